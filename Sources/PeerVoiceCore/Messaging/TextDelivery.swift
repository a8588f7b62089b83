/// Text delivery with every peer (docs/PROTOCOL.md §8): the durable `MessageStore` and, for each
/// open link, its `LinkDelivery`. It decides which TEXT and ACK go on which link and what the
/// service announces, and confirms nothing that is not on the disk yet: a TEXT is sent, an ACK
/// given, `MessageDelivered` and `MessageFailed` announced, and a caller's `whenDurable` run
/// (`Send`'s reply) only once every store write they depend on is durable (`MessageStore`:
/// `writesDurable`). Every announcement is noted once it has surely reached the user
/// (`whenAnnounced`: the daemon's signal written to the bus; a kill -9 between the emit and that
/// write lost the signal: campaign seed 12), and what the machine stopped before noting, or a
/// power loss took the note of, is announced again when the service starts
/// (`announceUnannounced`), with the same message id; none is repeated after its note stayed on
/// the disk. (`RemovePeer`'s failures are repeated by the removal a crash interrupted instead.)
/// `MessageReceived` is announced as soon as it is written rather than after the sync: no order
/// of "synced" and "announced" survives a power loss between the two, and a message that
/// outlived a crash unannounced would never be announced, its sender's resend being dropped as a
/// duplicate (found by the simulation, seeds 20 and 141); a power loss can also lose the record
/// itself, and then the resend is announced again. Pure and driven from outside: the daemon runs
/// it on its links and timers (`MessageDelivery`), the simulation on simulated ones. Used from
/// one thread.
///
/// A message accepted by `enqueue` is delivered exactly once or reported failed: it stays queued
/// until the peer acknowledges it, is sent again on every new link and after a stall, and fails
/// only when the peer is removed or the message expires.
public final class TextDelivery<Link: AnyObject> {
    public let store: MessageStore
    /// Monotonic time for runs and stalls, and the wall clock (ms since 1970) for what is stored.
    private let now: () -> ContinuousClock.Instant
    private let nowMs: () -> UInt64
    private let transmit: (Link, Frame) -> Void
    private let dropLink: (Link, String) -> Void
    private let emit: (ServiceEvent) -> Void
    private let whenAnnounced: (@escaping () -> Void) -> Void
    /// The open link of each connected peer, with its half of delivery (runs, window, ACKs).
    private var links: [PeerID: OpenLink] = [:]
    /// What waits for the disk, by the store write it needs, oldest first: for every journal
    /// (`waiting`), or for one peer's (`waitingForPeer`).
    private var waiting = DurabilityQueue()
    private var waitingForPeer: [PeerID: DurabilityQueue] = [:]

    /// Outbox batches read from the store at a time while the window has room.
    static var sendBatch: Int { 64 }

    /// - Parameters:
    ///   - now, nowMs: the clocks (the simulation's are simulated).
    ///   - transmit: sends a frame (TEXT, ACK) on a link given to `linkOpened`.
    ///   - drop: closes a link without a goodbye (a message that cannot be stored for another
    ///     reason than the disk's: the peer resends it).
    ///   - emit: `MessageReceived`, `MessageDelivered`, `MessageFailed`.
    ///   - whenAnnounced: runs its argument once every event `emit` took so far has reached the
    ///     user (the daemon: written to the bus), not at all if it cannot.
    public init(store: MessageStore, now: @escaping () -> ContinuousClock.Instant, nowMs: @escaping () -> UInt64,
                transmit: @escaping (Link, Frame) -> Void, drop: @escaping (Link, String) -> Void,
                emit: @escaping (ServiceEvent) -> Void, whenAnnounced: @escaping (@escaping () -> Void) -> Void) {
        self.store = store
        self.now = now
        self.nowMs = nowMs
        self.transmit = transmit
        self.dropLink = drop
        self.emit = emit
        self.whenAnnounced = whenAnnounced
    }

    // MARK: Durability

    /// Runs `action` once every store write made so far is durable: at once if it is.
    public func whenDurable(_ action: @escaping () -> Void) {
        if waiting.queues(action, write: store.writesMade, durable: store.writesDurable) { return }
        action()
    }

