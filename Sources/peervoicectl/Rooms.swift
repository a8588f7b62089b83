import GIO
import Glibc
import PeerVoiceBus

/// `join`, `rooms`, `room-send`, `room-register`, `leave`: Mumble rooms through JoinRoom and the room objects.
enum RoomCommands {
    static func join(_ service: Service, url: String, passwordFromStdin: Bool, acceptCertificate: String?) throws(Exit) {
        var options: [(String, Variant)] = []
        if passwordFromStdin {
            // Read, not an argument: arguments are visible to every user (ps, /proc).
            let password = readLine(strippingNewline: true) ?? ""
            options.append(("password", Variant(password)))
        }
        if let acceptCertificate { options.append(("accept-certificate", Variant(acceptCertificate))) }
        let reply = try service.call("JoinRoom", [Variant(url), Variant(dictionary: options)], timeout: .seconds(40))
        let path = reply[0].string ?? ""
        let properties = try service.objectProperties(path: path, interface: PeerVoiceBus.roomInterface)
        Output.line("room \(path.split(separator: "/").last ?? ""): in \(properties.lookup("Channel")?.string ?? "?") on \(properties.lookup("Url")?.string ?? url)")
        Output.line("server certificate: \(properties.lookup("ServerFingerprint")?.string ?? "?")")
    }

    static func list(_ service: Service) throws(Exit) {
        let rooms = try service.managedObjects(implementing: PeerVoiceBus.roomInterface)
        if rooms.isEmpty { return Output.line("no rooms (join one: peervoicectl join mumble://HOST/CHANNEL)") }
        for (path, properties) in rooms {
            let users = properties.lookup("Users")?.children.map { user in
                (user[1].string.map { Format.escaped($0) } ?? "?") + (user[3].bool == true ? " (muted)" : "") + (user[2].bool == true ? " (speaking)" : "")
            } ?? []
            let error = properties.lookup("Error")?.string ?? ""
            Output.line([String(path.split(separator: "/").last ?? ""), properties.lookup("State")?.string ?? "?",
                         properties.lookup("Url")?.string ?? "?", properties.lookup("Channel")?.string ?? ""].joined(separator: "  ")
                        + (error.isEmpty ? "" : "  (\(Format.escaped(error)))"))
            if !users.isEmpty { Output.line("    with " + users.joined(separator: ", ")) }
        }
    }

    /// A room's object path from its number (`1`) or its path.
    static func path(_ room: String) throws(Exit) -> String {
        if room.hasPrefix("/") { return room }
        guard let number = UInt32(room) else {
            throw Exit.usage("a room is its number, as `peervoicectl rooms` lists it, not '\(room)'")
        }
        return PeerVoiceBus.path + "/rooms/\(number)"
    }

    static func send(_ service: Service, room: String, text: String) throws(Exit) {
        let reply = try service.call(path: path(room), interface: PeerVoiceBus.roomInterface, method: "Send", [Variant(text)])
        Output.line(reply[0].string ?? "")
    }

    static func register(_ service: Service, room: String) throws(Exit) {
        let path = try path(room)
        try service.call(path: path, interface: PeerVoiceBus.roomInterface, method: "Register")
        let url = try service.objectProperties(path: path, interface: PeerVoiceBus.roomInterface).lookup("Url")?.string ?? "?"
        Output.line("registered on \(url) for this installation's certificate")
    }

    static func leave(_ service: Service, room: String) throws(Exit) {
        try service.call(path: path(room), interface: PeerVoiceBus.roomInterface, method: "Leave")
        Output.line("left room \(room)")
    }
}
