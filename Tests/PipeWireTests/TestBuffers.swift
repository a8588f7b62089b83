import PipeWire
import Synchronization

/// Test-only sink: keeps the first `capacity` samples it is given (single producer: the stream's
/// real-time thread; readers look at `count` and then the samples below it).
final class CollectingSink: SampleSink, @unchecked Sendable {
    let capacity: Int
    private let storage: UnsafeMutablePointer<Int16>
    private let written = Atomic<Int>(0)
    /// Samples that were not silent, counted as they arrived (to time the first real audio).
    let firstNonSilentIndex = Atomic<Int>(-1)

    init(capacity: Int) {
        self.capacity = capacity
        storage = .allocate(capacity: capacity)
        storage.initialize(repeating: 0, count: capacity)
    }

    deinit { storage.deallocate() }

    func write(_ samples: UnsafeBufferPointer<Int16>) -> Int {
        let start = written.load(ordering: .relaxed)
        let n = min(samples.count, capacity - start)
        guard n > 0, let base = samples.baseAddress else { return 0 }
        (storage + start).update(from: base, count: n)
        if firstNonSilentIndex.load(ordering: .relaxed) < 0, let i = samples[..<n].firstIndex(where: { $0 != 0 }) {
            firstNonSilentIndex.store(start + i, ordering: .relaxed)
        }
        written.store(start + n, ordering: .releasing)
        return n
    }

    var count: Int { written.load(ordering: .acquiring) }

    var samples: [Int16] { Array(UnsafeBufferPointer(start: storage, count: count)) }
}

/// Test-only source: hands out a fixed list of samples once, then nothing (the stream plays silence).
final class BufferSource: SampleSource, @unchecked Sendable {
    private let storage: UnsafeMutablePointer<Int16>
    let total: Int
    private let position = Atomic<Int>(0)
    /// Until armed, `read` hands out nothing (the stream plays silence).
    let armed: Atomic<Bool>

    init(_ samples: [Int16], armed: Bool = true) {
        self.armed = Atomic(armed)
        total = samples.count
        storage = .allocate(capacity: max(total, 1))
        samples.withUnsafeBufferPointer { storage.initialize(from: $0.baseAddress!, count: total) }
    }

    deinit { storage.deallocate() }

    func read(into buffer: UnsafeMutableBufferPointer<Int16>) -> Int {
        guard armed.load(ordering: .acquiring) else { return 0 }
        if replayRequested.load(ordering: .acquiring) {
            position.store(0, ordering: .releasing)
            replayRequested.store(false, ordering: .releasing)
        }
        let start = position.load(ordering: .relaxed)
        let n = min(buffer.count, total - start)
        guard n > 0, let base = buffer.baseAddress else { return 0 }
        base.update(from: storage + start, count: n)
        position.store(start + n, ordering: .releasing)
        return n
    }

    var consumed: Int { position.load(ordering: .acquiring) }

    private let replayRequested = Atomic<Bool>(false)

    /// Plays the samples again from the start (the consumer rewinds on its next read).
    func replay() { replayRequested.store(true, ordering: .releasing) }

    /// All samples handed out, and no replay pending.
    var finished: Bool { !replayRequested.load(ordering: .acquiring) && consumed == total }
}
