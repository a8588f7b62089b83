import GIO
import Glibc

/// A parsed command line: the command, its options and its positional arguments.
struct Invocation {
    let spec: CommandSpec
    var options: [String: String] = [:]
    var positionals: [String] = []

    func has(_ option: String) -> Bool { options[option] != nil }
}

enum Ctl {
    /// Runs peervoicectl with `arguments` (without the program name); returns the exit status.
    static func run(_ arguments: [String]) -> Int32 {
        do throws(Exit) {
            guard let invocation = try parse(arguments) else { return Exit.ok }
            try execute(invocation)
            return Exit.ok
        } catch {
            if !error.message.isEmpty { Output.error(error.message) }
            return error.status
        }
    }

    // MARK: Command line

    /// The invocation, or nil when help or the version was printed.
    static func parse(_ arguments: [String]) throws(Exit) -> Invocation? {
        var rest = arguments[...]
        while let first = rest.first, first.hasPrefix("-"), first != "-" {
            rest.removeFirst()
            switch first {
            case "--help", "-h":
                Output.line(Usage.main)
                return nil
            case "--version":
                Output.line("peervoicectl \(Usage.version)")
                return nil
            case "--":
                break
            default:
                throw Exit.usage("unknown option '\(first)'")
            }
            if first == "--" { break }
        }
        guard let name = rest.popFirst() else { throw Exit.usage("no command given") }
        guard let spec = Usage.command(named: name) else { throw Exit.usage("unknown command '\(name)'") }

        var invocation = Invocation(spec: spec)
        var optionsEnded = false
        while let argument = rest.popFirst() {
            guard !optionsEnded, argument.hasPrefix("-"), argument != "-" else {
                invocation.positionals.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            var option = argument
            var inlineValue: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                option = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            if option == "--help" || option == "-h" {
                Output.line(spec.name == "help" ? Usage.main : spec.help)
                return nil
            }
            guard let takesValue = spec.options[option] else {
                let hint = spec.name == "send" ? " (put -- before text that starts with '-')" : ""
                throw Exit.usage("\(spec.name): unknown option '\(option)'\(hint)", command: spec)
            }
            if takesValue {
                guard let value = inlineValue ?? rest.popFirst() else {
                    throw Exit.usage("\(spec.name): \(option) needs a value", command: spec)
                }
                invocation.options[option] = value
            } else {
                guard inlineValue == nil else {
                    throw Exit.usage("\(spec.name): \(option) takes no value", command: spec)
                }
                invocation.options[option] = ""
            }
        }
        let count = invocation.positionals.count
        if count < spec.minimumPositionals {
            throw Exit.usage("\(spec.name): missing arguments", command: spec)
        }
        if count > spec.maximumPositionals {
            throw Exit.usage("\(spec.name): too many arguments", command: spec)
        }
        if spec.name == "help" {
            if let topic = invocation.positionals.first {
                guard let command = Usage.command(named: topic) else {
                    throw Exit.usage("help: unknown command '\(topic)'")
                }
                Output.line(command.name == "help" ? Usage.main : command.help)
            } else {
                Output.line(Usage.main)
            }
            return nil
        }
        return invocation
    }

    /// The one word among `choices` that `argument` is, or a usage error.
    private static func choice(_ argument: String, _ choices: [String], of invocation: Invocation) throws(Exit) -> String {
        guard choices.contains(argument) else {
            let listed = choices.dropLast().joined(separator: ", ") + " or " + choices.last!
            throw Exit.usage("\(invocation.spec.name): expected \(listed), not '\(argument)'",
                             command: invocation.spec)
        }
        return argument
    }

    // MARK: Commands

    static func execute(_ invocation: Invocation) throws(Exit) {
        let arguments = invocation.positionals
        // Arguments are checked before the bus is touched, so a usage error never waits for it.
        switch invocation.spec.name {
        case "status":
            try status(Service())
        case "peers":
            try peers(Service(), idsOnly: invocation.has("--ids"))
        case "peer":
            try peer(Service(), named: arguments[0])
        case "discover":
            var timeout: Double?
            if let text = invocation.options["--timeout"] {
                guard let seconds = Double(text), seconds.isFinite, seconds > 0 else {
                    throw Exit.usage("discover: --timeout needs a positive number of seconds, not '\(text)'",
                                     command: invocation.spec)
                }
                timeout = seconds
            }
            try discover(Service(), timeout: timeout)
        case "connect":
            try connect(Service(), peer: arguments[0])
        case "disconnect":
            let service = try Service()
            try service.call("Disconnect", [Variant(arguments[0])])
            Output.line("disconnected from \(arguments[0])")
        case "remove":
            let service = try Service()
            try service.call("RemovePeer", [Variant(arguments[0])])
            Output.line("removed \(arguments[0])")
        case "send":
            let words = Array(arguments.dropFirst())
            let text = words.isEmpty || words == ["-"] ? try readStandardInput() : words.joined(separator: " ")
            guard !text.unicodeScalars.contains("\0") else {
                throw Exit.usage("send: the text contains a NUL character, which no PeerVoice message can carry")
            }
            let reply = try Service().call("Send", [Variant(arguments[0]), Variant(text)])
            Output.line(reply[0].string ?? "")
        case "history":
            var max: UInt32 = 20
            if let text = invocation.options["--max"] {
                guard let value = UInt32(text) else {
                    throw Exit.usage("history: --max needs a whole number from 0 to \(UInt32.max), not '\(text)'",
                                     command: invocation.spec)
                }
                max = value
            }
            try history(Service(), peer: arguments[0], max: max)
        case "mute":
            let action = try choice(arguments[0], ["on", "off", "toggle"], of: invocation)
            let service = try Service()
            let muted: Bool
            if action == "toggle" {
                muted = try service.call("ToggleMute")[0].bool ?? false
            } else {
                muted = action == "on"
                try service.call("Mute", [Variant(muted)])
            }
            Output.line(muted ? "muted" : "unmuted")
        case "name":
            let name = arguments.joined(separator: " ")
            let service = try Service()
            try service.call("SetName", [Variant(name)])
            Output.line("name: \(Format.escaped(try service.properties().lookup("Name")?.string ?? name))")
        case "visible":
            let method = try choice(arguments[0], ["bluetooth", "lan"], of: invocation)
            let visible = try choice(arguments[1], ["on", "off"], of: invocation) == "on"
            try Service().call("SetVisible", [Variant(method), Variant(visible)])
            Output.line(visible ? "visible on \(method)" : "not visible on \(method)")
        case "confirm":
            let answer = try choice(arguments[1], ["yes", "no"], of: invocation)
            try Service().call("ConfirmPairing", [Variant(arguments[0]), Variant(answer == "yes")])
            Output.line(answer == "yes" ? "accepted pairing with \(arguments[0])" : "refused pairing with \(arguments[0])")
        case "voice":
            let action = try choice(arguments[0], ["start", "stop"], of: invocation)
            try Service().call(action == "start" ? "StartVoice" : "StopVoice", [Variant(arguments[1])])
            Output.line(action == "start" ? "voice started with \(arguments[1])" : "voice stopped with \(arguments[1])")
        case "volume":
            guard let volume = Double(arguments[1]), volume.isFinite else {
                throw Exit.usage("volume: the volume is a number from 0.0 to 2.0 (1.0 as it comes), not '\(arguments[1])'",
                                 command: invocation.spec)
            }
            try Service().call("SetVolume", [Variant(arguments[0]), Variant(volume)])
            Output.line("\(arguments[0]) plays at volume \(volume)")
        case "mute-peer":
            let action = try choice(arguments[1], ["on", "off"], of: invocation)
            try Service().call("SetPeerMuted", [Variant(arguments[0]), Variant(action == "on")])
            Output.line(action == "on" ? "\(arguments[0]) muted here" : "\(arguments[0]) unmuted here")
        case "monitor":
            try monitor(Service(), json: invocation.has("--json"), levels: invocation.has("--levels"))
        case "open":
            let mode = try choice(invocation.options["--mode"] ?? "stream", ["stream", "messages"], of: invocation)
            try openStream(Service(), peer: arguments[0], channel: arguments[1], lines: mode == "messages")
        case "join":
            try RoomCommands.join(Service(), url: arguments[0], passwordFromStdin: invocation.has("--password-stdin"),
                                  acceptCertificate: invocation.options["--accept-certificate"])
        case "rooms":
            try RoomCommands.list(Service())
        case "room-send":
            let text = arguments.dropFirst().joined(separator: " ")
            try RoomCommands.send(Service(), room: arguments[0], text: text)
        case "room-register":
            try RoomCommands.register(Service(), room: arguments[0])
        case "leave":
            try RoomCommands.leave(Service(), room: arguments[0])
        case "listen":
            try listen(Service(), channel: arguments[0], command: Array(arguments.dropFirst()), once: invocation.has("--once"))
        case "send-file":
            try sendFiles(Service(), peer: arguments[0], paths: Array(arguments.dropFirst()), detach: invocation.has("--no-wait"))
        case "transfers":
            try transfers(Service())
        case "transfer":
            let action = try choice(arguments[0], ["accept", "decline", "cancel"], of: invocation)
            try answerTransfer(Service(), action: action, transfer: arguments[1])
        case "shortcut":
            switch try choice(arguments[0], ["install", "remove"], of: invocation) {
            case "install":
                guard arguments.count == 2 else { throw Exit.usage("shortcut install: which KEYS? e.g. ctrl+alt+m", command: invocation.spec) }
                try GnomeShortcut.install(keys: arguments[1])
            default:
                guard arguments.count == 1 else { throw Exit.usage("shortcut remove: takes no KEYS", command: invocation.spec) }
                try GnomeShortcut.remove()
            }
        default:
            throw Exit.usage("unknown command '\(invocation.spec.name)'")
        }
    }

    private static func yesNo(_ value: Variant?) -> String {
        guard let value = value?.bool else { return "?" }
        return value ? "yes" : "no"
    }

    /// `AudioProcessing` as "echo-cancel off (headphones: …), noise-suppression on, …": each part,
    /// whether it runs, and why when that is not the default.
    private static func processing(_ value: Variant?) -> String {
        let parts = (value?.children ?? []).map { part -> String in
            guard part.count == 3 else { return part.string ?? "?" }  // a daemon before reasons: the names that run
            let (name, running, why) = (part[0].string ?? "?", part[1].bool ?? false, part[2].string ?? "")
            return "\(name) \(running ? "on" : "off")" + (why == "default" ? "" : " (\(why))")
        }
        return parts.isEmpty ? "?" : parts.joined(separator: ", ")
    }

    private static func status(_ service: Service) throws(Exit) {
        let properties = try service.properties()
        let peers = try service.peers()
        let listen = properties.lookup("ListenAddress")?.string ?? ""
        let adapter = properties.lookup("Adapter")?.string ?? ""
        let methods = properties.lookup("DiscoveryMethods")?.strings ?? []
        let visible = properties.lookup("Visible")?.strings ?? []
        var rows = [
            ["Name:", Format.escaped(properties.lookup("Name")?.string ?? "?")],
            ["Version:", properties.lookup("Version")?.string ?? "?"],
            ["Id:", properties.lookup("Id")?.string ?? "?"],
            ["Fingerprint:", properties.lookup("Fingerprint")?.string ?? "?"],
            ["Muted:", yesNo(properties.lookup("Muted"))],
            ["Discovering:", yesNo(properties.lookup("Discovering"))],
            ["ListenAddress:", listen.isEmpty ? "none (not listening for IP peers)" : listen],
            ["Adapter:", adapter.isEmpty ? "none (no Bluetooth)" : adapter],
            ["Discovery:", methods.isEmpty ? "none (neither BlueZ nor Avahi)" : methods.joined(separator: ", ")],
            ["Visible:", visible.isEmpty ? "nowhere (peervoicectl visible lan on)" : visible.joined(separator: ", ")],
            ["Processing:", processing(properties.lookup("AudioProcessing"))],
        ]
        rows.append(["Peers:", peers.isEmpty ? "none" : "\(peers.count)"])
        Output.line(Format.table(rows))
        if !peers.isEmpty { Output.line(peerTable(peers, indent: "  ")) }
    }

    /// One peer object's properties, found by its id or one of its routes.
    private static func peer(_ service: Service, named name: String) throws(Exit) {
        let wanted = name.uppercased()
        let found = try service.peerObjects().first { object in
            let id = object.lookup("Id")?.string ?? ""
            let addresses: [String] = (object.lookup("Routes")?.children ?? []).compactMap { $0[1].string }
            return id.uppercased() == wanted || addresses.contains { $0.uppercased() == wanted }
        }
        guard let object = found else {
            throw Exit(status: 1, message: "peervoicectl: UnknownPeer: \(name) is neither the id nor an address of a known or found peer (peervoicectl peers lists them)")
        }
        func text(_ property: String) -> String { object.lookup(property)?.string ?? "" }
        var routes: [String] = []
        for route in object.lookup("Routes")?.children ?? [] {
            let seenMs = route[2].uint64 ?? 0
            let seen = seenMs == 0 ? "" : " (last seen \(Format.localTime(milliseconds: seenMs, withMilliseconds: false)))"
            routes.append((route[1].string ?? "?") + seen)
        }
        let id = text("Id"), fingerprint = text("Fingerprint")
        var rows: [[String]] = [
            ["Id:", id.isEmpty ? "none yet (its key is not known)" : id],
            ["Name:", text("Name").isEmpty ? "-" : Format.escaped(text("Name"))],
            ["State:", text("State")],
            ["Transport:", text("Transport")],
            ["Paired:", yesNo(object.lookup("Paired"))],
            ["Voice:", text("Voice")],
            ["Fingerprint:", fingerprint.isEmpty ? "none yet" : fingerprint],
        ]
        for (index, route) in routes.enumerated() { rows.append([index == 0 ? "Routes:" : "", route]) }
        Output.line(Format.table(rows))
    }

    private static func peerTable(_ peers: [Service.Peer], indent: String = "") -> String {
        let rows = [["ID", "NAME", "TRANSPORT", "STATE"]] + peers.map { peer in
            [peer.id, peer.name.isEmpty ? "-" : Format.escaped(peer.name), peer.transport, peer.state]
        }
        return Format.table(rows, indent: indent)
    }

    private static func peers(_ service: Service, idsOnly: Bool) throws(Exit) {
        let peers = try service.peers()
        if idsOnly {
            if !peers.isEmpty { Output.line(peers.map(\.id).joined(separator: "\n")) }
        } else if peers.isEmpty {
            Output.line("no known peers (peervoicectl connect PEER adds one)")
        } else {
            Output.line(peerTable(peers))
        }
    }

    private static func history(_ service: Service, peer: String, max: UInt32) throws(Exit) {
        let messages = try service.call("History", [Variant(peer), Variant(max)])[0].children
        var text = ""
        for message in messages {
            let time = Format.localTime(milliseconds: message[2].uint64 ?? 0, withMilliseconds: false)
            let status = message[1].string ?? "?"
            let padded = status + String(repeating: " ", count: Swift.max(0, 9 - status.count))
            text += "\(time) \(padded) \(message[0].string ?? "?") \(message[3].string ?? "")\n"
        }
        if !text.isEmpty { Output.write(1, text) }
    }

    /// Reads all of standard input as UTF-8 text, without one trailing newline.
    private static func readStandardInput() throws(Exit) -> String {
        if isatty(0) != 0 { Output.error("peervoicectl: type the message, then Ctrl-D") }
        let limit = 1 << 20
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if count == 0 { break }
            if count < 0 {
                if errno == EINTR { continue }
                throw Exit.usage("send: cannot read standard input: \(String(cString: strerror(errno)))")
            }
            bytes += buffer[0..<count]
            if bytes.count > limit {
                throw Exit.usage("send: standard input is over 1 MiB; a PeerVoice message is at most 65536 bytes")
            }
        }
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw Exit.usage("send: standard input is not UTF-8 text")
        }
        return text
    }
}
