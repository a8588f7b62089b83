import CGio
import Glibc

/// A wake-up descriptor (Linux's eventfd, non-blocking): readable while signalled, so a thread's
/// `poll` and the main loop's `FDWatch` can both wait on it. `signal` and `clear` are one system
/// call each; whoever uses it decides when (Swift's Glibc module has no eventfd, GLib's headers
/// bring it).
public final class EventFD: Sendable {
    public let fd: Int32

    /// Nil only when the process is out of descriptors (`errno` says so).
    public init?() {
        let fd = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard fd >= 0 else { return nil }
        self.fd = fd
    }

    deinit { Glibc.close(fd) }

    /// Makes it readable (until `clear`).
    public func signal() {
        var one: UInt64 = 1
        _ = Glibc.write(fd, &one, MemoryLayout<UInt64>.size)
    }

    /// Makes it not readable.
    public func clear() {
        var count: UInt64 = 0
        _ = Glibc.read(fd, &count, MemoryLayout<UInt64>.size)
    }
}
