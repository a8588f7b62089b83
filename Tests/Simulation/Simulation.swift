import Foundation
import PeerVoiceCore
import SeededRandom

/// One run of the simulation: two to four peers, a schedule of what people and faults do to
/// them (drawn from the seed), then a healed network, then the end checks. A run is a pure
/// function of its seed and of which schedule steps it keeps, so a failing seed replays exactly
/// and a smaller schedule can be searched for (`Shrinker`).
public struct Simulation {
    /// One step of the schedule.
    public enum Action: Equatable, Sendable {
        case send(from: Int, to: Int, bytes: Int)
        case connect(from: Int, to: Int)
        case disconnect(from: Int, to: Int)
        case remove(from: Int, to: Int)
        case crash(Int, SimulatedPeer.CrashKind)
        /// The machine stops between two writes: at the `changes`-th disk change from now.
        case stopBetweenWrites(Int, changes: Int)
        case restart(Int)
        case reinstall(Int)
        case partition(Int, Int)
        case heal(Int, Int)
        case resetAStream(pick: UInt64)
        case moveAddress(Int)
        case linkFaults(Bool)
        case diskFull(Int, Bool)
        case readOnly(Int, Bool)
        case stepWallClock(seconds: Int)
        /// `SendFiles` of files of these sizes (content drawn from the seed), at a rate drawn too.
        case sendFiles(from: Int, to: Int, sizes: [Int], bytesPerSecond: Int)
        case cancelTransfer(Int, pick: UInt64)
        /// An app opens a stream and writes this many bytes (drawn from the seed) to the other's app.
        case openAppStream(from: Int, to: Int, bytes: Int)
    }

    public struct Step: Equatable, Sendable {
        public let time: Duration
        public let action: Action
    }

    public let seed: UInt64
    public let peerCount: Int
    public let schedule: [Step]
    /// How long the schedule runs before the network heals.
    public let activeTime: Duration
    /// How long the healed network has to deliver everything.
    public static let healTime: Duration = .seconds(150)

