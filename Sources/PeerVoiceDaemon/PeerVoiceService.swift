import Foundation
import GIO
import PeerVoiceCore
import Sodium

/// The control plane: peers, links, pairing, messages, mute. Lives on the GLib main loop thread;
/// every method is called there, and it reports what happens through `emit`.
///
/// This file holds the bus-facing methods; PeerVoiceService+Links.swift the links, pairing and
/// delivery.
final class PeerVoiceService {
    var emit: (ServiceEvent) -> Void = { _ in }

    private(set) var isMuted = false
    var isDiscovering: Bool { bluetooth?.isDiscovering ?? false }
    var adapterName: String { bluetooth?.adapterName ?? "" }
    var listenAddress: String { ip.listenAddress }
    /// The capture processing of the latest voice session (before one: what the options allow).
    var audioProcessing: [String]

    let options: Options
    let instance: InstanceID
    let identity: StaticIdentity
    let crypto = LibSodium()
    let store: MessageStore
    let directory: PeerDirectory
    let ip = IPTransport()
    /// The voice thread, once its UDP socket is bound (PeerVoiceService+Voice.swift).
    var voice: VoiceEngine?
    /// The UDP port HELLO announces for voice when we do not listen (0: the listen port).
    var voicePort: UInt16 = 0
    /// BlueZ, once started (PeerVoiceService+Bluetooth.swift).
    var bluetooth: BluetoothTransport?
    var peers: [PeerID: Peer] = [:]
    /// Links not yet open, and the peer each belongs to (known from the dial, or once authenticated).
    var pendingLinks: [ObjectIdentifier: (link: PeerLink, peer: PeerID?)] = [:]
    /// The peer each open link belongs to.
    var linkOwners: [ObjectIdentifier: Peer] = [:]
    /// Pairing prompts waiting for `ConfirmPairing`, at most one per peer.
    var pairingPrompts: [PeerID: PairingPrompt] = [:]
    var pairingLimiter = PairingRateLimiter()
    private var timers: [EventSource] = []

    /// How often undeliverable messages are checked for expiry.
    static let expiryCheckMs: UInt32 = 60_000

