import PeerVoiceSimulation
import XCTest

/// The deterministic simulation's seeds that `make test` runs (more with `make simulate`).
final class SimulationTests: XCTestCase {
    func testSeedsRunWithoutViolation() {
        let count = Int(ProcessInfo.processInfo.environment["PEERVOICE_SIMULATION_SEEDS"] ?? "") ?? 300
        var events = 0
        for seed in UInt64(1)...UInt64(count) {
            let outcome = Simulation(seed: seed).run()
            events += outcome.events
            XCTAssertFalse(outcome.failed, "seed \(seed): \(outcome.violations.first ?? "")\nreplay and shrink: make simulate SEED=\(seed)\n"
                           + outcome.log.suffix(40).joined(separator: "\n"))
        }
        print("simulation: \(count) seeds, \(events) events")
    }

    func testASeedReplaysExactly() {
        let first = Simulation(seed: 7).run(), second = Simulation(seed: 7).run()
        XCTAssertEqual(first.events, second.events)
        XCTAssertEqual(first.log, second.log)
    }
}