    /// Runs `action` once every write made so far to `peer`'s journal is durable, whatever the
    /// others' (one awaiting a rewrite the full disk refuses holds nothing of this peer back).
    public func whenDurable(for peer: PeerID, _ action: @escaping () -> Void) {
        let key = peer.description
        var queue = waitingForPeer[peer] ?? DurabilityQueue()
        let queued = queue.queues(action, write: store.lastWrite(peer: key), durable: store.writesDurable(peer: key))
        if queued { waitingForPeer[peer] = queue } else { action() }
    }

    /// The store made more writes durable (after `MessageStore.finishSync`): runs what waited for them, in order.
    public func durabilityAdvanced() {
        // Taken out before they run: an action may wait for the disk in turn.
        var ready = waiting.takeDurable(store.writesDurable)
        for peer in waitingForPeer.keys.sorted() {
            ready += waitingForPeer[peer]!.takeDurable(store.writesDurable(peer: peer.description))
            if waitingForPeer[peer]!.isEmpty { waitingForPeer[peer] = nil }
        }
        ready.forEach { $0() }
    }

    /// How many actions wait for the disk (for tests and bounds).
    public var waitingForDisk: Int { waiting.count + waitingForPeer.values.reduce(0) { $0 + $1.count } }

    // MARK: Sending

    /// Queues `text` for `peer` (written now, sent once durable). Throws, storing nothing, when the
    /// outbox is full or the disk refuses, with words a person can act on.
    public func enqueue(_ text: String, id messageID: String, for peer: PeerID, nowMs: UInt64) throws(ServiceError) {
        do {
            _ = try store.enqueue(peer: peer.description, id: messageID, text: text, nowMs: nowMs)
        } catch MessageStoreError.outboxFull {
            throw .failed("the outbox for \(peer) is full (\(store.limits.maxQueuedPerPeer) messages or \(store.limits.maxQueuedBytesPerPeer >> 20) MiB): wait until the peer is back, or RemovePeer")
        } catch MessageStoreError.io(let error) {
            throw Self.refusal(error)
        } catch {
            throw .failed("could not store the message: \(error)")
        }
        whenDurable(for: peer) { [weak self] in self?.sendQueuedMessages(to: peer) }
    }

    /// `Send`'s error when the disk refused: what is wrong and what to do, and that nothing was kept.
    static func refusal(_ error: StorageError) -> ServiceError {
        switch error.kind {
        case .noSpace:
            .failed("the message was not queued: the disk holding \(error.path) is full (\(error.reason)); free some space and send it again")
        case .readOnly:
            .failed("the message was not queued: \(error.path) cannot be written (\(error.reason)); make the state directory writable and send it again")
        case .notFound, .other:
            .failed("the message was not queued: \(error)")
        }
    }

    public func hasPending(for peer: PeerID) -> Bool { store.hasPending(peer: peer.description) }

    public func history(of peer: PeerID, max: Int) -> [StoredMessage] { store.history(peer: peer.description, max: max) }

    /// Fails everything queued for `peer` and forgets its history (`RemovePeer`), durably, in an
    /// order no crash breaks: the journal notes the removal, the failures are reported,
    /// `elsewhere` forgets the peer outside the store (its pinned key), then, once the failures
    /// (and every announcement before them) reached the user, the journal goes. A crash on the
    /// way leaves the note, and the next start runs the removal again (`interruptedRemovals`; its
    /// failures reported again, same ids). Returns how many failed.
    public func forget(_ peer: PeerID, elsewhere: () throws -> Void) throws -> Int {
        links[peer] = nil
        let key = peer.description
        let failed = try store.beginForgetting(peer: key)
        for messageID in failed {
            emit(.messageFailed(peer, messageID: messageID, reason: "the peer was removed"))
        }
        try elsewhere()
        // Also the outcomes announced before the removal reach the user first. A journal that
        // cannot be deleted then keeps its note: the next start removes it again.
        whenAnnounced { [store] in try? store.finishForgetting(peer: key) }
        return failed.count
    }

