import Foundation
import GIO
import PeerVoiceBus
import Glibc

/// A private `dbus-daemon --session` for one test; nothing else talks on it.
public final class PrivateBus {
    public let address: String
    private let process: ChildProcess

    public init(in directory: TemporaryDirectory, configArguments: [String] = ["--session"]) throws {
        let socket = directory.path + "/bus"
        address = "unix:path=" + socket
        process = try ChildProcess("dbus-daemon", configArguments + ["--nofork", "--nopidfile", "--address=" + address],
                                   logPath: directory.path + "/dbus-daemon.log")
        // The socket file appears a moment before dbus-daemon listens on it: ready means a client
        // can connect.
        let address = address
        guard eventually(timeout: 10, { !process.isRunning || (try? DBusConnection.connect(address: address)) != nil }),
              process.isRunning else {
            throw HarnessError("dbus-daemon did not start: \(process.log)")
        }
    }

    /// A private session bus that starts services by bus activation from `serviceDirectories`
    /// only (so a PeerVoice installed on this machine is not found unless a directory is listed).
    public convenience init(in directory: TemporaryDirectory, activatingFrom serviceDirectories: [String]) throws {
        let config = directory.path + "/session.conf"
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:tmpdir=\(directory.path)</listen>
              <auth>EXTERNAL</auth>
            \(serviceDirectories.map { "  <servicedir>\($0)</servicedir>" }.joined(separator: "\n"))
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>

            """.write(toFile: config, atomically: true, encoding: .utf8)
        try self.init(in: directory, configArguments: ["--config-file=" + config])
    }

    public func stop() {
        process.signal(SIGTERM)
        if process.wait(timeout: 5) == nil { process.kill() }
    }
}

/// The peervoiced built next to the test binary.
public enum Binaries {
    public static var directory: String {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return (executable as NSString).deletingLastPathComponent
    }
    public static var peervoiced: String { directory + "/peervoiced" }
}

/// One running peervoiced on a private bus, with its own state directory.
public final class Daemon {
    public let process: ChildProcess
    public let stateDirectory: String

    /// `launcher`: a command that runs peervoiced in its place (e.g. `ip netns exec NS`).
    public init(bus: PrivateBus, in directory: TemporaryDirectory, name: String = "daemon",
                arguments: [String] = [], environment: [String: String] = [:], launcher: [String] = []) throws {
        stateDirectory = directory.path + "/\(name)-state"
        let command = launcher + [Binaries.peervoiced, "--state-dir", stateDirectory, "--name", name] + arguments
        process = try ChildProcess(command[0], Array(command.dropFirst()),
                                   environment: ["DBUS_SESSION_BUS_ADDRESS": bus.address].merging(environment) { $1 },
                                   logPath: directory.path + "/\(name).log")
    }

    /// SIGTERM, then the exit status within `timeout` seconds (nil if it did not exit).
    public func terminate(timeout: Double = 5) -> Int32? {
        process.signal(SIGTERM)
        return process.wait(timeout: timeout)
    }
}

/// A client of the PeerVoice API on a private bus that records every signal the service sends.
public final class APIClient {
    public static let name = PeerVoiceBus.name
    public static let path = PeerVoiceBus.path
    public static let interface = PeerVoiceBus.interface

    public let connection: DBusConnection
    public private(set) var signals: [BusSignal] = []
    private var subscription: SignalSubscription?

    public init(address: String) throws {
        connection = try DBusConnection.connect(address: address)
        subscription = connection.subscribe(path: Self.path) { [unowned self] signal in signals.append(signal) }
    }

    /// Calls a PeerVoice method; `arguments` are the in-arguments in order.
    @discardableResult
    public func call(_ method: String, _ arguments: [Variant] = [], timeoutMs: Int32 = 10_000) throws(BusError) -> Variant {
        try connection.call(destination: Self.name, path: Self.path, interface: Self.interface, method: method,
                            arguments: Variant(tuple: arguments), timeoutMs: timeoutMs)
    }

    /// The D-Bus error name a call fails with, or nil if it succeeds.
    public func errorName(_ method: String, _ arguments: [Variant] = []) -> String? {
        do { try call(method, arguments); return nil } catch { return error.name }
    }

    public func property(_ name: String) throws(BusError) -> Variant {
        try connection.call(destination: Self.name, path: Self.path, interface: "org.freedesktop.DBus.Properties",
                            method: "Get", arguments: Variant(tuple: [Variant(Self.interface), Variant(name)]))[0].unboxed!
    }

    public func nameHasOwner(_ name: String = APIClient.name) -> Bool {
        let reply = try? connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                         interface: "org.freedesktop.DBus", method: "NameHasOwner",
                                         arguments: Variant(tuple: [Variant(name)]))
        return reply?[0].bool ?? false
    }

    /// Waits until the name is owned (the daemon is up).
    public func waitForService(timeout: Double = 10) -> Bool {
        eventually(timeout: timeout) { nameHasOwner() }
    }

    /// Dispatches incoming signals until one named `member` satisfies `matching`, or `timeout` passes.
    @discardableResult
    public func waitForSignal(_ member: String, timeout: Double = 10,
                              matching: (BusSignal) -> Bool = { _ in true }) -> BusSignal? {
        var found: BusSignal?
        _ = iterateMainContext(timeout: timeout) {
            found = signals.first { $0.member == member && matching($0) }
            return found != nil
        }
        return found
    }

    /// Lets signals already on their way arrive, for `seconds`.
    public func drain(for seconds: Double) {
        _ = iterateMainContext(timeout: seconds) { false }
    }

    public func signals(_ member: String) -> [BusSignal] { signals.filter { $0.member == member } }

    public func clearSignals() { signals.removeAll() }

    /// The peer objects (ObjectManager on the service's path): each path with its
    /// `org.example.PeerVoice.Peer` properties.
    public func peerObjects() throws -> [String: Variant] {
        let reply = try connection.call(destination: Self.name, path: Self.path,
                                        interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
        var objects: [String: Variant] = [:]
        for entry in reply[0].children {
            objects[entry[0].string!] = entry[1].lookup("org.example.PeerVoice.Peer")
        }
        return objects
    }
}
