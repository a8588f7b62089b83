import Foundation
import GIO
import Glibc
import SeededRandom
import TestHarness

/// What one or more seeds did: faults by kind and the workload's outcomes.
struct ChaosFigures: CustomStringConvertible {
    var faults: [String: Int] = [:]
    var sent = 0, refused = 0, received = 0, delivered = 0, failed = 0
    /// Announced again (same id) by a receiver's next life: killed before it noted the first.
    var announcedAgain = 0
    /// `MessageDelivered` or `MessageFailed` reported again by a sender's next life, likewise.
    var reportedAgain = 0
    var transfers = 0, transfersComplete = 0, transfersFailed = 0, transferBytes = 0
    /// Transfer ends a client learned only from `PropertiesChanged`: the polls never saw them
    /// (the service was killed, or the object went, before the next one).
    var endsOnlySignalled = 0
    var streams = 0, streamsWhole = 0, streamsReset = 0, streamsRefused = 0, streamsCutByKill = 0
    /// Seconds from the last missing piece's return to the call active on both sides, by piece;
    /// seconds from avahi-daemon's return to browsing and publishing again (and being found).
    var callRecoveries: [String: [Double]] = [:]
    var avahiRecoveries: [Double] = [], avahiInterrupted = 0, avahiFoundAgain = 0

    mutating func add(_ other: ChaosFigures) {
        other.faults.forEach { faults[$0.key, default: 0] += $0.value }
        sent += other.sent; refused += other.refused; received += other.received
        announcedAgain += other.announcedAgain; reportedAgain += other.reportedAgain
        delivered += other.delivered; failed += other.failed
        transfers += other.transfers; transfersComplete += other.transfersComplete
        transfersFailed += other.transfersFailed; transferBytes += other.transferBytes
        endsOnlySignalled += other.endsOnlySignalled
        streams += other.streams; streamsWhole += other.streamsWhole; streamsReset += other.streamsReset
        streamsRefused += other.streamsRefused; streamsCutByKill += other.streamsCutByKill
        other.callRecoveries.forEach { callRecoveries[$0.key, default: []] += $0.value }
        avahiRecoveries += other.avahiRecoveries; avahiInterrupted += other.avahiInterrupted
        avahiFoundAgain += other.avahiFoundAgain
    }

    /// "n, median m s, max x s" of some durations.
    private static func spread(_ seconds: [Double]) -> String {
        guard !seconds.isEmpty else { return "0" }
        let sorted = seconds.sorted()
        return "\(sorted.count), median \(String(format: "%.2f", sorted[sorted.count / 2])) s, max \(String(format: "%.2f", sorted.last!)) s"
    }

    var description: String {
        let kinds = faults.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return "faults \(faults.values.reduce(0, +)) (\(kinds)); messages: \(sent) accepted, \(refused) refused, "
            + "\(received) received (\(announcedAgain) announced again after a kill), \(delivered) reported delivered, \(failed) failed "
            + "(\(reportedAgain) reported again after a kill); "
            + "transfers: \(transfers) accepted, \(transfersComplete) complete, \(transfersFailed) failed, "
            + "\(transferBytes) bytes landed (\(endsOnlySignalled) ends seen only in PropertiesChanged); streams: \(streams) opened, \(streamsWhole) whole, \(streamsReset) reset, "
            + "\(streamsRefused) refused, \(streamsCutByKill) cut by their receiver's kill -9; "
            + "call active again after: " + (callRecoveries.isEmpty ? "-" : callRecoveries.sorted { $0.key < $1.key }
                .map { "\($0.key) \(Self.spread($0.value))" }.joined(separator: ", "))
            + "; avahi-daemon restarts judged: \(Self.spread(avahiRecoveries)) (\(avahiFoundAgain) lost and found again by the other daemon, "
            + "\(avahiInterrupted) cut short by another)"
    }
}

/// One daemon of the campaign and what the faults did to it.
final class Node {
    let name: String
    let peer: TestPeer
    let watch: TransferWatch
    let downloads: String
    let streamsIn: String
    var listener: ChildProcess?
    /// SIGSTOPped by the schedule (no call may go to it until SIGCONT).
    var stopped = false
    /// Its state directory's tmpfs is filled.
    var diskFull = false
    /// Which life of the daemon this is (each restart after a kill -9 starts one), and when each
    /// life that was killed ended.
    var life = 0
    var killedAt: [Int: Date] = [:]
    /// The daemon's pid, RSS (KiB) and open fds, sampled once a second during the faults.
    var samples: [(pid: pid_t, rssKiB: Int, fds: Int)] = []

    /// What libfaketime adds to the daemon's wall clock ("+0", "+25m", "-90m"), read each second.
    let clockFile: String

    /// The node's own PipeWire (the two that hold the call), nil while the schedule has it down,
    /// and the directory it runs in every time.
    var pipewire: PipeWireSession?
    var pipewireDirectory: String?
    /// The LAN host it runs on (the two LAN nodes), and whether the schedule has its avahi-daemon down.
    var lanHost: LANHost?
    var avahiDown = false

    /// `observe()`'s place in the client's signals, and what they said last (since this life began).
    var cursor = 0
    var peerStates: [String: String] = [:]
    var voiceStates: [String: String] = [:]
    /// When a PeerFound last named each peer name, and the peers found now (address → name).
    var foundAt: [String: Date] = [:]
    var nearby: [String: String] = [:]

    init(name: String, peer: TestPeer, downloads: String, streamsIn: String, clockFile: String) {
        self.name = name
        self.clockFile = clockFile
        self.peer = peer
        self.watch = TransferWatch(peer.client)
        self.downloads = downloads
        self.streamsIn = streamsIn
    }

    var usable: Bool { peer.isRunning && !stopped }
    var stateDirectory: String { peer.daemon.stateDirectory }
}

/// What `Send` accepted (or refused): text tagged `chaos SEED FROM>TO #SEQ`.
struct SentMessage {
    let from: Int, to: Int, seq: Int, step: Int
    let id: String
    /// nil: accepted; else the error (a refusal) — "harness.NoReply"-like timeouts are uncertain.
    let error: String?
}

struct SentTransfer {
    let from: Int, to: Int, step: Int
    let id: String
    let source: String
}

