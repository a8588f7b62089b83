import GIO
import PeerVoiceCore

/// Text messages: the store (outboxes, history, duplicate marks) and delivery on each open link.
/// A message accepted by `enqueue` is delivered exactly once or reported failed: it stays queued
/// until the peer acknowledges it, is sent again on every new link and after a stall, and fails
/// only when the peer is removed or the message expires.
final class MessageDelivery {
    /// How often undeliverable messages are checked for expiry.
    static let expiryCheck: Duration = .seconds(60)
    /// How often open links are checked for a run the peer stopped acknowledging.
    static let stallCheck: Duration = .milliseconds(500)

    private let store: MessageStore
    private let emit: (ServiceEvent) -> Void
    /// The open link of each connected peer, with its half of delivery (runs, window, ACKs).
    private var links: [PeerID: OpenLink] = [:]
    private var timers: [EventSource] = []

    init(store: MessageStore, emit: @escaping (ServiceEvent) -> Void) {
        self.store = store
        self.emit = emit
    }

    /// Fails what expired meanwhile, then keeps checking expiry and stalls.
    func start() {
        expire()
        timers = [
            Timer.every(Self.expiryCheck) { [unowned self] in expire(); return true },
            Timer.every(Self.stallCheck) { [unowned self] in resendStalledRuns(); return true },
        ]
    }

    /// Queues `text` for `peer`; it goes out now if the peer is connected.
    func enqueue(_ text: String, id messageID: String, for peer: PeerID, nowMs: UInt64) throws(ServiceError) {
        do {
            _ = try store.enqueue(peer: peer.description, id: messageID, text: text, nowMs: nowMs)
        } catch MessageStoreError.outboxFull {
            throw .failed("the outbox for \(peer) is full (\(store.limits.maxQueuedPerPeer) messages or \(store.limits.maxQueuedBytesPerPeer >> 20) MiB): wait until the peer is back, or RemovePeer")
        } catch {
            throw .failed("could not store the message: \(error)")
        }
        sendQueuedMessages(to: peer)
    }

    func hasPending(for peer: PeerID) -> Bool { store.hasPending(peer: peer.description) }

    func history(of peer: PeerID, max: Int) -> [StoredMessage] { store.history(peer: peer.description, max: max) }

    /// Fails everything queued for `peer` and forgets its history; returns how many failed.
    func forget(_ peer: PeerID) throws -> Int {
        links[peer] = nil
        let failed = try store.forget(peer: peer.description)
        for messageID in failed {
            emit(.messageFailed(peer, messageID: messageID, reason: "the peer was removed"))
        }
        return failed.count
    }

    // MARK: Links

    /// A new link to `peer` opened: a new run starts, with everything still queued.
    func linkOpened(_ link: PeerLink, to peer: PeerID) {
        links[peer] = OpenLink(link)
        sendQueuedMessages(to: peer)
    }

    func linkClosed(to peer: PeerID) {
        links[peer] = nil
    }

    /// A TEXT from `peer`, which runs the instance `senderInstance`: stored and announced once,
    /// acknowledged after the read (`inputDrained`). One that does not continue the run waits for
    /// the resend its sender will make.
    func received(_ text: TextFrame, from peer: PeerID, senderInstance: InstanceID) {
        guard let open = links[peer] else { return }
        guard open.delivery.continuesRun(previousSeq: text.previousSeq) else {
            Log.debug("\(peer): TEXT \(text.seq) follows \(text.previousSeq), not the last one of the run: waiting for the resend")
            return
        }
        do {
            let isNew = try store.receive(peer: peer.description, senderInstance: senderInstance.hex, seq: text.seq,
                                          id: text.messageID.hex, text: text.text, sentAtMs: text.sentAtMs,
                                          nowMs: PeerVoiceService.nowMs())
            if isNew { emit(.messageReceived(peer, messageID: text.messageID.hex, text: text.text)) }
            open.delivery.accepted(seq: text.seq)
        } catch {
            // Not acknowledged, so the sender keeps it and sends it again on the next link.
            Log.error("could not store a message from \(peer): \(error)")
            open.link.drop(reason: "local storage failed")
        }
    }

    /// The peer's ACK: everything up to `seq` is delivered.
    func acknowledged(upTo seq: UInt64, by peer: PeerID) {
        guard let open = links[peer] else { return }
        for messageID in store.acknowledge(peer: peer.description, upTo: seq) {
            emit(.messageDelivered(peer, messageID: messageID))
        }
        open.delivery.acknowledged(upTo: seq, now: .now)
        sendQueuedMessages(to: peer)
    }

    /// One ACK per read rather than per message: stored messages are acknowledged together.
    func inputDrained(from peer: PeerID) {
        guard let open = links[peer], let upTo = open.delivery.takeAck() else { return }
        open.link.send(.ack(seq: upTo))
    }

    /// Sends queued messages the window allows, continuing the link's run: each TEXT names its
    /// predecessor so the receiver notices one lost to a rejected record.
    private func sendQueuedMessages(to peer: PeerID) {
        guard let open = links[peer] else { return }
        while open.delivery.hasRoom {
            let batch = store.pending(peer: peer.description, after: open.delivery.sentUpTo, limit: 64)
            guard !batch.isEmpty else { return }
            for message in batch {
                let previous = open.delivery.send(seq: message.seq, textBytes: message.text.utf8.count, now: .now)
                // Stored messages passed Send's checks; one that no longer encodes is a bug.
                let text = try! TextFrame(seq: message.seq, previousSeq: previous,
                                          messageID: MessageID(hex: message.id)!, sentAtMs: message.sentAtMs,
                                          text: message.text)
                open.link.send(.text(text))
                if !open.delivery.hasRoom { return }
            }
        }
    }

    /// Sends again every run the peer stopped acknowledging (a record carrying a TEXT or an ACK
    /// was rejected on the way); the receiver drops duplicates.
    private func resendStalledRuns() {
        let now = ContinuousClock.now
        for (peer, open) in links where open.delivery.isStalled(now: now) {
            Log.info("\(peer) acknowledged nothing for \(LinkDelivery.resendAfter): sending its queue again")
            open.delivery.restartRun(now: now)
            sendQueuedMessages(to: peer)
        }
    }

    private func expire() {
        for (peer, messageID) in store.expire(nowMs: PeerVoiceService.nowMs()) {
            guard let id = PeerID(peer) else { continue }
            emit(.messageFailed(id, messageID: messageID, reason: "not delivered within \(store.limits.expiryMs / 86_400_000) days"))
        }
    }
}

/// A connected peer's link and where delivery stands on it.
private final class OpenLink {
    let link: PeerLink
    var delivery = LinkDelivery(now: .now)

    init(_ link: PeerLink) {
        self.link = link
    }
}
