import Foundation
import GIO
import OpenSSLCrypto
import PeerVoiceCore
import Sodium

/// The control plane, as the bus sees it: each bus method becomes calls on the components below,
/// which own their state; they report through `emit`. Lives on the GLib main loop thread, where
/// every method is called.
///
/// A peer is a device, named by its key (`PeerID`); addresses are routes to it. docs/ARCHITECTURE.md
/// maps the components and who owns what.
final class PeerVoiceService {
    var emit: (ServiceEvent) -> Void = { _ in }
    /// Calls back once what `emit` took so far is written to the bus (false: it cannot be).
    var eventsWritten: (@escaping (Bool) -> Void) -> Void = { $0(true) }
    /// Called when what the object of one peer (or found device) shows changed without an event
    /// of its own (`ServiceEvent.changedPeerObjects` names those that come with one).
    var peerChanged: (PeerRef) -> Void = { _ in }

    private(set) var isMuted = false
    var isDiscovering: Bool { bluetooth.isDiscovering || lan.isDiscovering }
    var adapterName: String { bluetooth.adapterName }
    var listenAddress: String { ip.listenAddress }
    /// What DiscoveryMethods says: the methods StartDiscovery can use now.
    var discoveryMethods: [String] {
        (bluetooth.canDiscover ? ["bluetooth"] : []) + (lan.canDiscover ? ["lan"] : [])
    }
    /// The capture processing of the latest voice session (before one: what the options allow).
    var audioProcessing: [VoiceProcessingState] { voice.audioProcessing }
    /// Our microphone holds speech, unmuted (`Speaking`).
    var isMicrophoneSpeaking: Bool { voice.isMicrophoneSpeaking }
    /// The others in the calls our voice peers host (`Participants`).
    var relayedParticipants: [CallParticipant] { voice.relayedParticipants }
    /// The voice thread's handle, once it runs (levels for `LevelsMetering`).
    var voiceEngine: VoiceEngine? { voice.engine }

    let options: Options
    /// This service's own id and key, as peers see them.
    let ownID: PeerID
    let ownKey: PublicKey
    private let instance: InstanceID
    private let identity: StaticIdentity
    let crypto = LibSodium()
    /// The time the components read (the system's).
    let clock = WallClock.system
    let ip = IPTransport()
    /// The display name and visibility (PeerVoiceService+Settings.swift).
    let settings: ServiceSettings
    let registry: PeerRegistry
    /// Each connected peer's link, and the components that run over links.
    private let links = PeerLinks()
    private let pairing: PairingPrompts
    private let delivery: MessageDelivery
    let bluetooth: BluetoothPeers
    private let lan: LANPeers
    private let connections: PeerConnections
    private let voice: VoiceControl
    /// Registered channels and each link's streams.
    let channels: Channels
    /// The Mumble rooms we are in (`JoinRoom`).
    let rooms: Rooms
    /// File transfers, on a channel of their own.
    let transfers: Transfers
    private let sleep = SleepMonitor()
    private let network = NetworkMonitor()
    private var goodbyeTimer: EventSource?
    /// How long goodbyes have to leave before the computer may sleep (logind allows 5 s).
    private static let goodbye: Duration = .milliseconds(200)