struct SentStream {
    let from: Int, to: Int, step: Int
    let data: Data
    let process: ChildProcess
}

/// A transfer as one side saw it, final states kept once seen.
struct SeenTransfer {
    var state: String
    var destination: String
    var finals: Set<String> = []
}

/// One seed's run: three real peervoiced on private buses, each state directory on a small tmpfs,
/// paired through byte relays on 127.0.0.1 (a relay per dialled route, so a link can be cut), a
/// workload of texts, file transfers and app-channel streams interleaved with faults drawn from
/// the seed, then a quiet settle period and the invariants over everything users saw.
final class Campaign {
    static let channel = "org.example.Chaos"
    static let finals: Set<String> = ["complete", "failed", "cancelled", "declined"]

    let seed: UInt64
    let seconds: Double
    let settle: Double
    private var random: SplitMix64
    private let directory: TemporaryDirectory
    private var nodes: [Node] = []
    /// (dialler, dialled) → the relay the dialler's route goes through.
    private var relays: [Int: Relay] = [:]
    private var relayPorts: [Int: (port: UInt16, target: Int)] = [:]
    private var undo: [(at: Date, label: String, action: () -> Void)] = []
    /// Routes that moved to a new address (`moveRelay`).
    private var moved: Set<Int> = []
    private(set) var figures = ChaosFigures()
    private var step = 0
    private var messages: [SentMessage] = []
    private var nextSeq: [Int: Int] = [:]
    private var transfers: [SentTransfer] = []
    private var seen: [Int: [String: SeenTransfer]] = [:]
    /// Transfer ids each daemon lists now (a finished transfer is not listed after a restart).
    private var listed: [Int: Set<String>] = [:]
    /// Per node, how many of its watch's `PropertiesChanged` are folded into `seen`.
    private var foldedChanges: [Int: Int] = [:]
    private var streams: [SentStream] = []
    private var violations: [String] = []
    /// The faults' kill -9s, so an exit the schedule did not cause is told apart.
    private var expectedExits: Set<pid_t> = []
    private let ctl: String = Binaries.directory + "/peervoicectl"
    /// The two LAN hosts (delta and echo run there), the call alpha and bravo hold, and the
    /// avahi-daemon restarts awaiting their checks.
    private var lan: LANPair?
    private var call: CallWatch?
    private let avahi = AvahiWatch()
    private var lastServiceLook = Date.distantPast

    init(seed: UInt64, seconds: Double, settle: Double) throws {
        self.seed = seed
        self.seconds = seconds
        self.settle = settle
        random = SplitMix64(seed: seed)
        directory = try TemporaryDirectory("peervoice-chaos-\(seed)")
        do {
            try setUp()
        } catch {
            tearDown()
            throw error
        }
    }

    // MARK: Set-up and tear-down

    private func setUp() throws {
        for (index, name) in ["alpha", "bravo", "charlie"].enumerated() {
            let downloads = directory.path + "/\(name)-downloads", streamsIn = directory.path + "/\(name)-streams"
            try FileManager.default.createDirectory(atPath: streamsIn, withIntermediateDirectories: true)
            // alpha and bravo hold a call, each with its own PipeWire, voice starting as a link
            // opens (the default), and on the link: the relays carry TCP alone, and voice in UDP
            // datagrams would go to a relay's port, where nothing listens. charlie has no audio.
            let pipewireDirectory = directory.path + "/\(name)-pipewire"
            let pipewire = index < 2 ? try PipeWireSession(directory: pipewireDirectory) : nil
            let peer: TestPeer
            do {
                peer = try TestPeer(name: name, arguments: ["--verbose", pipewire == nil ? "--no-auto-voice" : "--voice-over-link",
                                                            "--download-dir", downloads],
                                    environment: pipewire?.environment ?? ["PIPEWIRE_RUNTIME_DIR": pipewireDirectory])
            } catch {
                pipewire?.stop()
                throw error
            }
            let node = Node(name: name, peer: peer, downloads: downloads, streamsIn: streamsIn,
                            clockFile: directory.path + "/\(name)-clock")
            node.pipewire = pipewire
            node.pipewireDirectory = pipewire.map { _ in pipewireDirectory }
            nodes.append(node)
            // The state directory moves onto a 4 MiB tmpfs (the disk-full fault fills it); then
            // the daemon runs with its wall clock under the schedule's control.
            try peer.moveStateOntoTmpfs(megabytes: 4)
            guard peer.stop() == 0 else { throw HarnessError("\(name) did not stop: \(peer.log.suffix(2_000))") }
            try start(node, clockOffset: "+0")
        }
        for (dialler, dialled) in [(0, 1), (0, 2), (1, 2)] {
            let relay = try relayOnAFixedPort(to: dialled)
            relays[dialler * 3 + dialled] = relay
            relayPorts[dialler * 3 + dialled] = (relay.port, dialled)
            let pairing = nodes[dialler].peer.pair(with: nodes[dialled].peer, via: relay.address)
            guard (try? pairing.connect.get())?[0].string == nodes[dialled].peer.id else {
                throw HarnessError("\(nodes[dialler].name) could not pair with \(nodes[dialled].name): \(pairing.connect)")
            }
        }
        call = CallWatch(nodes[0], nodes[1])
        try setUpLAN()
    }

    /// delta and echo: default daemons (listening once discoverable) on two LAN hosts, each in its
    /// network namespace with its own avahi-daemon; they find each other and pair as people would.
    private func setUpLAN() throws {
        let lan = try LANPair()
        self.lan = lan
        for (name, host) in [("delta", lan.a), ("echo", lan.b)] {
            let downloads = directory.path + "/\(name)-downloads"
            let peer = try TestPeer(name: name, listens: false, arguments: ["--verbose", "--no-auto-voice", "--download-dir", downloads],
                                    environment: ["DBUS_SYSTEM_BUS_ADDRESS": host.systemBus.address,
                                                  "PIPEWIRE_RUNTIME_DIR": directory.path + "/\(name)-pipewire"],
                                    launcher: ["ip", "netns", "exec", host.namespace])
            let node = Node(name: name, peer: peer, downloads: downloads, streamsIn: directory.path + "/\(name)-streams",
                            clockFile: directory.path + "/\(name)-clock")
            node.lanHost = host
            nodes.append(node)
            // StartDiscovery answers NotAvailable until the daemon has seen its avahi-daemon.
            guard eventually(timeout: 10, { (try? peer.client.property("DiscoveryMethods").strings)?.contains("lan") == true }) else {
                throw HarnessError("\(name) never listed lan among its DiscoveryMethods: \(peer.log.suffix(2_000))")
            }
            try peer.client.call("StartDiscovery")
        }
        let (delta, echo) = (nodes[3], nodes[4])
        guard eventually(timeout: 15, {
            delta.observe()
            echo.observe()
            return delta.foundAt[echo.name] != nil && echo.foundAt[delta.name] != nil
        }) else { throw HarnessError("delta and echo did not find each other on the LAN") }
        let pairing = delta.peer.pair(with: echo.peer, via: "ip:\(lan.b.address):47800")
        guard (try? pairing.connect.get())?[0].string == echo.peer.id else {
            throw HarnessError("delta could not pair with echo: \(pairing.connect)")
        }
    }

