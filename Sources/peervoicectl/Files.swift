import GIO
import Glibc
import PeerVoiceBus

/// `send-file`, `transfers` and `transfer`: file transfers from the shell, through `SendFiles` and
/// the transfer objects (org.example.PeerVoice.Transfer) the service publishes.
extension Ctl {
    static let finishedStates: Set<String> = ["complete", "failed", "cancelled", "declined"]

    // MARK: send-file

    /// Sends `paths` (made absolute) to `peer`; unless `detach`, follows the transfer to its end:
    /// a progress bar on a terminal, a line per state and per tenth otherwise. Ctrl-C cancels it.
    static func sendFiles(_ service: Service, peer: String, paths: [String], detach: Bool) throws(Exit) {
        let directory = currentDirectory()
        let absolute = paths.map { $0.hasPrefix("/") ? $0 : directory + "/" + $0 }
        let reply = try service.call("SendFiles", [Variant(peer), Variant(array: absolute.map { Variant($0) }, elementType: "s"),
                                                   Variant(dictionary: [])])
        let path = reply[0].string ?? ""
        guard !detach else { return Output.line(path) }
        let view = TransferView(path: path, who: peerName(service, peer), terminal: isatty(1) != 0)
        let loop = EventLoop()
        let subscription = service.connection.subscribe(sender: Service.name, interface: "org.freedesktop.DBus.Properties",
                                                        member: "PropertiesChanged", path: path) { signal in
            var changed: [String: Variant] = [:]
            for entry in signal.arguments[1].children { changed[entry[0].string ?? ""] = entry[1].unboxed }
            if let outcome = view.update(changed) { loop.finish(outcome) }
        }
        if let outcome = view.update(try transferProperties(service, path)) { loop.finish(outcome) }
        try loop.run(service) {
            _ = try? service.connection.call(destination: Service.name, path: path, interface: PeerVoiceBus.transferInterface, method: "Cancel")
            view.interrupted()
            return .failure(Exit(status: 130, message: "peervoicectl: interrupted: the transfer was cancelled"))
        }
        withExtendedLifetime(subscription) {}
    }

    private static func currentDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "." }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `peer` as a person knows it: "name (id)" when its object has a name.
    private static func peerName(_ service: Service, _ peer: String) -> String {
        let objects = (try? service.peerObjects()) ?? []
        let wanted = peer.uppercased()
        let found = objects.first { object in
            (object.lookup("Id")?.string ?? "").uppercased() == wanted
                || (object.lookup("Routes")?.children ?? []).contains { ($0[1].string ?? "").uppercased() == wanted }
        }
        guard let found, let name = found.lookup("Name")?.string, !name.isEmpty else { return peer }
        return "\(Format.escaped(name)) (\(found.lookup("Id")?.string ?? peer))"
    }

    private static func transferProperties(_ service: Service, _ path: String) throws(Exit) -> [String: Variant] {
        do {
            let all = try service.connection.call(destination: Service.name, path: path, interface: "org.freedesktop.DBus.Properties",
                                                  method: "GetAll", arguments: Variant(tuple: [Variant(PeerVoiceBus.transferInterface)]))[0]
            var properties: [String: Variant] = [:]
            for entry in all.children { properties[entry[0].string ?? ""] = entry[1].unboxed }
            return properties
        } catch {
            throw Exit.from(error)
        }
    }

    // MARK: transfers

    /// Every transfer object, in the order they were made.
    static func transfers(_ service: Service) throws(Exit) {
        let objects: [(number: Int, properties: Variant)]
        do {
            let reply = try service.connection.call(destination: Service.name, path: Service.path,
                                                    interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
            objects = reply[0].children.compactMap { entry in
                guard let path = entry[0].string, let properties = entry[1].lookup(PeerVoiceBus.transferInterface),
                      let number = Int(path.dropFirst(PeerVoiceBus.transfersPath.count + 1)) else { return nil }
                return (number, properties)
            }.sorted { $0.number < $1.number }
        } catch {
            throw Exit.from(error)
        }
        guard !objects.isEmpty else { return Output.line("no transfers (peervoicectl send-file PEER FILE sends one)") }
        var rows = [["#", "DIRECTION", "PEER", "STATE", "PROGRESS", "FILES", "WHERE"]]
        for (number, properties) in objects {
            func text(_ name: String) -> String { properties.lookup(name)?.string ?? "" }
            let size = properties.lookup("Size")?.uint64 ?? 0
            let done = properties.lookup("Transferred")?.uint64 ?? 0
            let files = properties.lookup("Files")?.children ?? []
            let what = files.count == 1 ? Format.escaped(files[0][0].string ?? "") : "\(files.count) files"
            var state = text("State")
            if !text("Error").isEmpty { state += ": " + Format.escaped(text("Error")) }
            rows.append(["\(number)", text("Direction"), text("Peer"), state,
                         "\(percent(done, of: size)) of \(ByteCount.text(size))", what, Format.escaped(text("Destination"))])
        }
        Output.line(Format.table(rows))
    }

    /// `transfer accept|decline|cancel N`: N is a transfer's number or its object path.
    static func answerTransfer(_ service: Service, action: String, transfer: String) throws(Exit) {
        let path = transfer.hasPrefix("/") ? transfer : PeerVoiceBus.transfersPath + "/" + transfer
        guard path.hasPrefix(PeerVoiceBus.transfersPath + "/"), Int(path.dropFirst(PeerVoiceBus.transfersPath.count + 1)) != nil else {
            throw Exit.usage("transfer: \(transfer) is neither a transfer's number nor its object path (peervoicectl transfers lists them)")
        }
        let method = action.prefix(1).uppercased() + action.dropFirst()
        do {
            try service.connection.call(destination: Service.name, path: path, interface: PeerVoiceBus.transferInterface, method: method)
        } catch {
            if error.name == "org.freedesktop.DBus.Error.UnknownObject" || error.name == "org.freedesktop.DBus.Error.UnknownMethod" {
                throw Exit(status: Exit.serviceError, message: "peervoicectl: no transfer \(transfer) (peervoicectl transfers lists them)")
            }
            throw Exit.from(error)
        }
        let done = ["accept": "accepted", "decline": "declined", "cancel": "cancelled"][action] ?? action
        Output.line("\(done) transfer \(transfer)")
    }

    static func percent(_ done: UInt64, of size: UInt64) -> String {
        size == 0 ? "100%" : "\(Int(Double(done) / Double(size) * 100))%"
    }
}

