import GIO
import Glibc
import PeerVoiceBus

/// The GLib main loop for commands that wait for signals: it ends when `finish` is called, at
/// SIGINT/SIGTERM/SIGHUP (with what `onInterrupt` says), or when the bus connection closes.
final class EventLoop {
    private let loop = MainLoop()
    private var result: Result<Void, Exit>?
    private var sources: [EventSource] = []

    func run(_ service: Service, onInterrupt: @escaping () -> Result<Void, Exit>) throws(Exit) {
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            sources.append(UnixSignal.watch(signal) { [unowned self] in finish(onInterrupt()) })
        }
        sources.append(Timer.every(.milliseconds(500)) { [unowned self] in
            guard service.connection.isClosed else { return true }
            finish(.failure(.unreachable("lost the connection to the session bus")))
            return false
        })
        if result == nil { loop.run() }
        sources.forEach { $0.cancel() }
        sources = []
        if case .failure(let exit) = result { throw exit }
    }

    func finish(_ result: Result<Void, Exit>) {
        guard self.result == nil else { return }
        self.result = result
        loop.quit()
    }

    /// Ends the loop after `seconds`; keep the returned source until then.
    func finish(after seconds: Double) -> EventSource {
        Timer.after(.seconds(min(seconds, Double(UInt32.max) / 1000))) { [unowned self] in
            finish(.success(()))
        }
    }
}

extension BusSignal {
    /// The `index`th argument as a string ("" if it is not one).
    func text(_ index: Int) -> String {
        index < arguments.count ? arguments[index].string ?? "" : ""
    }
}

extension Ctl {
    // MARK: discover

    static func discover(_ service: Service, timeout: Double?) throws(Exit) {
        let loop = EventLoop()
        let subscription = service.subscribe { signal in
            switch signal.member {
            case "PeerFound":
                let name = signal.text(1)
                Output.line("found \(signal.text(0))" + (name.isEmpty ? "" : " (\(Format.escaped(name)))"))
            case "PeerLost":
                Output.line("lost \(signal.text(0))")
            default:
                break
            }
        }
        try service.call("StartDiscovery")
        if isatty(2) != 0 {
            let duration = timeout.map { $0 == $0.rounded() ? " for \(Int($0)) s" : " for \($0) s" } ?? ""
            Output.error("peervoicectl: discovering\(duration); Ctrl-C to stop")
        }
        let timer = timeout.map { loop.finish(after: $0) }
        try loop.run(service) { .success(()) }
        timer?.cancel()
        withExtendedLifetime(subscription) {}
        try service.call("StopDiscovery")
    }

    // MARK: connect

    static func connect(_ service: Service, peer: String) throws(Exit) {
        // The service normalises what it is given (upper-case Bluetooth addresses, lower-case
        // ids); compare the way it does. Signals name the target by its address until
        // PeerIdentified says which id it is, then by the id.
        var names: Set<String> = [peer.uppercased()]
        let loop = EventLoop()
        var reported = ""
        let subscription = service.subscribe { signal in
            let id = signal.text(0)
            guard names.contains(id.uppercased()) else { return }
            switch signal.member {
            case "PeerIdentified":
                let key = signal.text(1)
                guard names.insert(key.uppercased()).inserted else { return }
                Output.line("\(id) is \(key)")
            case "PeerStateChanged":
                let state = signal.text(1)
                guard state != reported else { return }
                reported = state
                switch state {
                case "connecting": Output.line("connecting to \(id)...")
                case "pairing": Output.line("pairing with \(id)...")
                default: break  // connected: said once Connect answers; disconnected: its error follows
                }
            case "PairingRequested":
                reported = "pairing"
                let name = signal.text(1)
                let who = name.isEmpty ? id : "\(id) (\(Format.escaped(name)))"
                let passkey = signal.text(2)
                let compare = passkey.isEmpty ? "to accept," : "compare code \(passkey), then"
                Output.line("pairing with \(who): \(compare) run: peervoicectl confirm \(id) yes")
            default:
                break
            }
        }
        // Connect may wait for a person to confirm pairing; it answers with the id.
        var connected = peer
        service.callAsync("Connect", [Variant(peer)], timeout: PeerVoiceBus.connectCallTimeout) { result in
            loop.finish(result.map { reply in connected = (reply.count > 0 ? reply[0].string : nil) ?? peer })
        }
        try loop.run(service) {
            .failure(Exit(status: 130, message: "peervoicectl: interrupted; the service may still connect to \(peer)"))
        }
        withExtendedLifetime(subscription) {}
        let name = (try? service.peers())?.first { $0.id == connected }?.name ?? ""
        Output.line("connected to \(connected)" + (name.isEmpty ? "" : " (\(Format.escaped(name)))"))
    }

    // MARK: monitor

    /// The argument names of each signal, as in dbus/org.example.PeerVoice.xml.
    static let signalArguments: [String: [String]] = [
        "PeerFound": ["peer", "name"],
        "PeerLost": ["peer"],
        "PeerIdentified": ["address", "peer"],
        "PeerStateChanged": ["peer", "state"],
        "PairingRequested": ["peer", "name", "passkey"],
        "PairingPrompt": ["peer", "name", "passkey", "kind"],
        "PairingSettled": ["peer", "accepted"],
        "MessageReceived": ["peer", "message_id", "text"],
        "MessageDelivered": ["peer", "message_id"],
        "MessageFailed": ["peer", "message_id", "reason"],
        "MuteChanged": ["muted"],
        "VoiceStateChanged": ["peer", "state"],
        "Levels": ["input_dbfs", "peers_dbfs"],
    ]

