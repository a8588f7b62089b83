import GIO
import PeerVoiceBus
import PeerVoiceCore

/// What one peer object shows: the values of `org.example.PeerVoice.Peer`'s properties
/// (dbus/org.example.PeerVoice.Peer.xml) and the path it is exported at.
struct PeerObjectSnapshot: Equatable, Sendable {
    /// One way the peer was reached: an entry of `Routes` (`a(sst)`).
    struct Route: Equatable, Sendable {
        var transport: Transport
        /// What `Connect` accepts: `ip:192.168.1.20:47800`, `ip:[::1]:47800`, `AA:BB:CC:DD:EE:FF`.
        var address: String
        var lastSeenMs: UInt64
    }

    /// `PeerObjects.peerPath(_:)` for a keyed peer, `PeerObjects.foundPath(transport:address:)`
    /// for a found device not yet keyed.
    var path: String
    /// `pv:` + 26 base32 characters; "" while the key is not known.
    var id: String
    var name: String
    var state: PeerState
    /// Why it is in `state`, when a person can act on it ("" otherwise).
    var stateReason = ""
    /// Of the current or last link; for a found device, the transport it was found on.
    var transport: Transport
    var routes: [Route]
    /// Grouped for reading aloud; "" while the key is not known.
    var fingerprint: String
    var paired: Bool
    var voice: VoiceState
    /// Its voice holds speech now.
    var speaking = false
    /// Its voice's volume here (0.0–2.0), and whether it is muted here.
    var volume = 1.0
    var muted = false
}

/// The properties of `org.example.PeerVoice.Peer`, by their bus names.
enum PeerProperty: String, CaseIterable {
    case id = "Id"
    case name = "Name"
    case state = "State"
    case stateReason = "StateReason"
    case transport = "Transport"
    case routes = "Routes"
    case fingerprint = "Fingerprint"
    case paired = "Paired"
    case voice = "Voice"
    case speaking = "Speaking"
    case volume = "Volume"
    case muted = "Muted"
}

extension PeerObjectSnapshot {
    func value(of property: PeerProperty) -> Variant {
        switch property {
        case .id: Variant(id)
        case .name: Variant(name)
        case .state: Variant(state.rawValue)
        case .stateReason: Variant(stateReason)
        case .transport: Variant(transport.rawValue)
        case .routes:
            Variant(array: routes.map { Variant(tuple: [Variant($0.transport.rawValue), Variant($0.address), Variant($0.lastSeenMs)]) },
                    elementType: "(sst)")
        case .fingerprint: Variant(fingerprint)
        case .paired: Variant(paired)
        case .voice: Variant(voice.rawValue)
        case .speaking: Variant(speaking)
        case .volume: Variant(volume)
        case .muted: Variant(muted)
        }
    }

    /// The properties this snapshot gives a value different from `old`'s, in declaration order.
    func properties(changedFrom old: PeerObjectSnapshot) -> [PeerProperty] {
        PeerProperty.allCases.filter { value(of: $0) != old.value(of: $0) }
    }
}

/// The peer objects below `/org/example/PeerVoice` and the `org.freedesktop.DBus.ObjectManager`
/// that publishes them on that path (next to `BusObject`'s interface). Owns the exported objects:
/// callers hand it snapshots and it registers, updates and unregisters objects and emits
/// `InterfacesAdded`, `PropertiesChanged` (only what changed) and `InterfacesRemoved`. Main loop only.
final class PeerObjects {
    static let interface = PeerVoiceBus.peerInterface
    static let managerPath = BusObject.path

    /// The interface as written in dbus/org.example.PeerVoice.Peer.xml, embedded at build time.
    static let introspectionXML = String(decoding: PackageResources.org_example_PeerVoice_Peer_xml, as: UTF8.self)

    private struct Exported {
        var snapshot: PeerObjectSnapshot
        let registration: ObjectRegistration
    }

    private let connection: DBusConnection
    private var manager: ObjectRegistration?
    private var objects: [String: Exported] = [:]
    /// Other objects this ObjectManager publishes (the rooms: `RoomObjects`; the transfers:
    /// `TransferObjects`), for GetManagedObjects.
    var otherObjects: () -> [(String, ManagedInterfaces)] = { [] }

    init(connection: DBusConnection) throws(BusError) {
        self.connection = connection
        manager = try connection.registerObjectManager(path: Self.managerPath) { [weak self] in
            guard let self else { return [] }
            return objects.sorted { $0.key < $1.key }.map { ($0.key, Self.interfaces(of: $0.value.snapshot)) } + otherObjects()
        }
    }

