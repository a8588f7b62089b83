/// How much channel data may be in flight on an IP link, from the one-way delay the receiver
/// reports (CHANNEL_FEEDBACK), in the spirit of LEDBAT (RFC 6817): while the delay is at its base
/// the window grows; as a queue builds at the bottleneck (a home router's buffer, which the call's
/// voice datagrams cross too) the delay rises, and the window shrinks to keep that queue near
/// ``Parameters/targetQueueingUs``. Bulk data thus yields to the call instead of filling the queue
/// in front of it; docs/PROTOCOL.md §13.7.
///
/// Delay samples are the receiver's clock minus the sender's, modulo 2^32 µs: the clocks are not
/// synchronised, so only a sample's distance above the smallest one seen (the base) means anything.
///
/// Not every rise of the delay is a queue. The link is TCP: data behind a lost segment reaches
/// the receiver a round trip late, all at once (on a path losing 1 % of its packets, most data
/// waits behind some loss), and a busy machine or radio adds jitter that comes and goes. So:
/// - the current delay is the smallest sample over the path's round trip (measured here from the
///   FEEDBACK of each chunk), at least ``Parameters/currentFilterUs``: jitter and short stalls
///   pass through it, and on a short path a queue is still seen within milliseconds;
/// - where the kernel's TCP tells its round-trip estimate (``TransportReport``), which it
///   measures per acknowledgement, unaffected by what waits behind a loss, the queue is the
///   smaller of the two readings, each the smallest over the same span: a queue at a bottleneck
///   raises both, a loss or the receiver's own slowness only the one-way delay.
public struct DelayBasedRateControl: Sendable {
    public struct Parameters: Sendable, Equatable {
        /// The queueing delay the window aims at...
        public var targetQueueingUs: Int64
        /// ...or this share of the round trip where that is more: a call over a long path waits
        /// that round trip anyway, and there a few milliseconds of jitter are no queue.
        public var targetRoundTripShare: Double
        /// Above this queueing delay the window is halved (at most once per window of data); it
        /// grows with the target.
        public var backOffQueueingUs: Int64
        public var initialWindowBytes: Int
        public var minWindowBytes: Int
        public var maxWindowBytes: Int
        /// LEDBAT's GAIN: at most this many segments of growth per window acknowledged...
        public var gain: Double
        /// ...or this share of the window when that is more, so that a path with a large
        /// bandwidth-delay product (hundreds of segments) is filled in tens of round trips.
        public var windowShareGain: Double
        /// The segment size the growth is counted in.
        public var segmentBytes: Int
        /// The base delay is the smallest sample of the last `baseHistoryBuckets` buckets of this length.
        public var baseBucketUs: Int64
        public var baseHistoryBuckets: Int
        /// The current delay is the smallest sample of the last `currentFilterRoundTrips` smallest
        /// round-trip times, of at least `currentFilterUs` (filters the receiver's noise) and at
        /// most `maxCurrentFilterUs` (a queue is still acted on within that).
        public var currentFilterUs: Int64
        public var currentFilterRoundTrips: Int64
        public var maxCurrentFilterUs: Int64
        /// The round-trip time is the smallest of the last `roundTripHistoryBuckets` of this length.
        public var roundTripBucketUs: Int64
        public var roundTripHistoryBuckets: Int