    /// The schedule `seed` draws: who sends what to whom, and which faults when.
    public init(seed: UInt64) {
        self.seed = seed
        var random = SplitMix64(seed: seed)
        peerCount = 2 + Int(random.next() % 3)
        activeTime = .seconds(30 + Int(random.next() % 90))
        var steps: [Step] = []
        // Everyone pairs with everyone at the start, and tries again now and then (a pairing
        // may fail: a refusal, a fault).
        for a in 0..<peerCount {
            for b in (a + 1)..<peerCount {
                steps.append(Step(time: .milliseconds(Int(random.next() % 2000)), action: .connect(from: a, to: b)))
                for _ in 0..<(1 + random.next() % 4) {
                    let time = Duration.milliseconds(Int(random.next() % UInt64(activeTime.components.seconds * 1000)))
                    steps.append(Step(time: time, action: random.next() % 2 == 0 ? .connect(from: a, to: b) : .connect(from: b, to: a)))
                }
            }
        }
        let count = 20 + Int(random.next() % 80)
        let faultiness = random.uniform()
        for _ in 0..<count {
            let time = Duration.milliseconds(Int(random.next() % UInt64(activeTime.components.seconds * 1000)))
            let a = Int(random.next() % UInt64(peerCount))
            var b = Int(random.next() % UInt64(peerCount - 1))
            if b >= a { b += 1 }
            let roll = random.uniform()
            let action: Action
            if roll > faultiness * 0.6 {
                let burst = 1 + Int(random.next() % 6)
                for k in 0..<burst {
                    steps.append(Step(time: time + .milliseconds(k * Int(random.next() % 50)),
                                      action: .send(from: a, to: b, bytes: 1 + Int(random.next() % 120))))
                }
                continue
            }
            switch random.next() % 17 {
            case 0, 1: action = .crash(a, random.next() % 2 == 0 ? .kill : .powerLoss)
            case 2, 3: action = .stopBetweenWrites(a, changes: Int(random.next() % 12))
            case 4: action = .reinstall(a)
            case 5, 6: action = .partition(a, b)
            case 7: action = .resetAStream(pick: random.next())
            case 8: action = .moveAddress(a)
            case 9: action = .linkFaults(true)
            case 10: action = .diskFull(a, true)
            case 11: action = .readOnly(a, true)
            case 12: action = .disconnect(from: a, to: b)
            case 13: action = .remove(from: a, to: b)
            case 14: action = .connect(from: a, to: b)
            case 15: action = .stepWallClock(seconds: Int(random.next() % 7200))
            default: action = .connect(from: b, to: a)
            }
            steps.append(Step(time: time, action: action))
            // What undoes a fault comes a while later (a shrink may drop it; the healing phase undoes all).
            let later = time + .milliseconds(200 + Int(random.next() % 20_000))
            switch action {
            case .crash(let n, _), .stopBetweenWrites(let n, _): steps.append(Step(time: later, action: .restart(n)))
            case .partition(let x, let y): steps.append(Step(time: later, action: .heal(x, y)))
            case .linkFaults: steps.append(Step(time: later, action: .linkFaults(false)))
            case .diskFull(let n, _): steps.append(Step(time: later, action: .diskFull(n, false)))
            case .readOnly(let n, _): steps.append(Step(time: later, action: .readOnly(n, false)))
            default: break
            }
        }
        // Transfers, drawn from a stream of their own and listed after the steps above, which
        // stay what they were before transfers were simulated (the shrunk schedules of the
        // regression tests keep their indices): 1-3 files of 1 KiB to 4 MiB (log-uniform) each,
        // sent at 64 KiB/s to 4 MiB/s so that faults land in the middle; now and then a person
        // cancels one.
        var transferSteps: [Step] = []
        var transferRandom = SplitMix64(seed: Seeds.derive(seed, 5))
        for _ in 0..<(1 + transferRandom.next() % 4) {
            let time = Duration.milliseconds(Int(transferRandom.next() % UInt64(activeTime.components.seconds * 1000)))
            let a = Int(transferRandom.next() % UInt64(peerCount))
            var b = Int(transferRandom.next() % UInt64(peerCount - 1))
            if b >= a { b += 1 }
            let sizes = (0..<(1 + Int(transferRandom.next() % 3))).map { _ in Int(1024 * pow(4096, transferRandom.uniform())) }
            let rate = Int(65536 * pow(64, transferRandom.uniform()))
            transferSteps.append(Step(time: time, action: .sendFiles(from: a, to: b, sizes: sizes, bytesPerSecond: rate)))
            if transferRandom.next() % 5 == 0 {
                let cancel = Action.cancelTransfer(Int(transferRandom.next() % UInt64(peerCount)), pick: transferRandom.next())
                transferSteps.append(Step(time: time + .milliseconds(Int(transferRandom.next() % 20_000)), action: cancel))
            }
        }
        // App streams, from a stream of the seed of their own too, listed last: 0-3 of 1 KiB to 1 MiB.
        var streamSteps: [Step] = []
        var streamRandom = SplitMix64(seed: Seeds.derive(seed, 8))
        for _ in 0..<(streamRandom.next() % 4) {
            let time = Duration.milliseconds(Int(streamRandom.next() % UInt64(activeTime.components.seconds * 1000)))
            let a = Int(streamRandom.next() % UInt64(peerCount))
            var b = Int(streamRandom.next() % UInt64(peerCount - 1))
            if b >= a { b += 1 }
            streamSteps.append(Step(time: time, action: .openAppStream(from: a, to: b, bytes: Int(1024 * pow(1024, streamRandom.uniform())))))
        }
        func inOrder(_ steps: [Step]) -> [Step] {
            steps.enumerated().sorted { ($0.element.time, $0.offset) < ($1.element.time, $1.offset) }.map(\.element)
        }
        schedule = inOrder(steps) + inOrder(transferSteps) + inOrder(streamSteps)
    }

