import CGtk

/// Carries a Swift closure through a signal's `gpointer user_data`; GLib releases it with the
/// handler (`releaseHandler`).
final class HandlerBox<Function> {
    let function: Function
    init(_ function: Function) { self.function = function }

    func retainedPointer() -> gpointer { Unmanaged.passRetained(self).toOpaque() }

    static func from(_ pointer: gpointer?) -> Function {
        Unmanaged<HandlerBox<Function>>.fromOpaque(pointer!).takeUnretainedValue().function
    }
}

private let releaseHandler: GClosureNotify = { pointer, _ in
    guard let pointer else { return }
    Unmanaged<AnyObject>.fromOpaque(pointer).release()
}

/// `g_signal_connect()` is a macro: this is what it expands to. Each trampoline below has its
/// signal's exact C signature (user_data is always last).
@discardableResult
func connectSignal<Function>(_ instance: UnsafeMutableRawPointer, _ signal: String, _ function: Function,
                             trampoline: GCallback) -> gulong {
    g_signal_connect_data(instance, signal, trampoline, HandlerBox(function).retainedPointer(),
                          releaseHandler, GConnectFlags(0))
}

/// `(instance, user_data)`: clicked, toggled, activate, map, close-request-less signals.
let voidTrampoline: @convention(c) (gpointer?, gpointer?) -> Void = { _, data in
    HandlerBox<() -> Void>.from(data)()
}

/// `(instance, GParamSpec*, user_data)`: notify::property.
let notifyTrampoline: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { _, _, data in
    HandlerBox<() -> Void>.from(data)()
}

/// `(instance, pointer, user_data)`: row-selected and row-activated (the row; NULL when none),
/// activate of a GAction (its parameter), response of an AdwMessageDialog (its id, a C string).
let pointerTrampoline: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { _, argument, data in
    HandlerBox<(UnsafeMutableRawPointer?) -> Void>.from(data)(argument)
}

/// `(GtkGestureClick*, n_press, x, y, user_data)`: pressed, released.
let pressTrampoline: @convention(c) (gpointer?, gint, gdouble, gdouble, gpointer?) -> Void = { _, _, _, _, data in
    HandlerBox<() -> Void>.from(data)()
}

/// `(GtkGesture*, GdkEventSequence*, user_data)`: cancel.
let sequenceTrampoline: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { _, _, data in
    HandlerBox<() -> Void>.from(data)()
}

/// `(GtkEventControllerKey*, keyval, keycode, state, user_data) -> gboolean`: key-pressed.
let keyPressedTrampoline: @convention(c) (gpointer?, guint, guint, GdkModifierType, gpointer?) -> gboolean = { _, keyval, _, _, data in
    HandlerBox<(UInt32) -> Bool>.from(data)(keyval) ? 1 : 0
}

/// `(GtkEventControllerKey*, keyval, keycode, state, user_data)`: key-released.
let keyReleasedTrampoline: @convention(c) (gpointer?, guint, guint, GdkModifierType, gpointer?) -> Void = { _, keyval, _, _, data in
    _ = HandlerBox<(UInt32) -> Bool>.from(data)(keyval)
}

func callback<T>(_ trampoline: T) -> GCallback { unsafeBitCast(trampoline, to: GCallback.self) }

/// `(GtkWidget*, GVariant* args, user_data) -> gboolean`: a `GtkCallbackAction` (a shortcut).
let shortcutTrampoline: @convention(c) (UnsafeMutablePointer<GtkWidget>?, OpaquePointer?, gpointer?) -> gboolean = { _, _, data in
    HandlerBox<() -> Bool>.from(data)() ? 1 : 0
}

/// Releases a `HandlerBox` handed to C as a `GDestroyNotify`.
let releaseBox: GDestroyNotify = { pointer in
    guard let pointer else { return }
    Unmanaged<AnyObject>.fromOpaque(pointer).release()
}

/// `(instance, gint, user_data)`: response of a `GtkNativeDialog`.
let intTrampoline: @convention(c) (gpointer?, gint, gpointer?) -> Void = { _, value, data in
    HandlerBox<(Int32) -> Void>.from(data)(value)
}

/// `(GtkDropTarget*, const GValue*, x, y, user_data) -> gboolean`: drop.
let dropTrampoline: @convention(c) (gpointer?, UnsafeRawPointer?, gdouble, gdouble, gpointer?) -> gboolean = { _, value, _, _, data in
    HandlerBox<(UnsafeRawPointer?) -> Bool>.from(data)(value) ? 1 : 0
}