        public init(targetQueueingUs: Int64 = 2_500, targetRoundTripShare: Double = 1.0 / 8, backOffQueueingUs: Int64 = 12_500,
                    initialWindowBytes: Int = 16 * 1024, minWindowBytes: Int = 2 * 1024,
                    maxWindowBytes: Int = 8 << 20, gain: Double = 1, windowShareGain: Double = 1.0 / 8,
                    segmentBytes: Int = 1448, baseBucketUs: Int64 = 60_000_000, baseHistoryBuckets: Int = 10,
                    currentFilterUs: Int64 = 10_000, currentFilterRoundTrips: Int64 = 1, maxCurrentFilterUs: Int64 = 250_000,
                    roundTripBucketUs: Int64 = 1_000_000, roundTripHistoryBuckets: Int = 10) {
            self.targetQueueingUs = targetQueueingUs
            self.targetRoundTripShare = targetRoundTripShare
            self.backOffQueueingUs = backOffQueueingUs
            self.initialWindowBytes = initialWindowBytes
            self.minWindowBytes = minWindowBytes
            self.maxWindowBytes = maxWindowBytes
            self.gain = gain
            self.windowShareGain = windowShareGain
            self.segmentBytes = segmentBytes
            self.baseBucketUs = baseBucketUs
            self.baseHistoryBuckets = baseHistoryBuckets
            self.currentFilterUs = currentFilterUs
            self.currentFilterRoundTrips = currentFilterRoundTrips
            self.maxCurrentFilterUs = maxCurrentFilterUs
            self.roundTripBucketUs = roundTripBucketUs
            self.roundTripHistoryBuckets = roundTripHistoryBuckets
        }
    }

    public let parameters: Parameters
    /// Bytes that may be in flight (sent, not yet reported received).
    public private(set) var windowBytes: Int
    public private(set) var sentBytes: UInt64 = 0
    public private(set) var acknowledgedBytes: UInt64 = 0
    /// Doubling per window until the queue reaches half the target.
    public private(set) var inSlowStart = true
    /// The latest estimate of the queue in front of our data...
    public private(set) var queueingUs: Int64 = 0
    /// ...and what the one-way delay alone said (for the log).
    public private(set) var oneWayQueueingUs: Int64 = 0

    /// Samples as offsets from the first one (so the modulo-2^32 clock arithmetic happens once).
    private var reference: UInt32?
    private var baseDelay: WindowedMinimum
    /// The smallest time from sending a chunk to its FEEDBACK, recently.
    private var roundTrip: WindowedMinimum
    /// Recent one-way samples (as offsets) and TCP's queue readings, for the current-delay filter.
    private var recent = RecentMinimum()
    private var recentTransport = RecentMinimum()
    /// Chunks in flight: where each ends in the byte count, and when it was sent.
    private var inFlight: [(endBytes: UInt64, atUs: UInt64)] = []
    /// Acknowledged bytes since the last halving; none until a window's worth has come.
    private var acknowledgedSinceBackOff: Int = .max
    /// What was in flight right after the last chunk went: the flight that the acknowledgements
    /// since then belong to. Several FEEDBACKs handled with no sending between them (one read of
    /// the link) each see less in flight than the one before; the last one, as good as nothing.
    private var inFlightAtLastSendBytes = 0

    public init(parameters: Parameters = Parameters()) {
        self.parameters = parameters
        windowBytes = parameters.initialWindowBytes
        baseDelay = WindowedMinimum(bucketUs: parameters.baseBucketUs, buckets: parameters.baseHistoryBuckets)
        roundTrip = WindowedMinimum(bucketUs: parameters.roundTripBucketUs, buckets: parameters.roundTripHistoryBuckets)
    }

    public var inFlightBytes: Int { Int(sentBytes &- acknowledgedBytes) }

    /// The smallest recent round-trip time seen, if any chunk was acknowledged yet.
    public var roundTripUs: Int64? { roundTrip.value }

    /// The queue aimed at on this path (``Parameters/targetQueueingUs``, more on a long one).
    public var targetUs: Int64 {
        max(parameters.targetQueueingUs, Int64(parameters.targetRoundTripShare * Double(roundTripUs ?? 0)))
    }

    /// How big the next DATA may be (``ChannelChunking/ipChunkBytes(windowBytes:roundTripUs:targetQueueingUs:)``).
    public var chunkBytes: Int {
        ChannelChunking.ipChunkBytes(windowBytes: windowBytes, roundTripUs: roundTripUs, targetQueueingUs: targetUs)
    }

    /// Whether `bytes` more may go now (always when nothing is in flight, so one chunk larger than
    /// the window still goes).
    public func allows(_ bytes: Int) -> Bool {
        inFlightBytes == 0 || inFlightBytes + bytes <= windowBytes
    }

