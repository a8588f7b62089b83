import GIO
import PeerVoiceCore

/// One row of `ListPeers`.
struct PeerSummary {
    let id: PeerID
    let name: String
    let state: PeerState
}

/// A peer the service knows: its link, its redial state and where delivery stands on the link.
final class Peer {
    let id: PeerID
    var name: String
    var state: PeerState = .disconnected
    var instance: InstanceID?
    /// We can dial it: we dialled it, or it announced a listen port.
    var redialable: Bool
    /// Its pinned long-term key (hex); nil until a person confirmed the pairing code.
    var pinnedKey: String?
    /// The open link, once both sides accepted.
    var link: PeerLink?
    var dial: DialAttempt?
    var redialTimer: EventSource?
    var backoffMs: UInt32 = 0
    /// Set by our `Disconnect` (kept across restarts), the peer's user-disconnect goodbye, or a
    /// failed first contact: do not redial until the next `Connect`.
    var stayDisconnected = false
    /// Voice with this peer (PeerVoiceService+Voice.swift).
    var voice = PeerVoice()
    /// `Connect` calls waiting for the link.
    var connectWaiters: [(Result<Void, ServiceError>) -> Void] = []

    // Receiving on the current link.
    /// Highest TEXT sequence stored, for the cumulative ACK.
    var receivedUpTo: UInt64 = 0
    /// The last TEXT accepted on this link: the next must name it as its predecessor.
    var lastReceivedInRun: UInt64 = 0
    /// TEXT arrived since the last ACK was sent.
    var owesAck = false

    // Sending on the current link.
    /// The last TEXT sent in the link's current run (0: the next one starts a run).
    var lastSentInRun: UInt64 = 0
    /// Highest TEXT sequence sent on this link.
    var sentUpTo: UInt64 = 0
    /// Sent but not acknowledged, oldest first, with their sizes: the flow-control window.
    var inFlight: [(seq: UInt64, bytes: Int)] = []
    var inFlightHead = 0
    var inFlightBytes = 0
    /// When the peer last acknowledged something new (or the run last started).
    var lastAckProgress = ContinuousClock.now

    init(id: PeerID, name: String, redialable: Bool) {
        self.id = id
        self.name = name
        self.redialable = redialable
    }

    var isConnected: Bool { link != nil }

    var summary: PeerSummary { PeerSummary(id: id, name: name, state: state) }

    /// Forgets where delivery stood: a new link starts both directions afresh.
    func resetDelivery() {
        receivedUpTo = 0
        lastReceivedInRun = 0
        owesAck = false
        restartRun()
    }

    /// The next TEXT starts a new run from the oldest unacknowledged message.
    func restartRun() {
        lastSentInRun = 0
        sentUpTo = 0
        inFlight.removeAll()
        inFlightHead = 0
        inFlightBytes = 0
        lastAckProgress = .now
    }

    /// Records that the peer acknowledged everything up to `seq`.
    func acknowledged(upTo seq: UInt64) {
        var progressed = false
        while inFlightHead < inFlight.count, inFlight[inFlightHead].seq <= seq {
            inFlightBytes -= inFlight[inFlightHead].bytes
            inFlightHead += 1
            progressed = true
        }
        if inFlightHead == inFlight.count {
            inFlight.removeAll(keepingCapacity: true)
            inFlightHead = 0
        }
        if progressed { lastAckProgress = .now }
    }

    var hasUnacknowledged: Bool { inFlightHead < inFlight.count }
}
