/// Where text delivery stands on one open link (docs/PROTOCOL.md §8), both directions: the
/// receiving run and the cumulative ACK owed; the sending run and its flow-control window.
/// Fresh for every link. The durable half (sequence numbers, outbox, duplicate marks) is the
/// `MessageStore`'s; this is the per-link half, pure and clock-driven so it is tested alone.
public struct LinkDelivery: Sendable {
    /// Unacknowledged TEXT on one link: enough to keep a LAN busy, small enough that a peer that
    /// stopped reading is noticed rather than buffered. Each message counts its text + 64 bytes.
    public static let windowBytes = 2 << 20
    public static let perMessageOverheadBytes = 64
    /// A run without any acknowledgement for this long is sent again (a record was lost).
    public static let resendAfter: Duration = .seconds(2)

    // Receiving.
    /// Highest TEXT sequence accepted on this link, for the cumulative ACK.
    public private(set) var receivedUpTo: UInt64 = 0
    /// The last TEXT accepted on this link: the next must name it as its predecessor.
    private var lastReceivedInRun: UInt64 = 0
    private var owesAck = false

    // Sending.
    /// The last TEXT sent in the current run (0: the next one starts a run).
    public private(set) var lastSentInRun: UInt64 = 0
    /// Highest TEXT sequence sent in the current run: the next comes from above it.
    public private(set) var sentUpTo: UInt64 = 0
    /// Sent but not acknowledged, oldest first, with their window sizes.
    private var inFlight: [(seq: UInt64, bytes: Int)] = []
    private var inFlightHead = 0
    public private(set) var inFlightBytes = 0
    /// When the peer last acknowledged something new (or the run started, or the first TEXT went
    /// out while nothing was unacknowledged).
    private var lastAckProgress: ContinuousClock.Instant

    public init(now: ContinuousClock.Instant) {
        lastAckProgress = now
    }

    // MARK: Receiving

    /// Whether a TEXT naming `previousSeq` continues this link's run. If not, one before it was
    /// lost (a rejected record): drop it without an ACK past it, and the sender sends the run again.
    public func continuesRun(previousSeq: UInt64) -> Bool {
        previousSeq == 0 || previousSeq == lastReceivedInRun
    }

    /// A TEXT of the run was stored (or was a duplicate): it is acknowledged with the next ACK.
    public mutating func accepted(seq: UInt64) {
        lastReceivedInRun = seq
        receivedUpTo = max(receivedUpTo, seq)
        owesAck = true
    }

    /// The cumulative ACK owed after a read, once: nil when nothing new arrived since the last.
    public mutating func takeAck() -> UInt64? {
        guard owesAck else { return nil }
        owesAck = false
        return receivedUpTo
    }

    // MARK: Sending

    /// More TEXT may go out: the window is not full.
    public var hasRoom: Bool { inFlightBytes < Self.windowBytes }

    public var hasUnacknowledged: Bool { inFlightHead < inFlight.count }

    /// Records a TEXT sent now and returns the `previousSeq` its frame carries.
    public mutating func send(seq: UInt64, textBytes: Int, now: ContinuousClock.Instant) -> UInt64 {
        precondition(seq > sentUpTo, "a run goes up")
        if !hasUnacknowledged { lastAckProgress = now }
        let previous = lastSentInRun
        lastSentInRun = seq
        sentUpTo = seq
        let bytes = textBytes + Self.perMessageOverheadBytes
        inFlight.append((seq, bytes))
        inFlightBytes += bytes
        return previous
    }

    /// The peer acknowledged everything up to `seq`.
    public mutating func acknowledged(upTo seq: UInt64, now: ContinuousClock.Instant) {
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
        if progressed { lastAckProgress = now }
    }

    /// Unacknowledged TEXT and no progress for `resendAfter`: start a new run.
    public func isStalled(now: ContinuousClock.Instant) -> Bool {
        hasUnacknowledged && now - lastAckProgress > Self.resendAfter
    }

    /// The next TEXT starts a new run from the oldest queued message; what was in flight is forgotten.
    public mutating func restartRun(now: ContinuousClock.Instant) {
        lastSentInRun = 0
        sentUpTo = 0
        inFlight.removeAll()
        inFlightHead = 0
        inFlightBytes = 0
        lastAckProgress = now
    }
}