    /// A chunk of `bytes` went out at `nowUs` (this side's monotonic clock).
    public mutating func sent(_ bytes: Int, nowUs: UInt64) {
        sentBytes &+= UInt64(bytes)
        inFlight.append((sentBytes, nowUs))
        inFlightAtLastSendBytes = inFlightBytes
    }

    /// A CHANNEL_FEEDBACK: the receiver's total of DATA bytes received, and its delay sample.
    /// `nowUs` is this side's monotonic clock; `transport`, what the link's TCP says now, if it does.
    public mutating func feedback(receivedBytes: UInt64, delayUs: UInt32, nowUs: UInt64, transport: TransportReport? = nil) {
        // Only what we actually sent can be acknowledged (a confused peer cannot inflate the window).
        let received = min(receivedBytes, sentBytes)
        let newlyAcknowledged = received > acknowledgedBytes ? Int(received - acknowledgedBytes) : 0
        acknowledgedBytes = max(acknowledgedBytes, received)
        measureRoundTrip(nowUs: nowUs)
        record(delayUs, nowUs: nowUs)
        if let transport { recentTransport.add(transport.queueingUs, nowUs: nowUs, spanUs: currentFilterSpanUs) }
        guard newlyAcknowledged > 0 else { return }
        oneWayQueueingUs = (recent.value ?? 0) - (baseDelay.value ?? 0)
        queueingUs = min(oneWayQueueingUs, recentTransport.value ?? .max)
        let target = targetUs
        if acknowledgedSinceBackOff != .max { acknowledgedSinceBackOff += newlyAcknowledged }
        if queueingUs > parameters.backOffQueueingUs * target / parameters.targetQueueingUs {
            inSlowStart = false
            if acknowledgedSinceBackOff >= windowBytes {
                windowBytes /= 2
                acknowledgedSinceBackOff = 0
            }
        } else if inSlowStart {
            if queueingUs > target / 2 {
                inSlowStart = false
            } else {
                windowBytes += newlyAcknowledged
            }
        } else {
            let offTarget = max(-1, Double(target - queueingUs) / Double(target))
            let step = max(parameters.gain * Double(parameters.segmentBytes), parameters.windowShareGain * Double(windowBytes))
            let change = offTarget * step * Double(newlyAcknowledged) / Double(windowBytes)
            windowBytes += Int(change.rounded(.towardZero))
        }
        // Growth only while the window is what limits the sender (LEDBAT's flight-size rule).
        let limit = max(parameters.initialWindowBytes, 2 * inFlightAtLastSendBytes)
        windowBytes = max(parameters.minWindowBytes, min(windowBytes, parameters.maxWindowBytes, limit))
    }

    // MARK: Delay history

    /// How far back the current delay looks: a round trip, within bounds.
    private var currentFilterSpanUs: Int64 {
        let roundTrips = (roundTrip.value ?? 0) * parameters.currentFilterRoundTrips
        return min(parameters.maxCurrentFilterUs, max(parameters.currentFilterUs, roundTrips))
    }

    /// The chunks the receiver now has all of: the last one's send time gives a round trip.
    private mutating func measureRoundTrip(nowUs: UInt64) {
        var acknowledgedCount = 0
        while acknowledgedCount < inFlight.count, inFlight[acknowledgedCount].endBytes <= acknowledgedBytes { acknowledgedCount += 1 }
        guard acknowledgedCount > 0 else { return }
        let sentAtUs = inFlight[acknowledgedCount - 1].atUs
        inFlight.removeFirst(acknowledgedCount)
        if nowUs >= sentAtUs { roundTrip.add(Int64(nowUs - sentAtUs), nowUs: nowUs) }
    }

    private mutating func record(_ sample: UInt32, nowUs: UInt64) {
        let reference = reference ?? sample
        self.reference = reference
        let offset = Int64(Int32(bitPattern: sample &- reference))
        recent.add(offset, nowUs: nowUs, spanUs: currentFilterSpanUs)
        baseDelay.add(offset, nowUs: nowUs)
    }
}