    /// What a run found.
    public struct Outcome {
        public let violations: [String]
        public let events: Int
        public let simulatedTime: Duration
        public let accepted: Int
        public let received: Int
        public let pairings: Int
        public let transfersSent: Int
        public let transfersCompleted: Int
        public let bytesCompleted: UInt64
        public let appStreamsOpened: Int
        public let appStreamsWhole: Int
        public let log: [String]
        public var failed: Bool { !violations.isEmpty }
    }

    /// Runs the schedule, keeping only the steps in `keep` (all if nil); `fullLog` keeps every
    /// line of the log, not only the last few hundred. `signalsWrittenAtOnce`: the model before
    /// the bus wrote signals a moment late (`SimulatedService.emitted`), under which a seed found
    /// before it still runs as it was found.
    public func run(keeping keep: Set<Int>? = nil, fullLog: Bool = false, signalsWrittenAtOnce: Bool = false) -> Outcome {
        let world = World(seed: seed, peerCount: peerCount, fullLog: fullLog, signalsWrittenAtOnce: signalsWrittenAtOnce)
        for (index, step) in schedule.enumerated() where keep?.contains(index) ?? true {
            world.scheduler.after(step.time) { world.perform(step.action) }
        }
        world.run(until: activeTime)
        if !world.history.hasFailed { world.heal(for: Self.healTime) }
        if !world.history.hasFailed { world.finish() }
        return Outcome(violations: world.history.violations, events: world.scheduler.eventsRun,
                       simulatedTime: world.scheduler.now, accepted: world.history.accepted,
                       received: world.history.received, pairings: world.history.pairings,
                       transfersSent: world.history.transfersSent, transfersCompleted: world.history.transfersCompleted,
                       bytesCompleted: world.history.bytesCompleted, appStreamsOpened: world.history.appStreamsOpened,
                       appStreamsWhole: world.history.appStreamsWhole, log: world.history.log)
    }

    public static func describe(_ action: Action) -> String {
        switch action {
        case let .send(from, to, bytes): "peer\(from) sends \(bytes) bytes to peer\(to)"
        case let .connect(from, to): "peer\(from) connects to peer\(to)'s address"
        case let .disconnect(from, to): "peer\(from) disconnects peer\(to)"
        case let .remove(from, to): "peer\(from) removes peer\(to)"
        case let .crash(n, kind): "peer\(n) crashes (\(kind.rawValue))"
        case let .stopBetweenWrites(n, changes): "peer\(n) stops at its \(changes)th disk change from now"
        case let .restart(n): "peer\(n) restarts"
        case let .reinstall(n): "peer\(n) is reinstalled (new key, same name)"
        case let .partition(a, b): "peer\(a) and peer\(b) are partitioned"
        case let .heal(a, b): "the partition of peer\(a) and peer\(b) heals"
        case let .resetAStream(pick): "one stream is reset (\(pick % 1000))"
        case let .moveAddress(n): "peer\(n) gets a new address"
        case let .linkFaults(on): on ? "records are corrupted, duplicated and reordered" : "records pass unharmed"
        case let .diskFull(n, on): on ? "peer\(n)'s disk is full" : "peer\(n)'s disk has space"
        case let .readOnly(n, on): on ? "peer\(n)'s state directory is read-only" : "peer\(n)'s state directory is writable"
        case let .stepWallClock(seconds): "the wall clock steps \(seconds) s forward"
        case let .sendFiles(from, to, sizes, rate): "peer\(from) sends files of \(sizes) bytes to peer\(to) at \(rate) B/s"
        case let .cancelTransfer(n, pick): "peer\(n)'s person cancels a transfer (\(pick % 1000))"
        case let .openAppStream(from, to, bytes): "peer\(from)'s app streams \(bytes) bytes to peer\(to)'s"
        }
    }
}

