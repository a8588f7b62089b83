import Foundation
import PeerVoiceSimulation
import Synchronization

// `make simulate SEEDS=N`: runs seeds, prints what ran and, for a failing seed, a shrunk
// reproduction and the command that replays it. See docs/RELIABILITY.md.
//
//   simulate --seeds N [--first S]     seeds S ..< S+N (S = 1)
//   simulate --seconds T [--first S]   seeds from S until T seconds have passed (a long run)
//   simulate --seed S [--keep 3,7,9]   one seed, only those schedule steps, with its log
//   --jobs J                           seeds on J threads at once (default: one per core)

struct Arguments {
    var seeds = 100
    var first: UInt64 = 1
    var seconds: Double?
    var seed: UInt64?
    var keep: Set<Int>?
    var shrink = true
    var jobs = ProcessInfo.processInfo.activeProcessorCount

    init(_ arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--seeds": seeds = Int(iterator.next() ?? "") ?? seeds
            case "--first": first = UInt64(iterator.next() ?? "") ?? first
            case "--seconds": seconds = Double(iterator.next() ?? "")
            case "--seed": seed = UInt64(iterator.next() ?? "")
            case "--keep": keep = Set((iterator.next() ?? "").split(separator: ",").compactMap { Int($0) })
            case "--no-shrink": shrink = false
            case "--jobs": jobs = max(1, Int(iterator.next() ?? "") ?? jobs)
            default:
                FileHandle.standardError.write(Data("simulate: unknown argument \(argument)\n".utf8))
                exit(2)
            }
        }
    }
}

let arguments = Arguments(CommandLine.arguments)

func describe(_ simulation: Simulation, keeping keep: [Int]) -> String {
    keep.map { index in
        let step = simulation.schedule[index]
        return "  [\(index)] at \(Duration.seconds(0) + step.time) \(Simulation.describe(step.action))"
    }.joined(separator: "\n")
}

if let seed = arguments.seed {
    let simulation = Simulation(seed: seed)
    let outcome = simulation.run(keeping: arguments.keep, fullLog: true)
    let steps = arguments.keep.map { Array($0).sorted() } ?? Array(simulation.schedule.indices)
    print("seed \(seed): \(simulation.peerCount) peers, \(steps.count) schedule steps")
    print(describe(simulation, keeping: steps))
    print("--- what happened")
    for line in outcome.log { print("  \(line)") }
    print("--- \(outcome.events) events, \(outcome.accepted) messages accepted, \(outcome.received) received, \(outcome.pairings) links opened by people, "
          + "\(outcome.transfersCompleted) of \(outcome.transfersSent) transfers complete (\(outcome.bytesCompleted) bytes)")
    if outcome.failed {
        for violation in outcome.violations { print("VIOLATION \(violation)") }
        exit(1)
    }
    print("no violation")
    exit(0)
}

/// What the seeds run add up to.
struct Totals {
    var ran = 0, events = 0, accepted = 0, received = 0, pairings = 0, transfersSent = 0, transfersCompleted = 0
    var bytesCompleted: UInt64 = 0
    var appStreamsOpened = 0, appStreamsWhole = 0
    /// Each failing seed and its first violation.
    var failures: [(seed: UInt64, violation: String)] = []

    mutating func add(_ outcome: Simulation.Outcome, seed: UInt64) {
        ran += 1
        events += outcome.events
        accepted += outcome.accepted
        received += outcome.received
        pairings += outcome.pairings
        transfersSent += outcome.transfersSent
        transfersCompleted += outcome.transfersCompleted
        bytesCompleted += outcome.bytesCompleted
        appStreamsOpened += outcome.appStreamsOpened
        appStreamsWhole += outcome.appStreamsWhole
        if let violation = outcome.violations.first { failures.append((seed, violation)) }
    }
}

/// Runs seeds from `first` on `jobs` threads, each seed's world wholly on the thread that took it
/// (a simulation is single-threaded; worlds share nothing), until `seeds` have run or, given a
/// deadline, until it. The seeds run are `first ..< next`: a thread finishes the seed it took.
func runSeeds(first: UInt64, seeds: Int, until deadline: ContinuousClock.Instant?, jobs: Int) -> (totals: Totals, next: UInt64) {
    let next = Atomic<UInt64>(first)
    let totals = Mutex(Totals())
    DispatchQueue.concurrentPerform(iterations: jobs) { _ in
        while true {
            if let deadline, ContinuousClock.now >= deadline { return }
            let seed = next.add(1, ordering: .relaxed).oldValue
            if deadline == nil, seed >= first + UInt64(seeds) { return }
            let outcome = Simulation(seed: seed).run()
            totals.withLock { $0.add(outcome, seed: seed) }
        }
    }
    let taken = next.load(ordering: .relaxed)
    return (totals.withLock { $0 }, deadline == nil ? first + UInt64(seeds) : taken)
}

let clock = ContinuousClock()
let started = clock.now
let (totals, next) = runSeeds(first: arguments.first, seeds: arguments.seeds,
                              until: arguments.seconds.map { started + .seconds($0) }, jobs: arguments.jobs)
let failures = totals.failures.sorted { $0.seed < $1.seed }
let elapsed = clock.now - started
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
print("simulate: seeds \(arguments.first)...\(next - 1) (\(totals.ran) runs on \(arguments.jobs) thread\(arguments.jobs == 1 ? "" : "s")), \(totals.events) events in \(String(format: "%.1f", seconds)) s (\(Int(Double(totals.events) / max(seconds, 0.001))) events/s); \(totals.accepted) messages accepted, \(totals.received) received, \(totals.pairings) links opened by people; \(totals.transfersCompleted) of \(totals.transfersSent) transfers complete at their receivers (\(String(format: "%.1f", Double(totals.bytesCompleted) / 1_048_576)) MiB), \(totals.appStreamsWhole) of \(totals.appStreamsOpened) app streams whole; \(failures.count) failing")
if !failures.isEmpty { print("failing seeds: \(failures.map { String($0.seed) }.joined(separator: " "))") }
for (seed, violation) in failures.prefix(5) {
    print("\nFAILING seed \(seed): \(violation)")
    let simulation = Simulation(seed: seed)
    var keep = Array(simulation.schedule.indices)
    if arguments.shrink {
        let (shrunk, runs) = Shrinker(simulation: simulation).shrink(signature: Shrinker.signature(violation))
        keep = shrunk
        print("shrunk from \(simulation.schedule.count) to \(keep.count) schedule steps in \(runs) runs:")
    }
    print(describe(simulation, keeping: keep))
    print("replay: make simulate SEED=\(seed) KEEP=\(keep.map(String.init).joined(separator: ","))")
}
exit(failures.isEmpty ? 0 : 1)
