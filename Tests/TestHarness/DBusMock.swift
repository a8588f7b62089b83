import Foundation
import GIO
import Glibc

/// A python-dbusmock stand-in on a private bus (`python3 -m dbusmock --template T`),
/// remote-controlled through its `org.freedesktop.DBus.Mock` interface: the calls it received,
/// and signals to emit as the real service would.
public final class DBusMock {
    public static let mockInterface = "org.freedesktop.DBus.Mock"
    public let busName: String
    public let path: String
    private let process: ChildProcess
    private let client: APIClient

    /// Starts the mock and waits until it owns `busName`. `template` is a dbusmock template name
    /// or the path of a template file; `systemBus`: `bus` stands in for the system bus (BlueZ's).
    public init(template: String, parameters: String? = nil, busName: String, path: String, bus: PrivateBus,
                systemBus: Bool = false, client: APIClient, in directory: TemporaryDirectory, name: String) throws {
        self.busName = busName
        self.path = path
        self.client = client
        // Debian's python3 on purpose: python3-dbusmock is installed for it, not for a python3
        // that may come first on PATH.
        process = try ChildProcess("/usr/bin/python3",
                                   ["-m", "dbusmock", systemBus ? "--system" : "--session", "--template", template] + (parameters.map { ["--parameters", $0] } ?? []),
                                   environment: [systemBus ? "DBUS_SYSTEM_BUS_ADDRESS" : "DBUS_SESSION_BUS_ADDRESS": bus.address],
                                   logPath: directory.path + "/\(name).log")
        guard eventually(timeout: 15, { !process.isRunning || client.nameHasOwner(busName) }), process.isRunning else {
            throw HarnessError("\(template) mock did not own \(busName): \(process.log)")
        }
    }

    public func stop() {
        process.signal(SIGCONT)
        process.signal(SIGTERM)
        if process.wait(timeout: 5) == nil { process.kill() }
    }

    /// SIGSTOP: the mock stops answering, as a hung service would (its calls queue up on the bus).
    public func freeze() { process.signal(SIGSTOP) }

    /// SIGCONT: it answers again, the queued calls first.
    public func thaw() { process.signal(SIGCONT) }

    /// Calls a method of the mock's objects: the template's own (e.g. bluez5's
    /// `org.bluez.Mock.AddAdapter`), or any interface of an object it made (`on` that path).
    @discardableResult
    public func call(_ interface: String, _ method: String, _ arguments: [Variant], on objectPath: String? = nil) throws -> Variant {
        try client.connection.call(destination: busName, path: objectPath ?? path, interface: interface, method: method,
                                   arguments: Variant(tuple: arguments), timeout: .seconds(5))
    }

    private func mock(_ method: String, _ arguments: [Variant], on objectPath: String? = nil) throws -> Variant {
        try call(Self.mockInterface, method, arguments, on: objectPath)
    }

    /// The arguments of every call of `method` so far, oldest first, on the main object or the
    /// mock's object at `objectPath`.
    public func calls(_ method: String, on objectPath: String? = nil) -> [[Variant]] {
        guard let reply = try? mock("GetMethodCalls", [Variant(method)], on: objectPath) else { return [] }
        return reply[0].children.map { call in call[1].children.map { $0.unboxed! } }
    }

    public func clearCalls() throws { _ = try mock("ClearCalls", []) }

    /// Emits `interface.name` with `signature` from the mock's main object.
    public func emit(_ interface: String, _ name: String, _ signature: String, _ arguments: [Variant]) throws {
        _ = try mock("EmitSignal", [Variant(interface), Variant(name), Variant(signature),
                                    Variant(array: arguments.map { Variant(boxing: $0) }, elementType: "v")])
    }
}
