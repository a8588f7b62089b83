import PeerVoiceCore
import SeededRandom

/// The service of one simulated peer while it runs: the simulation's model of the daemon's
/// control plane (see `SimulatedPeer`). Every entry point ends by handing the store's writes to
/// the simulated sync (`syncWrites`) and by dying at once if the disk stopped inside it.
final class SimulatedService {
    /// A known peer (the daemon's `Peer`).
    final class Record {
        let id: PeerID
        let key: PublicKey
        var name: String
        var paired: Bool
        /// Routes, most recently used last.
        var routes: [String]
        var candidates: [String] = []
        var stayDisconnected = false
        var instance: InstanceID?
        var link: SimulatedLink?
        var waiters: [(Result<PeerID, ServiceError>) -> Void] = []

        init(id: PeerID, key: PublicKey, name: String, paired: Bool, routes: [String]) {
            self.id = id
            self.key = key
            self.name = name
            self.paired = paired
            self.routes = routes
        }

        var dialOrder: [String] { Array(routes.reversed()) + candidates.filter { !routes.contains($0) } }
    }

    enum DialTarget: Equatable {
        case peer(PeerID)
        case contact(String)
    }

    private struct PendingLink {
        let link: SimulatedLink
        let dialled: DialTarget?
        var dial: Dial?
        var peer: PeerID?
        var route: String?
    }

    /// A dial of a known peer's routes, in turn.
    final class Dial {
        let address: String
        let remaining: [String]
        init(address: String, remaining: [String]) {
            self.address = address
            self.remaining = remaining
        }
    }

    private struct Prompt {
        let link: SimulatedLink
        let timeout: Scheduler.Timer
    }

    static let messagesDirectory = "/state/messages"
    static let transfersDirectory = "/state/transfers"
    static let firstRedial: Duration = .milliseconds(250)
    static let maxRedial: Duration = .seconds(5)
    static let pairingWindow: Duration = .seconds(60)
    static let stallCheck: Duration = .milliseconds(500)
    static let expiryCheck: Duration = .seconds(60)
    /// Small history and compaction slack, so compactions (and crashes inside them) are frequent.
    static let limits = MessageStoreLimits(historyPerPeer: 40, compactionSlackBytes: 2048)

    unowned let peer: SimulatedPeer
    private let scheduler: Scheduler
    private let network: SimulatedNetwork
    private let history: History
    private var random: SplitMix64
    let instance: InstanceID
    let store: MessageStore
    private(set) var delivery: TextDelivery<SimulatedLink>!
    private let directory: PeerDirectory
    private(set) var peers: [PeerID: Record] = [:]
    private var contacts: [String: [(Result<PeerID, ServiceError>) -> Void]] = [:]
    private var contactDials: Set<String> = []
    private var pendingLinks: [Int: PendingLink] = [:]
    private var linkOwners: [Int: PeerID] = [:]
    private var dials: [PeerID: Dial] = [:]
    private var redials: [PeerID: (backoff: Duration, timer: Scheduler.Timer?)] = [:]
    private var prompts: [PeerID: Prompt] = [:]
    private var limiter = PairingRateLimiter()
    /// Each open link's app channels, by link id.
    private var channels: [Int: SimulatedChannels] = [:]
    private(set) var transfers: SimulatedTransfers!
    private(set) var appStreams: SimulatedAppStreams!
    private var syncing = false
    private(set) var isAlive = true
    /// The bus's model (`tell`): what the person is told (signals) not yet written, what waits
    /// for them, and whether a write is on its way.
    private var unwritten: [() -> Void] = []
    private var waitingForTheBus: [() -> Void] = []
    private var busWriteScheduled = false
    /// The bus's delays: drawn apart, so they change no other draw of the seed.
    private var busRandom: SplitMix64

