import Foundation
import GIO
import PeerVoiceBus

/// One peer's transfer objects as a client sees them: their properties now (`GetManagedObjects`,
/// `Properties.Get`), every `PropertiesChanged` they sent since the watch began (with the `Id`
/// each object was announced with), and the methods of `org.example.PeerVoice.Transfer`.
public final class TransferWatch {
    /// One `PropertiesChanged` of a transfer object.
    public struct Change {
        public let path: String
        public let properties: [String: Variant]
        public let at: Date
        /// The transfer's `Id`, from the `InterfacesAdded` that announced the object (nil when
        /// the watch began after it).
        public let id: String?
    }

    public let client: APIClient
    public private(set) var changes: [Change] = []
    /// Each transfer object's `Id` by the announcing service's unique bus name and the path: a
    /// restarted service numbers its objects from the start again.
    private var ids: [String: String] = [:]
    private var subscription: SignalSubscription?
    private var addedSubscription: SignalSubscription?

    public init(_ client: APIClient) {
        self.client = client
        addedSubscription = client.connection.subscribe(sender: APIClient.name, interface: "org.freedesktop.DBus.ObjectManager",
                                                        member: "InterfacesAdded") { [unowned self] signal in
            guard let path = signal.arguments[0].string, path.hasPrefix(PeerVoiceBus.transfersPath + "/"),
                  let id = signal.arguments[1].lookup(PeerVoiceBus.transferInterface)?.lookup("Id")?.string else { return }
            ids[signal.sender + " " + path] = id
        }
        subscription = client.connection.subscribe(sender: APIClient.name, interface: "org.freedesktop.DBus.Properties",
                                                   member: "PropertiesChanged") { [unowned self] signal in
            guard signal.path.hasPrefix(PeerVoiceBus.transfersPath + "/"), signal.arguments[0].string == PeerVoiceBus.transferInterface else { return }
            var properties: [String: Variant] = [:]
            for entry in signal.arguments[1].children { properties[entry[0].string!] = entry[1].unboxed }
            changes.append(Change(path: signal.path, properties: properties, at: Date(), id: ids[signal.sender + " " + signal.path]))
        }
    }

    /// Every transfer object: path → its properties (`a{sv}`).
    public func objects() throws -> [String: Variant] {
        let reply = try client.connection.call(destination: APIClient.name, path: APIClient.path,
                                               interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
        var objects: [String: Variant] = [:]
        for entry in reply[0].children {
            if let properties = entry[1].lookup(PeerVoiceBus.transferInterface) { objects[entry[0].string!] = properties }
        }
        return objects
    }

    public func property(_ path: String, _ name: String) -> Variant? {
        try? client.connection.call(destination: APIClient.name, path: path, interface: "org.freedesktop.DBus.Properties",
                                    method: "Get", arguments: Variant(tuple: [Variant(PeerVoiceBus.transferInterface), Variant(name)]))[0].unboxed
    }

    public func state(_ path: String) -> String { property(path, "State")?.string ?? "" }
    public func transferred(_ path: String) -> UInt64 { property(path, "Transferred")?.uint64 ?? 0 }

    /// Waits until the object's `State` is one of `states`; the state it reached (the last one
    /// seen when it timed out).
    @discardableResult
    public func waitForState(_ path: String, _ states: Set<String>, timeout: Double = 30) -> String {
        var state = ""
        eventually(timeout: timeout) {
            state = self.state(path)
            return states.contains(state)
        }
        return state
    }

    /// Waits until `Transferred` reaches `bytes`, with the transfer still running.
    @discardableResult
    public func waitForTransferred(_ path: String, atLeast bytes: UInt64, timeout: Double = 60) -> Bool {
        eventually(timeout: timeout) { transferred(path) >= bytes || ["complete", "failed", "cancelled", "declined"].contains(state(path)) }
            && transferred(path) >= bytes
    }

    /// The first incoming transfer object not among `known`, once one appears.
    public func waitForIncoming(except known: Set<String> = [], timeout: Double = 15) -> String? {
        var found: String?
        eventually(timeout: timeout) {
            found = (try? objects())?.first { !known.contains($0.key) && $0.value.lookup("Direction")?.string == "incoming" }?.key
            return found != nil
        }
        return found
    }

    /// Calls `Accept`, `Decline` or `Cancel` on a transfer object.
    public func call(_ method: String, on path: String) throws(BusError) {
        try client.connection.call(destination: APIClient.name, path: path, interface: PeerVoiceBus.transferInterface, method: method,
                                   arguments: nil)
    }

    /// `SendFiles(peer, paths, {})`: the transfer's object path.
    public func send(_ paths: [String], to peer: String) throws(BusError) -> String {
        try client.call("SendFiles", [Variant(peer), Variant(array: paths.map { Variant($0) }, elementType: "s"),
                                      Variant(dictionary: [])])[0].string!
    }

    /// The values `name` took in the object's `PropertiesChanged`, in order.
    public func changes(of name: String, on path: String) -> [Variant] {
        changes.filter { $0.path == path }.compactMap { $0.properties[name] }
    }
}
