import CGio

/// An OS thread started through GLib, so that it carries a name `top -H`, `ps -L` and `perf`
/// show (on Linux, Foundation's `Thread.name` never reaches the kernel).
public final class NamedThread {
    private typealias Body = @Sendable () -> Void
    /// The `GThread`, until joined.
    private var thread: UnsafeMutablePointer<GThread>?

    /// Runs `body` on a new thread called `name` (the kernel keeps its first 15 bytes). As
    /// `g_thread_new` does, aborts when the system cannot make a thread.
    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        thread = g_thread_new(name, { data in
            Unmanaged<ClosureBox<Body>>.fromOpaque(data!).takeRetainedValue().function()
            return nil
        }, ClosureBox<Body>(body).retainedPointer())
    }

    deinit {
        if let thread { g_thread_unref(thread) }
    }

    /// Waits until the thread's body has returned. From another thread, once.
    public func join() {
        guard let thread else { return }
        self.thread = nil
        _ = g_thread_join(thread)
    }
}