    init(peer: SimulatedPeer, scheduler: Scheduler, network: SimulatedNetwork, history: History, seed: UInt64) throws {
        self.peer = peer
        self.scheduler = scheduler
        self.network = network
        self.history = history
        random = SplitMix64(seed: seed)
        busRandom = SplitMix64(seed: Seeds.derive(seed, 8))
        let disk = peer.disk
        let crypto = peer.crypto
        try disk.makeDirectory(Self.messagesDirectory)
        instance = try InstanceFile.loadOrCreate(at: "/state/instance", storage: disk,
                                                 make: { InstanceID(bytes: crypto.randomBytes(16))! })
        directory = try PeerDirectory(path: "/state/peers.json", storage: disk) { PeerID(key: $0, using: crypto) }
        store = try MessageStore(directory: Self.messagesDirectory, limits: Self.limits, storage: disk, syncMode: .batched)
        for known in directory.all {
            let record = Record(id: known.id, key: known.key, name: known.name, paired: true,
                                routes: known.routes.sorted { $0.lastSeenMs < $1.lastSeenMs }.map(\.address.description))
            record.stayDisconnected = known.stayDisconnected
            record.instance = known.instance.flatMap { InstanceID(hex: $0) }
            peers[known.id] = record
        }
        let transferStore = try TransferStore(directory: Self.transfersDirectory, storage: disk)
        delivery = TextDelivery(
            store: store, now: { [scheduler] in scheduler.instant }, nowMs: { [scheduler] in scheduler.wallClockMs },
            transmit: { [weak self] link, frame in if self?.isAlive == true { link.send(frame) } },
            drop: { [weak self] link, reason in if self?.isAlive == true { link.drop(reason) } },
            emit: { [weak self] event in self?.emitted(event) },
            whenAnnounced: { [weak self] action in self?.whenWrittenToTheBus(action) })
        transfers = SimulatedTransfers(service: self, store: transferStore, scheduler: scheduler, history: history,
                                       seed: Seeds.derive(seed, 7))
        appStreams = SimulatedAppStreams(service: self, scheduler: scheduler, history: history)
    }

    var id: PeerID { peer.id }

    func start() {
        history.started(peer)
        listen()
        perform {
            for id in delivery.interruptedRemovals { forget(id) }
            delivery.announceUnannounced()
            transfers.showEndsNotShown()
        }
        expire()
        every(Self.stallCheck) {
            $0.delivery.resendStalledRuns()
            $0.store.retryFailedRewrites()
        }
        every(Self.expiryCheck) { $0.expire() }
        for id in peers.keys.sorted() { scheduleRedial(peers[id]!, immediately: true) }
    }

    func die() {
        isAlive = false
        for link in (pendingLinks.values.map(\.link) + peers.values.compactMap(\.link)).sorted(by: { $0.id < $1.id }) {
            link.abandon()
        }
        for prompt in prompts.values { prompt.timeout.cancel() }
        for redial in redials.values { redial.timer?.cancel() }
        transfers.die()
        network.stopListening(at: peer.address)
        history.stopped(peer)
    }

    private func every(_ interval: Duration, _ body: @escaping (SimulatedService) -> Void) {
        scheduler.after(interval) { [weak self] in
            guard let self, isAlive else { return }
            perform { body(self) }
            every(interval, body)
        }
    }

    /// Runs an entry point: its writes go to the sync, and a disk that stopped inside it stops the service.
    func perform(_ body: () -> Void) {
        guard isAlive else { return }
        body()
        guard isAlive else { return }
        if peer.disk.isStopped { return peer.stoppedInsideACall() }
        syncWrites()
    }

    /// The sync thread's model: a batch runs for a while (the disk's sync time), then reports back.
    private func syncWrites() {
        guard !syncing, let batch = store.takeSyncBatch() else { return }
        syncing = true
        scheduler.after(peer.drawDuration(.microseconds(50)...(.milliseconds(4)))) { [weak self] in
            guard let self, isAlive else { return }
            syncing = false
            perform {
                store.finishSync(batch, error: batch.run())
                delivery.durabilityAdvanced()
            }
        }
    }