    /// Stops everything; the directory (logs, what was sent and received) stays when `keeping`.
    func tearDown(keeping: Bool = false) {
        relays.values.forEach { $0.stop() }
        relays = [:]
        for stream in streams { stream.process.kill() }
        for node in nodes {
            node.listener?.kill()
            if node.stopped { node.peer.daemon.process.signal(SIGCONT) }
            node.peer.kill()
            if node.lanHost == nil { node.peer.unmountState() }
            node.peer.shutdown(keepDirectory: keeping)
            node.pipewire?.stop()
        }
        nodes = []
        if keeping, let lan {
            for (name, host) in [("delta", lan.a), ("echo", lan.b)] {
                try? FileManager.default.copyItem(atPath: host.directory.path + "/avahi-daemon.log",
                                                  toPath: directory.path + "/\(name)-avahi-daemon.log")
            }
        }
        lan?.stop()
        lan = nil
        if keeping { say("chaos: seed \(seed): logs, files sent and received kept in \(directory.path)") } else { directory.remove() }
    }

    func printLogs() {
        for node in nodes {
            say("----- log of \(node.name) (\(node.peer.id)), whole in \(node.peer.directory.path) -----\n\(node.peer.log.suffix(8_000))")
        }
    }

    /// `peervoicectl listen` on the node's bus: each stream into a file (`in.LIFE.PID`), renamed
    /// `.ok` when it ended cleanly (and touched: its time is the end's), `.reset` when reading it failed.
    private func startListener(_ node: Node) {
        node.listener?.kill()
        let keep = "f=\(node.streamsIn)/in.\(node.life).$$; if cat > $f.part; then mv $f.part $f.ok; touch $f.ok; else mv $f.part $f.reset; fi"
        node.listener = try? ChildProcess(ctl, ["listen", Self.channel, "--", "/bin/sh", "-c", keep],
                                          environment: ["DBUS_SESSION_BUS_ADDRESS": node.peer.bus.address],
                                          logPath: directory.path + "/\(node.name)-listener.log")
    }

    // MARK: The run

    /// Workload and faults for `seconds`, then the settle period; the violations found. The
    /// schedule is a function of the seed alone: when each step comes (virtual time), whether it
    /// is a fault, and everything the step draws (its own generator, seeded by the seed and the
    /// step's number), so a seed replays the same steps whatever the daemons did.
    func run() -> [String] {
        var schedule = SplitMix64(seed: seed)
        let start = Date()
        var at = 0.0
        var nextFault = schedule.exponential(mean: 3)
        var nextPoll = Date()
        while at < seconds && violations.isEmpty {
            step += 1
            at += schedule.exponential(mean: 0.12)
            let isFault = at >= nextFault
            if isFault { nextFault = at + schedule.exponential(mean: 3) }
            eventually(timeout: max(0, start.addingTimeInterval(at).timeIntervalSinceNow)) { watchServices(); return false }
            runDueUndo(all: false)
            random = SplitMix64(seed: seed &+ UInt64(step) &* 0x9E37_79B9_7F4A_7C15)
            if isFault {
                injectFault()
            } else {
                let draw = random.uniform()
                if draw < 0.75 { sendText() } else if draw < 0.9 { sendFiles() } else { openStream() }
            }
            if Date() >= nextPoll {
                poll(sampling: true)
                nextPoll = Date().addingTimeInterval(1)
            }
        }
        say("chaos: seed \(seed): \(step) steps; healing, then up to \(Int(settle)) s to settle")
        runDueUndo(all: true)
        for node in nodes where !node.peer.isRunning { restart(node, clockStep: nil) }
        moved.forEach(tellNewAddress)
        let settled = Date().addingTimeInterval(settle)
        while Date() < settled && violations.isEmpty && !quiet() {
            eventually(timeout: 0.5) { watchServices(); return false }
            poll(sampling: false)
        }
        // A little longer, so a late duplicate would be seen.
        eventually(timeout: 2) { watchServices(); return false }
        poll(sampling: false)
        if violations.isEmpty { check() }
        figures.callRecoveries = call?.recoveries ?? [:]
        figures.avahiRecoveries = avahi.recoveries
        figures.avahiInterrupted = avahi.interrupted
        figures.avahiFoundAgain = avahi.foundAgain
        return violations
    }

    /// The call and the avahi-daemon restarts judged from the signals, every 50 ms at most.
    private func watchServices() {
        guard Date().timeIntervalSince(lastServiceLook) >= 0.05 else { return }
        lastServiceLook = Date()
        nodes.forEach { $0.observe() }
        if let problem = call?.check() { violation(problem) }
        avahi.check().forEach(violation)
    }

    private func violation(_ what: String) {
        violations.append("at step \(step): \(what)")
    }

    private func pick(_ count: Int) -> Int { Int(random.next() % UInt64(count)) }

    private func lanPair() -> (Int, Int)? {
        let from = 3 + pick(2)
        return (from, 7 - from)
    }

    private func usablePair() -> (Int, Int)? {
        let from = pick(3), to = (from + 1 + pick(2)) % 3
        return nodes[from].usable ? (from, to) : nil
    }

    // MARK: Workload

