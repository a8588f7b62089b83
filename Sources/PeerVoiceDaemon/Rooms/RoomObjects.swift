import GIO
import PeerVoiceBus
import PeerVoiceCore

/// The properties of `org.example.PeerVoice.Room`, by their bus names.
enum RoomProperty: String, CaseIterable {
    case url = "Url"
    case state = "State"
    case error = "Error"
    case channel = "Channel"
    case users = "Users"
    case serverFingerprint = "ServerFingerprint"
    case voicePath = "VoicePath"
}

extension MumbleRoom {
    func value(of property: RoomProperty) -> Variant {
        switch property {
        case .url: Variant(url.description)
        case .state: Variant(state.rawValue)
        case .error: Variant(error)
        case .channel: Variant(state == .connected ? channelPath : "")
        case .users:
            Variant(array: model.usersInOwnChannel.map {
                Variant(tuple: [Variant(String($0.session)), Variant($0.name), Variant(speaking.contains($0.session)), Variant($0.muted)])
            }, elementType: "(ssbb)")
        case .serverFingerprint: Variant(serverFingerprint)
        case .voicePath: Variant(voicePath.rawValue)
        }
    }
}

/// The room objects below `/org/example/PeerVoice/rooms/`, published through the ObjectManager
/// `PeerObjects` serves on `/org/example/PeerVoice`: registers, updates (PropertiesChanged with
/// what changed) and unregisters them, and answers their methods. Main loop only.
final class RoomObjects {
    static let interface = PeerVoiceBus.roomInterface
    static let root = PeerObjects.managerPath + "/rooms"

    /// The interface as written in dbus/org.example.PeerVoice.Room.xml, embedded at build time.
    static let introspectionXML = String(decoding: PackageResources.org_example_PeerVoice_Room_xml, as: UTF8.self)

    private struct Exported {
        let room: MumbleRoom
        var shown: [Variant]
        let registration: ObjectRegistration
    }

    private let connection: DBusConnection
    private let rooms: Rooms
    private var objects: [Int: Exported] = [:]

    init(connection: DBusConnection, rooms: Rooms) {
        self.connection = connection
        self.rooms = rooms
    }

    static func path(of room: MumbleRoom) -> String { "\(root)/\(room.number)" }

    /// What GetManagedObjects lists for the rooms.
    var managedObjects: [(String, ManagedInterfaces)] {
        objects.keys.sorted().map { (Self.path(of: objects[$0]!.room), Self.interfaces(of: objects[$0]!.room)) }
    }

    /// Makes the exported objects the rooms there are now, signalling what changed.
    func update() {
        for number in objects.keys.sorted() where rooms.rooms[number] == nil {
            let path = Self.path(of: objects.removeValue(forKey: number)!.room)
            logIfFails("InterfacesRemoved for \(path)") { () throws(BusError) in
                try connection.emitInterfacesRemoved(managerPath: PeerObjects.managerPath, object: path, interfaces: [Self.interface])
            }
        }
        for number in rooms.rooms.keys.sorted() {
            let room = rooms.rooms[number]!
            let values = RoomProperty.allCases.map(room.value(of:))
            if let old = objects[number] {
                let changed = RoomProperty.allCases.indices.filter { old.shown[$0] != values[$0] }
                guard !changed.isEmpty else { continue }
                objects[number]!.shown = values
                logIfFails("PropertiesChanged on \(Self.path(of: room))") { () throws(BusError) in
                    try connection.emitPropertiesChanged(path: Self.path(of: room), interface: Self.interface,
                                                         changed: changed.map { (RoomProperty.allCases[$0].rawValue, values[$0]) })
                }
            } else {
                export(room, values: values)
            }
        }
    }

    func messageReceived(in room: MumbleRoom, from sender: String, text: String) {
        logIfFails("emit MessageReceived") { () throws(BusError) in
            try connection.emitSignal(path: Self.path(of: room), interface: Self.interface, name: "MessageReceived",
                                      arguments: Variant(tuple: [Variant(sender), Variant(text)]))
        }
    }

    func unregister() { objects = [:] }

    private func export(_ room: MumbleRoom, values: [Variant]) {
        let path = Self.path(of: room)
        logIfFails("export \(path)") { () throws(BusError) in
            let registration = try connection.registerObject(
                path: path, introspectionXML: Self.introspectionXML, interface: Self.interface,
                methods: { [weak self, weak room] call in
                    guard let self, let room else { return call.fail(name: PeerVoiceBus.errorPrefix + "NotConnected", message: "the room was left") }
                    dispatch(call, room: room)
                },
                properties: { [weak room] name in
                    guard let property = RoomProperty(rawValue: name) else { return nil }
                    return room?.value(of: property)
                })
            objects[room.number] = Exported(room: room, shown: values, registration: registration)
            try connection.emitInterfacesAdded(managerPath: PeerObjects.managerPath, object: path, interfaces: Self.interfaces(of: room))
        }
    }

    private func dispatch(_ call: MethodCall, room: MumbleRoom) {
        let arguments = call.arguments
        do throws(ServiceError) {
            switch call.method {
            case "Leave":
                rooms.leave(room)
                call.reply()
            case "Send":
                let text = arguments[0].string!
                try MessageText.validate(text)
                call.reply(Variant(tuple: [Variant(try room.sendToChannel(text))]))
            case "SendTo":
                let text = arguments[1].string!
                try MessageText.validate(text)
                call.reply(Variant(tuple: [Variant(try room.send(text, toUser: arguments[0].string!))]))
            case "SetUserVolume":
                try room.setPlayback(ofUser: arguments[0].string!, volume: arguments[1].double!)
                call.reply()
            case "Register":
                room.register { result in
                    switch result {
                    case .success: call.reply()
                    case .failure(let error): call.fail(name: PeerVoiceBus.errorPrefix + error.name, message: error.message)
                    }
                }
            case "SetUserMuted":
                try room.setPlayback(ofUser: arguments[0].string!, muted: arguments[1].bool!)
                call.reply()
            default:
                call.fail(name: PeerVoiceBus.errorPrefix + "Failed", message: "\(call.method) is declared but not implemented")
            }
        } catch {
            call.fail(name: PeerVoiceBus.errorPrefix + error.name, message: error.message)
        }
    }

    private static func interfaces(of room: MumbleRoom) -> ManagedInterfaces {
        [(interface, RoomProperty.allCases.map { ($0.rawValue, room.value(of: $0)) })]
    }
}
