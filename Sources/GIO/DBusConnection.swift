import CGio

/// A D-Bus error: its name (`org.example.PeerVoice.Error.NotConnected`) and a message for people.
public struct BusError: Error, Equatable, CustomStringConvertible {
    public let name: String
    public let message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    /// Takes over (and frees) a `GError` filled in by GDBus.
    init(consuming error: UnsafeMutablePointer<GError>) {
        defer { g_error_free(error) }
        if let remote = g_dbus_error_get_remote_error(error) {
            name = String(cString: remote)
            g_free(remote)
            g_dbus_error_strip_remote_error(error)
        } else if error.pointee.domain == g_io_error_quark() && error.pointee.code == G_IO_ERROR_TIMED_OUT.rawValue {
            // GDBus's own call timeout: named as the bus names a missing reply, so callers can tell it apart.
            name = Self.noReply
        } else {
            name = "org.gtk.GDBus.Error.Local"
        }
        message = String(cString: error.pointee.message)
    }

    /// No reply came within the call's timeout (from the bus, or GDBus's own timer).
    public static let noReply = "org.freedesktop.DBus.Error.NoReply"

    /// The callee did not answer in time: it is busy, hung or stopped.
    public var isNoReply: Bool { name == Self.noReply }

    public var description: String { "\(name): \(message)" }
}

/// Runs a GLib call that reports failure through a `GError**`, turning it into a thrown `BusError`.
func throwingGError<T>(_ body: (UnsafeMutablePointer<UnsafeMutablePointer<GError>?>) -> T?) throws(BusError) -> T {
    var error: UnsafeMutablePointer<GError>?
    let result = body(&error)
    if let error { throw BusError(consuming: error) }
    guard let result else { throw BusError(name: "org.gtk.GDBus.Error.Local", message: "call failed without an error") }
    return result
}

/// A signal received from the bus.
public struct BusSignal {
    public let sender: String
    public let path: String
    public let interface: String
    public let member: String
    public let arguments: Variant
}

/// A connection to a message bus (`GDBusConnection`). Callbacks run on the main context that was
/// the thread-default one when they were registered (the default main loop in the service).
///
/// `@unchecked Sendable`: GDBusConnection is thread-safe (GIO's documentation), and this class
/// adds no state of its own.
public final class DBusConnection: @unchecked Sendable {
    let pointer: OpaquePointer

    /// Takes over a new reference (from `g_bus_get_sync`, `g_bus_get_finish`, …).
    fileprivate init(owning pointer: OpaquePointer) {
        self.pointer = pointer
        g_dbus_connection_set_exit_on_close(pointer, 0)
    }

    deinit { g_object_unref(UnsafeMutableRawPointer(pointer)) }

    /// The user's session bus (`DBUS_SESSION_BUS_ADDRESS`).
    public static func session() throws(BusError) -> DBusConnection {
        DBusConnection(owning: try throwingGError { g_bus_get_sync(G_BUS_TYPE_SESSION, nil, $0) })
    }

    /// The system bus, where BlueZ lives, without waiting for it: `completion` runs on the
    /// current thread-default main context.
    public static func system(completion: @escaping (Result<DBusConnection, BusError>) -> Void) {
        let box = ClosureBox<(Result<DBusConnection, BusError>) -> Void>(completion)
        g_bus_get(G_BUS_TYPE_SYSTEM, nil, busGetTrampoline, box.retainedPointer())
    }

