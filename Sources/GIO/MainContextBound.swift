import CGio

/// Whether the calling thread owns GLib's default main context: the control plane's thread, from
/// the moment it makes the `MainLoop`, or any thread while it runs `iterateMainContext`.
public var isOnMainContext: Bool { g_main_context_is_owner(nil) != 0 }

/// Stops a debug build when called off the main context's thread; nothing in release builds.
@inline(__always)
public func assertOnMainContext(_ what: StaticString = "main-context state",
                                file: StaticString = #fileID, line: UInt = #line) {
    assert(isOnMainContext, "\(what) used off the main context's thread", file: file, line: line)
}

/// A value that belongs to the main context, as SwiftNIO's `NIOLoopBound` belongs to an event
/// loop: any thread may hold it and pass it on, only the main context's thread may read or change
/// it. Debug builds check that on every access (`g_main_context_is_owner`), so a use from the
/// wrong thread stops the tests at once instead of corrupting state later.
///
/// `@unchecked Sendable`: the value is only ever touched on the owning thread, which is checked.
public final class MainContextBound<Value>: @unchecked Sendable {
    private var stored: Value

    /// Made on the main context's thread.
    public init(_ value: Value) {
        assertOnMainContext("a new MainContextBound")
        stored = value
    }

    public var value: Value {
        get {
            assertOnMainContext("a MainContextBound value")
            return stored
        }
        set {
            assertOnMainContext("a MainContextBound value")
            stored = newValue
        }
    }
}

/// A weak reference other threads may carry but only the main context dereferences (checked like
/// `MainContextBound`): how the voice thread's events find the control plane.
///
/// `@unchecked Sendable`: the reference is only ever read on the owning thread, which is checked.
public final class MainContextReference<Object: AnyObject>: @unchecked Sendable {
    private weak var stored: Object?

    /// Made on the main context's thread.
    public init(_ object: Object) {
        assertOnMainContext("a new MainContextReference")
        stored = object
    }

    /// The object, if it still exists. On the main context's thread only.
    public var object: Object? {
        assertOnMainContext("a MainContextReference")
        return stored
    }
}
