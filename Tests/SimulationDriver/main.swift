import Foundation
import PeerVoiceSimulation

// `make simulate SEEDS=N`: runs seeds, prints what ran and, for a failing seed, a shrunk
// reproduction and the command that replays it. See docs/RELIABILITY.md.
//
//   simulate --seeds N [--first S]     seeds S ..< S+N (S = 1)
//   simulate --seconds T [--first S]   seeds from S until T seconds have passed (a long run)
//   simulate --seed S [--keep 3,7,9]   one seed, only those schedule steps, with its log

struct Arguments {
    var seeds = 100
    var first: UInt64 = 1
    var seconds: Double?
    var seed: UInt64?
    var keep: Set<Int>?
    var shrink = true

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

let clock = ContinuousClock()
let started = clock.now
var seed = arguments.first
var ran = 0, events = 0, accepted = 0, received = 0, pairings = 0, transfersSent = 0, transfersCompleted = 0
var bytesCompleted: UInt64 = 0
var appStreamsOpened = 0, appStreamsWhole = 0
var failures: [(UInt64, Simulation.Outcome)] = []
while true {
    if let seconds = arguments.seconds {
        if clock.now - started >= .seconds(seconds) { break }
    } else if ran >= arguments.seeds {
        break
    }
    let simulation = Simulation(seed: seed)
    let outcome = simulation.run()
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
    if outcome.failed { failures.append((seed, outcome)) }
    seed += 1
}
let elapsed = clock.now - started
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
print("simulate: seeds \(arguments.first)...\(seed - 1) (\(ran) runs), \(events) events in \(String(format: "%.1f", seconds)) s (\(Int(Double(events) / max(seconds, 0.001))) events/s); \(accepted) messages accepted, \(received) received, \(pairings) links opened by people; \(transfersCompleted) of \(transfersSent) transfers complete at their receivers (\(String(format: "%.1f", Double(bytesCompleted) / 1_048_576)) MiB), \(appStreamsWhole) of \(appStreamsOpened) app streams whole; \(failures.count) failing")
if !failures.isEmpty { print("failing seeds: \(failures.map { String($0.0) }.joined(separator: " "))") }
for (seed, outcome) in failures.prefix(5) {
    print("\nFAILING seed \(seed): \(outcome.violations[0])")
    let simulation = Simulation(seed: seed)
    var keep = Array(simulation.schedule.indices)
    if arguments.shrink {
        let (shrunk, runs) = Shrinker(simulation: simulation).shrink(signature: Shrinker.signature(outcome.violations[0]))
        keep = shrunk
        print("shrunk from \(simulation.schedule.count) to \(keep.count) schedule steps in \(runs) runs:")
    }
    print(describe(simulation, keeping: keep))
    print("replay: make simulate SEED=\(seed) KEEP=\(keep.map(String.init).joined(separator: ","))")
}
exit(failures.isEmpty ? 0 : 1)
