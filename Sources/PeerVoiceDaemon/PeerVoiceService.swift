import Foundation
import GIO
import PeerVoiceCore
import Sodium

/// The control plane: peers, links, pairing, messages, mute. Lives on the GLib main loop thread;
/// every method is called there, and it reports what happens through `emit`.
///
/// A peer is a device, named by its key (`PeerID`); addresses are routes to it. This file holds
/// the bus-facing methods; PeerVoiceService+Links.swift the links, pairing and delivery.
final class PeerVoiceService {
    var emit: (ServiceEvent) -> Void = { _ in }
    /// Called when the set of peers (or what one shows) changed without an event of its own.
    var peersChanged: () -> Void = {}

    private(set) var isMuted = false
    var isDiscovering: Bool { (bluetooth?.isDiscovering ?? false) || isDiscoveringOnLAN }
    var adapterName: String { bluetooth?.adapterName ?? "" }
    var listenAddress: String { ip.listenAddress }
    /// The capture processing of the latest voice session (before one: what the options allow).
    var audioProcessing: [String]
    /// Our microphone holds speech, unmuted (`Speaking`, from the voice thread).
    var isMicrophoneSpeaking = false

    let options: Options
    let instance: InstanceID
    let identity: StaticIdentity
    let crypto = LibSodium()
    let store: MessageStore
    let directory: PeerDirectory
    let ip = IPTransport()
    /// This service's own id and key, as peers see them.
    let ownID: PeerID
    let ownKey: PublicKey
    /// The voice thread, once its UDP socket is bound (PeerVoiceService+Voice.swift).
    var voice: VoiceEngine?
    /// The UDP port HELLO announces for voice when we do not listen (0: the listen port).
    var voicePort: UInt16 = 0
    /// BlueZ, once started (PeerVoiceService+Bluetooth.swift).
    var bluetooth: BluetoothTransport?
    /// Avahi, unless `--no-lan` (PeerVoiceService+LAN.swift).
    var lan: LANDiscovery?
    /// How each LAN advertisement found was reported (`PeerLost` names it the same way).
    var lanFoundRefs: [LANRoute: PeerRef] = [:]
    /// Peers by key: the paired ones, and those meeting us for the first time.
    var peers: [PeerID: Peer] = [:]
    /// Addresses being dialled whose key is not known yet.
    var contacts: [PeerAddress: Contact] = [:]
    /// Links not yet open.
    var pendingLinks: [ObjectIdentifier: PendingLink] = [:]
    /// The peer each open link belongs to.
    var linkOwners: [ObjectIdentifier: Peer] = [:]
    /// Pairing prompts waiting for `ConfirmPairing`, at most one per peer.
    var pairingPrompts: [PeerID: PairingPrompt] = [:]
    var pairingLimiter = PairingRateLimiter()
    private var timers: [EventSource] = []

    /// How often undeliverable messages are checked for expiry.
    static let expiryCheckMs: UInt32 = 60_000

