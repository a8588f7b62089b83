import Foundation
import Glibc

// The seeded fault campaign against real daemons (`make chaos`, docs/RELIABILITY.md):
//   chaos [--first S] [--seeds N] [--seconds T] [--settle T]
// runs seeds S, S+1, … each for T seconds of workload and faults, then a quiet settle period,
// and exits 1 at the first seed whose history breaks an invariant (printing the seed, the
// schedule step and what was expected against what was seen).

var first: UInt64 = 1
var seeds = 1
var seconds = 60.0
var settle = 90.0
var arguments = CommandLine.arguments.dropFirst()
while let option = arguments.popFirst() {
    guard let value = arguments.popFirst() else {
        say("chaos: \(option) needs a value"); exit(2)
    }
    switch option {
    case "--first": first = UInt64(value) ?? first
    case "--seeds": seeds = Int(value) ?? seeds
    case "--seconds": seconds = Double(value) ?? seconds
    case "--settle": settle = Double(value) ?? settle
    default: say("usage: chaos [--first S] [--seeds N] [--seconds T] [--settle T]"); exit(2)
    }
}

var total = ChaosFigures()
let started = Date()
for seed in first..<(first + UInt64(seeds)) {
    say("chaos: seed \(seed) (replay: make chaos FIRST=\(seed) SEEDS=1 CHAOS_SECONDS=\(Int(seconds)))")
    let campaign: Campaign
    do {
        campaign = try Campaign(seed: seed, seconds: seconds, settle: settle)
    } catch {
        say("chaos: seed \(seed): could not set up: \(error)"); exit(2)
    }
    let violations = campaign.run()
    total.add(campaign.figures)
    say("chaos: seed \(seed): \(campaign.figures)")
    if !violations.isEmpty {
        for violation in violations { say("chaos: VIOLATION seed \(seed) \(violation)") }
        campaign.printLogs()
        campaign.tearDown(keeping: true)
        exit(1)
    }
    campaign.tearDown()
}
say("chaos: \(seeds) seed(s) from \(first), \(Int(Date().timeIntervalSince(started))) s, no violation")
say("chaos: total \(total)")

/// A line on standard output at once (a long campaign is watched as it runs).
func say(_ line: String) {
    print(line)
    fflush(nil)
}
