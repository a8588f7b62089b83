/// Limits how often strangers may ask a person to compare codes.
///
/// Every first-contact key exchange gives a man in the middle one 1-in-10^6 guess, and every
/// prompt interrupts a person: so each remote host gets a few prompts per window, and all hosts
/// together a few more. Pure and clock-driven, so it is tested without waiting.
public struct PairingRateLimiter: Sendable {
    public let perHost: Int
    public let overall: Int
    public let windowMs: UInt64
    private var recent: [(host: String, atMs: UInt64)] = []

    public init(perHost: Int = 3, overall: Int = 10, windowMs: UInt64 = 60_000) {
        self.perHost = perHost
        self.overall = overall
        self.windowMs = windowMs
    }

    /// Records a prompt for `host` at `nowMs` if the limits allow one; false if not.
    public mutating func allow(host: String, nowMs: UInt64) -> Bool {
        recent.removeAll { nowMs >= $0.atMs + windowMs }
        guard recent.count < overall, recent.filter({ $0.host == host }).count < perHost else { return false }
        recent.append((host, nowMs))
        return true
    }
}
