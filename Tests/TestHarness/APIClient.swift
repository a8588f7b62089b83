import Foundation
import GIO
import PeerVoiceBus

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
    public func call(_ method: String, _ arguments: [Variant] = [], timeout: Duration = .seconds(10)) throws(BusError) -> Variant {
        try connection.call(destination: Self.name, path: Self.path, interface: Self.interface, method: method,
                            arguments: Variant(tuple: arguments), timeout: timeout)
    }

    /// The D-Bus error name a call fails with, or nil if it succeeds.
    public func errorName(_ method: String, _ arguments: [Variant] = []) -> String? {
        do { try call(method, arguments); return nil } catch { return error.name }
    }

    public func property(_ name: String) throws(BusError) -> Variant {
        try connection.call(destination: Self.name, path: Self.path, interface: "org.freedesktop.DBus.Properties",
                            method: "Get", arguments: Variant(tuple: [Variant(Self.interface), Variant(name)]))[0].unboxed!
    }

    /// `AudioProcessing`: every part of the capture processing as "part on|off: why".
    public func audioProcessing() throws(BusError) -> [String] {
        try property("AudioProcessing").children.map { "\($0[0].string!) \($0[1].bool! ? "on" : "off"): \($0[2].string!)" }
    }

    /// The parts of `AudioProcessing` that run, in its order.
    public func runningProcessing() throws(BusError) -> [String] {
        try property("AudioProcessing").children.filter { $0[1].bool! }.map { $0[0].string! }
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

    /// The first `member` signal at or after index `start` that satisfies `matching`, waiting up
    /// to `timeout` seconds for it (`waitForSignalIndex`, for a test that wants the signal).
    @discardableResult
    public func waitForSignal(_ member: String, after start: Int = 0, timeout: Double = 10,
                              matching: (BusSignal) -> Bool = { _ in true }) -> BusSignal? {
        waitForSignalIndex(member, after: start, timeout: timeout, matching: matching).map { signals[$0] }
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
            objects[entry[0].string!] = entry[1].lookup(PeerVoiceBus.peerInterface)
        }
        return objects
    }
}

extension BusSignal {
    /// The `index`th argument as a string ("" if it is not one).
    public func string(_ index: Int) -> String {
        index < arguments.count ? arguments[index].string ?? "" : ""
    }
}

extension APIClient {
    /// Calls a PeerVoice method without blocking the main context; returns the reply and how many
    /// signals had been recorded when it was dispatched, so a test can tell which signals came
    /// before the reply (GDBus dispatches replies and signals in the order they arrived).
    public func callRecordingOrder(_ method: String, _ arguments: [Variant] = [], timeout: Double = 15)
        -> (result: Result<Variant, BusError>, signalsBefore: Int) {
        let pending = callAsync(method, arguments, timeout: timeout)
        eventually(timeout: timeout + 5) { pending.isDone }
        return (pending.result ?? .failure(BusError(name: "harness.NoReply", message: "no reply within \(timeout) s")),
                pending.signalsBefore)
    }

    /// Index of the first `member` signal at or after `start` that satisfies `matching`, waiting
    /// up to `timeout` seconds for it.
    public func waitForSignalIndex(_ member: String, after start: Int = 0, timeout: Double = 10,
                                   matching: (BusSignal) -> Bool = { _ in true }) -> Int? {
        var next = start
        var found: Int?
        eventually(timeout: timeout) {
            while found == nil && next < signals.count {
                if signals[next].member == member && matching(signals[next]) { found = next }
                next += 1
            }
            return found != nil
        }
        return found
    }
}

/// A method call in flight: wait (`eventually`) until `result` is set.
public final class PendingCall {
    public fileprivate(set) var result: Result<Variant, BusError>?
    /// How many signals the client had recorded when the reply was dispatched.
    public fileprivate(set) var signalsBefore = 0
    public var isDone: Bool { result != nil }
}

extension APIClient {
    /// Starts a PeerVoice method call without waiting for its reply (Connect waits for pairing).
    public func callAsync(_ method: String, _ arguments: [Variant] = [],
                          timeout: Double = Double(PeerVoiceBus.connectCallTimeout.components.seconds)) -> PendingCall {
        let pending = PendingCall()
        connection.callAsync(destination: Self.name, path: Self.path, interface: Self.interface, method: method,
                             arguments: Variant(tuple: arguments), timeout: .seconds(timeout)) { [weak self] result in
            // A test that gave up on the reply may have let this client go before it came.
            pending.result = result
            pending.signalsBefore = self?.signals.count ?? 0
        }
        return pending
    }
}