/// The simulated world of one run: clock, network, peers, history.
final class World {
    let scheduler = Scheduler()
    let network: SimulatedNetwork
    let history: History
    let peers: [SimulatedPeer]
    private var contentRandom: SplitMix64
    private var contentCounter = 0

    init(seed: UInt64, peerCount: Int, fullLog: Bool, signalsWrittenAtOnce: Bool) {
        contentRandom = SplitMix64(seed: Seeds.derive(seed, 6))
        network = SimulatedNetwork(scheduler: scheduler, seed: Seeds.derive(seed, 1))
        history = History(scheduler: scheduler, keepsFullLog: fullLog)
        var peers: [SimulatedPeer] = []
        for index in 0..<peerCount {
            peers.append(SimulatedPeer(index: index, seed: Seeds.derive(seed, 10 + UInt64(index)),
                                       scheduler: scheduler, network: network, history: history))
        }
        self.peers = peers
        for peer in peers { peer.signalsWrittenAtOnce = signalsWrittenAtOnce }
        if fullLog {
            for peer in peers { peer.disk.trace = { [history] in history.note("\(peer.name) \($0)") } }
        }
        for peer in peers { peer.start() }
    }

    /// Runs events until `time`, checking the bounds after each.
    func run(until time: Duration) {
        while !history.hasFailed, scheduler.runNext(until: time) { checkBounds() }
        scheduler.advance(to: time)
    }

    func perform(_ action: Simulation.Action) {
        history.note(Simulation.describe(action))
        switch action {
        case let .send(from, to, bytes):
            guard let service = peers[from].service, let target = target(of: service, node: to) else { return }
            service.send(String(repeating: "x", count: max(1, bytes)), to: target)
        case let .connect(from, to):
            peers[from].service?.connect(toAddress: peers[to].address)
        case let .disconnect(from, to):
            guard let service = peers[from].service, let target = target(of: service, node: to) else { return }
            service.disconnect(target)
        case let .remove(from, to):
            guard let service = peers[from].service, let target = target(of: service, node: to) else { return }
            service.removePeer(target)
        case let .crash(n, kind):
            peers[n].crash(kind)
        case let .stopBetweenWrites(n, changes):
            guard peers[n].isRunning else { return }
            peers[n].disk.stop(afterOperations: changes)
        case let .restart(n):
            if peers[n].disk.isStopped { peers[n].stoppedInsideACall() }
            peers[n].start()
        case let .reinstall(n):
            peers[n].reinstall()
            peers[n].start()
        case let .partition(a, b):
            network.partition(peers[a].host, peers[b].host)
        case let .heal(a, b):
            network.heal(peers[a].host, peers[b].host)
        case let .resetAStream(pick):
            network.resetOneStream(pick: pick)
        case let .moveAddress(n):
            peers[n].moveAddress()
            announceAddress(of: n)
        case let .linkFaults(on):
            var faults = SimulatedNetwork.Faults()
            if on { faults.corrupt = 0.02; faults.duplicate = 0.02; faults.reorder = 0.02 }
            network.faults = faults
        case let .diskFull(n, on):
            peers[n].disk.capacityBytes = on ? peers[n].disk.usedBytes + 300 : nil
        case let .readOnly(n, on):
            peers[n].disk.isReadOnly = on
        case let .stepWallClock(seconds):
            scheduler.stepWallClock(by: UInt64(seconds) * 1000)
        case let .sendFiles(from, to, sizes, rate):
            guard let service = peers[from].service, let target = target(of: service, node: to) else { return }
            let files = sizes.enumerated().map { index, size in
                (name: "file-\(contentCounter)-\(index).bin", bytes: content(bytes: size))
            }
            contentCounter += 1
            service.sendFiles(files, to: target, bytesPerSecond: Double(rate))
        case let .cancelTransfer(n, pick):
            peers[n].service?.cancelTransfer(pick: pick)
        case let .openAppStream(from, to, count):
            guard let service = peers[from].service, let target = target(of: service, node: to) else { return }
            contentCounter += 1
            let bytes = withUnsafeBytes(of: contentCounter.littleEndian) { Array($0) } + content(bytes: count)
            if service.openAppStream(to: target, key: contentCounter, bytes: bytes) {
                history.appStreamOpened(contentCounter, from: peers[from], to: target, bytes: bytes)
            }
        }
    }