    /// At start: the peers whose removal a crash interrupted, to `forget` again.
    public var interruptedRemovals: [PeerID] { store.interruptedRemovals.compactMap { PeerID($0) } }

    /// Fails what waited longer than the store's expiry; announced once that is durable.
    public func expire() {
        let expired = store.expire(nowMs: nowMs())
        guard !expired.isEmpty else { return }
        whenDurable { [weak self] in
            guard let self else { return }
            announceOutcomes(expired.map { (peer: $0.peer, id: $0.id, status: .failed) })
        }
    }

    /// Why a message that outlived the store's expiry failed.
    private var expiryReason: String { "not delivered within \(store.limits.expiryMs / 86_400_000) days" }

    /// Emits `MessageDelivered` or `MessageFailed` (expired) for each, in order, and notes each
    /// peer's announced once that reached the user.
    private func announceOutcomes(_ outcomes: [(peer: String, id: String, status: MessageStatus)]) {
        var newest: [String: String] = [:]
        for outcome in outcomes {
            guard let peer = PeerID(outcome.peer) else { continue }
            emit(outcome.status == .delivered ? .messageDelivered(peer, messageID: outcome.id)
                                              : .messageFailed(peer, messageID: outcome.id, reason: expiryReason))
            newest[outcome.peer] = outcome.id
        }
        noteOnceAnnounced(newest, store.noteOutcomesAnnounced)
    }

    /// Once what was emitted so far reached the user, `note`s each peer's newest message id.
    private func noteOnceAnnounced(_ newest: [String: String], _ note: @escaping (_ peer: String, _ through: String) -> Void) {
        guard !newest.isEmpty else { return }
        whenAnnounced {
            for (peer, messageID) in newest.sorted(by: { $0.key < $1.key }) { note(peer, messageID) }
        }
    }

    /// At start: announces the messages and the outcomes the journal does not say were announced
    /// (the machine stopped between storing them and noting their announcement), and notes them
    /// once that reached the user.
    public func announceUnannounced() {
        var newest: [String: String] = [:]
        for (peer, message) in store.unannounced() {
            guard let id = PeerID(peer) else { continue }
            emit(.messageReceived(id, messageID: message.id, text: message.text))
            newest[peer] = message.id
        }
        noteOnceAnnounced(newest, store.noteAnnounced)
        announceOutcomes(store.unannouncedOutcomes().map { (peer: $0.peer, id: $0.message.id, status: $0.message.status) })
    }

    // MARK: Links

    /// A new link to `peer` opened (replacing any other): a new run starts, with everything queued.
    public func linkOpened(_ link: Link, to peer: PeerID) {
        links[peer] = OpenLink(link: link, delivery: LinkDelivery(now: now()))
        sendQueuedMessages(to: peer)
    }

    /// `peer`'s open link closed; nothing more goes on it.
    public func linkClosed(to peer: PeerID) {
        links[peer] = nil
    }

    /// A TEXT from `peer`, which runs the instance `senderInstance`: stored and announced once
    /// written (noted announced once that reached the user), acknowledged (after the read,
    /// `inputDrained`) once durable. One that does not
    /// continue the run waits for the resend its sender will make.
    public func received(_ text: TextFrame, from peer: PeerID, senderInstance: InstanceID) {
        guard let open = links[peer], open.delivery.continuesRun(previousSeq: text.previousSeq) else { return }
        do {
            let isNew = try store.receive(peer: peer.description, senderInstance: senderInstance.hex, seq: text.seq,
                                          id: text.messageID.hex, text: text.text, sentAtMs: text.sentAtMs, nowMs: nowMs())
            if isNew {
                let messageID = text.messageID.hex
                emit(.messageReceived(peer, messageID: messageID, text: text.text))
                whenAnnounced { [store] in store.noteAnnounced(peer: peer.description, through: messageID) }
            }
            open.delivery.accepted(seq: text.seq)
        } catch MessageStoreError.io {
            // The disk refused (the store said why). Not acknowledged, and the run ends here (the
            // TEXTs after it do not continue it), so the sender sends it again when the run stalls
            // (2 s), on this link. Closing the link instead made it flap while the disk was full,
            // each new link's resend closing it again, voice and transfers with it (seed 18).
        } catch {
            // Not acknowledged, so the sender keeps it and sends it again on the next link.
            links[peer] = nil
            dropLink(open.link, "could not store a message: \(error)")
        }
    }