    /// Opens the state directory (identity key, instance id, known peers, message store).
    /// Nothing is sent or accepted until `start()`.
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
        do {
            instance = try Self.loadInstanceID(in: state)
            store = try MessageStore(directory: state + "/messages", onWarning: { Log.warning("message store: \($0)") })
            directory = try PeerDirectory(path: state + "/peers.json")
        } catch {
            throw .failed("cannot use the state directory \(state): \(error)")
        }
        for known in directory.all {
            guard let id = try? PeerID(parsing: known.id) else { continue }
            let peer = Peer(id: id, name: known.name, redialable: known.redialable)
            peer.instance = known.instance.flatMap { InstanceID(hex: $0) }
            peer.pinnedKey = known.key
            peer.stayDisconnected = known.stayDisconnected
            peers[id] = peer
        }
        for known in store.knownPeers {
            guard let id = try? PeerID(parsing: known), peers[id] == nil else { continue }
            peers[id] = Peer(id: id, name: "", redialable: id.transport == .ip)
        }
        Log.info("identity \(identity.fingerprint)")
    }

    /// Starts accepting peers and delivering queued messages: called once the bus name is owned.
    func start() throws(ServiceError) {
        if let address = options.listen {
            try ip.listen(on: address)
            ip.onIncoming = { [unowned self] connection, remote in
                // A host that used up its key exchanges is turned away before any work.
                if pairingLimiter.isExhausted(host: remote.host, nowMs: Self.nowMs()) {
                    Log.info("turned away \(remote): too many key exchanges from \(remote.host) within a minute")
                    connection.closeAfterFlushing()
                    return
                }
                startLink(PeerLink(connection: connection, remote: .ip(remote), isOutgoing: false), for: nil)
            }
            emit(.propertiesChanged([.listenAddress]))
        }
        startVoiceEngine()
        startBluetooth()
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
        voice?.shutdown()
    }

    // MARK: Discovery

    func startDiscovery() throws(ServiceError) {
        try startBluetoothDiscovery()
    }

    func stopDiscovery() throws(ServiceError) {
        try stopBluetoothDiscovery()
    }

    // MARK: Peers

    func peerList() -> [PeerSummary] {
        let known = peers.values.map(\.summary)
        let found = bluetoothPeerSummaries(excluding: Set(peers.keys))
        return (known + found).sorted { $0.id.description < $1.id.description }
    }

    func connect(_ id: PeerID, completion: @escaping (Result<Void, ServiceError>) -> Void) {
        if let unavailable = bluetoothUnavailable(for: id) { return completion(.failure(unavailable)) }
        let peer = peers[id] ?? Peer(id: id, name: "", redialable: true)
        if peer.isConnected { return completion(.success(())) }
        peers[id] = peer
        setStayDisconnected(peer, false)
        peer.connectWaiters.append(completion)
        if peer.dial == nil && !hasPendingLink(peer) {
            dial(peer)
        }
    }

    func disconnect(_ id: PeerID) throws(ServiceError) {
        let peer = try known(id)
        guard peer.isConnected || peer.dial != nil || peer.redialTimer != nil || hasPendingLink(peer) else {
            throw .notConnected("\(id) is not connected")
        }
        setStayDisconnected(peer, true)
        stopDialling(peer)
        failConnectWaiters(peer, .failed("Disconnect(\(id)) was called while connecting"))
        if let link = peer.link {
            link.close(goodbye: .userDisconnected, logReason: "Disconnect was called")
        } else {
            setState(peer, .disconnected)
        }
    }

    func removePeer(_ id: PeerID) throws(ServiceError) {
        let peer = try known(id)
        peer.stayDisconnected = true
        stopDialling(peer)
        failConnectWaiters(peer, .failed("RemovePeer(\(id)) was called while connecting"))
        peer.link?.close(goodbye: .userDisconnected, logReason: "RemovePeer was called")
        let failed: [String]
        do {
            failed = try store.forget(peer: id.description)
            try directory.remove(id: id.description)
        } catch {
            throw .failed("could not forget \(id) in the state directory: \(error)")
        }
        peers[id] = nil
        for messageID in failed {
            emit(.messageFailed(id, messageID: messageID, reason: "the peer was removed"))
        }
        Log.info("removed \(id): key unpinned, \(failed.count) queued messages failed")
    }

    // MARK: Messages

    /// Queues `text` for `peer` (nil: every connected peer) and returns the message id.
    func send(_ text: String, to id: PeerID?) throws(ServiceError) -> String {
        try MessageText.validate(text)
        let targets: [Peer]
        if let id {
            targets = [try known(id)]
        } else {
            targets = peers.values.filter(\.isConnected).sorted { $0.id.description < $1.id.description }
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

    func history(of id: PeerID, max: Int) throws(ServiceError) -> [StoredMessage] {
        _ = try known(id)
        return store.history(peer: id.description, max: max)
    }

    private func expireMessages() {
        for (peer, messageID) in store.expire(nowMs: Self.nowMs()) {
            guard let id = try? PeerID(parsing: peer) else { continue }
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

    func confirmPairing(_ id: PeerID, accept: Bool) throws(ServiceError) {
        if answerBluetoothPairing(id, accept: accept) { return }
        guard let prompt = pairingPrompts.removeValue(forKey: id) else {
            throw .invalidArgument("no pairing request is pending for \(id)")
        }
        answer(prompt, for: id, accept: accept, reason: "refused here with ConfirmPairing")
    }

    // MARK: Helpers

    func known(_ id: PeerID) throws(ServiceError) -> Peer {
        guard let peer = peers[id] else {
            throw .unknownPeer("\(id) is not a known peer: Connect to it first (ListPeers shows known peers)")
        }
        return peer
    }

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