    private func sendText() {
        // A fifth of the texts go between the LAN daemons.
        guard let (from, to) = lan != nil && random.uniform() < 0.2 ? lanPair() : usablePair() else { return }
        let seq = nextSeq[from * 8 + to, default: 0]
        let padding = String(repeating: "x", count: random.uniform() < 0.05 ? 20_000 + pick(40_000) : pick(300))
        let text = "chaos \(seed) \(from)>\(to) #\(seq) \(padding)"
        let result = nodes[from].peer.client.callRecordingOrder("Send", [Variant(nodes[to].peer.id), Variant(text)])
        // Every Send takes its own number, refused or not, so a tag names one call.
        nextSeq[from * 8 + to] = seq + 1
        switch result.result {
        case .success(let reply):
            messages.append(SentMessage(from: from, to: to, seq: seq, step: step, id: reply[0].string ?? "", error: nil))
            figures.sent += 1
        case .failure(let error):
            messages.append(SentMessage(from: from, to: to, seq: seq, step: step, id: "", error: "\(error.name): \(error.message)"))
            if !error.name.hasSuffix(".Failed") {
                say("chaos: step \(step): Send \(nodes[from].name) → \(nodes[to].name) answered \(error.name): \(error.message)")
            }
            figures.refused += 1
        }
    }

    private func randomBytes(_ count: Int) -> Data {
        var data = Data(count: count)
        data.withUnsafeMutableBytes { buffer in
            for index in buffer.indices { buffer[index] = UInt8(truncatingIfNeeded: random.next()) }
        }
        return data
    }

    private func sendFiles() {
        guard let (from, to) = usablePair() else { return }
        let number = transfers.count
        let outbox = directory.path + "/outbox-\(nodes[from].name)"
        let source: String
        do {
            if random.uniform() < 0.5 {
                source = outbox + "/file \(number).bin"
                try FileManager.default.createDirectory(atPath: outbox, withIntermediateDirectories: true)
                try randomBytes(pick(300_000)).write(to: URL(fileURLWithPath: source))
            } else {
                source = outbox + "/folder \(number)"
                try FileManager.default.createDirectory(atPath: source + "/empty", withIntermediateDirectories: true)
                try FileManager.default.createDirectory(atPath: source + "/inner", withIntermediateDirectories: true)
                for index in 0...pick(4) {
                    try randomBytes(pick(100_000)).write(to: URL(fileURLWithPath: source + (index % 2 == 0 ? "/" : "/inner/") + "part \(index)"))
                }
            }
        } catch {
            violation("the driver could not write its files: \(error)")
            return
        }
        do {
            let path = try nodes[from].watch.send([source], to: nodes[to].peer.id)
            let id = nodes[from].watch.property(path, "Id")?.string ?? ""
            transfers.append(SentTransfer(from: from, to: to, step: step, id: id, source: source))
            figures.transfers += 1
        } catch {
            say("chaos: step \(step): SendFiles \(nodes[from].name) → \(nodes[to].name) refused: \(error.name): \(error.message)")
        }
    }

    private func openStream() {
        guard let (from, to) = usablePair(), streams.filter({ $0.process.isRunning }).count < 4 else { return }
        let data = randomBytes(1 + pick(200_000))
        let file = directory.path + "/stream-\(streams.count).out"
        do {
            try data.write(to: URL(fileURLWithPath: file))
            let process = try ChildProcess(ctl, ["open", nodes[to].peer.id, Self.channel],
                                           environment: ["DBUS_SESSION_BUS_ADDRESS": nodes[from].peer.bus.address],
                                           logPath: file + ".log", stdinPath: file)
            streams.append(SentStream(from: from, to: to, step: step, data: data, process: process))
            figures.streams += 1
        } catch {
            violation("the driver could not start peervoicectl open: \(error)")
        }
    }

    // MARK: Faults

    /// A relay to `target` on a port below the kernel's ephemeral range (32768–60999 here): while
    /// its link is cut, no outgoing connection can take that port and keep the route from coming
    /// back (it did: "the relay could not listen again", seed 31).
    private func relayOnAFixedPort(to target: Int) throws -> Relay {
        for _ in 0..<100 {
            if let relay = try? Relay(targetPort: nodes[target].peer.port, listenPort: UInt16.random(in: 20_000..<32_000)) {
                return relay
            }
        }
        throw HarnessError("no free port for a relay between 20000 and 32000")
    }

    /// The route `key` back on its port; tried again each second (10 times) if the port is busy.
    private func reopenRelay(_ key: Int, attempt: Int = 1) {
        let (port, target) = relayPorts[key]!
        relays[key]?.stop()  // a burst may have brought it back meanwhile
        relays[key] = nil
        do {
            relays[key] = try Relay(targetPort: nodes[target].peer.port, listenPort: port)
            return
        } catch {
            say("chaos: the relay could not listen on \(port) again (attempt \(attempt)): \(error)")
        }
        guard attempt < 10 else { return violation("the harness could not bring the route on port \(port) back") }
        later(1, "relay \(key) again") { [unowned self] in reopenRelay(key, attempt: attempt + 1) }
    }

    /// The dialled peer moved: its route comes back on another port, and the dialler learns the
    /// address as it would from the LAN (a `Connect` to it; the old route stays, dead). Told
    /// again after the healing, in case the dialler was down to hear it.
    private func moveRelay(_ key: Int) {
        let target = relayPorts[key]!.target
        relays[key]?.stop()  // a burst may have brought the old one back meanwhile
        guard let relay = try? relayOnAFixedPort(to: target) else {
            return violation("the harness found no port for \(nodes[target].name)'s new address")
        }
        relays[key] = relay
        relayPorts[key] = (relay.port, target)
        moved.insert(key)
        tellNewAddress(key)
    }

    private func tellNewAddress(_ key: Int) {
        let dialler = nodes[key / 3]
        guard dialler.peer.isRunning, let relay = relays[key] else { return }
        _ = dialler.peer.client.callAsync("Connect", [Variant(relay.address)])
    }

    private func later(_ seconds: Double, _ label: String, _ action: @escaping () -> Void) {
        undo.append((Date().addingTimeInterval(seconds), label, action))
    }

    private func runDueUndo(all: Bool) {
        while let index = undo.indices.min(by: { undo[$0].at < undo[$1].at }), all || undo[index].at <= Date() {
            let due = undo.remove(at: index)
            say("chaos: step \(step): \(due.label)")
            due.action()
        }
    }