    /// Arguments that carry free text, always quoted in plain lines.
    private static let freeText: Set<String> = ["name", "text", "reason"]

    /// How often `monitor --levels` asks for levels (ms).
    static let levelsIntervalMs: UInt32 = 100

    static func monitor(_ service: Service, json: Bool, levels: Bool) throws(Exit) {
        let loop = EventLoop()
        let subscription = service.subscribe { signal in
            Output.line(json ? jsonLine(signal) : signal.member == "Levels" ? levelBars(signal) : plainLine(signal))
        }
        // A round trip through the bus: once it is answered, the subscription is in place.
        let running = try service.isRunning()
        // The service ends the metering when this process leaves the bus.
        if levels { try service.call("StartMetering", [Variant(levelsIntervalMs)]) }
        Output.error("peervoicectl: monitoring \(Service.name)\(running ? "" : " (not running yet)"); Ctrl-C to stop")
        try loop.run(service) { .success(()) }
        withExtendedLifetime(subscription) {}
    }

    private static func named(_ signal: BusSignal) -> [(String, Variant)] {
        let names = signalArguments[signal.member] ?? []
        return signal.arguments.children.enumerated().map { index, value in
            (index < names.count ? names[index] : "arg\(index)", value)
        }
    }

    /// `2025-05-01T14:03:07.123+02:00 Levels input -23.5 [#########···········] pv:3k7q… -41.0 [####················]`:
    /// a bar of 20 for −60 to 0 dBFS per level (a peer by its id's first characters).
    static func levelBars(_ signal: BusSignal) -> String {
        var line = Format.localTime(milliseconds: Format.nowMilliseconds(), withMilliseconds: true) + " Levels input "
        line += levelBar(signal.arguments[0].double ?? -100)
        var peers: [(id: String, dBFS: Double)] = []
        for entry in signal.arguments[1].children {
            peers.append((entry[0].string ?? "?", entry[1].double ?? -100))
        }
        for peer in peers.sorted(by: { $0.id < $1.id }) {
            line += " " + peer.id.prefix(8) + "… " + levelBar(peer.dBFS)
        }
        return line
    }

    /// `-23.5 [#########···········]`
    private static func levelBar(_ dBFS: Double) -> String {
        let clamped = min(max(dBFS, -60), 0)
        let filled = Int(((clamped + 60) / 3).rounded())
        let bar = String(repeating: "#", count: filled) + String(repeating: "·", count: 20 - filled)
        return decibels(dBFS) + " [" + bar + "]"
    }

    /// One decimal: `-23.5`.
    private static func decibels(_ value: Double) -> String {
        String((value * 10).rounded() / 10)
    }

    /// `2025-05-01T14:03:07.123+02:00 MessageReceived peer=ip:192.168.1.20:47800 message_id=… text="hi\nthere"`
    static func plainLine(_ signal: BusSignal) -> String {
        var line = Format.localTime(milliseconds: Format.nowMilliseconds(), withMilliseconds: true) + " " + signal.member
        for (name, value) in named(signal) {
            let shown: String
            switch value.typeString {
            case "s", "o":
                let text = value.string ?? ""
                let plain = !text.isEmpty && !text.unicodeScalars.contains {
                    $0 == " " || $0 == "\"" || $0 == "=" || $0.properties.isWhitespace
                }
                shown = freeText.contains(name) || !plain ? Format.quoted(text) : Format.escaped(text)
            case "b": shown = value.bool == true ? "true" : "false"
            case "u": shown = String(value.uint32 ?? 0)
            case "t": shown = String(value.uint64 ?? 0)
            case "d": shown = decibels(value.double ?? 0)
            default: shown = Format.escaped(value.description)
            }
            line += " \(name)=\(shown)"
        }
        return line
    }

    /// `{"time": "…", "signal": "MessageReceived", "peer": "…", "message_id": "…", "text": "…"}`
    static func jsonLine(_ signal: BusSignal) -> String {
        var fields = [
            ("time", Format.jsonString(Format.localTime(milliseconds: Format.nowMilliseconds(), withMilliseconds: true))),
            ("signal", Format.jsonString(signal.member)),
        ]
        for (name, value) in named(signal) {
            switch value.typeString {
            case "s", "o": fields.append((name, Format.jsonString(value.string ?? "")))
            case "b": fields.append((name, value.bool == true ? "true" : "false"))
            case "u": fields.append((name, String(value.uint32 ?? 0)))
            case "t": fields.append((name, String(value.uint64 ?? 0)))
            case "d": fields.append((name, decibels(value.double ?? 0)))
            case "a{sd}":
                let entries = value.children.map { Format.jsonString($0[0].string ?? "") + ": " + decibels($0[1].double ?? 0) }
                fields.append((name, "{" + entries.joined(separator: ", ") + "}"))
            default: fields.append((name, Format.jsonString(value.description)))
            }
        }
        return "{" + fields.map { "\(Format.jsonString($0.0)): \($0.1)" }.joined(separator: ", ") + "}"
    }
}