    /// A new, private connection to the message bus at `address` (e.g. `unix:path=/tmp/bus`).
    public static func connect(address: String) throws(BusError) -> DBusConnection {
        let flags = GDBusConnectionFlags(rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue
            | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
        return DBusConnection(owning: try throwingGError {
            g_dbus_connection_new_for_address_sync(address, flags, nil, nil, $0)
        })
    }

    /// This connection's unique name, e.g. `:1.42`.
    public var uniqueName: String { String(cString: g_dbus_connection_get_unique_name(pointer)) }

    public var isClosed: Bool { g_dbus_connection_is_closed(pointer) != 0 }

    /// Calls `handler` once, on the main context that made this connection, when it closes: the
    /// bus went away (its dbus-daemon ended with the session), or `close()`.
    public func onClosed(_ handler: @escaping () -> Void) {
        let box = ClosureBox<() -> Void>(handler)
        g_signal_connect_data(UnsafeMutableRawPointer(pointer), "closed", unsafeBitCast(closedTrampoline, to: GCallback.self),
                              box.retainedPointer(), releaseBoxOnDisconnect, GConnectFlags(rawValue: 0))
    }

    /// Closes the connection: the bus forgets this client (its pending calls are abandoned).
    public func close() {
        g_dbus_connection_close_sync(pointer, nil, nil)
    }

    // MARK: Names

    public enum NameRequestResult: Equatable {
        case owned
        case alreadyOwned
    }

    /// Asks the bus for `name` without queueing or replacing anyone (`RequestName` with
    /// `DBUS_NAME_FLAG_DO_NOT_QUEUE`), so a second instance learns at once that it lost.
    public func requestName(_ name: String) throws(BusError) -> NameRequestResult {
        let doNotQueue: UInt32 = 4
        let reply = try call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                             interface: "org.freedesktop.DBus", method: "RequestName",
                             arguments: Variant(tuple: [Variant(name), Variant(doNotQueue)]))
        let primaryOwner: UInt32 = 1, alreadyOwner: UInt32 = 4
        switch reply[0].uint32 {
        case primaryOwner, alreadyOwner: return .owned
        default: return .alreadyOwned
        }
    }