    /// Opens the state directory (identity key, instance id, known peers, message store),
    /// migrating one of protocol version 3. Nothing is sent or accepted until `start()`.
    init(options: Options) throws(ServiceError) {
        self.options = options
        let state = options.stateDirectory
        do {
            // Durably: a power loss must not take the directory from under the files synced in it.
            try FileStorage().makeDirectory(state)
            // Keys and messages live here: only the user may look in.
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: state)
        } catch {
            throw .failed("cannot use the state directory \(state): \((error as? StorageError)?.description ?? error.localizedDescription)")
        }
        do {
            identity = try IdentityFile.loadOrCreate(at: state + "/identity.key", using: crypto).identity
        } catch {
            throw .failed("\(error)")
        }
        ownKey = PublicKey(bytes: identity.publicKey)!
        let crypto = crypto
        ownID = PeerID(key: ownKey, using: crypto)
        let store: MessageStore
        let directory: PeerDirectory
        do {
            instance = try InstanceFile.loadOrCreate(at: state + "/instance")
            // Synced in batches on MessageDelivery's sync thread, never on the main loop per message.
            store = try MessageStore(directory: state + "/messages", syncMode: .batched,
                                     onWarning: { Log.warning("message store: \($0)") })
            directory = try PeerDirectory(path: state + "/peers.json") { PeerID(key: $0, using: crypto) }
            settings = try ServiceSettings(path: state + "/settings.json", defaultName: options.name)
            try Self.migrate(store: store, directory: directory)
        } catch {
            throw .failed("cannot use the state directory \(state): \(error)")
        }
        // The components report through `emit`, which the daemon sets after this.
        weak var service: PeerVoiceService?
        rooms = Rooms(stateDirectory: state, displayName: { [settings] in settings.name }, voice: { service?.voiceEngine })
        let emit: (ServiceEvent) -> Void = { service?.emit($0) }
        registry = PeerRegistry(directory: directory, emit: emit)
        pairing = PairingPrompts(clock: clock, emit: emit)
        bluetooth = BluetoothPeers(adapter: options.adapter, defaultAgent: options.defaultAgent, registry: registry, emit: emit)
        // The link components (LANPeers for PRESENCE, MessageDelivery, VoiceControl) register
        // with `links` as they are made, and hear of a new link in this order.
        do {
            lan = try LANPeers(options: options, fingerprint: identity.fingerprint, crypto: crypto, ip: ip, registry: registry,
                               links: links, clock: clock, displayName: { [settings] in settings.name },
                               offersVoice: { service?.voiceEngine != nil }, emit: emit)
        } catch {
            throw .failed("cannot use the state directory \(state): \(error)")
        }
        delivery = MessageDelivery(store: store, links: links, clock: clock, emit: emit,
                                   eventsWritten: { service?.eventsWritten($0) ?? $0(false) })
        connections = PeerConnections(instance: instance, identity: identity, crypto: crypto, ip: ip, registry: registry,
                                      links: links, clock: clock, pairing: pairing, delivery: delivery, bluetooth: bluetooth,
                                      lan: lan, hello: { service!.localHello }, emit: emit)
        bluetooth.receiver = connections
        connections.peerChanged = { service?.peerChanged($0) }
        lan.knownPeerAppeared = { [unowned connections] in connections.scheduleRedial($0, immediately: true) }
        voice = VoiceControl(options: options, crypto: crypto, ip: ip, registry: registry, links: links, bluetooth: bluetooth,
                             emit: emit, peerChanged: { service?.peerChanged($0) })
        voice.roomVoiceOut = { [unowned rooms] number, packet in rooms.sendVoice(packet, toRoom: number) }
        channels = Channels(links: links)
        do {
            transfers = Transfers(store: try TransferStore(directory: state + "/transfers"), links: links, channels: channels,
                                  hashes: ContentHashes(blake2b256: crypto, sha256: OpenSSLSHA256()), clock: clock,
                                  downloadFolder: Self.downloadFolder(options))
        } catch {
            throw .failed("cannot use the state directory \(state): \(error.localizedDescription)")
        }
        transfers.peerName = { [registry] in registry[$0]?.name ?? "" }
        transfers.eventsWritten = { service?.eventsWritten($0) ?? $0(false) }
        transfers.wantsLink = { [registry, connections] in
            if let peer = registry[$0] { connections.scheduleRedial(peer, immediately: true) }
        }
        service = self
        Log.info("identity \(ownID) (key \(ownKey))")
    }

    /// Protocol version 3 named peers by address: merge the journals of each key into its id's,
    /// fail what was queued for peers never paired, then write the directory's new format.
    private static func migrate(store: MessageStore, directory: PeerDirectory) throws {
        guard let migration = directory.migration else { return }
        for (from, into) in migration.journals { try store.merge(from, into: into.description) }
        var failed = 0
        for name in store.knownPeers where PeerID(name) == nil {
            failed += try store.forget(peer: name).count
        }
        // Numbering toward any peer, even one removed under an address, never restarts.
        try store.raiseSequenceFloor(to: store.highestSequenceEver)
        try directory.finishMigration()
        Log.info("migrated the state directory to peers named by key: \(migration.peers.count) peers from \(migration.journals.map(\.from.count).reduce(0, +)) addresses; \(failed) messages queued for never-paired addresses failed")
    }

    /// Starts accepting peers and delivering queued messages: called once the bus name is owned.
    func start() throws(ServiceError) {
        // A RemovePeer a crash interrupted is finished before anything dials.
        for id in delivery.interruptedRemovals {
            do {
                let failed = try delivery.forget(id) { try registry.remove(id) }
                Log.info("finished removing \(id), which a crash interrupted: \(failed) queued messages failed")
                peerChanged(.id(id))
            } catch {
                Log.warning("cannot finish removing \(id), which a crash interrupted: \(error)")
            }
        }
        // For --listen and for the default LAN listener alike.
        connections.start()
        if let address = options.listen {
            try ip.listen(on: address)
            emit(.propertiesChanged([.listenAddress]))
        }
        voice.start(muted: isMuted)
        bluetooth.start()
        lan.start()
        sleep.willSleep = { [unowned self] done in
            connections.sleep()
            lan.sleep()
            // The goodbyes leave on the next turns of the loop.
            goodbyeTimer = Timer.after(Self.goodbye) { done() }
        }
        sleep.didWake = { [unowned self] in
            lan.wake()
            connections.wake()
        }
        sleep.start()
        network.changed = { [unowned self] in
            lan.networkChanged()
            connections.redialNow()
        }
        network.start()
        for peer in registry.all { connections.scheduleRedial(peer, immediately: true) }
        delivery.start()
    }

    /// Says goodbye to every connected peer.
    func shutdown() {
        transfers.shutdown()
        channels.shutdown()
        rooms.shutdown()
        for (_, link) in links.openLinks {
            link.close(goodbye: .shuttingDown, logReason: "shutting down")
        }
        bluetooth.stop()
        lan.stop()
        sleep.stop()
        network.stop()
        voice.shutdown()
    }

    private var localHello: Hello {
        // Every field is in range by construction; a HELLO that cannot be built is a bug.
        try! Hello(instanceID: instance, capabilities: links.offeredCapabilities.union(.highestVersion(Wire.protocolVersion)),
                   listenPort: ip.listenPort, voicePort: voice.voicePort,
                   name: Hello.truncatedName(settings.name))
    }

    // MARK: Discovery

    /// Starts every method that can run, and the LAN's later if Avahi is not there yet; fails only
    /// when none can run now, saying why for each. `completion` runs once BlueZ has answered (or
    /// failed to in time).
    func startDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        let onLAN = settings.visible.contains(.lan) ? lan.startDiscovery() : .failure(Self.notVisible(on: .lan))
        startVisibleBluetoothDiscovery { [unowned self] result in
            guard case .failure(let error) = result else { return completion(.success(())) }
            guard case .failure(let lanError) = onLAN else {
                Log.info("discovering on the LAN only: \(error.message)")
                return completion(.success(()))
            }
            // Nothing runs: the call fails, so nothing is left wanted either.
            _ = lan.stopDiscovery()
            guard case .notAvailable = error, case .notAvailable = lanError else { return completion(.failure(error)) }
            completion(.failure(.notAvailable("\(error.message); \(lanError.message)")))
        }
    }

    func stopDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        let wasOnLAN = lan.stopDiscovery()
        bluetooth.stopDiscovery { [unowned self] result in
            // Without Bluetooth there was nothing to stop there; a BlueZ that did not answer is reported.
            if case .failure(let error) = result, wasOnLAN, bluetooth.unavailable(for: .bluetooth) != nil {
                Log.debug("StopDiscovery: \(error.message)")
                return completion(.success(()))
            }
            completion(result)
        }
    }

    /// StartDiscovery's Bluetooth half, when this device is to be visible over Bluetooth.
    private func startVisibleBluetoothDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard settings.visible.contains(.bluetooth) else { return completion(.failure(Self.notVisible(on: .bluetooth))) }
        bluetooth.startDiscovery(completion: completion)
    }

    private static func notVisible(on method: DiscoveryMethod) -> ServiceError {
        .notAvailable(method == .lan ? "not visible on the LAN (SetVisible lan true turns it on)"
                                     : "not visible over Bluetooth (SetVisible bluetooth true turns it on)")
    }

    // MARK: Settings

    /// A new name goes into the HELLO of every link opened from now on and, while discovering,
    /// into the LAN advertisement's TXT record.
    func setName(_ name: String) throws(ServiceError) {
        guard try settings.setName(name) else { return }
        Log.info("display name changed")
        lan.nameChanged()
        emit(.propertiesChanged([.name]))
    }

    /// Visibility chooses the methods StartDiscovery uses, and applies at once while discovering.
    func setVisible(_ methodName: String, _ isVisible: Bool) throws(ServiceError) {
        guard let method = DiscoveryMethod(rawValue: methodName) else {
            let known = DiscoveryMethod.allCases.map(\.rawValue).joined(separator: ", ")
            throw .invalidArgument("\"\(methodName)\" is not a discovery method: use one of \(known)")
        }
        guard try settings.setVisible(method, isVisible) else { return }
        Log.info("\(isVisible ? "visible" : "not visible") on \(method.rawValue) from now on")
        emit(.propertiesChanged([.visible]))
        guard isDiscovering else { return }
        // Discovery is on: the method follows now (its failure is no failure of the setting).
        let applied: (Result<Void, ServiceError>) -> Void = { [unowned self] result in
            if case .failure(let error) = result { Log.info("SetVisible(\(method.rawValue)): \(error.message)") }
            emit(.propertiesChanged([.discovering]))
        }
        switch (method, isVisible) {
        case (.lan, true): applied(lan.startDiscovery())
        case (.lan, false): _ = lan.stopDiscovery()
        case (.bluetooth, true): bluetooth.startDiscovery(completion: applied)
        case (.bluetooth, false): bluetooth.stopDiscovery(completion: applied)
        }
    }

    // MARK: Peers

    func peerList() -> [PeerSummary] {
        let known = registry.all.map(\.summary)
        let dialling = registry.allContacts.map(\.summary)
        let taken = Set(registry.all.flatMap { $0.routes.map(\.address) } + registry.allContacts.map(\.address))
        let found = bluetooth.summaries(excluding: taken)
        return (known + dialling + found).sorted { $0.ref.description < $1.ref.description }
    }

    /// What the peer objects show: one per `ListPeers` row, a peer at its id's path, a device
    /// not yet keyed at its address's found path.
    func peerObjectSnapshots() -> [PeerObjectSnapshot] {
        peerList().compactMap { peerObjectSnapshot(of: $0.ref) }
    }

    /// What the object of `ref` shows (its `ListPeers` row), nil when there is none: a peer no
    /// longer known, an address that is no longer dialled or found, or a known peer's route.
    func peerObjectSnapshot(of ref: PeerRef) -> PeerObjectSnapshot? {
        switch ref {
        case .id(let id):
            guard let peer = registry[id] else { return nil }
            return PeerObjectSnapshot(
                path: PeerObjects.peerPath(id), id: id.description, name: peer.name, state: peer.state,
                stateReason: peer.stateReason, transport: peer.transport,
                routes: peer.routes.map { .init(transport: $0.transport, address: $0.address.description, lastSeenMs: $0.lastSeenMs) },
                fingerprint: peer.key.fingerprint, paired: peer.paired, voice: voice.isActive(id) ? .active : .stopped,
                speaking: voice.isSpeaking(id), volume: peer.playback.volume, muted: peer.playback.muted)
        case .address(let address):
            // A contact being dialled, else a device BlueZ found that is no known peer's route.
            guard let row = registry.contact(at: address)?.summary
                    ?? (registry.owners(of: address).isEmpty ? bluetooth.summary(of: address) : nil) else { return nil }
            return PeerObjectSnapshot(
                path: PeerObjects.path(of: ref), id: "", name: row.name, state: row.state, transport: address.transport,
                routes: [.init(transport: address.transport, address: address.description, lastSeenMs: 0)],
                fingerprint: "", paired: false, voice: .stopped)
        }
    }

    /// Connects to `target`: a known peer (by id or route), or a new address. Completes with the
    /// peer's id once the link is open.
    func connect(_ target: PeerRef, completion: @escaping ConnectWaiter) {
        connections.connect(target, completion: completion)
    }

    func disconnect(_ ref: PeerRef) throws(ServiceError) {
        if connections.abandonContact(ref, because: "Disconnect") { return }
        let peer = try registry.resolve(ref)
        guard connections.isBusy(peer) else { throw .notConnected("\(peer.id) is not connected") }
        connections.disconnect(peer, by: "Disconnect", ref: ref)
    }

    func removePeer(_ ref: PeerRef) throws(ServiceError) {
        if connections.abandonContact(ref, because: "RemovePeer") { return }
        let peer = try registry.resolve(ref)
        let id = peer.id
        connections.disconnect(peer, by: "RemovePeer", ref: ref)
        connections.forget(id)
        let failed: Int
        do {
            failed = try delivery.forget(id) { try registry.remove(id) }
        } catch {
            throw .failed("could not forget \(id) in the state directory: \(error)")
        }
        transfers.peerRemoved(id)
        lan.rotatePresenceSecret()
        connections.handOutPresenceSecret()
        Log.info("removed \(id): key unpinned, \(failed) queued messages failed")
        // Its object goes; a device found at one of its routes is no route of a peer any more.
        peerChanged(.id(id))
        for route in peer.routes { peerChanged(.address(route.address)) }
    }

    // MARK: Messages

    /// Queues `text` for the peer `ref` names (nil: every connected peer); `accepted` gets the
    /// message id once the message is on the disk (it is not sent before either).
    func send(_ text: String, to ref: PeerRef?, accepted: @escaping (String) -> Void) throws(ServiceError) {
        try MessageText.validate(text)
        let targets: [Peer]
        if let ref {
            let peer = try registry.resolve(ref)
            // What is queued for a peer met but not paired would not outlive a restart (only
            // paired peers are remembered): stuck for days, then failed (simulation seed 201).
            guard peer.paired else {
                throw .notConnected("\(peer.id) is not paired yet: accept the pairing (Connect waits for it), then send")
            }
            targets = [peer]
        } else {
            targets = links.connectedPeers
            guard !targets.isEmpty else { throw .notConnected("no peer is connected: Connect to one first") }
        }
        let messageID = MessageID.random().hex
        let now = clock.nowMs()
        for peer in targets {
            try delivery.enqueue(text, id: messageID, for: peer.id, nowMs: now)
            if !links.isConnected(peer.id) { connections.scheduleRedial(peer, immediately: true) }
        }
        delivery.whenDurable(for: targets.map(\.id)) { accepted(messageID) }
    }

    func history(of ref: PeerRef, max: Int) throws(ServiceError) -> (PeerID, [StoredMessage]) {
        let peer = try registry.resolve(ref)
        return (peer.id, delivery.history(of: peer.id, max: max))
    }

    // MARK: Voice

    func startVoice(_ ref: PeerRef) throws(ServiceError) { try voice.startVoice(ref) }
    func stopVoice(_ ref: PeerRef) throws(ServiceError) { try voice.stopVoice(ref) }
    func setVolume(_ ref: PeerRef, volume: Double) throws(ServiceError) { try voice.setVolume(ref, volume: volume) }
    func setPeerMuted(_ ref: PeerRef, muted: Bool) throws(ServiceError) { try voice.setPeerMuted(ref, muted: muted) }

    // MARK: Channels

    /// Opens a stream to `channel` on the peer `ref` names (`Channels.openStream`); checks the
    /// peer (`UnknownPeer`), its link (`NotConnected`) and whether it carries channels
    /// (`NotAvailable`) first.
    func openStream(to ref: PeerRef, channel: ChannelName, mode: StreamMode,
                    endedAbruptly: @escaping (PeerID, String) -> Void,
                    completion: @escaping (Result<Int32, ServiceError>) -> Void) throws(ServiceError) {
        let peer = try registry.resolve(ref)
        guard let link = links.link(of: peer.id) else { throw .notConnected("\(peer.id) is not connected: Connect to it first") }
        if let why = link.negotiated?.whyOff(.channels, who: peer.name.isEmpty ? peer.id.description : peer.name) {
            throw .notAvailable(why)
        }
        let id = peer.id
        channels.openStream(to: id, channel: channel, mode: mode, endedAbruptly: { endedAbruptly(id, $0) }, completion: completion)
    }

    // MARK: Files

    /// `SendFiles`: to a paired peer, connected or not (`UnknownPeer`, `NotAvailable` for one
    /// not paired, or whose open link says its PeerVoice cannot receive files); completes with
    /// the transfer's object path.
    func sendFiles(_ paths: [String], to ref: PeerRef, options: [String],
                   completion: @escaping (Result<String, ServiceError>) -> Void) throws(ServiceError) {
        if let unknown = options.first { throw .invalidArgument("SendFiles takes no option \"\(unknown)\" (there are none yet)") }
        let peer = try registry.resolve(ref)
        let who = peer.name.isEmpty ? peer.id.description : peer.name
        guard peer.paired else { throw .notAvailable("\(who) is not paired: Connect to it first") }
        if let negotiated = links.link(of: peer.id)?.negotiated, let why = Transfers.whyOff(on: negotiated, who: who) {
            throw .notAvailable(why)
        }
        transfers.send(paths, to: peer.id, completion: completion)
    }

    /// Where incoming files go: `--download-dir`, else the desktop's download folder.
    private static func downloadFolder(_ options: Options) -> String {
        let environment = ProcessInfo.processInfo.environment
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? NSHomeDirectory()
        let config = environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? home + "/.config"
        let userDirs = FileManager.default.contents(atPath: config + "/user-dirs.dirs").map { String(decoding: $0, as: UTF8.self) }
        return DownloadFolder.path(override: options.downloadDirectory, userDirs: userDirs, home: home)
    }

    // MARK: Mute

    func setMuted(_ muted: Bool) {
        guard muted != isMuted else { return }
        isMuted = muted
        voice.setMuted(muted)
        rooms.setMuted(muted)
        Log.info(muted ? "microphone muted" : "microphone unmuted")
        emit(.muteChanged(muted))
        emit(.propertiesChanged([.muted]))
    }

    func toggleMute() -> Bool {
        setMuted(!isMuted)
        return isMuted
    }

    // MARK: Pairing

    /// Answers the prompt whose `PairingRequested` carried exactly `ref`: BlueZ's question for
    /// an address, the peer link's for an id.
    func confirmPairing(_ ref: PeerRef, accept: Bool) throws(ServiceError) {
        switch ref {
        case .address(let address):
            guard bluetooth.answerPairing(address, accept: accept) else {
                throw .invalidArgument("no pairing request is pending for \(address)")
            }
        case .id(let id):
            try pairing.answer(id, accept: accept)
        }
    }

    // MARK: Helpers

}
