import GIO
import PeerVoiceCore

/// Text messages: the store (outboxes, history, duplicate marks) and delivery on each open link
/// (a `LinkComponent`: TEXT and ACK are its frames). A message accepted by `enqueue` is delivered
/// exactly once or reported failed: it stays queued until the peer acknowledges it, is sent again
/// on every new link and after a stall, and fails only when the peer is removed or the message
/// expires.
final class MessageDelivery: LinkComponent {
    /// How often undeliverable messages are checked for expiry.
    static let expiryCheck: Duration = .seconds(60)
    /// How often open links are checked for a run the peer stopped acknowledging.
    static let stallCheck: Duration = .milliseconds(500)

    private let store: MessageStore
    private let links: PeerLinks
    private let clock: WallClock
    private let emit: (ServiceEvent) -> Void
    /// Where delivery stands on each connected peer's link (runs, window, ACKs).
    private var runs: [PeerID: LinkDelivery] = [:]
    private var timers: [EventSource] = []

    init(store: MessageStore, links: PeerLinks, clock: WallClock, emit: @escaping (ServiceEvent) -> Void) {
        self.store = store
        self.links = links
        self.clock = clock
        self.emit = emit
        links.register(self, frames: [.text, .ack])
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
        runs[peer] = nil
        let failed = try store.forget(peer: peer.description)
        for messageID in failed {
            emit(.messageFailed(peer, messageID: messageID, reason: "the peer was removed"))
        }
        return failed.count
    }

    // MARK: Links

    var offeredCapabilities: Capabilities { .text }

    /// A new link to `peer` opened: a new run starts, with everything still queued.
    func linkOpened(_ link: PeerLink, to peer: Peer) {
        if let why = link.negotiated?.whyOff(.text, who: peer.id.description) {
            return Log.info("messages for \(peer.id) stay queued: \(why)")
        }
        runs[peer.id] = LinkDelivery(now: .now)
        sendQueuedMessages(to: peer.id)
    }

    func linkClosed(_ link: PeerLink, of peer: Peer, reason: String) {
        runs[peer.id] = nil
    }

    func received(_ frame: Frame, on link: PeerLink, from peer: Peer) {
        switch frame {
        case .text(let text):
            guard let hello = link.peerHello else { return }
            received(text, from: peer.id, senderInstance: hello.instanceID, on: link)
        case .ack(let seq):
            acknowledged(upTo: seq, by: peer.id)
        default:
            break
        }
    }

    /// A TEXT from `peer`, which runs the instance `senderInstance`: stored and announced once,
    /// acknowledged after the read (`inputDrained`). One that does not continue the run waits for
    /// the resend its sender will make.
    private func received(_ text: TextFrame, from peer: PeerID, senderInstance: InstanceID, on link: PeerLink) {
        guard let run = runs[peer] else { return }
        guard run.continuesRun(previousSeq: text.previousSeq) else {
            Log.debug("\(peer): TEXT \(text.seq) follows \(text.previousSeq), not the last one of the run: waiting for the resend")
            return
        }
        do {
            let isNew = try store.receive(peer: peer.description, senderInstance: senderInstance.hex, seq: text.seq,
                                          id: text.messageID.hex, text: text.text, sentAtMs: text.sentAtMs,
                                          nowMs: clock.nowMs())
            if isNew { emit(.messageReceived(peer, messageID: text.messageID.hex, text: text.text)) }
            runs[peer]?.accepted(seq: text.seq)
        } catch {
            // Not acknowledged, so the sender keeps it and sends it again on the next link.
            Log.error("could not store a message from \(peer): \(error)")
            link.drop(reason: "local storage failed")
        }
    }

    /// The peer's ACK: everything up to `seq` is delivered.
    private func acknowledged(upTo seq: UInt64, by peer: PeerID) {
        guard runs[peer] != nil else { return }
        for messageID in store.acknowledge(peer: peer.description, upTo: seq) {
            emit(.messageDelivered(peer, messageID: messageID))
        }
        runs[peer]?.acknowledged(upTo: seq, now: .now)
        sendQueuedMessages(to: peer)
    }

    /// One ACK per read rather than per message: stored messages are acknowledged together.
    func inputDrained(on link: PeerLink, from peer: Peer) {
        guard let upTo = runs[peer.id]?.takeAck() else { return }
        link.send(.ack(seq: upTo))
    }

    /// Sends queued messages the window allows, continuing the link's run: each TEXT names its
    /// predecessor so the receiver notices one lost to a rejected record.
    private func sendQueuedMessages(to peer: PeerID) {
        guard let link = links.link(of: peer), runs[peer] != nil else { return }
        while runs[peer]!.hasRoom {
            let batch = store.pending(peer: peer.description, after: runs[peer]!.sentUpTo, limit: 64)
            guard !batch.isEmpty else { return }
            for message in batch {
                let previous = runs[peer]!.send(seq: message.seq, textBytes: message.text.utf8.count, now: .now)
                // Stored messages passed Send's checks; one that no longer encodes is a bug.
                let text = try! TextFrame(seq: message.seq, previousSeq: previous,
                                          messageID: MessageID(hex: message.id)!, sentAtMs: message.sentAtMs,
                                          text: message.text)
                link.send(.text(text))
                if !runs[peer]!.hasRoom { return }
            }
        }
    }

    /// Sends again every run the peer stopped acknowledging (a record carrying a TEXT or an ACK
    /// was rejected on the way); the receiver drops duplicates.
    private func resendStalledRuns() {
        let now = ContinuousClock.now
        for (peer, run) in runs where run.isStalled(now: now) {
            Log.info("\(peer) acknowledged nothing for \(LinkDelivery.resendAfter): sending its queue again")
            runs[peer]?.restartRun(now: now)
            sendQueuedMessages(to: peer)
        }
    }

    private func expire() {
        for (peer, messageID) in store.expire(nowMs: clock.nowMs()) {
            guard let id = PeerID(peer) else { continue }
            emit(.messageFailed(id, messageID: messageID, reason: "not delivered within \(store.limits.expiryMs / 86_400_000) days"))
        }
    }
}