    private func count(_ kind: String, _ detail: String) {
        figures.faults[kind, default: 0] += 1
        say("chaos: step \(step): fault \(kind) \(detail)")
    }

    private func injectFault() {
        let index = pick(3)
        let node = nodes[index]
        switch pick(9) {
        case 0:
            // kill -9, restarted at once or after up to 3 s; now and then with its clock stepped.
            guard node.peer.isRunning else { return }
            let clockStep = random.uniform() < 0.3 ? "+\(1 + pick(30))m" : nil
            let downFor = random.uniform() < 0.5 ? 0 : random.uniform() * 3
            count("kill-9", "\(node.name), back after \(String(format: "%.1f", downFor)) s\(clockStep.map { ", clock \($0)" } ?? "")")
            if clockStep != nil { figures.faults["clock-step", default: 0] += 1 }
            expectedExits.insert(node.peer.daemon.process.pid)
            node.peer.kill()
            node.forgetLife()
            node.killedAt[node.life] = Date()
            node.life += 1
            node.stopped = false
            node.listener?.kill()
            undo.removeAll { $0.label.hasPrefix("SIGCONT \(node.name)") }
            if downFor == 0 { restart(node, clockStep: clockStep) } else {
                later(downFor, "restart \(node.name)") { [unowned self] in restart(node, clockStep: clockStep) }
            }
        case 1:
            guard node.peer.isRunning, !node.stopped else { return }
            let seconds = 0.3 + random.uniform() * 6
            count("sigstop", "\(node.name) for \(String(format: "%.1f", seconds)) s")
            node.peer.daemon.process.signal(SIGSTOP)
            node.stopped = true
            let pid = node.peer.daemon.process.pid
            later(seconds, "SIGCONT \(node.name)") {
                if node.peer.daemon.process.pid == pid { node.peer.daemon.process.signal(SIGCONT) }
                node.stopped = false
            }
        case 2:
            let key = [1, 2, 5][pick(3)]
            guard let relay = relays[key], let (_, target) = relayPorts[key] else { return }
            let seconds = 0.5 + random.uniform() * 8
            let route = "\(nodes[key / 3].name) → \(nodes[target].name)"
            relay.stop()
            relays[key] = nil
            if random.uniform() < 0.3 {
                count("address-change", "\(route): the route dies, a new address after \(String(format: "%.1f", seconds)) s")
                later(seconds, "new address \(route)") { [unowned self] in moveRelay(key) }
            } else {
                count("link-cut", "\(route) for \(String(format: "%.1f", seconds)) s")
                later(seconds, "link back \(route)") { [unowned self] in reopenRelay(key) }
            }
        case 3:
            guard !node.diskFull else { return }
            let seconds = 1 + random.uniform() * 8
            count("disk-full", "\(node.name)'s state directory for \(String(format: "%.1f", seconds)) s")
            try? node.peer.fillState()
            node.diskFull = true
            later(seconds, "disk freed \(node.name)") {
                try? node.peer.freeState()
                node.diskFull = false
            }
        case 4:
            let key = [1, 2, 5][pick(3)]
            guard let relay = relays[key], let (_, target) = relayPorts[key] else { return }
            let delay = 0.02 + random.uniform() * 0.4, seconds = 1 + random.uniform() * 8
            count("delay", "\(nodes[key / 3].name) → \(nodes[target].name): \(Int(delay * 1000)) ms a read for \(String(format: "%.1f", seconds)) s")
            relay.delay(delay)
            later(seconds, "no delay \(nodes[key / 3].name) → \(nodes[target].name)") { relay.delay(0) }
        case 5:
            // The wall clock stepped under a running daemon, forward or back, and set right 2-20 s
            // later, as NTP would (libfaketime reads the offset again each second).
            guard node.peer.isRunning else { return }
            let minutes = (1 + pick(120)) * (random.uniform() < 0.5 ? -1 : 1)
            let seconds = 2 + random.uniform() * 18
            let offset = String(format: "%+dm", minutes)
            count("clock-step-running", "\(node.name)'s wall clock \(offset) for \(String(format: "%.1f", seconds)) s")
            setClock(node, offset)
            later(seconds, "clock right \(node.name)") { [unowned self] in setClock(node, "+0") }
        case 6:
            // PipeWire killed under the call (WirePlumber and its bus go with it), back after a while.
            let node = nodes[pick(2)]
            guard let pipewire = node.pipewire else { return }
            let seconds = 0.5 + random.uniform() * 5
            count("pipewire-kill-9", "\(node.name)'s PipeWire, back after \(String(format: "%.1f", seconds)) s")
            if let pid = pipewire.pids["pipewire"] { kill(pid, SIGKILL) }
            pipewire.stop()
            node.pipewire = nil
            later(seconds, "PipeWire back \(node.name)") { [unowned self] in restartPipeWire(node) }
        case 7:
            // A LAN host's avahi-daemon stopped (SIGTERM: goodbyes go out) or killed, and started again.
            guard lan != nil else { return }
            let host = 3 + pick(2)
            let node = nodes[host], other = nodes[7 - host]
            guard let lanHost = node.lanHost, !node.avahiDown else { return }
            let graceful = random.uniform() < 0.5, seconds = 0.5 + random.uniform() * 5
            count("avahi-restart", "\(node.name)'s avahi-daemon \(graceful ? "stopped" : "killed"), back after \(String(format: "%.1f", seconds)) s")
            avahi.goingDown(node)
            if graceful { lanHost.stopAvahi() } else { lanHost.killAvahi() }
            node.avahiDown = true
            later(seconds, "avahi-daemon back on \(node.name)'s host") { [unowned self] in
                do {
                    try lanHost.startAvahi()
                    node.avahiDown = false
                    avahi.restarted(node, other: other, graceful: graceful)
                } catch {
                    violation("the harness could not start \(node.name)'s avahi-daemon again: \(error)")
                }
            }
        default:
            // A burst: the same peer frozen while another's link is cut (combinations are where
            // the defects were).
            guard node.peer.isRunning, !node.stopped else { return }
            count("burst", "\(node.name) frozen 2 s and its routes reset")
            node.peer.daemon.process.signal(SIGSTOP)
            node.stopped = true
            for key in [1, 2, 5] where relayPorts[key]!.target == index || key / 3 == index {
                relays[key]?.stop()
                reopenRelay(key)
            }
            let pid = node.peer.daemon.process.pid
            later(2, "SIGCONT \(node.name) (burst)") {
                if node.peer.daemon.process.pid == pid { node.peer.daemon.process.signal(SIGCONT) }
                node.stopped = false
            }
        }
    }

