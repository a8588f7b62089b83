/// Searches a failing run for a smaller schedule that still fails the same way (delta
/// debugging: drop halves, then quarters, … then single steps, keeping each drop that still
/// fails), so the reproduction printed is a handful of steps rather than a hundred.
public struct Shrinker {
    public let simulation: Simulation
    /// Runs allowed for the search.
    public var budget = 500

    public init(simulation: Simulation) { self.simulation = simulation }

    /// What a violation says without its time, numbers and ids: "the same way".
    public static func signature(_ violation: String) -> String {
        let body = violation.split(separator: ":", maxSplits: 1).last.map(String.init) ?? violation
        return String(body.filter { !$0.isNumber && !$0.isHexDigit }.prefix(50))
    }

    /// The smallest set of step indices found that still fails with `signature`, and the runs it took.
    public func shrink(signature: String) -> (keep: [Int], runs: Int) {
        var keep = Array(simulation.schedule.indices)
        var runs = 0
        var chunk = max(1, keep.count / 2)
        while runs < budget {
            var removed = false
            var start = 0
            while start < keep.count, runs < budget {
                let candidate = Array(keep[..<start]) + Array(keep[min(keep.count, start + chunk)...])
                runs += 1
                let outcome = simulation.run(keeping: Set(candidate))
                if outcome.failed, Self.signature(outcome.violations[0]) == signature {
                    keep = candidate
                    removed = true
                } else {
                    start += chunk
                }
            }
            if chunk == 1 && !removed { break }
            chunk = max(1, chunk / 2)
        }
        return (keep, runs)
    }
}