/// What the link's transport knows of the path from its acknowledgements (Linux: TCP_INFO's
/// `tcpi_rtt` and `tcpi_min_rtt`).
public struct TransportReport: Sendable, Equatable {
    /// The round trip, smoothed over the recent acknowledgements.
    public var smoothedRoundTripUs: Int64
    /// The smallest round trip seen (the path without a queue).
    public var minimumRoundTripUs: Int64

    public init(smoothedRoundTripUs: Int64, minimumRoundTripUs: Int64) {
        self.smoothedRoundTripUs = smoothedRoundTripUs
        self.minimumRoundTripUs = minimumRoundTripUs
    }

    /// The queue it shows.
    public var queueingUs: Int64 { max(0, smoothedRoundTripUs - minimumRoundTripUs) }
}

/// The smallest value of a recent span (the latest value always counts).
struct RecentMinimum: Sendable {
    /// Each value larger than the one before (a value hides every older, larger one), so the
    /// first is the smallest.
    private var values: [(atUs: UInt64, value: Int64)] = []

    var value: Int64? { values.first?.value }

    mutating func add(_ value: Int64, nowUs: UInt64, spanUs: Int64) {
        while let last = values.last, last.value >= value { values.removeLast() }
        values.append((nowUs, value))
        let expired = values.prefix { nowUs &- $0.atUs > UInt64(spanUs) }.count
        values.removeFirst(min(expired, values.count - 1))
    }
}

/// The smallest value over the last `buckets` spans of `bucketUs` (LEDBAT's base-delay history):
/// old values age out a bucket at a time, so the minimum follows a path that changed.
struct WindowedMinimum: Sendable {
    let bucketUs: UInt64
    let buckets: Int
    /// Per bucket (by start time): the smallest value in it.
    private var history: [(startUs: UInt64, minimum: Int64)] = []

    init(bucketUs: Int64, buckets: Int) {
        self.bucketUs = UInt64(bucketUs)
        self.buckets = buckets
    }

    var value: Int64? { history.map(\.minimum).min() }

    mutating func add(_ value: Int64, nowUs: UInt64) {
        let bucketStart = nowUs - nowUs % bucketUs
        if let last = history.last, last.startUs == bucketStart {
            history[history.count - 1].minimum = min(last.minimum, value)
        } else {
            history.append((bucketStart, value))
            if history.count > buckets { history.removeFirst() }
        }
    }
}

/// How big a DATA frame a sender makes: large records where the path is fast (the cost per
/// record is the seal and a system call, so tens of KiB keep it small), small ones where a voice
/// frame could wait behind one (docs/PROTOCOL.md §13.7).
public enum ChannelChunking {
    /// Over Bluetooth voice rides the same RFCOMM channel: a VOICE frame waits behind at most one
    /// chunk, 2 KiB (8 ms at 2 Mbit/s).
    public static let bluetoothChunkBytes = 2 * 1024
    /// The smallest chunk over IP.
    public static let minimumIPChunkBytes = 1024

    /// Over IP: a quarter of the rate control's window, so several chunks are in flight and each
    /// adds little to the queue; where the round trip is long against the queueing target, at
    /// most what crosses the path in half the target at the window's rate (a window per round
    /// trip), since the receiver's delay sample is taken when a chunk's last byte arrives and a
    /// longer chunk would read as a queue (64 KiB take 10 ms at 50 Mbit/s). Between 1 KiB and
    /// ``ChannelWire/maxDataBytes``.
    public static func ipChunkBytes(windowBytes: Int, roundTripUs: Int64? = nil, targetQueueingUs: Int64 = 2_500) -> Int {
        var chunk = windowBytes / 4
        if let roundTripUs, roundTripUs > 0 {
            chunk = min(chunk, Int(Int64(windowBytes) * targetQueueingUs / (2 * roundTripUs)))
        }
        return min(ChannelWire.maxDataBytes, max(minimumIPChunkBytes, chunk))
    }
}
