import Foundation
import GIO
import PeerVoiceCore

/// One row of `ListPeers`.
struct PeerSummary {
    let id: PeerID
    let name: String
    let state: PeerState
}

/// A peer the service knows, with its link and redial state.
final class Peer {
    let id: PeerID
    var name: String
    var state: PeerState = .disconnected
    var instance: InstanceID?
    /// We can dial it: we dialled it, or it announced a listen port.
    var redialable: Bool
    /// The open link, once both HELLOs are exchanged.
    var link: PeerLink?
    var dial: DialAttempt?
    var redialTimer: EventSource?
    var backoffMs: UInt32 = 0
    /// Set by our `Disconnect` or the peer's user-disconnect goodbye: do not redial.
    var stayDisconnected = false
    /// `Connect` calls waiting for the link.
    var connectWaiters: [(Result<Void, ServiceError>) -> Void] = []
    /// Highest TEXT sequence received on the current link, for the cumulative ACK.
    var receivedUpTo: UInt64 = 0
    /// TEXT arrived since the last ACK was sent.
    var owesAck = false

    init(id: PeerID, name: String, redialable: Bool) {
        self.id = id
        self.name = name
        self.redialable = redialable
    }

    var isConnected: Bool { link != nil }
}

/// The control plane: peers, links, messages, mute. Lives on the GLib main loop thread; every
/// method is called there, and it reports what happens through `emit`.
final class PeerVoiceService {
    /// First and longest wait between redials of a dropped peer with pending messages.
    static let firstRedialMs: UInt32 = 250
    static let maxRedialMs: UInt32 = 5_000
    /// How often undeliverable messages are checked for expiry.
    static let expiryCheckMs: UInt32 = 60_000

    var emit: (ServiceEvent) -> Void = { _ in }

    private(set) var isMuted = false
    private(set) var isDiscovering = false
    private(set) var adapterName = ""
    var listenAddress: String { ip.listenAddress }

    private let options: Options
    private let instance: InstanceID
    private let store: MessageStore
    private let directory: PeerDirectory
    private let ip = IPTransport()
    private var peers: [PeerID: Peer] = [:]
    /// Links whose HELLO has not arrived yet, and the peer each outgoing one was dialled for.
    private var handshaking: [ObjectIdentifier: (link: PeerLink, peer: PeerID?)] = [:]
    /// The peer each open link belongs to.
    private var linkOwners: [ObjectIdentifier: Peer] = [:]
    private var expiryTimer: EventSource?

    private static let noBluetooth = "Bluetooth is not available: this PeerVoice does not use BlueZ yet; use an ip:HOST:PORT peer"
    private static let noVoice = "voice is not available yet: this PeerVoice has no audio support"

    /// Opens the state directory (instance id, known peers, message store). Nothing is sent or
    /// accepted until `start()`.
    init(options: Options) throws(ServiceError) {
        self.options = options
        let state = options.stateDirectory
        do {
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
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
            peers[id] = peer
        }
        for known in store.knownPeers {
            guard let id = try? PeerID(parsing: known), peers[id] == nil else { continue }
            peers[id] = Peer(id: id, name: "", redialable: id.transport == .ip)
        }
    }

    /// Starts accepting peers and delivering queued messages: called once the bus name is owned.
    func start() throws(ServiceError) {
        if let address = options.listen {
            try ip.listen(on: address)
            ip.onIncoming = { [unowned self] connection, remote in accept(connection, from: remote) }
            emit(.propertiesChanged([.listenAddress]))
        }
        for peer in peers.values where !store.pending(peer: peer.id.description).isEmpty {
            scheduleRedial(peer, immediately: true)
        }
        expireMessages()
        expiryTimer = Timer.every(milliseconds: Self.expiryCheckMs) { [unowned self] in
            expireMessages()
            return true
        }
    }

