import Synchronization

/// A single-producer, single-consumer ring of 16-bit samples, for handing audio between a
/// real-time thread (PipeWire's process callback) and an ordinary one (the voice thread).
///
/// All memory is allocated in `init`; ``write(_:)`` and ``read(into:)`` take no lock, allocate
/// nothing and never wait, so either may run on a real-time thread. The contract is the usual
/// one for such a ring: **exactly one thread writes and exactly one thread reads** (they may be
/// the same thread). Methods marked "producer" must only be called by the writing thread,
/// "consumer" only by the reading one; the counters may be read from anywhere.
///
/// The indices are monotonic counters (an `Int` of samples never wraps in practice: 2^63 samples
/// at 48 kHz is six million years), published with release/acquire ordering so the reader sees
/// the samples before the count that covers them, and the writer never overwrites samples before
/// the reader is done with them.
///
/// `@unchecked Sendable`: the two indices are atomics, and each sample is written before the
/// release that publishes it and read after the acquire that sees it, by one thread per side.
public final class AudioRing: @unchecked Sendable {
    /// How many samples the ring holds: the requested capacity rounded up to a power of two.
    public let capacity: Int
    private let mask: Int
    private let storage: UnsafeMutablePointer<Int16>

    /// Samples written so far (advanced by the producer only).
    private let writeCount = Atomic<Int>(0)
    /// Samples read so far (advanced by the consumer only).
    private let readCount = Atomic<Int>(0)
    private let overflowCount = Atomic<Int>(0)
    private let underflowCount = Atomic<Int>(0)

    /// A ring holding at least `minimumCapacity` samples (rounded up to a power of two, at least 2).
    public init(minimumCapacity: Int) {
        precondition(minimumCapacity > 0, "AudioRing capacity must be positive")
        var size = 2
        while size < minimumCapacity { size <<= 1 }
        capacity = size
        mask = size - 1
        storage = UnsafeMutablePointer<Int16>.allocate(capacity: size)
        storage.initialize(repeating: 0, count: size)
    }

    deinit {
        storage.deallocate()
    }

    /// Samples waiting to be read. Exact on the consumer's thread; a lower bound elsewhere.
    public var availableToRead: Int {
        writeCount.load(ordering: .acquiring) - readCount.load(ordering: .acquiring)
    }

    /// Free room. Exact on the producer's thread; a lower bound elsewhere.
    public var availableToWrite: Int { capacity - availableToRead }

    /// Samples that ``write(_:)`` dropped because the ring was full, since creation.
    public var droppedSamples: Int { overflowCount.load(ordering: .relaxed) }

    /// Samples that ``read(into:)`` was asked for and could not supply, since creation.
    public var missingSamples: Int { underflowCount.load(ordering: .relaxed) }

    /// Producer. Appends as many of `samples` as fit and returns how many that was; the rest
    /// (the newest samples) are dropped and counted in ``droppedSamples``.
    @discardableResult
    public func write(_ samples: UnsafeBufferPointer<Int16>) -> Int {
        let written = writeCount.load(ordering: .relaxed)  // only this thread stores it
        let read = readCount.load(ordering: .acquiring)  // the reader is done with what it passed
        let room = capacity - (written - read)
        let count = Swift.min(room, samples.count)
        if count < samples.count {
            overflowCount.add(samples.count - count, ordering: .relaxed)
        }
        guard count > 0, let source = samples.baseAddress else { return 0 }
        let start = written & mask
        let first = Swift.min(count, capacity - start)
        (storage + start).update(from: source, count: first)
        if first < count {
            storage.update(from: source + first, count: count - first)
        }
        writeCount.store(written + count, ordering: .releasing)
        return count
    }

    /// Producer. ``write(_:)`` for an array (allocates nothing).
    @discardableResult
    public func write(_ samples: [Int16]) -> Int {
        samples.withUnsafeBufferPointer { write($0) }
    }

    /// Consumer. Moves up to `buffer.count` samples into the front of `buffer`, oldest first, and
    /// returns how many. The shortfall, if any, is counted in ``missingSamples``; the rest of
    /// `buffer` is left untouched (see ``read(into:fillingWith:)``).
    @discardableResult
    public func read(into buffer: UnsafeMutableBufferPointer<Int16>) -> Int {
        let read = readCount.load(ordering: .relaxed)  // only this thread stores it
        let written = writeCount.load(ordering: .acquiring)  // the samples it covers are visible
        let count = Swift.min(written - read, buffer.count)
        if count < buffer.count {
            underflowCount.add(buffer.count - count, ordering: .relaxed)
        }
        guard count > 0, let destination = buffer.baseAddress else { return 0 }
        let start = read & mask
        let first = Swift.min(count, capacity - start)
        destination.update(from: storage + start, count: first)
        if first < count {
            (destination + first).update(from: storage, count: count - first)
        }
        readCount.store(read + count, ordering: .releasing)
        return count
    }

    /// Consumer. Fills all of `buffer`: what the ring has, then `fill` (silence by default) for
    /// the shortfall. Returns how many samples came from the ring. What a playback callback wants.
    @discardableResult
    public func read(into buffer: UnsafeMutableBufferPointer<Int16>, fillingWith fill: Int16) -> Int {
        let count = read(into: buffer)
        if count < buffer.count, let base = buffer.baseAddress {
            (base + count).update(repeating: fill, count: buffer.count - count)
        }
        return count
    }

    /// Consumer. Drops up to `count` of the oldest samples (e.g. to cut latency after a stall)
    /// and returns how many were dropped.
    @discardableResult
    public func discard(_ count: Int) -> Int {
        let read = readCount.load(ordering: .relaxed)
        let written = writeCount.load(ordering: .acquiring)
        let dropped = Swift.max(0, Swift.min(count, written - read))
        readCount.store(read + dropped, ordering: .releasing)
        return dropped
    }
}