    /// GDBus writes a signal to the bus from its worker thread a moment after the emit, and a
    /// crash in between loses it (campaign seed 12): so does the model, and the service
    /// announces again after a restart what it had not noted written.
    private func emitted(_ event: ServiceEvent) {
        guard isAlive, !peer.disk.isStopped else { return }
        if case .messageReceived(_, let messageID, _) = event { history.stored(messageID) }
        tell { [history, peer] in history.event(event, at: peer) }
    }

    /// A signal emitted: `report` (what the person learns, to the history) runs once the bus
    /// write carries it, not at all if the service dies first.
    func tell(_ report: @escaping () -> Void) {
        unwritten.append(report)
        scheduleBusWrite()
    }

    /// `action` once every announcement emitted so far is written (`g_dbus_connection_flush`).
    func whenWrittenToTheBus(_ action: @escaping () -> Void) {
        waitingForTheBus.append(action)
        scheduleBusWrite()
    }

    /// The worker thread's write: everything queued goes in one, then what waited for it runs.
    private func scheduleBusWrite() {
        if peer.signalsWrittenAtOnce { return writeToTheBus() }
        guard !busWriteScheduled else { return }
        busWriteScheduled = true
        scheduler.after(.microseconds(20 + Int64(busRandom.uniform() * 2980))) { [weak self] in
            guard let self, isAlive else { return }
            busWriteScheduled = false
            perform { writeToTheBus() }
        }
    }

    private func writeToTheBus() {
        let written = unwritten, waiting = waitingForTheBus
        unwritten = []
        waitingForTheBus = []
        written.forEach { $0() }
        waiting.forEach { $0() }
    }

    private func expire() { delivery.expire() }

    // MARK: The bus API, as the workload calls it

    /// `Send`: the message id once it is on the disk (`accepted`), or the error at once.
    func send(_ text: String, to target: PeerID) {
        perform {
            guard let record = peers[target] else { return }
            let messageID = MessageID(bytes: peer.crypto.randomBytes(16))!.hex
            do throws(ServiceError) {
                try MessageText.validate(text)
                guard record.paired else { throw .notConnected("\(record.id) is not paired yet") }
                try delivery.enqueue(text, id: messageID, for: record.id, nowMs: scheduler.wallClockMs)
            } catch {
                history.sendRefused(by: peer, error)
                return
            }
            history.enqueued(messageID, from: peer, to: record.id)
            if record.link == nil { scheduleRedial(record, immediately: true) }
            let history = history, peer = peer
            delivery.whenDurable(for: record.id) { [weak self] in
                guard self?.isAlive == true, !peer.disk.isStopped else { return }
                history.accepted(messageID, by: peer)
            }
        }
    }

    func connect(toAddress address: String) {
        perform {
            let owners = peers.values.filter { $0.routes.contains(address) }
            if owners.count == 1 {
                connect(owners[0], preferring: address)
            } else {
                contacts[address, default: []].append { _ in }
                if !contactDials.contains(address) && !pendingLinks.values.contains(where: { $0.dialled == .contact(address) }) {
                    dial(contact: address)
                }
            }
        }
    }

    func connect(toPeer id: PeerID) {
        perform {
            guard let record = peers[id] else { return }
            connect(record, preferring: nil)
        }
    }

    private func connect(_ record: Record, preferring address: String?) {
        guard record.link == nil else { return }
        setStayDisconnected(record, false)
        record.waiters.append { _ in }
        if dials[record.id] == nil && !hasPendingLink(record) { dial(record, preferring: address) }
    }

    func disconnect(_ id: PeerID) {
        perform {
            guard let record = peers[id] else { return }
            disconnect(record, by: "Disconnect")
        }
    }

    private func disconnect(_ record: Record, by method: String) {
        setStayDisconnected(record, true)
        stopDialling(record)
        failWaiters(record, .failed("\(method) was called"))
        record.link?.close(goodbye: .userDisconnected, method)
    }