    /// Says goodbye to every connected peer (they redial only if they have messages for us).
    func shutdown() {
        for peer in peers.values {
            peer.link?.close(goodbye: .shuttingDown, logReason: "shutting down")
        }
    }

    // MARK: Discovery

    func startDiscovery() throws(ServiceError) {
        throw .notAvailable(Self.noBluetooth)
    }

    func stopDiscovery() throws(ServiceError) {
        throw .notAvailable(Self.noBluetooth)
    }

    // MARK: Peers

    func peerList() -> [PeerSummary] {
        peers.values.sorted { $0.id.description < $1.id.description }
            .map { PeerSummary(id: $0.id, name: $0.name, state: $0.state) }
    }

    func connect(_ id: PeerID, completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard id.transport == .ip else { return completion(.failure(.notAvailable(Self.noBluetooth))) }
        let peer = peers[id] ?? Peer(id: id, name: "", redialable: true)
        if peer.isConnected { return completion(.success(())) }
        peers[id] = peer
        peer.stayDisconnected = false
        peer.connectWaiters.append(completion)
        if peer.dial == nil && !isHandshaking(peer) {
            dial(peer)
        }
    }

    func disconnect(_ id: PeerID) throws(ServiceError) {
        let peer = try known(id)
        guard peer.isConnected || peer.dial != nil || peer.redialTimer != nil || isHandshaking(peer) else {
            throw .notConnected("\(id) is not connected")
        }
        peer.stayDisconnected = true
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
        for (key, entry) in handshaking where entry.peer == id {
            entry.link.drop(reason: "RemovePeer was called")
            handshaking[key] = nil
        }
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
        Log.info("removed \(id) (\(failed.count) queued messages failed)")
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
            let queued: OutgoingMessage
            do {
                queued = try store.enqueue(peer: peer.id.description, id: messageID, text: text, nowMs: now)
            } catch MessageStoreError.outboxFull {
                throw .failed("the outbox for \(peer.id) is full (\(store.limits.maxQueuedPerPeer) messages or \(store.limits.maxQueuedBytesPerPeer >> 20) MiB): wait until the peer is back, or RemovePeer")
            } catch {
                throw .failed("could not store the message: \(error)")
            }
            if let link = peer.link {
                link.send(.text(Self.textFrame(queued)))
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
        throw .invalidArgument("no pairing request is pending for \(id)")
    }

    func startVoice(_ id: PeerID) throws(ServiceError) {
        try requireConnected(id)
        throw .notAvailable(Self.noVoice)
    }

    func stopVoice(_ id: PeerID) throws(ServiceError) {
        try requireConnected(id)
        throw .notAvailable(Self.noVoice)
    }

    // MARK: Links

    private func accept(_ connection: StreamConnection, from remote: IPEndpoint) {
        let link = PeerLink(connection: connection, remote: remote, isOutgoing: false)
        startLink(link, for: nil)
    }

    private func dial(_ peer: Peer) {
        peer.redialTimer = nil
        setState(peer, .connecting)
        Log.debug("dialling \(peer.id)")
        peer.dial = ip.dial(IPEndpoint(host: peer.id.host, port: peer.id.port)) { [unowned self, weak peer] result in
            guard let peer, peers[peer.id] === peer else { return }
            peer.dial = nil
            switch result {
            case .success(let connection):
                startLink(PeerLink(connection: connection, remote: IPEndpoint(host: peer.id.host, port: peer.id.port),
                                   isOutgoing: true), for: peer.id)
            case .failure(let error):
                Log.info("\(error.message)")
                connectFailed(peer, error)
            }
        }
    }

    private func startLink(_ link: PeerLink, for peer: PeerID?) {
        handshaking[ObjectIdentifier(link)] = (link, peer)
        link.delegate = self
        link.start(hello: localHello)
    }

    private var localHello: Hello {
        // The name was checked at start-up; a HELLO that cannot be built is a bug, not input.
        try! Hello(instanceID: instance, capabilities: [.text], listenPort: ip.listenPort, voicePort: 0,
                   name: Hello.truncatedName(options.name))
    }

    private func connectFailed(_ peer: Peer, _ error: ServiceError) {
        failConnectWaiters(peer, error)
        setState(peer, .disconnected)
        if directory[peer.id.description] == nil && store.history(peer: peer.id.description, max: 1).isEmpty {
            // Never reached and nothing to deliver: not worth remembering.
            peers[peer.id] = nil
        } else {
            scheduleRedial(peer)
        }
    }

    /// Dials `peer` again later if it has messages waiting and may be dialled.
    private func scheduleRedial(_ peer: Peer, immediately: Bool = false) {
        guard peer.redialable, !peer.stayDisconnected, !peer.isConnected, peer.dial == nil, peer.redialTimer == nil,
              !isHandshaking(peer), !store.pending(peer: peer.id.description).isEmpty else { return }
        peer.backoffMs = immediately ? 0 : min(Self.maxRedialMs, max(Self.firstRedialMs, peer.backoffMs * 2))
        peer.redialTimer = Timer.after(milliseconds: peer.backoffMs) { [unowned self, weak peer] in
            guard let peer, peers[peer.id] === peer else { return }
            dial(peer)
        }
    }

    private func stopDialling(_ peer: Peer) {
        peer.dial?.cancel()
        peer.dial = nil
        peer.redialTimer = nil
        for (key, entry) in handshaking where entry.peer == peer.id {
            entry.link.drop(reason: "no longer wanted")
            handshaking[key] = nil
        }
    }

    private func isHandshaking(_ peer: Peer) -> Bool {
        handshaking.values.contains { $0.peer == peer.id }
    }

    private func failConnectWaiters(_ peer: Peer, _ error: ServiceError) {
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.failure(error)) }
    }

    private func setState(_ peer: Peer, _ state: PeerState) {
        guard peer.state != state else { return }
        peer.state = state
        emit(.peerStateChanged(peer.id, state))
    }

    private func known(_ id: PeerID) throws(ServiceError) -> Peer {
        guard let peer = peers[id] else {
            throw .unknownPeer("\(id) is not a known peer: Connect to it first (ListPeers shows known peers)")
        }
        return peer
    }

    private func requireConnected(_ id: PeerID) throws(ServiceError) {
        guard try known(id).isConnected else { throw .notConnected("\(id) is not connected: Connect to it first") }
    }

    private static func textFrame(_ message: OutgoingMessage) -> TextFrame {
        // Stored messages were validated by Send; one that no longer encodes is a bug.
        try! TextFrame(seq: message.seq, messageID: MessageID(hex: message.id)!, sentAtMs: message.sentAtMs, text: message.text)
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

extension PeerVoiceService: PeerLinkDelegate {
    func linkDidOpen(_ link: PeerLink) {
        guard let entry = handshaking.removeValue(forKey: ObjectIdentifier(link)), let hello = link.peerHello else { return }
        if hello.instanceID == instance {
            link.close(goodbye: .protocolError, logReason: "connected to itself")
            if let id = entry.peer, let peer = peers[id] {
                connectFailed(peer, .failed("\(id) is this peervoiced itself"))
            }
            return
        }
        let peer: Peer
        if let id = entry.peer, let dialled = peers[id] {
            peer = dialled
        } else {
            // A peer that dialled us is named by its address and the listen port it announces.
            let announced = hello.listenPort != 0
            let id = PeerID(ipHost: link.remote.host, port: announced ? hello.listenPort : link.remote.port)
            peer = peers[id] ?? Peer(id: id, name: hello.name, redialable: announced)
            peer.redialable = peer.redialable || announced
            peers[id] = peer
        }
        if let existing = peer.link, existing !== link {
            guard keepsNewLink(existing: existing, new: link, peerInstance: hello.instanceID) else {
                link.drop(reason: "\(peer.id) already has a link")
                return
            }
            existing.delegate = nil
            linkOwners[ObjectIdentifier(existing)] = nil
            existing.drop(reason: "replaced by a newer link")
        }
        peer.link = link
        linkOwners[ObjectIdentifier(link)] = peer
        peer.name = hello.name
        peer.instance = hello.instanceID
        peer.receivedUpTo = 0
        peer.backoffMs = 0
        peer.stayDisconnected = false
        stopDialling(peer)
        do {
            try directory.save(KnownPeer(id: peer.id.description, name: peer.name, instance: hello.instanceID.hex,
                                         redialable: peer.redialable))
        } catch {
            Log.warning("could not remember \(peer.id): \(error)")
        }
        Log.info("\(peer.id) connected (\(link.isOutgoing ? "dialled" : "incoming"))")
        setState(peer, .connected)
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.success(())) }
        for message in store.pending(peer: peer.id.description) {
            link.send(.text(Self.textFrame(message)))
        }
    }

    /// When two links to one peer are open at once (both sides dialled), both sides keep the link
    /// dialled by the smaller instance id, so they agree without talking; otherwise the newer
    /// link wins (the peer restarted before we noticed the old one die).
    private func keepsNewLink(existing: PeerLink, new: PeerLink, peerInstance: InstanceID) -> Bool {
        guard existing.isOutgoing != new.isOutgoing else { return true }
        let newDialler = new.isOutgoing ? instance : peerInstance
        let otherDialler = new.isOutgoing ? peerInstance : instance
        return newDialler.hex < otherDialler.hex
    }

    func link(_ link: PeerLink, received frame: Frame) {
        guard let peer = linkOwners[ObjectIdentifier(link)], let hello = link.peerHello else { return }
        switch frame {
        case .text(let text):
            do {
                let isNew = try store.receive(peer: peer.id.description, senderInstance: hello.instanceID.hex, seq: text.seq,
                                              id: text.messageID.hex, text: text.text, sentAtMs: text.sentAtMs,
                                              nowMs: Self.nowMs())
                if isNew { emit(.messageReceived(peer.id, messageID: text.messageID.hex, text: text.text)) }
                peer.receivedUpTo = max(peer.receivedUpTo, text.seq)
                peer.owesAck = true
            } catch {
                // Not acknowledged, so the sender keeps it and sends it again on the next link.
                Log.error("could not store a message from \(peer.id): \(error)")
                link.drop(reason: "local storage failed")
            }
        case .ack(let seq):
            for messageID in store.acknowledge(peer: peer.id.description, upTo: seq) {
                emit(.messageDelivered(peer.id, messageID: messageID))
            }
        case .voice, .hello, .keepalive, .goodbye:
            break
        }
    }

    /// One ACK per read rather than per message: stored messages are acknowledged together.
    func linkDidDrainInput(_ link: PeerLink) {
        guard let peer = linkOwners[ObjectIdentifier(link)], peer.owesAck else { return }
        peer.owesAck = false
        link.send(.ack(seq: peer.receivedUpTo))
    }

    func linkDidClose(_ link: PeerLink, reason: String, goodbye: GoodbyeReason?) {
        if let entry = handshaking.removeValue(forKey: ObjectIdentifier(link)) {
            Log.info("link with \(entry.peer?.description ?? link.remote.description) closed during the handshake: \(reason)")
            if let id = entry.peer, let peer = peers[id], !peer.isConnected {
                connectFailed(peer, .failed("\(id) closed the connection during the handshake: \(reason)"))
            }
            return
        }
        guard let peer = linkOwners.removeValue(forKey: ObjectIdentifier(link)) else { return }
        peer.link = nil
        Log.info("\(peer.id) disconnected: \(reason)")
        if goodbye == .userDisconnected { peer.stayDisconnected = true }
        setState(peer, .disconnected)
        scheduleRedial(peer)
    }
}