    public func releaseName(_ name: String) {
        _ = try? call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                      interface: "org.freedesktop.DBus", method: "ReleaseName",
                      arguments: Variant(tuple: [Variant(name)]))
    }

    /// Blocks until everything queued on this connection has been written to the bus.
    public func flush() {
        g_dbus_connection_flush_sync(pointer, nil, nil)
    }

    /// Calls `completion` on the current thread-default main context once everything queued on
    /// this connection so far (signals emitted, replies) has been written to the bus, with false
    /// if it could not be (the connection closed). Blocks nothing: GDBus's worker thread writes.
    public func flush(completion: @escaping (Bool) -> Void) {
        let box = ClosureBox<(Bool) -> Void>(completion)
        g_dbus_connection_flush(pointer, nil, flushTrampoline, box.retainedPointer())
    }

    // MARK: Calls

    /// Calls a method and waits for the reply, or `timeout` (nil: GDBus's default of 25 s).
    @discardableResult
    public func call(destination: String, path: String, interface: String, method: String,
                     arguments: Variant? = nil, timeout: Duration? = nil) throws(BusError) -> Variant {
        try withExtendedLifetime(arguments) { () throws(BusError) in
            Variant(owning: try throwingGError {
                g_dbus_connection_call_sync(pointer, destination, path, interface, method, arguments?.pointer,
                                            nil, G_DBUS_CALL_FLAGS_NONE, Duration.gdbusTimeout(timeout), nil, $0)
            })
        }
    }

    /// Calls a method; `completion` runs on the current thread-default main context with the reply.
    public func callAsync(destination: String, path: String, interface: String, method: String,
                          arguments: Variant? = nil, timeout: Duration? = nil,
                          completion: @escaping (Result<Variant, BusError>) -> Void) {
        let box = ClosureBox<(Result<Variant, BusError>) -> Void>(completion)
        withExtendedLifetime(arguments) {
            g_dbus_connection_call(pointer, destination, path, interface, method, arguments?.pointer, nil,
                                   G_DBUS_CALL_FLAGS_NONE, Duration.gdbusTimeout(timeout), nil, asyncCallTrampoline, box.retainedPointer())
        }
    }

    /// Like `callAsync`, for a method whose call or reply carries file descriptors (type `h`):
    /// `fds` go with the call (duplicated: the caller keeps and closes its own), and the
    /// completion gets the reply with the descriptors it carried, which the caller then owns
    /// (logind's `Inhibit` replies with one; a channel handler's `NewStream` is called with one).
    public func callAsyncReceivingFDs(destination: String, path: String, interface: String, method: String,
                                      arguments: Variant? = nil, fds: [Int32] = [], timeout: Duration? = nil,
                                      completion: @escaping (Result<(reply: Variant, fds: [Int32]), BusError>) -> Void) {
        let box = ClosureBox<(Result<(reply: Variant, fds: [Int32]), BusError>) -> Void>(completion)
        let list = UnixFDList(duplicating: fds)
        withExtendedLifetime((arguments, list)) {
            g_dbus_connection_call_with_unix_fd_list(pointer, destination, path, interface, method, arguments?.pointer, nil,
                                                     G_DBUS_CALL_FLAGS_NONE, Duration.gdbusTimeout(timeout), list?.pointer, nil,
                                                     fdCallTrampoline, box.retainedPointer())
        }
    }

    // MARK: Signals

    /// Emits a signal to every subscriber (no destination).
    /// Emits a signal to every subscriber, or only to `destination` (a unique bus name: unicast).
    public func emitSignal(path: String, interface: String, name: String, arguments: Variant,
                           destination: String? = nil) throws(BusError) {
        let _: gboolean = try arguments.withPointer { arguments throws(BusError) in
            try throwingGError { g_dbus_connection_emit_signal(pointer, destination, path, interface, name, arguments, $0) }
        }
    }

    /// Emits `org.freedesktop.DBus.Properties.PropertiesChanged` for `interface` with new values.
    public func emitPropertiesChanged(path: String, interface: String, changed: [(String, Variant)]) throws(BusError) {
        try emitSignal(path: path, interface: "org.freedesktop.DBus.Properties", name: "PropertiesChanged",
                       arguments: Variant(tuple: [Variant(interface), Variant(dictionary: changed),
                                                  Variant(array: [], elementType: "s")]))
    }

    /// Calls `handler` for each matching signal until the returned subscription is released.
    /// nil matches anything.
    public func subscribe(sender: String? = nil, interface: String? = nil, member: String? = nil,
                          path: String? = nil, _ handler: @escaping (BusSignal) -> Void) -> SignalSubscription {
        let box = ClosureBox<(BusSignal) -> Void>(handler)
        let id = g_dbus_connection_signal_subscribe(pointer, sender, interface, member, path, nil,
                                                    G_DBUS_SIGNAL_FLAGS_NONE, signalTrampoline,
                                                    box.retainedPointer(), releaseAnyBox)
        return SignalSubscription(connection: self, id: id)
    }

    /// Calls `appeared` (with the owner's unique name) when `name` gets an owner, and `vanished`
    /// when it loses one, starting with its current state, until the watch is released.
    public func watchName(_ name: String, appeared: @escaping (String) -> Void,
                          vanished: @escaping () -> Void) -> NameWatch {
        let box = ClosureBox<NameWatchHandlers>(NameWatchHandlers(appeared: appeared, vanished: vanished))
        let id = g_bus_watch_name_on_connection(pointer, name, G_BUS_NAME_WATCHER_FLAGS_NONE,
                                                nameAppearedTrampoline, nameVanishedTrampoline,
                                                box.retainedPointer(), releaseAnyBox)
        return NameWatch(id: id)
    }

    // MARK: Objects

    /// Exports an object implementing `interface` as described in `introspectionXML`. GDBus checks
    /// argument types against the XML and answers `Introspect` from it.
    public func registerObject(path: String, introspectionXML: String, interface: String,
                               methods: @escaping (MethodCall) -> Void,
                               properties: @escaping (String) -> Variant?) throws(BusError) -> ObjectRegistration {
        let node = try throwingGError { g_dbus_node_info_new_for_xml(introspectionXML, $0) }
        defer { g_dbus_node_info_unref(node) }
        guard let info = g_dbus_node_info_lookup_interface(node, interface) else {
            throw BusError(name: "org.gtk.GDBus.Error.Local", message: "interface \(interface) is not in the introspection XML")
        }
        let box = ClosureBox<ObjectHandlers>(ObjectHandlers(methods: methods, properties: properties))
        var vtable = GDBusInterfaceVTable()
        vtable.method_call = methodCallTrampoline
        vtable.get_property = getPropertyTrampoline
        let id: guint = try throwingGError {
            let id = g_dbus_connection_register_object(pointer, path, info, &vtable, box.retainedPointer(), releaseAnyBox, $0)
            return id == 0 ? nil : id
        }
        return ObjectRegistration(connection: self, id: id)
    }
}

/// An exported object; unregistered when released.
public final class ObjectRegistration {
    private let connection: DBusConnection
    private let id: guint