    func removePeer(_ id: PeerID) {
        perform {
            guard let record = peers[id] else { return }
            disconnect(record, by: "RemovePeer")
            redials[id] = nil
            transfers.peerRemoved(id)
            forget(id)
        }
    }

    /// `RemovePeer`'s work once the links are gone (and at start, a removal a crash interrupted).
    private func forget(_ id: PeerID) {
        do {
            _ = try delivery.forget(id) {
                try directory.remove(id: id)
                peers[id] = nil
            }
            history.removed(id, by: peer)
        } catch {
            history.note("\(peer.name): RemovePeer(\(id)) failed: \(error)")
        }
    }

    /// The LAN says a known peer is at `address` now (its advertisement, after it moved).
    func peerAppeared(_ id: PeerID, at address: String) {
        perform {
            guard let record = peers[id], !record.routes.contains(address) else { return }
            record.candidates.removeAll { $0 == address }
            record.candidates.append(address)
            redials[id] = nil
            scheduleRedial(record, immediately: true)
        }
    }

    /// `SendFiles` of `files` to `target`.
    func sendFiles(_ files: [(name: String, bytes: [UInt8])], to target: PeerID, bytesPerSecond: Double) {
        perform {
            guard peers[target]?.paired == true else { return }
            let id = TransferID(bytes: peer.crypto.randomBytes(16))!
            transfers.send(files, to: target, id: id, bytesPerSecond: bytesPerSecond)
        }
    }

    /// An app opens a stream to `target` (`OpenStream`) and writes `bytes`; false when no link
    /// is open to it (the call fails).
    func openAppStream(to target: PeerID, key: Int, bytes: [UInt8]) -> Bool {
        var opened = false
        perform {
            guard let link = peers[target]?.link, let linkChannels = channels[link.id] else { return }
            opened = appStreams.open(on: linkChannels, key: key, bytes: bytes)
        }
        return opened
    }

    /// `Cancel` on one of the transfers not yet over.
    func cancelTransfer(pick: UInt64) { perform { transfers.cancel(pick: pick) } }

    /// A transfer waits for a link to `id` (the daemon's `Transfers.wantsLink`).
    func wantsLink(_ id: PeerID) {
        guard let record = peers[id] else { return }
        scheduleRedial(record, immediately: true)
    }

    /// Whether messages or transfers wait for a link to `id`.
    private func needsLink(to id: PeerID) -> Bool { delivery.hasPending(for: id) || transfers.needsLink(to: id) }

    /// In the final phase, as a person would: Connect to every peer with messages or transfers waiting.
    func connectToPeersWithMessagesWaiting() {
        perform { transfers.answerEverythingWaiting() }
        for id in peers.keys.sorted() where needsLink(to: id) {
            connect(toPeer: id)
        }
    }

    func expireNow() { perform { expire() } }

    // MARK: Listening and dialling

    private func listen() {
        network.listen(at: peer.address) { [weak self] end in
            guard let self, isAlive else { return end.close() }
            perform {
                if limiter.isExhausted(host: end.remoteHost, nowMs: scheduler.wallClockMs) { return end.close() }
                startLink(end, isOutgoing: false, dialledAddress: nil, dialled: nil, dial: nil)
            }
        }
    }

    func stopListening() { network.stopListening(at: peer.address) }

    func addressChanged() {
        listen()
        for record in peers.values where record.link == nil { redials[record.id] = nil }
        for id in peers.keys.sorted() { scheduleRedial(peers[id]!, immediately: true) }
    }

    private func hasPendingLink(_ record: Record) -> Bool {
        pendingLinks.values.contains { $0.peer == record.id || $0.dialled == .peer(record.id) }
    }