    /// A file's content, drawn from the seed.
    private func content(bytes count: Int) -> [UInt8] {
        var words: [UInt64] = []
        words.reserveCapacity(count / 8 + 1)
        for _ in 0...(count / 8) { words.append(contentRandom.next()) }
        return words.withUnsafeBytes { Array($0.prefix(count)) }
    }

    /// Which of `service`'s known peers the workload means by node `node`: its current key if
    /// known there, else the key it had before a reinstall.
    private func target(of service: SimulatedService, node: Int) -> PeerID? {
        if service.record(peers[node].id) != nil { return peers[node].id }
        return service.knownPeerIDs.first { service.record($0)?.name == peers[node].name }
    }

    /// The LAN tells the peers that know `n` where it is now (a presence advertisement).
    private func announceAddress(of n: Int) {
        let moved = peers[n]
        scheduler.after(.seconds(1)) { [self] in
            for peer in peers where peer !== moved { peer.service?.peerAppeared(moved.id, at: moved.address) }
        }
    }

    /// Every fault undone, every peer up, every person accepting; people connect to the peers
    /// they have messages for, as someone waiting for a reply would, and write to each other.
    func heal(for duration: Duration) {
        history.note("the network heals")
        network.healAll()
        network.faults = SimulatedNetwork.Faults()
        for peer in peers {
            peer.disk.capacityBytes = nil
            peer.disk.isReadOnly = false
            peer.person = SimulatedPeer.Person(accepts: 1, ignores: 0, answerDelay: .milliseconds(100)...(.seconds(2)))
            if peer.disk.isStopped { peer.stoppedInsideACall() }
            peer.disk.restart()  // and no stop point left armed
            peer.start()
            peer.service?.perform { peer.service?.transfers.answerEverythingWaiting() }
        }
        for n in peers.indices { announceAddress(of: n) }
        // Whoever is not paired with someone pairs now.
        for peer in peers {
            for other in peers where other !== peer && peer.service?.record(other.id)?.paired != true {
                peer.service?.connect(toAddress: other.address)
            }
        }
        // Once the pairings had time, everyone writes to everyone it is paired with: every seed
        // checks delivery, even one whose schedule sent nothing that was accepted.
        scheduler.after(.seconds(30)) { [self] in
            for peer in peers {
                for other in peers where other !== peer && peer.service?.record(other.id)?.paired == true {
                    perform(.send(from: peer.index, to: other.index, bytes: 20))
                }
            }
        }
        let end = scheduler.now + duration
        var round = scheduler.now
        while !history.hasFailed, round < end {
            for peer in peers { peer.service?.connectToPeersWithMessagesWaiting() }
            round += .seconds(10)
            run(until: min(round, end))
        }
    }

    /// The end: nothing may be stuck, nothing may wait for the disk; then a week passes and what
    /// could not be delivered (to a reinstalled key) must be reported failed.
    func finish() {
        let current = Set(peers.map(\.id))
        history.checkStuck(currentPeers: current)
        checkTransfersEnded(currentPeers: current)
        for peer in peers {
            guard let service = peer.service else { history.violation("\(peer.name) is not running at the end"); continue }
            if service.delivery.waitingForDisk > 0 {
                history.violation("\(peer.name): \(service.delivery.waitingForDisk) confirmations still wait for the disk")
            }
            if service.promptCount > 0 { history.violation("\(peer.name): a pairing prompt is still open at the end") }
            for (other, _) in service.openLinks {
                guard let otherPeer = peers.first(where: { $0.id == other }), let otherService = otherPeer.service else { continue }
                if otherService.record(peer.id)?.paired != true {
                    history.violation("\(peer.name) has a link to \(otherPeer.name), which does not have it paired")
                }
            }
        }
        scheduler.stepWallClock(by: 8 * 24 * 3600 * 1000)
        for peer in peers { peer.service?.expireNow() }
        run(until: scheduler.now + .seconds(5))
        history.finish(currentPeers: current)
    }

