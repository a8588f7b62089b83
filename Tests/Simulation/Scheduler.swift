import PeerVoiceCore
import SeededRandom

/// Simulated time and the events due in it: the simulation's only clock and only loop. Events
/// run one at a time in time order (ties in the order they were scheduled), so a run is a pure
/// function of its seed. Nothing here waits for real time.
public final class Scheduler {
    /// A scheduled event; `cancel()` keeps it from running.
    public final class Timer {
        fileprivate var isCancelled = false
        public func cancel() { isCancelled = true }
    }

    private struct Event {
        let time: Duration
        let order: UInt64
        let timer: Timer
        let action: () -> Void
    }

    /// Simulated time since the start.
    public private(set) var now: Duration = .zero
    /// Events run so far.
    public private(set) var eventsRun = 0
    /// Where the monotonic clock of the core's APIs (`ContinuousClock.Instant`) starts; only
    /// differences are ever used, so a real instant as origin keeps runs deterministic.
    public let origin = ContinuousClock.now
    /// The wall clock at the start (ms since 1970, fixed): what messages are stamped with.
    public let wallClockOriginMs: UInt64 = 1_800_000_000_000
    /// Added to the wall clock only (a clock step, or days skipped to reach the expiry).
    public private(set) var wallClockOffsetMs: UInt64 = 0
    private var heap: [Event] = []
    private var nextOrder: UInt64 = 0

    public init() {}

    public var instant: ContinuousClock.Instant { origin + now }
    public var wallClockMs: UInt64 { wallClockOriginMs + UInt64(now.components.seconds) * 1000
        + UInt64(now.components.attoseconds / 1_000_000_000_000_000) + wallClockOffsetMs }
    public var pendingEvents: Int { heap.count }

    @discardableResult
    public func after(_ delay: Duration, _ action: @escaping () -> Void) -> Timer {
        let timer = Timer()
        push(Event(time: now + max(delay, .zero), order: nextOrder, timer: timer, action: action))
        nextOrder += 1
        return timer
    }

    /// Steps the wall clock (not the monotonic one) forward.
    public func stepWallClock(by ms: UInt64) { wallClockOffsetMs += ms }

    /// Runs the next event; false when none is left or the next is after `deadline`.
    public func runNext(until deadline: Duration) -> Bool {
        while let first = heap.first {
            guard first.time <= deadline else { return false }
            let event = pop()
            guard !event.timer.isCancelled else { continue }
            now = event.time
            eventsRun += 1
            event.action()
            return true
        }
        return false
    }

    /// Moves the clock to `time` when nothing is due before it.
    public func advance(to time: Duration) { now = max(now, time) }

    // MARK: Binary heap by (time, order)

    private static func before(_ a: Event, _ b: Event) -> Bool { (a.time, a.order) < (b.time, b.order) }

    private func push(_ event: Event) {
        heap.append(event)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.before(heap[child], heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func pop() -> Event {
        let top = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1, right = left + 1
                var smallest = parent
                if left < heap.count, Self.before(heap[left], heap[smallest]) { smallest = left }
                if right < heap.count, Self.before(heap[right], heap[smallest]) { smallest = right }
                guard smallest != parent else { break }
                heap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return top
    }
}

/// Seeds for the run's independent random streams (per peer, disk, network…): mixed, so that no
/// two streams are shifted copies of each other (SplitMix64 seeds that differ by a multiple of
/// its increment would be).
enum Seeds {
    static func derive(_ seed: UInt64, _ stream: UInt64) -> UInt64 {
        var generator = SplitMix64(seed: seed ^ (stream &* 0xD1B5_4A32_D192_ED03))
        return generator.next()
    }
}