    /// Opens the state directory (identity key, instance id, known peers, message store),
    /// migrating one of protocol version 3. Nothing is sent or accepted until `start()`.
    init(options: Options) throws(ServiceError) {
        self.options = options
        audioProcessing = CaptureProcessing.names(options.voice.processing)
        let state = options.stateDirectory
        do {
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
            // Keys and messages live here: only the user may look in.
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: state)
        } catch {
            throw .failed("cannot use the state directory \(state): \(error.localizedDescription)")
        }
        do {
            identity = try IdentityFile.loadOrCreate(at: state + "/identity.key", using: crypto).identity
        } catch {
            throw .failed("\(error)")
        }
        ownKey = PublicKey(bytes: identity.publicKey)!
        let crypto = crypto
        ownID = PeerID(key: ownKey, using: crypto)
        do {
            instance = try Self.loadInstanceID(in: state)
            store = try MessageStore(directory: state + "/messages", onWarning: { Log.warning("message store: \($0)") })
            directory = try PeerDirectory(path: state + "/peers.json") { PeerID(key: $0, using: crypto) }
            try Self.migrate(store: store, directory: directory)
        } catch {
            throw .failed("cannot use the state directory \(state): \(error)")
        }
        for known in directory.all {
            let peer = Peer(id: known.id, key: known.key, name: known.name, routes: known.routes, paired: true)
            peer.instance = known.instance.flatMap { InstanceID(hex: $0) }
            peer.stayDisconnected = known.stayDisconnected
            if let volume = known.volume { try? peer.voice.playback.setVolume(volume) }  // a bad value in the file: 1.0
            peers[known.id] = peer
        }
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
        // For --listen and for the default LAN listener alike.
        ip.onIncoming = { [unowned self] connection, remote in
            // A host that used up its key exchanges is turned away before any work.
            if pairingLimiter.isExhausted(host: remote.host, nowMs: Self.nowMs()) {
                Log.info("turned away \(remote): too many key exchanges from \(remote.host) within a minute")
                connection.closeAfterFlushing()
                return
            }
            startLink(PeerLink(connection: connection, remote: .ip(remote), isOutgoing: false), dialled: nil)
        }
        if let address = options.listen {
            try ip.listen(on: address)
            emit(.propertiesChanged([.listenAddress]))
        }
        startVoiceEngine()
        startBluetooth()
        startLAN()
        for peer in peers.values { scheduleRedial(peer, immediately: true) }
        expireMessages()
        timers = [
            Timer.every(milliseconds: Self.expiryCheckMs) { [unowned self] in expireMessages(); return true },
            Timer.every(milliseconds: 500) { [unowned self] in resendStalledRuns(); return true },
            Timer.every(milliseconds: Self.voiceRetryMs) { [unowned self] in retryWantedVoice(); return true },
        ]
    }

    /// Says goodbye to every connected peer.
    func shutdown() {
        for peer in peers.values {
            peer.link?.close(goodbye: .shuttingDown, logReason: "shutting down")
        }
        stopBluetooth()
        stopLAN()
        voice?.shutdown()
    }

    // MARK: Discovery

    /// Starts every method that can run, and the LAN's later if Avahi is not there yet; fails only
    /// when none can run now, saying why for each. `completion` runs once BlueZ has answered (or
    /// failed to in time).
    func startDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        let onLAN = startLANDiscovery()
        startBluetoothDiscovery { [unowned self] result in
            guard case .failure(let error) = result else { return completion(.success(())) }
            guard case .failure(let lanError) = onLAN else {
                Log.info("discovering on the LAN only: \(error.message)")
                return completion(.success(()))
            }
            // Nothing runs: the call fails, so nothing is left wanted either.
            _ = stopLANDiscovery()
            guard case .notAvailable = error, case .notAvailable = lanError else { return completion(.failure(error)) }
            completion(.failure(.notAvailable("\(error.message); \(lanError.message)")))
        }
    }

    func stopDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        let wasOnLAN = stopLANDiscovery()
        stopBluetoothDiscovery { [unowned self] result in
            // Without Bluetooth there was nothing to stop there; a BlueZ that did not answer is reported.
            if case .failure(let error) = result, wasOnLAN, bluetoothUnavailable(for: .bluetooth) != nil {
                Log.debug("StopDiscovery: \(error.message)")
                return completion(.success(()))
            }
            completion(result)
        }
    }

    // MARK: Peers

    func peerList() -> [PeerSummary] {
        let known = peers.values.map(\.summary)
        let dialling = contacts.values.map(\.summary)
        let taken = Set(peers.values.flatMap { $0.routes.map(\.address) } + contacts.keys)
        let found = bluetoothPeerSummaries(excluding: taken)
        return (known + dialling + found).sorted { $0.ref.description < $1.ref.description }
    }

    /// What the peer objects show: one per `ListPeers` row, a peer at its id's path, a device
    /// not yet keyed at its address's found path.
    func peerObjectSnapshots() -> [PeerObjectSnapshot] {
        peerList().map { row in
            switch row.ref {
            case .id(let id):
                let peer = peers[id]!
                return PeerObjectSnapshot(
                    path: PeerObjects.peerPath(id), id: id.description, name: peer.name, state: peer.state,
                    transport: peer.transport,
                    routes: peer.routes.map { .init(transport: $0.transport, address: $0.address.description, lastSeenMs: $0.lastSeenMs) },
                    fingerprint: peer.key.fingerprint, paired: peer.paired, voice: peer.voice.active ? .active : .stopped,
                    speaking: peer.voice.speaking, volume: peer.voice.playback.volume, muted: peer.voice.playback.muted)
            case .address(let address):
                return PeerObjectSnapshot(
                    path: PeerObjects.foundPath(transport: address.transport, address: address.description), id: "",
                    name: row.name, state: row.state, transport: address.transport,
                    routes: [.init(transport: address.transport, address: address.description, lastSeenMs: 0)],
                    fingerprint: "", paired: false, voice: .stopped)
            }
        }
    }

    /// The peer `ref` names: its id, or an address that is a route of exactly one known peer.
    func peer(_ ref: PeerRef) throws(ServiceError) -> Peer {
        switch ref {
        case .id(let id):
            guard let peer = peers[id] else {
                throw .unknownPeer("\(id) is not a known peer: Connect to its address first (ListPeers shows known peers)")
            }
            return peer
        case .address(let address):
            let matches = peers.values.filter { $0.hasRoute(address) }
            guard matches.count <= 1 else {
                throw .invalidArgument("\(address) is a route of several peers (\(matches.map(\.id.description).sorted().joined(separator: ", "))): name the peer by its id")
            }
            guard let peer = matches.first else {
                throw .unknownPeer("\(address) is not the address of a known peer: Connect to it first (ListPeers shows known peers)")
            }
            return peer
        }
    }

    /// Connects to `target`: a known peer (by id or route), or a new address. Completes with the
    /// peer's id once the link is open.
    func connect(_ target: PeerRef, completion: @escaping ConnectWaiter) {
        if case .address(let address) = target, let unavailable = bluetoothUnavailable(for: address.transport) {
            return completion(.failure(unavailable))
        }
        let peer: Peer
        switch target {
        case .id:
            do throws(ServiceError) { peer = try self.peer(target) } catch { return completion(.failure(error)) }
        case .address(let address):
            let owners = peers.values.filter { $0.hasRoute(address) }
            guard owners.count == 1 else {
                // A new address (or one several peers used): whoever answers is identified by its key.
                let contact = contacts[address] ?? Contact(address: address)
                contacts[address] = contact
                contact.connectWaiters.append(completion)
                if contact.dial == nil && !pendingLinks.values.contains(where: { $0.dialled == .contact(address) }) {
                    dial(contact)
                }
                return
            }
            peer = owners[0]
        }
        if peer.isConnected { return completion(.success(peer.id)) }
        setStayDisconnected(peer, false)
        peer.connectWaiters.append(completion)
        if peer.dial == nil && !hasPendingLink(peer) {
            if case .address(let address) = target { dial(peer, preferring: address) } else { dial(peer) }
        }
    }

    func disconnect(_ ref: PeerRef) throws(ServiceError) {
        if abandonContact(ref, because: "Disconnect") { return }
        let peer = try peer(ref)
        guard peer.isConnected || peer.dial != nil || peer.redialTimer != nil || hasPendingLink(peer) else {
            throw .notConnected("\(peer.id) is not connected")
        }
        setStayDisconnected(peer, true)
        stopDialling(peer)
        failConnectWaiters(peer, .failed("Disconnect(\(ref)) was called while connecting"))
        if let link = peer.link {
            link.close(goodbye: .userDisconnected, logReason: "Disconnect was called")
        } else {
            setState(peer, .disconnected)
        }
    }

    /// Stops a dial to an address whose key is not known yet, if `ref` names one; its Connect
    /// fails saying that `method` was called.
    private func abandonContact(_ ref: PeerRef, because method: String) -> Bool {
        guard case .address(let address) = ref, let contact = contacts[address] else { return false }
        stopDialling(contact)
        contactFailed(contact, .failed("\(method)(\(address)) was called while connecting"))
        return true
    }

    func removePeer(_ ref: PeerRef) throws(ServiceError) {
        if abandonContact(ref, because: "RemovePeer") { return }
        let peer = try peer(ref)
        let id = peer.id
        peer.stayDisconnected = true
        stopDialling(peer)
        failConnectWaiters(peer, .failed("RemovePeer(\(ref)) was called while connecting"))
        peer.link?.close(goodbye: .userDisconnected, logReason: "RemovePeer was called")
        let failed: [String]
        do {
            failed = try store.forget(peer: id.description)
            try directory.remove(id: id)
        } catch {
            throw .failed("could not forget \(id) in the state directory: \(error)")
        }
        peers[id] = nil
        for messageID in failed {
            emit(.messageFailed(id, messageID: messageID, reason: "the peer was removed"))
        }
        Log.info("removed \(id): key unpinned, \(failed.count) queued messages failed")
        peersChanged()
    }

    // MARK: Messages

    /// Queues `text` for the peer `ref` names (nil: every connected peer) and returns the message id.
    func send(_ text: String, to ref: PeerRef?) throws(ServiceError) -> String {
        try MessageText.validate(text)
        let targets: [Peer]
        if let ref {
            targets = [try peer(ref)]
        } else {
            targets = peers.values.filter(\.isConnected).sorted { $0.id < $1.id }
            guard !targets.isEmpty else { throw .notConnected("no peer is connected: Connect to one first") }
        }
        let messageID = MessageID.random().hex
        let now = Self.nowMs()
        for peer in targets {
            do {
                _ = try store.enqueue(peer: peer.id.description, id: messageID, text: text, nowMs: now)
            } catch MessageStoreError.outboxFull {
                throw .failed("the outbox for \(peer.id) is full (\(store.limits.maxQueuedPerPeer) messages or \(store.limits.maxQueuedBytesPerPeer >> 20) MiB): wait until the peer is back, or RemovePeer")
            } catch {
                throw .failed("could not store the message: \(error)")
            }
            if peer.isConnected {
                sendQueuedMessages(to: peer)
            } else {
                scheduleRedial(peer, immediately: true)
            }
        }
        return messageID
    }

    func history(of ref: PeerRef, max: Int) throws(ServiceError) -> (PeerID, [StoredMessage]) {
        let peer = try peer(ref)
        return (peer.id, store.history(peer: peer.id.description, max: max))
    }

    private func expireMessages() {
        for (peer, messageID) in store.expire(nowMs: Self.nowMs()) {
            guard let id = PeerID(peer) else { continue }
            emit(.messageFailed(id, messageID: messageID, reason: "not delivered within \(store.limits.expiryMs / 86_400_000) days"))
        }
    }

    // MARK: Mute

    func setMuted(_ muted: Bool) {
        guard muted != isMuted else { return }
        isMuted = muted
        voice?.muted.store(muted, ordering: .relaxed)
        Log.info(muted ? "microphone muted" : "microphone unmuted")
        emit(.muteChanged(muted))
        emit(.propertiesChanged([.muted]))
    }

    func toggleMute() -> Bool {
        setMuted(!isMuted)
        return isMuted
    }

    // MARK: Pairing and voice

    /// Answers the prompt whose `PairingRequested` carried exactly `ref`: BlueZ's question for
    /// an address, the peer link's for an id.
    func confirmPairing(_ ref: PeerRef, accept: Bool) throws(ServiceError) {
        switch ref {
        case .address(let address):
            guard answerBluetoothPairing(address, accept: accept) else {
                throw .invalidArgument("no pairing request is pending for \(address)")
            }
        case .id(let id):
            guard let prompt = pairingPrompts.removeValue(forKey: id) else {
                throw .invalidArgument("no pairing request is pending for \(id)")
            }
            answer(prompt, for: id, accept: accept, reason: "refused here with ConfirmPairing")
        }
    }

    // MARK: Helpers

    static func nowMs() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }

    private static func loadInstanceID(in directory: String) throws -> InstanceID {
        let path = directory + "/instance"
        if let data = FileManager.default.contents(atPath: path),
           let id = InstanceID(hex: String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) {
            return id
        }
        let id = InstanceID.random()
        guard FileManager.default.createFile(atPath: path, contents: Data((id.hex + "\n").utf8),
                                             attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
        return id
    }
}
