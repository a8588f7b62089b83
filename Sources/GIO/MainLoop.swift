import CGio

/// GLib's default main loop (`GMainLoop` on the default `GMainContext`).
///
/// PeerVoice's control plane lives on the thread that makes the loop and calls `run()`: every
/// D-Bus method, signal, timer and socket callback registered through this module is invoked
/// there, one at a time.
public final class MainLoop {
    private let loop: OpaquePointer

    /// Makes the calling thread the owner of the default context until the loop is released, also
    /// before `run()`: so `runOnMainContext` from another thread always queues its work here (GLib
    /// would otherwise run it on the calling thread while nobody owns the context), and
    /// `MainContextBound` knows the owning thread from the start.
    public init() {
        g_main_context_acquire(nil)
        loop = g_main_loop_new(nil, 0)
    }

    deinit {
        g_main_loop_unref(loop)
        g_main_context_release(nil)
    }

    /// Runs until `quit()`.
    public func run() { g_main_loop_run(loop) }

    public func quit() { g_main_loop_quit(loop) }
}

/// A callback registered with a GLib main context (timer, fd watch, signal handler).
/// Cancelling, or letting the last reference go, removes it.
public final class EventSource {
    private var id: guint
    private let context: OpaquePointer?

    init(id: guint, context: OpaquePointer? = nil) {
        self.id = id
        self.context = context
    }

    deinit { cancel() }

    public func cancel() {
        guard id != 0 else { return }
        if let source = g_main_context_find_source_by_id(context, id) {
            g_source_destroy(source)
        }
        id = 0
    }
}

/// Heap box that carries a Swift closure through a C `gpointer`; GLib frees it with `releaseAnyBox`.
final class ClosureBox<Function> {
    let function: Function
    init(_ function: Function) { self.function = function }

    func retainedPointer() -> gpointer { Unmanaged.passRetained(self).toOpaque() }

    static func from(_ pointer: gpointer?) -> ClosureBox<Function> {
        Unmanaged<ClosureBox<Function>>.fromOpaque(pointer!).takeUnretainedValue()
    }
}

let releaseAnyBox: GDestroyNotify = { pointer in
    guard let pointer else { return }
    Unmanaged<AnyObject>.fromOpaque(pointer).release()
}

private let sourceTrampoline: GSourceFunc = { userData in
    ClosureBox<() -> Bool>.from(userData).function() ? 1 : 0
}

public enum Timer {
    /// Calls `action` once after `delay` (to the millisecond, as GLib's timeouts count).
    public static func after(_ delay: Duration, _ action: @escaping () -> Void) -> EventSource {
        let box = ClosureBox<() -> Bool> { action(); return false }
        let id = g_timeout_add_full(G_PRIORITY_DEFAULT, delay.glibMilliseconds, sourceTrampoline, box.retainedPointer(), releaseAnyBox)
        return EventSource(id: id)
    }

    /// Calls `action` every `interval` until it returns false or the source is cancelled.
    public static func every(_ interval: Duration, _ action: @escaping () -> Bool) -> EventSource {
        let box = ClosureBox<() -> Bool>(action)
        let id = g_timeout_add_full(G_PRIORITY_DEFAULT, interval.glibMilliseconds, sourceTrampoline, box.retainedPointer(), releaseAnyBox)
        return EventSource(id: id)
    }
}

/// Runs `action` on the default main context's thread at the next iteration. Safe to call from
/// any thread: this is how other threads hand work to the control plane.
public func runOnMainContext(_ action: @escaping @Sendable () -> Void) {
    let box = ClosureBox<() -> Bool> { action(); return false }
    g_main_context_invoke_full(nil, G_PRIORITY_DEFAULT, sourceTrampoline, box.retainedPointer(), releaseAnyBox)
}

/// Unix signal handling through the main loop (`g_unix_signal_add`), so handlers run as ordinary
/// main-loop callbacks rather than in signal context.
public enum UnixSignal {
    public static func watch(_ signal: Int32, _ action: @escaping () -> Void) -> EventSource {
        let box = ClosureBox<() -> Bool> { action(); return true }
        let id = g_unix_signal_add_full(G_PRIORITY_DEFAULT, signal, sourceTrampoline, box.retainedPointer(), releaseAnyBox)
        return EventSource(id: id)
    }
}

/// What a file descriptor watch reports.
public struct FDEvents: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let readable = FDEvents(rawValue: UInt32(G_IO_IN.rawValue))
    public static let writable = FDEvents(rawValue: UInt32(G_IO_OUT.rawValue))
    public static let hangUp = FDEvents(rawValue: UInt32(G_IO_HUP.rawValue))
    public static let error = FDEvents(rawValue: UInt32(G_IO_ERR.rawValue))
}

private let fdTrampoline: GUnixFDSourceFunc = { _, condition, userData in
    ClosureBox<(FDEvents) -> Bool>.from(userData).function(FDEvents(rawValue: UInt32(condition.rawValue))) ? 1 : 0
}

public enum FDWatch {
    /// Calls `action` whenever `fd` has one of `events` (errors and hang-ups are always reported).
    /// The watch lasts until `action` returns false or the source is cancelled.
    public static func add(fd: Int32, events: FDEvents, _ action: @escaping (FDEvents) -> Bool) -> EventSource {
        let box = ClosureBox<(FDEvents) -> Bool>(action)
        let condition = GIOCondition(rawValue: events.union([.hangUp, .error]).rawValue)
        let id = g_unix_fd_add_full(G_PRIORITY_DEFAULT, fd, condition, fdTrampoline, box.retainedPointer(), releaseAnyBox)
        return EventSource(id: id)
    }
}

/// Dispatches the default main context's events until `condition` holds or `timeout` seconds pass;
/// returns whether it holds. For code that waits for bus signals without running a `MainLoop`.
public func iterateMainContext(timeout: Double, until condition: () -> Bool) -> Bool {
    var timedOut = false
    let timer = Timer.after(.milliseconds(max(0, timeout * 1000))) { timedOut = true }
    defer { timer.cancel() }
    while !condition() && !timedOut {
        g_main_context_iteration(nil, 1)
    }
    return condition()
}

extension Duration {
    /// Whole milliseconds, as GLib's timeouts take them: negative as 0, beyond `UInt32.max` as
    /// `UInt32.max` (49 days).
    var glibMilliseconds: UInt32 {
        let milliseconds = components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000
        return UInt32(clamping: milliseconds)
    }

    /// A D-Bus call's timeout in GDBus's terms: nil is GDBus's default (25 s).
    static func gdbusTimeout(_ timeout: Duration?) -> Int32 {
        guard let timeout else { return -1 }
        return Int32(clamping: timeout.glibMilliseconds)
    }
}
