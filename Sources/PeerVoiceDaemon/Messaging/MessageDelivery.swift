import GIO
import PeerVoiceCore

/// Text messages on the main loop: the core's `TextDelivery` (store, runs, windows, ACKs, and
/// nothing confirmed before it is on the disk) wired to the peer links as a `LinkComponent` (TEXT
/// and ACK are its frames), the expiry and stall timers, and the sync thread that makes the
/// store's writes durable (`JournalSyncer`). A message accepted by `enqueue` is delivered exactly
/// once or reported failed.
final class MessageDelivery: LinkComponent {
    /// How often undeliverable messages are checked for expiry.
    static let expiryCheck: Duration = .seconds(60)
    /// How often open links are checked for a run the peer stopped acknowledging.
    static let stallCheck: Duration = .milliseconds(500)

    private let store: MessageStore
    private var delivery: TextDelivery<PeerLink>!
    private let syncer = JournalSyncer()
    private var timers: [EventSource] = []
    private let eventsWritten: (@escaping (Bool) -> Void) -> Void
    /// One bus flush at a time (each is a task on GLib's thread pool: one per message starved
    /// it in a burst of 10,000): the notes the running one covers, and those for the next.
    private var flushing = false
    private var notesForNextFlush: [() -> Void] = []

    /// `store` syncs in batches (`.batched`): this component runs them on its sync thread.
    /// `eventsWritten` calls back once the events emitted so far are written to the bus (true),
    /// or could not be (false): a `MessageReceived` is noted announced only then.
    init(store: MessageStore, links: PeerLinks, clock: WallClock, emit: @escaping (ServiceEvent) -> Void,
         eventsWritten: @escaping (@escaping (Bool) -> Void) -> Void) {
        self.store = store
        self.eventsWritten = eventsWritten
        delivery = TextDelivery(
            store: store, now: { .now }, nowMs: { clock.nowMs() },
            transmit: { link, frame in link.send(frame) },
            drop: { link, reason in
                Log.error("\(reason)")
                link.drop(reason: "local storage failed")
            },
            emit: emit,
            whenAnnounced: { [weak self] note in self?.afterTheNextFlush(note) })
        links.register(self, frames: [.text, .ack])
    }

    /// Announces what was stored but not announced before a crash, fails what expired meanwhile,
    /// then keeps checking expiry and stalls.
    func start() {
        delivery.announceUnannounced()
        expire()
        timers = [
            Timer.every(Self.expiryCheck) { [unowned self] in expire(); return true },
            Timer.every(Self.stallCheck) { [unowned self] in
                for peer in delivery.resendStalledRuns() {
                    Log.info("\(peer) acknowledged nothing for \(LinkDelivery.resendAfter): sending its queue again")
                }
                // A sync or rewrite that failed is retried here, even when nothing else is written.
                store.retryFailedRewrites()
                syncWrites()
                return true
            },
        ]
    }

    /// Queues `text` for `peer`; it goes out once it is on the disk, at once if the peer is connected.
    func enqueue(_ text: String, id messageID: String, for peer: PeerID, nowMs: UInt64) throws(ServiceError) {
        defer { syncWrites() }
        try delivery.enqueue(text, id: messageID, for: peer, nowMs: nowMs)
    }

    /// Runs `action` once everything written so far to these peers' journals is on the disk
    /// (`Send`'s reply), whatever the other journals'.
    func whenDurable(for peers: [PeerID], _ action: @escaping () -> Void) {
        guard let first = peers.first else { return action() }
        delivery.whenDurable(for: first) { [weak self] in self?.whenDurable(for: Array(peers.dropFirst()), action) }
    }

    func hasPending(for peer: PeerID) -> Bool { delivery.hasPending(for: peer) }

    func history(of peer: PeerID, max: Int) -> [StoredMessage] { delivery.history(of: peer, max: max) }

    /// Fails everything queued for `peer` and forgets its history, `elsewhere` forgetting the rest
    /// of it before the journal goes; returns how many failed.
    func forget(_ peer: PeerID, elsewhere: () throws -> Void) throws -> Int {
        defer { syncWrites() }
        return try delivery.forget(peer, elsewhere: elsewhere)
    }

    /// The peers whose `RemovePeer` a crash interrupted: to remove again at start.
    var interruptedRemovals: [PeerID] { delivery.interruptedRemovals }

    // MARK: Links

    var offeredCapabilities: Capabilities { .text }

    /// A new link to `peer` opened: a new run starts, with everything still queued (unless the
    /// link does not carry text).
    func linkOpened(_ link: PeerLink, to peer: Peer) {
        if let why = link.negotiated?.whyOff(.text, who: peer.id.description) {
            return Log.info("messages for \(peer.id) stay queued: \(why)")
        }
        delivery.linkOpened(link, to: peer.id)
    }

    func linkClosed(_ link: PeerLink, of peer: Peer, reason: String) { delivery.linkClosed(to: peer.id) }

    func received(_ frame: Frame, on link: PeerLink, from peer: Peer) {
        defer { syncWrites() }
        switch frame {
        case .text(let text):
            // A TEXT from `peer`, which runs the instance its HELLO named.
            guard let hello = link.peerHello else { return }
            delivery.received(text, from: peer.id, senderInstance: hello.instanceID)
        case .ack(let seq):
            // Everything up to `seq` is delivered.
            delivery.acknowledged(upTo: seq, from: peer.id)
        default:
            break
        }
    }

    /// One ACK per read rather than per message, once what it acknowledges is on the disk.
    func inputDrained(on link: PeerLink, from peer: Peer) { delivery.inputDrained(from: peer.id) }

    /// Runs `note` once the events emitted so far are written to the bus (not at all if they
    /// cannot be): after the running flush if it started after them, else after the next one.
    private func afterTheNextFlush(_ note: @escaping () -> Void) {
        notesForNextFlush.append(note)
        flushIfIdle()
    }

    private func flushIfIdle() {
        guard !flushing, !notesForNextFlush.isEmpty else { return }
        flushing = true
        let notes = notesForNextFlush
        notesForNextFlush = []
        eventsWritten { [weak self] written in
            guard let self else { return }
            flushing = false
            if written {
                notes.forEach { $0() }
                syncWrites()
            }
            flushIfIdle()
        }
    }

    private func expire() {
        defer { syncWrites() }
        delivery.expire()
    }

    /// Hands the writes made so far to the sync thread, unless a sync runs (then they go in the
    /// next one, when it reports back: group commit).
    private func syncWrites() {
        guard let batch = store.takeSyncBatch() else { return }
        syncer.sync(batch) { [weak self] error in
            guard let self else { return }
            store.finishSync(batch, error: error)
            delivery.durabilityAdvanced()
            syncWrites()
        }
    }
}