    init(connection: DBusConnection, id: guint) {
        self.connection = connection
        self.id = id
    }

    deinit { g_dbus_connection_unregister_object(connection.pointer, id) }
}

/// A signal subscription; unsubscribed when released.
public final class SignalSubscription {
    private let connection: DBusConnection
    private let id: guint

    init(connection: DBusConnection, id: guint) {
        self.connection = connection
        self.id = id
    }

    deinit { g_dbus_connection_signal_unsubscribe(connection.pointer, id) }
}

/// A watch on a bus name; stops when released.
public final class NameWatch {
    private let id: guint

    init(id: guint) { self.id = id }

    deinit { g_bus_unwatch_name(id) }
}

struct NameWatchHandlers {
    let appeared: (String) -> Void
    let vanished: () -> Void
}

/// GDBusConnection::closed(connection, remote_peer_vanished, error, user_data).
private let closedTrampoline: @convention(c) (OpaquePointer?, gboolean, UnsafeMutablePointer<GError>?, gpointer?) -> Void = {
    _, _, _, userData in
    ClosureBox<() -> Void>.from(userData).function()
}

private let releaseBoxOnDisconnect: GClosureNotify = { data, _ in releaseAnyBox(data) }

private let nameAppearedTrampoline: GBusNameAppearedCallback = { _, _, owner, userData in
    ClosureBox<NameWatchHandlers>.from(userData).function.appeared(String(cString: owner!))
}

private let nameVanishedTrampoline: GBusNameVanishedCallback = { _, _, userData in
    ClosureBox<NameWatchHandlers>.from(userData).function.vanished()
}

/// One incoming method call. Answer it exactly once with `reply` or `fail`; one dropped unanswered
/// is answered with `org.freedesktop.DBus.Error.Failed` so the caller never waits for nothing.
public final class MethodCall {
    private var invocation: OpaquePointer?
    public let sender: String
    public let method: String
    public let arguments: Variant

    init(invocation: OpaquePointer, sender: String, method: String, arguments: Variant) {
        self.invocation = invocation
        self.sender = sender
        self.method = method
        self.arguments = arguments
    }

    deinit {
        if invocation != nil { fail(name: "org.freedesktop.DBus.Error.Failed", message: "\(method) was not answered") }
    }

    /// Replies with `value`, a tuple matching the method's out arguments (nil for none).
    public func reply(_ value: Variant? = nil) {
        guard let invocation else { return }
        self.invocation = nil
        withExtendedLifetime(value) { g_dbus_method_invocation_return_value(invocation, value?.pointer) }
    }

    /// Replies with `value` and the descriptors its `h` arguments index, duplicated into the
    /// message (the caller keeps and closes its own). `Variant(handle: 0)` names the first.
    public func reply(_ value: Variant, fds: [Int32]) {
        guard let invocation else { return }
        self.invocation = nil
        let list = UnixFDList(duplicating: fds)
        withExtendedLifetime((value, list)) {
            g_dbus_method_invocation_return_value_with_unix_fd_list(invocation, value.pointer, list?.pointer)
        }
    }

    public func fail(name: String, message: String) {
        guard let invocation else { return }
        self.invocation = nil
        g_dbus_method_invocation_return_dbus_error(invocation, name, message)
    }

    public func fail(_ error: BusError) { fail(name: error.name, message: error.message) }

    /// The file descriptor an `h` argument refers to, duplicated: the caller owns and closes it
    /// (BlueZ's `Profile1.NewConnection` hands over its socket this way).
    public func fileDescriptor(handle: Int32) -> Int32? {
        guard let invocation,
              let list = g_dbus_message_get_unix_fd_list(g_dbus_method_invocation_get_message(invocation)) else { return nil }
        let fd = g_unix_fd_list_get(list, handle, nil)
        return fd >= 0 ? fd : nil
    }
}

/// A `GUnixFDList` holding duplicates of some descriptors, for one message.
final class UnixFDList {
    let pointer: UnsafeMutablePointer<GUnixFDList>