    private func dial(_ record: Record, preferring preferred: String? = nil) {
        redials[record.id]?.timer = nil
        var order = record.dialOrder
        if let preferred {
            order.removeAll { $0 == preferred }
            order.insert(preferred, at: 0)
        }
        guard let first = order.first else { return connectFailed(record, .notAvailable("no route")) }
        dialRoute(record, Dial(address: first, remaining: Array(order.dropFirst())))
    }

    private func dialRoute(_ record: Record, _ dial: Dial) {
        history.note("\(peer.name) dials \(record.id.base32.prefix(6)) at \(dial.address)")
        dials[record.id] = dial
        let id = record.id
        network.dial(from: peer.host, to: dial.address) { [weak self, weak record] result in
            guard let self, isAlive, let record, peers[id] === record, dials[id] === dial else {
                if case .success(let end) = result { end.close() }
                return
            }
            perform {
                dials[id] = nil
                switch result {
                case .success(let end):
                    startLink(end, isOutgoing: true, dialledAddress: dial.address, dialled: .peer(id), dial: dial)
                case .failure:
                    dialNextRoute(record, after: dial, .notAvailable("\(dial.address) did not answer"))
                }
            }
        }
    }

    private func dialNextRoute(_ record: Record, after dial: Dial, _ error: ServiceError) {
        if let next = dial.remaining.first {
            dialRoute(record, Dial(address: next, remaining: Array(dial.remaining.dropFirst())))
        } else {
            connectFailed(record, error)
        }
    }

    private func dial(contact address: String) {
        history.note("\(peer.name) dials \(address)")
        contactDials.insert(address)
        network.dial(from: peer.host, to: address) { [weak self] result in
            guard let self, isAlive, contactDials.contains(address) else {
                if case .success(let end) = result { end.close() }
                return
            }
            perform {
                contactDials.remove(address)
                switch result {
                case .success(let end):
                    startLink(end, isOutgoing: true, dialledAddress: address, dialled: .contact(address), dial: nil)
                case .failure:
                    contactFailed(address, .notAvailable("\(address) did not answer"))
                }
            }
        }
    }

    private func startLink(_ end: SimulatedStream.End, isOutgoing: Bool, dialledAddress: String?, dialled: DialTarget?,
                           dial: Dial?) {
        let link = SimulatedLink(id: history.nextLinkID(), end: end, isOutgoing: isOutgoing, dialledAddress: dialledAddress,
                                 scheduler: scheduler)
        pendingLinks[link.id] = PendingLink(link: link, dialled: dialled, dial: dial)
        link.owner = self
        var pinned: [UInt8]?
        if case .peer(let id) = dialled, let record = peers[id], record.paired { pinned = record.key.bytes }
        let hello = try! Hello(instanceID: instance, capabilities: [.text], listenPort: 47800, voicePort: 0, name: peer.name)
        link.start(hello: hello, identity: peer.identity, pinnedKey: pinned, crypto: peer.crypto, aesGCM: peer.crypto)
    }

    private func connectFailed(_ record: Record, _ error: ServiceError) {
        failWaiters(record, error)
        if !record.paired && record.link == nil && delivery.history(of: record.id, max: 1).isEmpty {
            if peers[record.id] === record { peers[record.id] = nil }
        } else {
            scheduleRedial(record)
        }
    }

    private func contactFailed(_ address: String, _ error: ServiceError) {
        let waiters = contacts.removeValue(forKey: address) ?? []
        waiters.forEach { $0(.failure(error)) }
    }

    private func failWaiters(_ record: Record, _ error: ServiceError) {
        let waiters = record.waiters
        record.waiters = []
        waiters.forEach { $0(.failure(error)) }
    }

    private func scheduleRedial(_ record: Record, immediately: Bool = false) {
        var redial = redials[record.id] ?? (.zero, nil)
        guard isAlive, record.paired, !record.routes.isEmpty || !record.candidates.isEmpty, !record.stayDisconnected,
              record.link == nil, dials[record.id] == nil, redial.timer == nil, !hasPendingLink(record),
              needsLink(to: record.id) else { return }
        redial.backoff = immediately ? .zero : min(Self.maxRedial, max(Self.firstRedial, redial.backoff * 2))
        let id = record.id
        redial.timer = scheduler.after(redial.backoff) { [weak self, weak record] in
            guard let self, isAlive, let record, peers[id] === record else { return }
            perform {
                redials[id]?.timer = nil
                dial(record)
            }
        }
        redials[id] = redial
    }

