import GIO
import PeerVoiceBus

/// How peervoicectl ends: an exit status and what to print on stderr.
struct Exit: Error {
    static let ok: Int32 = 0
    /// The service answered with an error.
    static let serviceError: Int32 = 1
    static let usageError: Int32 = 2
    /// The service is not running, cannot be started or does not answer.
    static let unreachable: Int32 = 3

    let status: Int32
    let message: String

    static func usage(_ problem: String, command: CommandSpec? = nil) -> Exit {
        let hint = command.map { "Usage: \($0.usageLine)\nTry 'peervoicectl \($0.name) --help'." }
            ?? "Try 'peervoicectl --help'."
        return Exit(status: usageError, message: "peervoicectl: \(problem)\n\(hint)")
    }

    static let startHint = "peervoicectl: start it with `systemctl --user start peervoiced`, or `make run` in the PeerVoice source tree"

    static func unreachable(_ problem: String) -> Exit {
        Exit(status: unreachable, message: "peervoicectl: \(problem)\n\(startHint)")
    }

    /// Sorts a failed call into "the service said no" (1) and "the service is not there" (3).
    static func from(_ error: BusError) -> Exit {
        let dbus = "org.freedesktop.DBus.Error."
        switch error.name {
        case dbus + "ServiceUnknown", dbus + "NameHasNoOwner":
            return unreachable("the PeerVoice service is not running: nothing owns \(Service.name) on the session bus")
        case let name where name.hasPrefix(dbus + "Spawn."):
            return unreachable("the session bus could not start the PeerVoice service: \(error.message)")
        case dbus + "NoReply", dbus + "Timeout", dbus + "TimedOut", dbus + "Disconnected", "org.gtk.GDBus.Error.Local":
            return unreachable("the PeerVoice service did not answer: \(error.message)")
        default:
            let short = error.name.split(separator: ".").last.map(String.init) ?? error.name
            return Exit(status: serviceError, message: "peervoicectl: \(short): \(error.message)")
        }
    }
}

/// org.example.PeerVoice on the session bus, reached through the public API only.
final class Service {
    static let name = PeerVoiceBus.name
    static let path = PeerVoiceBus.path
    static let interface = PeerVoiceBus.interface

    let connection: DBusConnection

    init() throws(Exit) {
        do {
            connection = try DBusConnection.session()
        } catch {
            throw Exit(status: Exit.unreachable, message: """
                peervoicectl: cannot connect to the session bus: \(error.message)
                peervoicectl: is DBUS_SESSION_BUS_ADDRESS set? Without a session bus, `make run` in the PeerVoice source tree starts one and prints the line that sets it
                """)
        }
    }

    /// Calls a PeerVoice method with `arguments` (its in-arguments, in order).
    @discardableResult
    func call(_ method: String, _ arguments: [Variant] = [], timeout: Duration? = nil) throws(Exit) -> Variant {
        do {
            return try connection.call(destination: Self.name, path: Self.path, interface: Self.interface,
                                       method: method, arguments: Variant(tuple: arguments), timeout: timeout)
        } catch {
            throw Exit.from(error)
        }
    }

    /// Calls a method without waiting; `completion` runs from the main loop.
    func callAsync(_ method: String, _ arguments: [Variant] = [], timeout: Duration,
                   completion: @escaping (Result<Variant, Exit>) -> Void) {
        connection.callAsync(destination: Self.name, path: Self.path, interface: Self.interface, method: method,
                             arguments: Variant(tuple: arguments), timeout: timeout) { result in
            completion(result.mapError(Exit.from))
        }
    }

    /// The properties (`a{sv}`) of every peer object the ObjectManager publishes.
    func peerObjects() throws(Exit) -> [Variant] {
        do {
            let reply = try connection.call(destination: Self.name, path: Self.path,
                                            interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
            return reply[0].children.compactMap { $0[1].lookup(PeerVoiceBus.peerInterface) }
        } catch {
            throw Exit.from(error)
        }
    }

    /// Calls a method of another of PeerVoice's objects (a room).
    @discardableResult
    func call(path: String, interface: String, method: String, _ arguments: [Variant] = []) throws(Exit) -> Variant {
        do {
            return try connection.call(destination: Self.name, path: path, interface: interface,
                                       method: method, arguments: Variant(tuple: arguments))
        } catch {
            throw Exit.from(error)
        }
    }

    /// The path and properties (`a{sv}`) of every object implementing `interface`, by path.
    func managedObjects(implementing interface: String) throws(Exit) -> [(String, Variant)] {
        do {
            let reply = try connection.call(destination: Self.name, path: Self.path,
                                            interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
            return reply[0].children.compactMap { entry in entry[1].lookup(interface).map { (entry[0].string ?? "", $0) } }
                .sorted { ($0.0.count, $0.0) < ($1.0.count, $1.0) }  // rooms/2 before rooms/10
        } catch {
            throw Exit.from(error)
        }
    }

    /// Every property of the object at `path` for `interface`, as an `a{sv}`.
    func objectProperties(path: String, interface: String) throws(Exit) -> Variant {
        do {
            return try connection.call(destination: Self.name, path: path, interface: "org.freedesktop.DBus.Properties",
                                       method: "GetAll", arguments: Variant(tuple: [Variant(interface)]))[0]
        } catch {
            throw Exit.from(error)
        }
    }

    /// Every property, as an `a{sv}`.
    func properties() throws(Exit) -> Variant {
        do {
            return try connection.call(destination: Self.name, path: Self.path,
                                       interface: "org.freedesktop.DBus.Properties", method: "GetAll",
                                       arguments: Variant(tuple: [Variant(Self.interface)]))[0]
        } catch {
            throw Exit.from(error)
        }
    }

    /// PeerVoice's signals (all of them, or the one named `member`) until the subscription is released.
    func subscribe(member: String? = nil, _ handler: @escaping (BusSignal) -> Void) -> SignalSubscription {
        connection.subscribe(sender: Self.name, interface: Self.interface, member: member, path: Self.path, handler)
    }

    /// Whether the service is running now (without starting it).
    func isRunning() throws(Exit) -> Bool {
        do {
            return try connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                       interface: "org.freedesktop.DBus", method: "NameHasOwner",
                                       arguments: Variant(tuple: [Variant(Self.name)]))[0].bool ?? false
        } catch {
            throw Exit.unreachable("the session bus does not answer: \(error.message)")
        }
    }

    /// One row of ListPeers.
    struct Peer {
        let id: String
        let name: String
        let transport: String
        let state: String
    }

    func peers() throws(Exit) -> [Peer] {
        try call("ListPeers")[0].children.map { row in
            Peer(id: row[0].string ?? "", name: row[1].string ?? "", transport: row[2].string ?? "",
                 state: row[3].string ?? "")
        }
    }
}