    /// Exports a new object (then `InterfacesAdded`), or updates the one at `snapshot.path` with
    /// one `PropertiesChanged` holding only the properties whose values changed (none: no signal).
    func publish(_ snapshot: PeerObjectSnapshot) {
        let path = snapshot.path
        if let old = objects[path]?.snapshot {
            objects[path]!.snapshot = snapshot
            let changed = snapshot.properties(changedFrom: old)
            guard !changed.isEmpty else { return }
            logIfFails("PropertiesChanged on \(path)") { () throws(BusError) in
                try connection.emitPropertiesChanged(path: path, interface: Self.interface,
                                                     changed: changed.map { ($0.rawValue, snapshot.value(of: $0)) })
            }
            return
        }
        logIfFails("export \(path)") { () throws(BusError) in
            let registration = try connection.registerObject(
                path: path, introspectionXML: Self.introspectionXML, interface: Self.interface,
                // The interface declares no methods, so GDBus dispatches none here.
                methods: { _ in },
                properties: { [weak self] name in
                    guard let property = PeerProperty(rawValue: name) else { return nil }
                    return self?.objects[path]?.snapshot.value(of: property)
                })
            objects[path] = Exported(snapshot: snapshot, registration: registration)
            try connection.emitInterfacesAdded(managerPath: Self.managerPath, object: path, interfaces: Self.interfaces(of: snapshot))
        }
    }

    /// Unregisters the object at `path` and emits `InterfacesRemoved`; nothing if none is there.
    func withdraw(path: String) {
        guard objects.removeValue(forKey: path) != nil else { return }
        logIfFails("InterfacesRemoved for \(path)") { () throws(BusError) in
            try connection.emitInterfacesRemoved(managerPath: Self.managerPath, object: path, interfaces: [Self.interface])
        }
    }

    /// Shows `snapshot` at `path` (`publish`), or withdraws the object there when it is nil.
    func show(_ snapshot: PeerObjectSnapshot?, at path: String) {
        guard let snapshot else { return withdraw(path: path) }
        precondition(snapshot.path == path, "a snapshot of \(snapshot.path) shown at \(path)")
        publish(snapshot)
    }

    /// Makes the exported objects exactly `snapshots`, in this one main-loop turn: objects not
    /// among them are withdrawn first, then each is published (added, or its changes signalled).
    /// So when a found device's key becomes known, clients see `InterfacesRemoved` for its found
    /// path before `InterfacesAdded` for its peer path.
    func show(_ snapshots: [PeerObjectSnapshot]) {
        let wanted = Set(snapshots.map(\.path))
        for path in objects.keys.sorted() where !wanted.contains(path) { withdraw(path: path) }
        snapshots.forEach(publish)
    }

    /// Unexports everything, without signals: the service is leaving the bus.
    func unregister() {
        objects = [:]
        manager = nil
    }

    private static func interfaces(of snapshot: PeerObjectSnapshot) -> ManagedInterfaces {
        [(interface, PeerProperty.allCases.map { ($0.rawValue, snapshot.value(of: $0)) })]
    }
}

/// Runs a bus emission or registration whose failure only the log needs to hear of (the client
/// misses one signal; nothing else can be done): PeerObjects and RoomObjects.
func logIfFails(_ what: String, _ body: () throws(BusError) -> Void) {
    do throws(BusError) {
        try body()
    } catch {
        Log.warning("could not \(what): \(error)")
    }
}

// MARK: Which objects an event changes

extension ServiceEvent {
    /// The peer objects whose properties this event may change: each is shown afresh right after
    /// it (and no other). A key that became known moves a found object to the peer's path: the
    /// found one goes first.
    var changedPeerObjects: [PeerRef] {
        switch self {
        case .peerFound(let ref, _), .peerLost(let ref), .peerStateChanged(let ref, _), .pairingRequested(let ref, _, _, _),
             .pairingSettled(let ref, _):
            [ref]
        case .peerIdentified(let address, let id):
            [.address(address), .id(id)]
        case .voiceStateChanged(let id, _):
            [.id(id)]
        case .messageReceived, .messageDelivered, .messageFailed, .muteChanged, .propertiesChanged:
            []
        }
    }
}

// MARK: Paths

extension PeerObjects {
    static let peersRoot = managerPath + "/peers"
    static let foundRoot = managerPath + "/found"

    /// Where the object of `ref` lives: a peer's id path, or a found device's address path.
    static func path(of ref: PeerRef) -> String {
        switch ref {
        case .id(let id): peerPath(id)
        case .address(let address): foundPath(transport: address.transport, address: address.description)
        }
    }

    /// `/org/example/PeerVoice/peers/<the 26 base32 characters of id>` (a–z and 2–7: always a
    /// valid path element).
    static func peerPath(_ id: PeerID) -> String {
        peersRoot + "/" + id.base32
    }

    /// `/org/example/PeerVoice/found/<bt|ip>_<address>` for a device found at `address` (spelt as
    /// the API spells it, `ip:` included) but not yet keyed: every byte of the address's UTF-8
    /// outside [A-Za-z0-9] becomes `_` and two lower-case hex digits, so the path is a valid object
    /// path for any address and decodes back to it.
    static func foundPath(transport: Transport, address: String) -> String {
        let prefix = switch transport {
        case .bluetooth: "bt"
        case .ip: "ip"
        }
        var element = prefix + "_"
        for byte in address.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                element.append(Character(Unicode.Scalar(byte)))
            default:
                element += "_" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
            }
        }
        return foundRoot + "/" + element
    }
}