    private func stopDialling(_ record: Record) {
        dials[record.id] = nil
        redials[record.id]?.timer?.cancel()
        redials[record.id]?.timer = nil
        withdrawPrompt(record.id)
        for key in pendingLinks.keys.sorted() {
            guard let entry = pendingLinks[key], entry.peer == record.id || entry.dialled == .peer(record.id) else { continue }
            pendingLinks[key] = nil
            entry.link.drop("no longer wanted")
        }
    }

    private func setStayDisconnected(_ record: Record, _ stay: Bool) {
        record.stayDisconnected = stay
        if record.paired { remember(record) }
    }

    private func remember(_ record: Record) {
        let routes = record.routes.enumerated().compactMap { index, address in
            (try? PeerAddress(parsing: address)).map { PeerRoute(address: $0, lastSeenMs: UInt64(index)) }
        }
        do {
            try directory.save(KnownPeer(id: record.id, key: record.key, name: record.name, instance: record.instance?.hex,
                                         routes: routes, stayDisconnected: record.stayDisconnected))
        } catch {
            history.note("\(peer.name) could not remember \(record.id): \(error)")
        }
    }

    private func noteRoute(_ record: Record, _ address: String) {
        record.candidates.removeAll { $0 == address }
        record.routes.removeAll { $0 == address }
        record.routes.append(address)
    }

    // MARK: Prompts

    private func ask(about record: Record, over link: SimulatedLink) {
        guard let result = link.result else { return }
        let id = record.id
        let timeout = scheduler.after(Self.pairingWindow) { [weak self] in
            guard let self, isAlive else { return }
            perform { settle(id, accept: false) }
        }
        prompts[id] = Prompt(link: link, timeout: timeout)
        history.prompted(peer, about: id, link: result.handshakeHash, code: result.verificationCode)
        let person = peer.person
        guard peer.draw() >= person.ignores else { return }
        let accept = peer.draw() < person.accepts
        scheduler.after(peer.drawDuration(person.answerDelay)) { [weak self] in
            guard let self, isAlive, prompts[id]?.link === link else { return }
            perform { settle(id, accept: accept) }
        }
    }

    private func settle(_ id: PeerID, accept: Bool) {
        guard let prompt = prompts.removeValue(forKey: id), let result = prompt.link.result else { return }
        prompt.timeout.cancel()
        history.answered(peer, link: result.handshakeHash, accept: accept)
        if accept {
            prompt.link.accept()
        } else {
            if let record = peers[id] {
                setStayDisconnected(record, true)
                failWaiters(record, .rejected("refused"))
            }
            prompt.link.refuse("pairing refused")
        }
    }

    private func withdrawPrompt(_ id: PeerID, askingAbout link: SimulatedLink? = nil) {
        guard let prompt = prompts[id], link.map({ $0 === prompt.link }) ?? true else { return }
        prompts[id] = nil
        prompt.timeout.cancel()
    }

    // MARK: Bounds

    var openLinkCount: Int { peers.values.filter { $0.link != nil }.count }
    var linkChannels: [SimulatedChannels] { channels.keys.sorted().map { channels[$0]! } }
    var pendingLinkCount: Int { pendingLinks.count }
    var promptCount: Int { prompts.count }
    var peerCount: Int { peers.count }
    var knownPeerIDs: [PeerID] { peers.keys.sorted() }
    var queuedMessages: Int { store.knownPeers.reduce(0) { $0 + store.pending(peer: $1).count } }
    func record(_ id: PeerID) -> Record? { peers[id] }
    var openLinks: [(PeerID, SimulatedLink)] {
        peers.keys.sorted().compactMap { id in peers[id]!.link.map { (id, $0) } }
    }
}

