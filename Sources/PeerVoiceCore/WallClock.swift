import Foundation

/// The wall-clock time in milliseconds since 1970, as the message store, routes, the rate
/// limiter and the bus API carry it. The service's components are given one rather than reading
/// the system's, so that a test or a simulation can run them on a clock of its own.
public struct WallClock: Sendable {
    private let read: @Sendable () -> UInt64

    public init(nowMs: @escaping @Sendable () -> UInt64) {
        read = nowMs
    }

    /// Milliseconds since 1970-01-01 UTC.
    public func nowMs() -> UInt64 { read() }

    /// The system's clock (`Date`).
    public static let system = WallClock { UInt64(Date().timeIntervalSince1970 * 1000) }
}