/// What `send-file` shows of one transfer as its properties change: a redrawn progress bar on a
/// terminal, plain lines otherwise.
final class TransferView {
    private let path: String
    private let who: String
    private let terminal: Bool
    private var properties: [String: Variant] = [:]
    private var lastState = ""
    private var lastTenth = -1
    private var activeSince: Double?
    /// Recent (time, bytes) samples for the rate: the last few seconds.
    private var samples: [(time: Double, bytes: UInt64)] = []
    private var barShown = false

    init(path: String, who: String, terminal: Bool) {
        self.path = path
        self.who = who
        self.terminal = terminal
    }

    private var state: String { properties["State"]?.string ?? "" }
    private var size: UInt64 { properties["Size"]?.uint64 ?? 0 }
    private var transferred: UInt64 { properties["Transferred"]?.uint64 ?? 0 }

    /// Takes changed properties; the outcome once the transfer has ended.
    func update(_ changed: [String: Variant]) -> Result<Void, Exit>? {
        properties.merge(changed) { $1 }
        let now = Self.seconds()
        if state == "active" {
            if activeSince == nil { activeSince = now }
            samples.append((now, transferred))
            samples.removeAll { now - $0.time > 3 }
        }
        if state != lastState {
            stateChanged(now: now)
            lastState = state
        } else if state == "active" {
            showProgress()
        }
        guard Ctl.finishedStates.contains(state) else { return nil }
        let error = properties["Error"]?.string ?? ""
        switch state {
        case "complete": return .success(())
        default: return .failure(Exit(status: Exit.serviceError, message: "peervoicectl: the transfer \(state == "failed" ? "failed" : "was \(state)")"
                                      + (error.isEmpty ? "" : ": \(Format.escaped(error))")))
        }
    }

    private func stateChanged(now: Double) {
        let files = properties["Files"]?.children.count ?? 0
        let what = "\(files) \(files == 1 ? "file" : "files") (\(ByteCount.text(size)))"
        switch state {
        case "waiting": line("\(what) for \(who): waiting for it to accept")
        case "paused": line("paused at \(Ctl.percent(transferred, of: size)): the link is down; it resumes by itself")
        case "active":
            if lastState == "paused" { line("resumed at \(Ctl.percent(transferred, of: size))") } else if !terminal { line("sending \(what) to \(who)") }
            showProgress()
        case "complete":
            lastTenth = 9
            showProgress()
            let elapsed = activeSince.map { now - $0 } ?? 0
            let rate = elapsed > 0 ? ", \(ByteCount.text(UInt64(Double(size) / elapsed)))/s" : ""
            line("complete: \(what) in \(Self.duration(elapsed))\(rate)")
        default:
            break
        }
    }

    /// The bar (a terminal) or a line per tenth (otherwise).
    private func showProgress() {
        let fraction = size == 0 ? 1 : min(1, Double(transferred) / Double(size))
        let rate = self.rate
        var tail = "\(ByteCount.text(transferred)) of \(ByteCount.text(size))"
        if let rate, rate > 0 {
            tail += "  \(ByteCount.text(UInt64(rate)))/s"
            if state == "active" { tail += "  \(Self.duration(Double(size - min(size, transferred)) / rate)) left" }
        }
        if terminal {
            let width = 24
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            Output.write(1, "\r\(Ctl.percent(transferred, of: size)) [\(bar)] \(tail)\u{1B}[K")
            barShown = true
        } else {
            let tenth = Int(fraction * 10)
            guard tenth > lastTenth, tenth < 10 else { return }
            lastTenth = tenth
            Output.line("\(tenth * 10)%: \(tail)")
        }
    }

    /// Bytes a second over the last few seconds.
    private var rate: Double? {
        guard let first = samples.first, let last = samples.last, last.time - first.time > 0.2 else { return nil }
        return Double(last.bytes - min(last.bytes, first.bytes)) / (last.time - first.time)
    }

    func interrupted() { if barShown { Output.write(1, "\n") } }

    private func line(_ text: String) {
        if barShown {
            Output.write(1, "\r\u{1B}[K")
            barShown = false
        }
        Output.line(text)
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "?" }
        if seconds < 10 { return "\(Int((seconds * 10).rounded()) / 10).\(Int((seconds * 10).rounded()) % 10) s" }
        let whole = Int(seconds.rounded())
        let (hours, minutes, rest) = (whole / 3600, whole / 60 % 60, whole % 60)
        let two = { (value: Int) in value < 10 ? "0\(value)" : "\(value)" }
        return hours > 0 ? "\(hours):\(two(minutes)):\(two(rest))" : "\(minutes):\(two(rest))"
    }

    private static func seconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