    private func restartPipeWire(_ node: Node) {
        guard node.pipewire == nil, let directory = node.pipewireDirectory else { return }
        do {
            node.pipewire = try PipeWireSession(directory: directory)
        } catch {
            violation("the harness could not start \(node.name)'s PipeWire again: \(error)")
        }
    }

    private func restart(_ node: Node, clockStep: String?) {
        guard !node.peer.isRunning else { return }
        do {
            try start(node, clockOffset: clockStep ?? "+0")
        } catch {
            violation("\(node.name) did not start again (disk full: \(node.diskFull)): \(error)")
        }
    }

    /// Starts the node's daemon (it must have ended) under libfaketime, its wall clock `clockOffset`
    /// from the machine's (the monotonic clock untouched), and its stream listener.
    private func start(_ node: Node, clockOffset: String) throws {
        setClock(node, clockOffset)
        try node.peer.restart(adding: ["LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                       "FAKETIME_TIMESTAMP_FILE": node.clockFile, "FAKETIME_CACHE_DURATION": "1",
                                       "FAKETIME_DONT_FAKE_MONOTONIC": "1"],
                              launcher: ["/usr/bin/env"])
        startListener(node)
    }

    /// Replaced whole (a rename), so libfaketime never reads half an offset.
    private func setClock(_ node: Node, _ offset: String) {
        try? (offset + "\n").write(toFile: node.clockFile, atomically: true, encoding: .utf8)
    }

    // MARK: Watching

    /// Transfer states (accepting every offer, as a person would), processes that ended on their
    /// own, and the daemons' RSS and fds.
    private func poll(sampling: Bool) {
        for (index, node) in nodes.enumerated() {
            if !node.peer.isRunning, !expectedExits.contains(node.peer.daemon.process.pid) {
                violation("\(node.name)'s peervoiced ended by itself, status \(node.peer.daemon.process.status ?? -1)")
                expectedExits.insert(node.peer.daemon.process.pid)
            }
            guard node.usable else { continue }
            if node.lanHost == nil, node.listener?.isRunning != true { startListener(node) }
            if sampling {
                let pid = node.peer.daemon.process.pid
                let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
                node.samples.append((pid, residentKiB(of: pid), fds))
            }
            guard let objects = try? node.watch.objects() else { continue }
            listed[index] = Set(objects.values.compactMap { $0.lookup("Id")?.string })
            for (path, properties) in objects {
                guard let id = properties.lookup("Id")?.string, let state = properties.lookup("State")?.string else { continue }
                var entry = seen[index]?[id] ?? SeenTransfer(state: state, destination: "")
                entry.state = state
                entry.destination = properties.lookup("Destination")?.string ?? entry.destination
                if Self.finals.contains(state) { entry.finals.insert(state) }
                seen[index, default: [:]][id] = entry
                if state == "waiting", properties.lookup("Direction")?.string == "incoming" {
                    try? node.watch.call("Accept", on: path)
                }
            }
            foldChanges(index, node)
        }
    }

    /// What the bus carried between polls: an end a client was told of counts as seen even when
    /// the service was killed before the next poll (and lists it no more after its restart).
    private func foldChanges(_ index: Int, _ node: Node) {
        let changes = node.watch.changes
        for change in changes.dropFirst(foldedChanges[index] ?? 0) {
            guard let id = change.id, let state = change.properties["State"]?.string, Self.finals.contains(state) else { continue }
            var entry = seen[index]?[id] ?? SeenTransfer(state: state, destination: "")
            entry.state = state
            if entry.finals.insert(state).inserted, !(listed[index]?.contains(id) ?? false) { figures.endsOnlySignalled += 1 }
            if let destination = change.properties["Destination"]?.string, !destination.isEmpty { entry.destination = destination }
            seen[index, default: [:]][id] = entry
        }
        foldedChanges[index] = changes.count
    }

    /// Everything accepted has come to an end the user can see.
    private func quiet() -> Bool {
        let received = receivedTags()
        let failed = Set(nodes.indices.flatMap { index in
            nodes[index].peer.client.signals("MessageFailed").map { "\(index) \($0.string(1))" } })
        let delivered = Set(nodes.indices.flatMap { index in
            nodes[index].peer.client.signals("MessageDelivered").map { "\(index) \($0.string(1))" } })
        // Received, and its sender told its user so; or failed.
        let messagesDone = messages.allSatisfy { message in
            message.error != nil || failed.contains("\(message.from) \(message.id)")
                || (received[message.tag(seed)] != nil && delivered.contains("\(message.from) \(message.id)"))
        }
        let transfersDone = transfers.allSatisfy { transfer in
            [transfer.from, transfer.to].allSatisfy { side in
                seen[side]?[transfer.id].map { view in
                    // The sender shows how it ended, also after a restart that came before the
                    // end reached the bus (shown again then).
                    side == transfer.from ? !view.finals.isEmpty
                        : Self.finals.contains(view.state) || !(listed[side]?.contains(transfer.id) ?? false)
                } ?? (side == transfer.from)
            }
        }
        return messagesDone && transfersDone && streams.allSatisfy { !$0.process.isRunning } && (call?.settled ?? true) && avahi.settled
    }

    /// Receiver's MessageReceived by tag: (receiver, sender id, message id, the bus name of the
    /// daemon's life that announced it) for each announcement.
    private func receivedTags() -> [String: [(receiver: Int, sender: String, id: String, life: String)]] {
        var tags: [String: [(receiver: Int, sender: String, id: String, life: String)]] = [:]
        for (index, node) in nodes.enumerated() {
            for signal in node.peer.client.signals("MessageReceived") {
                let text = signal.string(2)
                let tag = text.split(separator: " ", maxSplits: 4).prefix(4).joined(separator: " ")
                tags[tag, default: []].append((index, signal.string(0), signal.string(1), signal.sender))
            }
        }
        return tags
    }

