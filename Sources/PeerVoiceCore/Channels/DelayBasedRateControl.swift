/// How much channel data may be in flight on an IP link, from the one-way delay the receiver
/// reports (CHANNEL_FEEDBACK), in the spirit of LEDBAT (RFC 6817): while the delay is at its base
/// the window grows; as a queue builds at the bottleneck (a home router's buffer, which the call's
/// voice datagrams cross too) the delay rises, and the window shrinks to keep that queue near
/// ``Parameters/targetQueueingUs``. Bulk data thus yields to the call instead of filling the queue
/// in front of it; docs/PROTOCOL.md §13.7.
///
/// Delay samples are the receiver's clock minus the sender's, modulo 2^32 µs: the clocks are not
/// synchronised, so only a sample's distance above the smallest one seen (the base) means anything.
public struct DelayBasedRateControl: Sendable {
    public struct Parameters: Sendable, Equatable {
        /// The queueing delay the window aims at.
        public var targetQueueingUs: Int64
        /// Above this queueing delay the window is halved (at most once per window of data).
        public var backOffQueueingUs: Int64
        public var initialWindowBytes: Int
        public var minWindowBytes: Int
        public var maxWindowBytes: Int
        /// LEDBAT's GAIN: at most this many segments of growth per window acknowledged.
        public var gain: Double
        /// The segment size the growth is counted in.
        public var segmentBytes: Int
        /// The base delay is the smallest sample of the last `baseHistoryBuckets` buckets of this length.
        public var baseBucketUs: Int64
        public var baseHistoryBuckets: Int
        /// The current delay is the smallest sample of this recent span (filters the receiver's noise).
        public var currentFilterUs: Int64

        public init(targetQueueingUs: Int64 = 2_500, backOffQueueingUs: Int64 = 12_500,
                    initialWindowBytes: Int = 16 * 1024, minWindowBytes: Int = 2 * 1024,
                    maxWindowBytes: Int = 8 << 20, gain: Double = 1, segmentBytes: Int = 1448,
                    baseBucketUs: Int64 = 60_000_000, baseHistoryBuckets: Int = 10, currentFilterUs: Int64 = 10_000) {
            self.targetQueueingUs = targetQueueingUs
            self.backOffQueueingUs = backOffQueueingUs
            self.initialWindowBytes = initialWindowBytes
            self.minWindowBytes = minWindowBytes
            self.maxWindowBytes = maxWindowBytes
            self.gain = gain
            self.segmentBytes = segmentBytes
            self.baseBucketUs = baseBucketUs
            self.baseHistoryBuckets = baseHistoryBuckets
            self.currentFilterUs = currentFilterUs
        }
    }

    public let parameters: Parameters
    /// Bytes that may be in flight (sent, not yet reported received).
    public private(set) var windowBytes: Int
    public private(set) var sentBytes: UInt64 = 0
    public private(set) var acknowledgedBytes: UInt64 = 0
    /// Doubling per window until the queue reaches half the target.
    public private(set) var inSlowStart = true
    /// The latest estimate of the queue in front of our data.
    public private(set) var queueingUs: Int64 = 0

    /// Samples as offsets from the first one (so the modulo-2^32 clock arithmetic happens once).
    private var reference: UInt32?
    /// Per bucket (by start time): the smallest sample in it.
    private var baseBuckets: [(startUs: UInt64, minimum: Int64)] = []
    /// Recent samples (time, offset) for the current-delay filter.
    private var recent: [(atUs: UInt64, offset: Int64)] = []
    /// Acknowledged bytes since the last halving; none until a window's worth has come.
    private var acknowledgedSinceBackOff: Int = .max

    public init(parameters: Parameters = Parameters()) {
        self.parameters = parameters
        windowBytes = parameters.initialWindowBytes
    }

    public var inFlightBytes: Int { Int(sentBytes &- acknowledgedBytes) }

    /// Whether `bytes` more may go now (always when nothing is in flight, so one chunk larger than
    /// the window still goes).
    public func allows(_ bytes: Int) -> Bool {
        inFlightBytes == 0 || inFlightBytes + bytes <= windowBytes
    }

    public mutating func sent(_ bytes: Int) {
        sentBytes &+= UInt64(bytes)
    }

    /// A CHANNEL_FEEDBACK: the receiver's total of DATA bytes received, and its delay sample.
    /// `nowUs` is this side's monotonic clock.
    public mutating func feedback(receivedBytes: UInt64, delayUs: UInt32, nowUs: UInt64) {
        // Only what we actually sent can be acknowledged (a confused peer cannot inflate the window).
        let received = min(receivedBytes, sentBytes)
        let newlyAcknowledged = received > acknowledgedBytes ? Int(received - acknowledgedBytes) : 0
        acknowledgedBytes = max(acknowledgedBytes, received)
        record(delayUs, nowUs: nowUs)
        guard newlyAcknowledged > 0 else { return }
        queueingUs = (recent.map(\.offset).min() ?? baseOffset) - baseOffset
        let target = parameters.targetQueueingUs
        if acknowledgedSinceBackOff != .max { acknowledgedSinceBackOff += newlyAcknowledged }
        if queueingUs > parameters.backOffQueueingUs {
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
            let change = parameters.gain * offTarget * Double(newlyAcknowledged) * Double(parameters.segmentBytes) / Double(windowBytes)
            windowBytes += Int(change.rounded(.towardZero))
        }
        // Growth only while the window is what limits the sender (LEDBAT's flight-size rule).
        let limit = max(parameters.initialWindowBytes, 2 * (inFlightBytes + newlyAcknowledged))
        windowBytes = max(parameters.minWindowBytes, min(windowBytes, parameters.maxWindowBytes, limit))
    }

    // MARK: Delay history

    private var baseOffset: Int64 { baseBuckets.map(\.minimum).min() ?? 0 }

    private mutating func record(_ sample: UInt32, nowUs: UInt64) {
        let reference = reference ?? sample
        self.reference = reference
        let offset = Int64(Int32(bitPattern: sample &- reference))
        recent.append((nowUs, offset))
        if let first = recent.first, nowUs &- first.atUs > UInt64(parameters.currentFilterUs), recent.count > 1 {
            recent.removeAll { nowUs &- $0.atUs > UInt64(parameters.currentFilterUs) }
            if recent.isEmpty { recent.append((nowUs, offset)) }
        }
        let bucketStart = nowUs - nowUs % UInt64(parameters.baseBucketUs)
        if let last = baseBuckets.last, last.startUs == bucketStart {
            baseBuckets[baseBuckets.count - 1].minimum = min(last.minimum, offset)
        } else {
            baseBuckets.append((bucketStart, offset))
            if baseBuckets.count > parameters.baseHistoryBuckets { baseBuckets.removeFirst() }
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
    /// adds little to the queue, between 1 KiB and ``ChannelWire/maxDataBytes``.
    public static func ipChunkBytes(windowBytes: Int) -> Int {
        min(ChannelWire.maxDataBytes, max(minimumIPChunkBytes, windowBytes / 4))
    }
}
