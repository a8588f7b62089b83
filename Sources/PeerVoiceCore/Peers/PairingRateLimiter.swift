/// Limits how often other hosts may start key exchanges that could end in a pairing prompt.
///
/// Every incoming key exchange that reaches message 3 gives a man in the middle one 1-in-10^6
/// guess at the code, whether or not it goes on to prompt a person: so each remote host gets a
/// few per window, and all hosts together a few more. An exchange that ends on a pinned key is
/// given back. Pure and clock-driven, so it is tested without waiting.
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

    /// Whether `host` has no attempt left now (its new connections can be closed before any
    /// key-exchange work).
    public mutating func isExhausted(host: String, nowMs: UInt64) -> Bool {
        forgetOld(nowMs: nowMs)
        return recent.count >= overall || recent.filter({ $0.host == host }).count >= perHost
    }

    /// Gives back `host`'s latest attempt: it ended on a pinned key, so it guessed nothing.
    public mutating func giveBack(host: String) {
        if let index = recent.lastIndex(where: { $0.host == host }) { recent.remove(at: index) }
    }

    private mutating func forgetOld(nowMs: UInt64) {
        recent.removeAll { nowMs >= $0.atMs + windowMs }
    }

    /// Records an attempt by `host` at `nowMs` if the limits allow one; false if not.
    public mutating func allow(host: String, nowMs: UInt64) -> Bool {
        guard !isExhausted(host: host, nowMs: nowMs) else { return false }
        recent.append((host, nowMs))
        return true
    }
}