extension SimulatedService: SimulatedLinkOwner {
    func linkMayContinueAfterCommitment(_ link: SimulatedLink) -> Bool {
        guard isAlive else { return false }
        return limiter.allow(host: link.remoteHost, nowMs: scheduler.wallClockMs)
    }

    func linkDidAuthenticate(_ link: SimulatedLink) {
        perform {
            guard var entry = pendingLinks[link.id], let hello = link.peerHello, let result = link.result,
                  let key = PublicKey(bytes: result.remoteStaticKey) else { return }
            let id = PeerID(key: key, using: peer.crypto)
            let status = PairingExchange.status(isItself: hello.instanceID == instance || key.bytes == peer.identity.publicKey,
                                                keyPinned: peers[id]?.paired ?? false, refusesFirstContact: false,
                                                promptPending: prompts[id] != nil)
            let address = link.dialledAddress ?? "ip:\(link.remoteHost):\(hello.listenPort)"
            let dialable = link.isOutgoing || hello.listenPort != 0
            if status == .itself {
                pendingLinks[link.id] = nil
                link.drop("connected to itself")
                return
            }
            if case .peer(let dialledID) = entry.dialled, dialledID != id {
                pendingLinks[link.id] = nil
                link.drop("another key answered")
                if let record = peers[dialledID] { connectFailed(record, .rejected("another device answered")) }
                return
            }
            let record = peers[id] ?? {
                let new = Record(id: id, key: key, name: hello.name, paired: false, routes: [])
                peers[id] = new
                return new
            }()
            if !record.paired { record.name = hello.name }
            if case .contact(let address) = entry.dialled, let waiters = contacts.removeValue(forKey: address) {
                record.waiters += waiters
            }
            entry.peer = id
            entry.route = dialable ? address : nil
            if dialable { noteRoute(record, address) }
            pendingLinks[link.id] = entry
            switch status {
            case .known:
                if !link.isOutgoing { limiter.giveBack(host: link.remoteHost) }
                link.declare(.known)
            case .refuse:
                link.refuse("first contact refused")
            case .alreadyAsking:
                link.drop("a prompt is pending")
            case .asking:
                link.declare(.asking)
                ask(about: record, over: link)
            case .itself:
                break
            }
        }
    }

    func linkPeerIsAsking(_ link: SimulatedLink) {
        perform {
            guard let id = pendingLinks[link.id]?.peer, let record = peers[id] else { return }
            guard prompts[id] == nil else { return link.drop("a prompt is pending") }
            ask(about: record, over: link)
        }
    }

    func linkDidOpen(_ link: SimulatedLink) {
        perform {
            guard let entry = pendingLinks.removeValue(forKey: link.id), let id = entry.peer, let record = peers[id],
                  let hello = link.peerHello, let result = link.result else {
                return link.drop("opened for no known peer")
            }
            if let existing = record.link, existing !== link {
                guard LinkTieBreak.keepsNew(existing: (existing.transport, existing.isOutgoing),
                                            new: (link.transport, link.isOutgoing),
                                            ourInstance: instance, peerInstance: hello.instanceID) else {
                    return link.drop("already has a better link")
                }
                existing.owner = nil
                linkOwners[existing.id] = nil
                existing.drop("replaced by a better link")
                closeChannels(of: existing, to: id, reason: "replaced by a better link")
            }
            record.link = link
            linkOwners[link.id] = id
            record.name = hello.name
            record.instance = hello.instanceID
            record.paired = true
            if let route = entry.route { noteRoute(record, route) }
            record.stayDisconnected = false
            dials[id] = nil
            redials[id]?.timer?.cancel()
            redials[id] = nil
            remember(record)
            history.linkOpened(peer, to: id, link: result.handshakeHash,
                               byPeople: !(link.pairing.localStatus == .known && link.pairing.peerStatus == .known))
            let waiters = record.waiters
            record.waiters = []
            waiters.forEach { $0(.success(id)) }
            delivery.linkOpened(link, to: id)
            let linkChannels = SimulatedChannels(link: link, scheduler: scheduler, history: history, owner: peer.name)
            channels[link.id] = linkChannels
            // The channels taken here: the service's own (transfers) and the app's.
            linkChannels.takeStream = { [weak self, weak linkChannels] channel, stream in
                guard let self, let linkChannels else { return nil }
                switch channel.description {
                case TransferWire.channel: return transfers.takeStream(stream, from: id, on: linkChannels)
                case SimulatedAppStreams.channel: return appStreams.takeStream(stream, on: linkChannels)
                default: return nil
                }
            }
            transfers.linkOpened(to: id, channels: linkChannels)
        }
    }