    /// nil for no descriptors (GDBus takes a NULL list); a descriptor that cannot be duplicated
    /// is left out, and the message's handle then names nothing (the receiver sees an error).
    init?(duplicating fds: [Int32]) {
        guard !fds.isEmpty, let list = g_unix_fd_list_new() else { return nil }
        pointer = list
        for fd in fds { _ = g_unix_fd_list_append(list, fd, nil) }
    }

    deinit { g_object_unref(pointer) }
}

struct ObjectHandlers {
    let methods: (MethodCall) -> Void
    let properties: (String) -> Variant?
}

private let methodCallTrampoline: GDBusInterfaceMethodCallFunc = { _, sender, _, _, method, parameters, invocation, userData in
    let call = MethodCall(invocation: invocation!, sender: sender.map { String(cString: $0) } ?? "",
                          method: String(cString: method!), arguments: Variant(adopting: parameters!))
    ClosureBox<ObjectHandlers>.from(userData).function.methods(call)
}

private let getPropertyTrampoline: GDBusInterfaceGetPropertyFunc = { _, _, _, _, name, error, userData in
    let property = String(cString: name!)
    guard let value = ClosureBox<ObjectHandlers>.from(userData).function.properties(property) else {
        g_set_error_literal(error, g_dbus_error_quark(), gint(G_DBUS_ERROR_UNKNOWN_PROPERTY.rawValue), "No property \(property)")
        return nil
    }
    return value.withPointer { g_variant_ref($0) }
}

private let signalTrampoline: GDBusSignalCallback = { _, sender, path, interface, member, parameters, userData in
    let signal = BusSignal(sender: sender.map { String(cString: $0) } ?? "", path: String(cString: path!),
                           interface: String(cString: interface!), member: String(cString: member!),
                           arguments: Variant(adopting: parameters!))
    ClosureBox<(BusSignal) -> Void>.from(userData).function(signal)
}

private let busGetTrampoline: GAsyncReadyCallback = { _, result, userData in
    let box = Unmanaged<ClosureBox<(Result<DBusConnection, BusError>) -> Void>>.fromOpaque(userData!).takeRetainedValue()
    do throws(BusError) {
        box.function(.success(DBusConnection(owning: try throwingGError { g_bus_get_finish(result, $0) })))
    } catch {
        box.function(.failure(error))
    }
}

private let fdCallTrampoline: GAsyncReadyCallback = { source, result, userData in
    let box = Unmanaged<ClosureBox<(Result<(reply: Variant, fds: [Int32]), BusError>) -> Void>>.fromOpaque(userData!).takeRetainedValue()
    var error: UnsafeMutablePointer<GError>?
    var list: UnsafeMutablePointer<GUnixFDList>?
    guard let reply = g_dbus_connection_call_with_unix_fd_list_finish(OpaquePointer(source), &list, result, &error) else {
        return box.function(.failure(error.map { BusError(consuming: $0) }
            ?? BusError(name: "org.gtk.GDBus.Error.Local", message: "call failed without an error")))
    }
    var fds: [Int32] = []
    if let list {
        var count: Int32 = 0
        if let stolen = g_unix_fd_list_steal_fds(list, &count) {
            fds = Array(UnsafeBufferPointer(start: stolen, count: Int(count)))
            g_free(stolen)
        }
        g_object_unref(list)
    }
    box.function(.success((Variant(owning: reply), fds)))
}

private let flushTrampoline: GAsyncReadyCallback = { source, result, userData in
    let box = Unmanaged<ClosureBox<(Bool) -> Void>>.fromOpaque(userData!).takeRetainedValue()
    var error: UnsafeMutablePointer<GError>?
    let written = g_dbus_connection_flush_finish(OpaquePointer(source), result, &error) != 0
    if let error { g_error_free(error) }
    box.function(written)
}

private let asyncCallTrampoline: GAsyncReadyCallback = { source, result, userData in
    let box = Unmanaged<ClosureBox<(Result<Variant, BusError>) -> Void>>.fromOpaque(userData!).takeRetainedValue()
    var error: UnsafeMutablePointer<GError>?
    if let reply = g_dbus_connection_call_finish(OpaquePointer(source), result, &error) {
        box.function(.success(Variant(owning: reply)))
    } else {
        box.function(.failure(error.map { BusError(consuming: $0) }
            ?? BusError(name: "org.gtk.GDBus.Error.Local", message: "call failed without an error")))
    }
}