    // MARK: Invariants

    private func check() {
        checkMessages()
        checkTransfers()
        checkStreams()
        checkResources()
    }

    private func checkMessages() {
        let received = receivedTags()
        var byTag: [String: SentMessage] = [:]
        for message in messages { byTag[message.tag(seed)] = message }
        for (index, node) in nodes.enumerated() {
            // Reported (delivered or failed) once per life of the sending daemon at most: again
            // only by a later life, killed before it noted its report written (seed 12).
            let reports = node.peer.client.signals("MessageFailed") + node.peer.client.signals("MessageDelivered")
            let failed = Set(node.peer.client.signals("MessageFailed").map { $0.string(1) })
            let delivered = Set(node.peer.client.signals("MessageDelivered").map { $0.string(1) })
            figures.failed += failed.count
            figures.delivered += delivered.count
            let byLife = Set(reports.map { "\($0.sender) \($0.string(1))" })
            if byLife.count != reports.count {
                violation("\(node.name) reported a message's outcome more than once in one life: \(reports.count) reports, "
                    + "\(byLife.count) messages and lives")
            }
            figures.reportedAgain += byLife.count - failed.union(delivered).count
            // Per-sender order on this receiver: first announcements in Send's order.
            var highest: [Int: Int] = [:]
            var announced: Set<String> = []
            for signal in node.peer.client.signals("MessageReceived") {
                let tag = signal.string(2).split(separator: " ", maxSplits: 4).prefix(4).joined(separator: " ")
                guard let message = byTag[tag] else {
                    violation("\(node.name) announced a message nobody sent: '\(tag)'")
                    continue
                }
                if message.to != index || signal.string(0) != nodes[message.from].peer.id {
                    violation("'\(tag)' announced by \(node.name) as from \(signal.string(0)): expected \(nodes[message.to].name) from \(nodes[message.from].peer.id)")
                }
                if let error = message.error, !error.contains("NoReply"), !error.contains("Timeout") {
                    violation("'\(tag)' (schedule step \(message.step)) was refused (\(error)) yet \(node.name) announced it")
                }
                guard announced.insert(tag).inserted else { continue }
                figures.received += 1
                if let last = highest[message.from], message.seq <= last {
                    violation("\(node.name) announced '\(tag)' (step \(message.step)) after #\(last) from the same sender: expected Send's order")
                }
                highest[message.from] = max(highest[message.from] ?? -1, message.seq)
            }
            for message in messages where message.from == index && message.error == nil {
                // At least once; again (same id) only by a later life of the receiver, killed
                // before it noted its announcement written to the bus (seed 12).
                let lives = received[message.tag(seed)]?.map(\.life) ?? []
                let ids = Set(received[message.tag(seed)]?.map(\.id) ?? [])
                let announcements = lives.count
                if Set(lives).count < lives.count {
                    violation("'\(message.tag(seed))' (schedule step \(message.step)) announced \(announcements) times by \(nodes[message.to].name) "
                        + "in \(Set(lives).count) lives: expected once per life at most")
                }
                if !ids.isSubset(of: [message.id]) {
                    violation("'\(message.tag(seed))' (schedule step \(message.step)) announced with ids \(ids.sorted()): expected \(message.id)")
                }
                figures.announcedAgain += max(announcements - 1, 0)
                if announcements == 0 && !failed.contains(message.id) {
                    violation("'\(message.tag(seed))' (id \(message.id), schedule step \(message.step)) accepted by Send but neither received by "
                        + "\(nodes[message.to].name) nor reported failed after the settle period; \(historyEntry(of: message))")
                }
                if announcements > 0 && failed.contains(message.id) {
                    violation("'\(message.tag(seed))' (id \(message.id), step \(message.step)) was received but its sender reported MessageFailed")
                }
                if delivered.contains(message.id) && announcements == 0 {
                    violation("'\(message.tag(seed))' reported delivered but never announced by \(nodes[message.to].name)")
                }
                if announcements > 0 && !delivered.contains(message.id) {
                    violation("'\(message.tag(seed))' (id \(message.id), step \(message.step)) was received but \(node.name) never "
                        + "reported it delivered after the settle period")
                }
            }
        }
    }

    /// Where the receiver's `History` has the message: stored but never announced, or not there.
    private func historyEntry(of message: SentMessage) -> String {
        let receiver = nodes[message.to]
        guard let history = try? receiver.peer.client.call("History", [Variant(nodes[message.from].peer.id), Variant(UInt32(10_000))]) else {
            return "\(receiver.name)'s History did not answer"
        }
        let entry = history[0].children.first { $0[0].string == message.id }
        return entry.map { "\(receiver.name)'s History holds it (status \($0[1].string ?? "?"))" } ?? "not in \(receiver.name)'s History"
    }

    private func checkTransfers() {
        for transfer in transfers {
            let sender = seen[transfer.from]?[transfer.id], receiver = seen[transfer.to]?[transfer.id]
            let label = "transfer \(transfer.id) \(nodes[transfer.from].name) → \(nodes[transfer.to].name) of '\((transfer.source as NSString).lastPathComponent)' (schedule step \(transfer.step))"
            // What landed: a transfer that completed just before its receiver was killed is not
            // listed after the restart, but its files are there.
            let landed = receiver.map { !$0.destination.isEmpty && compare(transfer.source, $0.destination) == nil } ?? false
            for (side, node, view) in [("sender", transfer.from, sender), ("receiver", transfer.to, receiver)] {
                guard let view else {
                    if side == "receiver" { violation("\(label): the receiver never showed it; expected an offer once the peers were back") }
                    continue
                }
                let stillListed = listed[node]?.contains(transfer.id) ?? false
                // A receiver that lost an offer or a transfer whose sender ended it has nothing
                // waiting: the sender's end is what the person sees.
                let senderEnded = sender.map { Self.finals.contains($0.state) && $0.state != "complete" } ?? false
                let lostButOver = side == "receiver" && senderEnded
                if !Self.finals.contains(view.state) && (stillListed || !(landed || view.finals.contains("complete") || lostButOver)) {
                    violation("\(label): the \(side) \(stillListed ? "still shows" : "last showed, then lost,") '\(view.state)' after the settle period "
                        + "(sender \(sender?.state ?? "-") \(sender?.finals.sorted() ?? []), receiver \(receiver?.state ?? "-") \(receiver?.finals.sorted() ?? []), "
                        + "landed: \(landed)): expected complete or failed")
                }
                if view.finals.count > 1 { violation("\(label): the \(side) showed several ends: \(view.finals.sorted())") }
                if side == "sender" && view.finals.isEmpty {
                    violation("\(label): the sender never showed how it ended (last '\(view.state)')")
                }
            }
            if sender?.finals.contains("complete") == true && receiver?.finals.contains("complete") != true && !landed {
                violation("\(label): complete at the sender, '\(receiver?.state ?? "nothing")' at the receiver, and the files did not land")
            }
            if receiver?.finals.contains("complete") == true || (landed && receiver?.finals.isEmpty == true) {
                figures.transfersComplete += 1
                let destination = receiver?.destination ?? ""
                if let difference = compare(transfer.source, destination) {
                    violation("\(label): complete but \(destination) differs from what was sent: \(difference)")
                } else {
                    figures.transferBytes += treeBytes(transfer.source)
                }
            } else if receiver?.finals.isEmpty == false {
                figures.transfersFailed += 1
            }
        }
    }