    private func closeChannels(of link: SimulatedLink, to id: PeerID, reason: String) {
        guard let linkChannels = channels.removeValue(forKey: link.id) else { return }
        transfers.linkClosed(to: id, channels: linkChannels)
        linkChannels.linkClosed(reason: reason)
    }

    func link(_ link: SimulatedLink, receivedChannelFrame body: [UInt8]) {
        perform { channels[link.id]?.received(body) }
    }

    func link(_ link: SimulatedLink, received frame: Frame) {
        perform {
            guard let id = linkOwners[link.id], let hello = link.peerHello else { return }
            switch frame {
            case .text(let text): delivery.received(text, from: id, senderInstance: hello.instanceID)
            case .ack(let seq): delivery.acknowledged(upTo: seq, from: id)
            default: break
            }
        }
    }

    func linkDidDrainInput(_ link: SimulatedLink) {
        perform {
            guard let id = linkOwners[link.id] else { return }
            delivery.inputDrained(from: id)
            channels[link.id]?.inputDrained()
        }
    }

    func linkDidClose(_ link: SimulatedLink, reason: SimulatedLink.CloseReason) {
        perform {
            if let entry = pendingLinks.removeValue(forKey: link.id) {
                return pendingLinkClosed(link, entry: entry, reason: reason)
            }
            guard let id = linkOwners.removeValue(forKey: link.id), let record = peers[id] else { return }
            history.note("\(peer.name): link \(link.id) to \(id.base32.prefix(6)) closed: \(reason)")
            delivery.linkClosed(to: id)
            closeChannels(of: link, to: id, reason: "\(reason)")
            record.link = nil
            if reason == .goodbye(.userDisconnected) { setStayDisconnected(record, true) }
            scheduleRedial(record)
        }
    }

    private func pendingLinkClosed(_ link: SimulatedLink, entry: PendingLink, reason: SimulatedLink.CloseReason) {
        history.note("\(peer.name): link \(link.id) with \(link.remoteHost) closed before opening: \(reason)")
        if entry.peer == nil, case .contact(let address) = entry.dialled {
            return contactFailed(address, .failed("\(address): \(reason)"))
        }
        let dialledID: PeerID? = if case .peer(let id) = entry.dialled { id } else { nil }
        guard let id = entry.peer ?? dialledID, let record = peers[id], record.link == nil else { return }
        withdrawPrompt(id, askingAbout: link)
        guard !hasPendingLink(record) else { return }
        let error: ServiceError
        switch reason {
        case .handshakeFailed(.unexpectedRemoteKey) where entry.dial.map({ record.candidates.contains($0.address) }) == true:
            let dial = entry.dial!
            record.candidates.removeAll { $0 == dial.address }
            return dialNextRoute(record, after: dial, .failed("another device answered"))
        case .refusedByPeer, .handshakeFailed(.unexpectedRemoteKey):
            setStayDisconnected(record, true)
            error = .rejected("\(reason)")
        default:
            error = .failed("\(reason)")
        }
        connectFailed(record, error)
    }
}