    /// After the healing every transfer is over at both ends, unless the other end cannot be
    /// reached any more (its key was reinstalled away). A receiver left with a transfer its
    /// sender no longer has is a violation too (seeds 119 and 134: the sender removed the peer).
    private func checkTransfersEnded(currentPeers: Set<PeerID>) {
        for peer in peers {
            guard let transfers = peer.service?.transfers else { continue }
            for transfer in transfers.unfinished {
                guard let ends = history.transferEnds(transfer.id), currentPeers.contains(ends.sender),
                      currentPeers.contains(ends.receiver) else { continue }
                let other = peers.first { $0.id == transfer.peer }?.service?.transfers.transfers[transfer.id]
                history.violation("\(peer.name): transfer \(transfer.id.hex.prefix(8)) (\(transfer.direction.rawValue)) is still "
                                  + "\(transfer.state.rawValue) after the healing; "
                                  + (other != nil ? "the other side has it too" : "the other side no longer has it"))
            }
        }
    }

    private var checkedChanges: [Int: Int] = [:]

    /// The app takes what arrives at once: nothing may stay buffered; what waits for credit is
    /// at most one message and one chunk per stream. Every 32 events (it walks the streams).
    private func checkChannelBounds(_ service: SimulatedService) {
        let name = service.peer.name
        for channels in service.linkChannels {
            if channels.bufferedBytes > 0 { history.violation("\(name): \(channels.bufferedBytes) channel bytes buffered") }
            if channels.waitingBytes > channels.streamCount * 2 * (ChannelWire.maxDataBytes + 64) {
                history.violation("\(name): \(channels.waitingBytes) channel bytes wait for credit on \(channels.streamCount) streams")
            }
        }
        if service.transfers.streamCount > 64 { history.violation("\(name): \(service.transfers.streamCount) transfer streams") }
    }

    private func checkBounds() {
        if scheduler.pendingEvents > 200_000 { history.violation("\(scheduler.pendingEvents) events pending: something grows without bound") }
        for peer in peers {
            guard let service = peer.service else { continue }
            if service.delivery.waitingForDisk > 50_000 {
                history.violation("\(peer.name): \(service.delivery.waitingForDisk) confirmations wait for the disk")
            }
            if service.pendingLinkCount > 32 { history.violation("\(peer.name): \(service.pendingLinkCount) links in their handshake") }
            if service.promptCount > max(1, service.peerCount) { history.violation("\(peer.name): more prompts than peers") }
            if scheduler.eventsRun % 32 == 0 { checkChannelBounds(service) }
            // Compaction keeps a journal under twice its live contents (history window, marks,
            // queued messages) plus slack: a generous bound per peer and per queued message.
            // Measured every 64 disk changes (it costs a walk over the files).
            guard peer.disk.changes >= checkedChanges[peer.index, default: 0] + 64 else { continue }
            checkedChanges[peer.index] = peer.disk.changes
            let journalBytes = peer.disk.bytes(under: SimulatedService.messagesDirectory)
            let bound = (service.peerCount + 2) * 64 * 1024 + 600 * service.queuedMessages
            if journalBytes > bound {
                history.violation("\(peer.name): its journals hold \(journalBytes) bytes (bound \(bound)): they grow without bound")
            }
        }
    }
}