    /// The peer's ACK: everything up to `seq` is delivered (announced once that is durable).
    public func acknowledged(upTo seq: UInt64, from peer: PeerID) {
        guard let open = links[peer] else { return }
        let delivered = store.acknowledge(peer: peer.description, upTo: seq)
        if !delivered.isEmpty {
            whenDurable(for: peer) { [weak self] in
                self?.announceOutcomes(delivered.map { (peer: peer.description, id: $0, status: .delivered) })
            }
        }
        open.delivery.acknowledged(upTo: seq, now: now())
        sendQueuedMessages(to: peer)
    }

    /// One ACK per read rather than per message: what was stored is acknowledged together, once
    /// durable.
    public func inputDrained(from peer: PeerID) {
        guard let open = links[peer], let upTo = open.delivery.takeAck() else { return }
        let link = open.link
        whenDurable(for: peer) { [weak self] in
            guard let self, links[peer]?.link === link else { return }
            transmit(link, .ack(seq: upTo))
        }
    }

    /// Sends again every run the peer stopped acknowledging (a record carrying a TEXT or an ACK
    /// was rejected on the way); the receiver drops duplicates. Returns the peers concerned.
    @discardableResult
    public func resendStalledRuns() -> [PeerID] {
        let now = now()
        let stalled = links.filter { $0.value.delivery.isStalled(now: now) }.map(\.key).sorted()
        for peer in stalled {
            links[peer]?.delivery.restartRun(now: now)
            sendQueuedMessages(to: peer)
        }
        return stalled
    }

    /// Sends the durable queued messages the window allows, continuing the link's run: each TEXT
    /// names its predecessor so the receiver notices one lost to a rejected record.
    private func sendQueuedMessages(to peer: PeerID) {
        guard let open = links[peer] else { return }
        while open.delivery.hasRoom {
            let batch = store.pending(peer: peer.description, after: open.delivery.sentUpTo, limit: Self.sendBatch)
            guard !batch.isEmpty else { return }
            for message in batch {
                let previous = open.delivery.send(seq: message.seq, textBytes: message.text.utf8.count, now: now())
                // Stored messages passed Send's checks; one that no longer encodes is a bug.
                let text = try! TextFrame(seq: message.seq, previousSeq: previous,
                                          messageID: MessageID(hex: message.id)!, sentAtMs: message.sentAtMs,
                                          text: message.text)
                transmit(open.link, .text(text))
                if !open.delivery.hasRoom { return }
            }
        }
    }

    /// Actions waiting for the store's writes to become durable, in order: one runs once the
    /// durable count reaches the write it noted, and never before an earlier one.
    private struct DurabilityQueue {
        private var entries: [(write: UInt64, action: () -> Void)] = []
        private var head = 0

        var count: Int { entries.count - head }
        var isEmpty: Bool { head == entries.count }

        /// Queues `action` unless `write` is durable and nothing waits before it (then the
        /// caller runs it now: false).
        mutating func queues(_ action: @escaping () -> Void, write: UInt64, durable: UInt64) -> Bool {
            if write <= durable && isEmpty { return false }
            entries.append((write, action))
            return true
        }

        /// Takes the actions whose writes are durable, in order.
        mutating func takeDurable(_ durable: UInt64) -> [() -> Void] {
            var ready: [() -> Void] = []
            while head < entries.count, entries[head].write <= durable {
                ready.append(entries[head].action)
                head += 1
            }
            if head == entries.count {
                entries.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 1024, head * 2 >= entries.count {
                entries.removeFirst(head)
                head = 0
            }
            return ready
        }
    }

    /// A connected peer's link and where delivery stands on it.
    private final class OpenLink {
        let link: Link
        var delivery: LinkDelivery

        init(link: Link, delivery: LinkDelivery) {
            self.link = link
            self.delivery = delivery
        }
    }
}
