import PeerVoiceCore
import SeededRandom

/// One simulated computer: its disk (which outlives crashes), its address, its person, and the
/// service while it runs. The service is the simulation's model of the daemon's control plane
/// (`PeerConnections`, `PairingPrompts`, `PeerRegistry`, `MessageDelivery`) over the core's
/// parts: `MessageStore` and `TextDelivery` on the simulated disk, `PeerDirectory`,
/// `InstanceFile`, `PairingExchange`, `LinkTieBreak`, `PairingRateLimiter`, and links
/// (`SimulatedLink`) on the simulated network.
public final class SimulatedPeer {
    /// How this computer's person answers pairing prompts.
    public struct Person {
        public var accepts = 0.9
        public var ignores = 0.03
        public var answerDelay: ClosedRange<Duration> = .milliseconds(300)...(.seconds(8))
    }

    public let index: Int
    public let name: String
    public let disk: SimulatedDisk
    public private(set) var address: String
    public var host: String { SimulatedNetwork.host(of: address) }
    public private(set) var identity: StaticIdentity
    public private(set) var crypto: DeterministicCrypto
    /// Bumped by a reinstall (a new key, an empty disk).
    public private(set) var installation = 0
    public var person = Person()
    /// Its service's bus writes each signal as it is emitted (`Simulation.run`).
    var signalsWrittenAtOnce = false
    private let scheduler: Scheduler
    private let network: SimulatedNetwork
    private let history: History
    private var random: SplitMix64
    private let seed: UInt64
    /// The service while it runs.
    private(set) var service: SimulatedService?
    private var addressCounter: Int

    init(index: Int, seed: UInt64, scheduler: Scheduler, network: SimulatedNetwork, history: History) {
        self.index = index
        self.seed = seed
        name = "peer\(index)"
        self.scheduler = scheduler
        self.network = network
        self.history = history
        random = SplitMix64(seed: Seeds.derive(seed, 1))
        disk = SimulatedDisk(seed: Seeds.derive(seed, 2))
        crypto = DeterministicCrypto(seed: Seeds.derive(seed, 3))
        identity = StaticIdentity.generate(using: crypto)
        addressCounter = index + 1
        address = "ip:10.0.\(index).\(index + 1):47800"
    }

    public var id: PeerID { PeerID(key: PublicKey(bytes: identity.publicKey)!, using: crypto) }
    public var isRunning: Bool { service?.isAlive ?? false }

    // MARK: Life

    /// Starts the service from what the disk holds. False if it could not start (the disk refused).
    @discardableResult
    public func start() -> Bool {
        guard service == nil else { return true }
        disk.restart()
        do {
            let service = try SimulatedService(peer: self, scheduler: scheduler, network: network, history: history,
                                               seed: Seeds.derive(seed, 1000 + UInt64(scheduler.eventsRun)))
            self.service = service
            service.start()
            return true
        } catch where Self.isFullOrReadOnly(error) {
            // As the daemon would: it exits with the error, and is started again later.
            history.note("\(name) could not start: \(error)")
            return false
        } catch {
            history.violation("\(name) could not start from its disk: \(error)")
            return false
        }
    }

    private static func isFullOrReadOnly(_ error: any Error) -> Bool {
        let storageError: StorageError? = switch error {
        case let error as StorageError: error
        case MessageStoreError.io(let error): error
        default: nil
        }
        return storageError.map { $0.kind == .noSpace || $0.kind == .readOnly } ?? false
    }

    public enum CrashKind: String, Sendable {
        /// kill -9: what was written stays (the kernel has it); the kernel resets the streams.
        case kill
        /// Power lost: what was not synced is lost, in part; the peers hear only silence.
        case powerLoss
    }

    public func crash(_ kind: CrashKind) {
        guard let service else { return }
        self.service = nil
        service.die()
        // A stop point not reached dies with the machine.
        disk.restart()
        switch kind {
        case .kill:
            network.resetStreams(of: host)
            // Announced perhaps, the note that the signal was written not yet: announced again.
            history.killed(self, announcementsNotNoted: service.store.unannounced().map(\.message.id),
                           outcomesNotNoted: service.store.unannouncedOutcomes().map(\.message.id),
                           transferEndsNotNoted: service.transfers.endsNotNotedShown)
            // Memory held what the disk refused, or a RemovePeer the disk stopped half-way (the
            // next start finishes it, reporting its failures again).
            if service.store.holdsUnrecordedChanges || !service.store.interruptedRemovals.isEmpty
                || service.transfers.holdsUnsavedRecords {
                history.lostState(self)
            }
        case .powerLoss:
            network.abandonStreams(of: host)
            disk.crash()
            history.lostState(self)
        }
        history.note("\(name) crashed (\(kind.rawValue))")
    }

    /// The service stopped inside a call (the disk's stop point): as a power loss.
    func stoppedInsideACall() {
        guard let service else { return }
        self.service = nil
        service.die()
        network.abandonStreams(of: host)
        history.lostState(self)
        history.note("\(name) stopped between two writes")
    }

    /// A new installation: a new key and instance, an empty disk; same name and address.
    public func reinstall() {
        crash(.kill)
        if disk.isStopped { stoppedInsideACall() }
        disk.restart()
        history.reinstalled(self)
        // A new installation on a working disk (a person reinstalling fixes that first).
        disk.isReadOnly = false
        disk.capacityBytes = nil
        disk.wipe()
        installation += 1
        crypto = DeterministicCrypto(seed: Seeds.derive(seed, 100 + UInt64(installation)))
        identity = StaticIdentity.generate(using: crypto)
    }

    /// The computer moves to a new address (DHCP): its streams die silently; after a while the
    /// LAN tells the peers that know it where it is now.
    public func moveAddress() {
        service?.stopListening()
        network.abandonStreams(of: host)
        addressCounter += 100
        address = "ip:10.0.\(index).\(addressCounter % 250 + 1):47800"
        service?.addressChanged()
    }

    func draw() -> Double { random.uniform() }
    func drawDuration(_ range: ClosedRange<Duration>) -> Duration {
        range.lowerBound + (range.upperBound - range.lowerBound) * random.uniform()
    }
}

extension SimulatedDisk {
    /// Everything gone (a reinstall).
    func wipe() {
        crash()
        for path in (try? list("/state")) ?? [] where !isDirectory("/state/" + path) { try? remove("/state/" + path) }
        for path in (try? list("/state/messages")) ?? [] { try? remove("/state/messages/" + path) }
        for path in (try? list(SimulatedService.transfersDirectory)) ?? [] { try? remove(SimulatedService.transfersDirectory + "/" + path) }
        try? syncDirectory(SimulatedService.transfersDirectory)
        try? syncDirectory("/state/messages")
        try? syncDirectory("/state")
    }
}
