/// When the voice thread refills the speaker's ring, and which time it gives the jitter buffers.
///
/// The device draws a quantum at a time; a draw that leaves the ring below its fill level wakes
/// the voice thread, which has until the next draw to refill it. Deciding at once, a packet that
/// came a moment after the draw was missing and had to wait for the next draw: a quantum more
/// delay. On one machine, where the sender's capture runs in the same graph cycle as the
/// receiver's playback, every packet comes just after the draw (bench/voice/README.md,
/// "Issue 20: refilling at the draw's deadline"). So while a voice's frame due has not come, the
/// refill waits for it until ``marginNs`` before the next draw, and every refill gives the jitter
/// buffers that deadline as `now`: "here by `now`" then means "here in time for the next draw",
/// whether the refill ran at once or waited, and the buffers' timings of the path stay consistent.
public struct RefillSchedule: Sendable {
    /// Kept free before the next draw for the refill's own work (decoding, mixing) and for
    /// waking late: poll(2) rounds the wait up to a millisecond, and a loaded machine wakes the
    /// thread later still. At the usual quantum (5.3 ms) a refill waits up to 2.3 ms after the
    /// draw, which covers a packet from the same graph cycle (0.3–1.5 ms after it).
    public static let defaultMarginNs: Int64 = 3_000_000

    public let marginNs: Int64

    public init(marginNs: Int64 = defaultMarginNs) {
        precondition(marginNs >= 0, "marginNs must not be negative")
        self.marginNs = marginNs
    }

    public enum Decision: Equatable, Sendable {
        /// Refill now, giving the jitter buffers this `now`.
        case refill(now: Int64)
        /// Wait for the missing packet, until this clock reading at the latest (then refill).
        case wait(until: Int64)
    }

    /// `clock`: the monotonic clock now (ns); `nextDrawNs`: when the device is expected to draw
    /// next (0 before its first draw); `awaitingPacket`: a voice that would be decoded has its
    /// frame due missing (``JitterBuffer/isAwaitingFrameDue``).
    public func decide(clock: Int64, nextDrawNs: Int64, awaitingPacket: Bool) -> Decision {
        let deadline = nextDrawNs - marginNs
        if awaitingPacket && clock < deadline { return .wait(until: deadline) }
        return .refill(now: max(clock, deadline))
    }
}