    /// nil when the trees (or files) at `source` and `destination` hold the same names and bytes.
    private func compare(_ source: String, _ destination: String) -> String? {
        let manager = FileManager.default
        var isFolder: ObjCBool = false
        guard manager.fileExists(atPath: destination, isDirectory: &isFolder) else { return "nothing at the destination" }
        if !isFolder.boolValue {
            return manager.contentsEqual(atPath: source, andPath: destination) ? nil : "the bytes differ"
        }
        let sent = Set(manager.subpaths(atPath: source) ?? []), landed = Set(manager.subpaths(atPath: destination) ?? [])
        guard sent == landed else { return "entries \(sent.sorted()) sent, \(landed.sorted()) landed" }
        for entry in sent where !manager.contentsEqual(atPath: source + "/" + entry, andPath: destination + "/" + entry) {
            return "'\(entry)' differs"
        }
        return nil
    }

    private func treeBytes(_ path: String) -> Int {
        let manager = FileManager.default
        let entries = (manager.subpaths(atPath: path) ?? []).map { path + "/" + $0 } + [path]
        return entries.reduce(0) { total, entry in
            let attributes = try? manager.attributesOfItem(atPath: entry)
            return total + ((attributes?[.type] as? FileAttributeType) == .typeRegular ? (attributes?[.size] as? Int ?? 0) : 0)
        }
    }

    private func checkStreams() {
        var unmatched: [Int: [Data]] = [:]
        for stream in streams {
            if stream.process.isRunning {
                violation("peervoicectl open \(nodes[stream.from].name) → \(nodes[stream.to].name) (schedule step \(stream.step)) still runs after the settle period")
            } else if stream.process.status == 0 {
                unmatched[stream.to, default: []].append(stream.data)
            } else if stream.process.log.contains("Rejected") || stream.process.log.contains("NotConnected") || stream.process.log.contains("not connected") {
                figures.streamsRefused += 1
            }
        }
        for (index, node) in nodes.enumerated() {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: node.streamsIn)) ?? []
            figures.streamsReset += files.filter { $0.hasSuffix(".reset") }.count
            for file in files where file.hasSuffix(".ok") {
                let path = node.streamsIn + "/" + file
                guard let data = FileManager.default.contents(atPath: path) else { continue }
                // The receiver's own daemon killed (-9) in the middle: its end of the app's socket
                // closes like a clean end, and nobody is left to say otherwise (README, App
                // channels). Such a stream ended at the kill.
                let life = Int(file.split(separator: ".")[1]) ?? -1
                let ended = (try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate]) as? Date
                if let killed = node.killedAt[life], let ended, ended.timeIntervalSince(killed) > -0.05,
                   !streams.contains(where: { $0.to == index && $0.data == data }) {
                    figures.streamsCutByKill += 1
                    continue
                }
                figures.streamsWhole += 1
                // A stream that ended cleanly holds exactly what one sender wrote to it, whole.
                let candidates = streams.filter { $0.to == index && $0.data == data }
                if candidates.isEmpty {
                    violation("\(node.name) read a stream to its clean end holding \(data.count) bytes that no sender wrote whole "
                        + "(a truncated or corrupted stream that looked whole)")
                }
                if let position = unmatched[index]?.firstIndex(of: data) { unmatched[index]?.remove(at: position) }
            }
        }
        // A sender whose `open` said all went well: its bytes arrived whole.
        for (index, lost) in unmatched where !lost.isEmpty {
            violation("\(lost.count) stream(s) to \(nodes[index].name) ended well at the sender but never arrived whole")
        }
    }

    /// RSS and fds between the first and last third of the faults, per daemon (generous bounds:
    /// restarts reset them, so the medians are compared).
    private func checkResources() {
        for node in nodes where node.samples.count >= 9 {
            let third = node.samples.count / 3
            func median(_ values: [Int]) -> Int { values.sorted()[values.count / 2] }
            let rssFirst = median(node.samples.prefix(third).map(\.rssKiB)), rssLast = median(node.samples.suffix(third).map(\.rssKiB))
            let fdsFirst = median(node.samples.prefix(third).map(\.fds)), fdsLast = median(node.samples.suffix(third).map(\.fds))
            say("chaos: \(node.name): RSS median \(rssFirst) → \(rssLast) KiB, fds \(fdsFirst) → \(fdsLast) (first → last third, \(node.samples.count) samples)")
            if rssLast > rssFirst * 2 + 32_768 {
                violation("\(node.name)'s RSS grew from \(rssFirst) to \(rssLast) KiB (median, first to last third): expected under 2× + 32 MiB")
            }
            if fdsLast > fdsFirst + 64 {
                violation("\(node.name)'s open fds grew from \(fdsFirst) to \(fdsLast) (median, first to last third): expected under +64")
            }
        }
    }
}

extension SentMessage {
    /// The first four words of its text: `chaos SEED FROM>TO #SEQ`.
    func tag(_ seed: UInt64) -> String { "chaos \(seed) \(from)>\(to) #\(seq)" }
}
