import GIO
import PeerVoiceCore

/// Text messages on the main loop: the core's `TextDelivery` (store, runs, windows, ACKs, and
/// nothing confirmed before it is on the disk) wired to the peer links, the expiry and stall
/// timers, and the sync thread that makes the store's writes durable (`JournalSyncer`).
final class MessageDelivery {
    /// How often undeliverable messages are checked for expiry.
    static let expiryCheck: Duration = .seconds(60)
    /// How often open links are checked for a run the peer stopped acknowledging.
    static let stallCheck: Duration = .milliseconds(500)

    private let store: MessageStore
    private var delivery: TextDelivery<PeerLink>!
    private let syncer = JournalSyncer()
    private var timers: [EventSource] = []

    /// `store` syncs in batches (`.batched`): this component runs them on its sync thread.
    init(store: MessageStore, emit: @escaping (ServiceEvent) -> Void) {
        self.store = store
        delivery = TextDelivery(
            store: store, now: { .now }, nowMs: { PeerVoiceService.nowMs() },
            transmit: { link, frame in link.send(frame) },
            drop: { link, reason in
                Log.error("\(reason)")
                link.drop(reason: "local storage failed")
            },
            emit: emit)
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

    /// Runs `action` once everything written so far is on the disk (`Send`'s reply).
    func whenDurable(_ action: @escaping () -> Void) { delivery.whenDurable(action) }

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

    /// A new link to `peer` opened: a new run starts, with everything still queued.
    func linkOpened(_ link: PeerLink, to peer: PeerID) { delivery.linkOpened(link, to: peer) }

    func linkClosed(to peer: PeerID) { delivery.linkClosed(to: peer) }

    /// A TEXT from `peer`, which runs the instance `senderInstance`.
    func received(_ text: TextFrame, from peer: PeerID, senderInstance: InstanceID) {
        defer { syncWrites() }
        delivery.received(text, from: peer, senderInstance: senderInstance)
    }

    /// The peer's ACK: everything up to `seq` is delivered.
    func acknowledged(upTo seq: UInt64, by peer: PeerID) {
        defer { syncWrites() }
        delivery.acknowledged(upTo: seq, from: peer)
    }

    /// One ACK per read rather than per message, once what it acknowledges is on the disk.
    func inputDrained(from peer: PeerID) { delivery.inputDrained(from: peer) }

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
