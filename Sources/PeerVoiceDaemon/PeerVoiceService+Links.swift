import GIO
import PeerVoiceCore

/// A first-contact prompt waiting for a person's `ConfirmPairing`.
struct PairingPrompt {
    let link: PeerLink
    let timeout: EventSource
}

extension PeerVoiceService {
    /// First and longest wait between redials of a dropped peer with pending messages.
    static let firstRedialMs: UInt32 = 250
    static let maxRedialMs: UInt32 = 5_000
    /// How long a person has to compare codes.
    static let pairingTimeoutMs: UInt32 = 60_000
    /// Unacknowledged TEXT bytes on one link: enough to keep a LAN busy, small enough that a
    /// peer that stopped reading is noticed rather than buffered.
    static let sendWindowBytes = 2 << 20
    /// A run without any acknowledgement for this long is sent again (a record was lost).
    static let resendAfter: Duration = .seconds(2)

    // MARK: Dialling

    func dial(_ peer: Peer) {
        peer.redialTimer = nil
        setState(peer, .connecting)
        Log.debug("dialling \(peer.id)")
        guard peer.id.transport == .ip else { return dialBluetooth(peer) }
        let endpoint = IPEndpoint(host: peer.id.host, port: peer.id.port)
        peer.dial = ip.dial(endpoint) { [unowned self, weak peer] result in
            guard let peer, peers[peer.id] === peer else { return }
            peer.dial = nil
            switch result {
            case .success(let connection):
                startLink(PeerLink(connection: connection, remote: .ip(endpoint), isOutgoing: true), for: peer.id)
            case .failure(let error):
                Log.info("\(error.message)")
                connectFailed(peer, error)
            }
        }
    }

    /// Starts the key exchange on a new connection; `peer` is who we dialled (nil: incoming).
    func startLink(_ link: PeerLink, for peer: PeerID?) {
        pendingLinks[ObjectIdentifier(link)] = (link, peer)
        link.delegate = self
        let pinned = peer.flatMap { peers[$0]?.pinnedKey }.flatMap(Self.bytes(hex:))
        link.start(hello: localHello, identity: identity, pinnedKey: pinned, crypto: crypto)
    }

    private var localHello: Hello {
        // Every field is in range by construction; a HELLO that cannot be built is a bug.
        try! Hello(instanceID: instance, capabilities: voice == nil ? [.text] : [.text, .voice],
                   listenPort: ip.listenPort, voicePort: voicePort,
                   name: Hello.truncatedName(options.name))
    }

    func connectFailed(_ peer: Peer, _ error: ServiceError) {
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
    func scheduleRedial(_ peer: Peer, immediately: Bool = false) {
        guard peer.redialable, !peer.stayDisconnected, !peer.isConnected, peer.dial == nil, peer.redialTimer == nil,
              !hasPendingLink(peer), store.hasPending(peer: peer.id.description) else { return }
        peer.backoffMs = immediately ? 0 : min(Self.maxRedialMs, max(Self.firstRedialMs, peer.backoffMs * 2))
        peer.redialTimer = Timer.after(milliseconds: peer.backoffMs) { [unowned self, weak peer] in
            guard let peer, peers[peer.id] === peer else { return }
            dial(peer)
        }
    }

    func stopDialling(_ peer: Peer) {
        peer.dial?.cancel()
        peer.dial = nil
        peer.redialTimer = nil
        if let prompt = pairingPrompts.removeValue(forKey: peer.id) {
            prompt.timeout.cancel()
        }
        for (key, entry) in pendingLinks where entry.peer == peer.id {
            pendingLinks[key] = nil
            entry.link.drop(reason: "no longer wanted")
        }
    }

    func hasPendingLink(_ peer: Peer) -> Bool {
        pendingLinks.values.contains { $0.peer == peer.id }
    }

    func failConnectWaiters(_ peer: Peer, _ error: ServiceError) {
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.failure(error)) }
    }

    func setState(_ peer: Peer, _ state: PeerState) {
        guard peer.state != state else { return }
        peer.state = state
        emit(.peerStateChanged(peer.id, state))
    }

    func setStayDisconnected(_ peer: Peer, _ stay: Bool) {
        peer.stayDisconnected = stay
        if directory[peer.id.description] != nil { remember(peer) }
    }

    /// Saves what we know about `peer` (name, instance, pinned key, redial choice).
    func remember(_ peer: Peer) {
        do {
            try directory.save(KnownPeer(id: peer.id.description, name: peer.name, instance: peer.instance?.hex,
                                         redialable: peer.redialable, key: peer.pinnedKey,
                                         stayDisconnected: peer.stayDisconnected))
        } catch {
            Log.warning("could not remember \(peer.id) in the state directory: \(error)")
        }
    }

    // MARK: Pairing

    /// Answers a first-contact prompt: the link opens once the peer's person accepts too.
    func answer(_ prompt: PairingPrompt, for id: PeerID, accept: Bool, reason: String) {
        prompt.timeout.cancel()
        if accept {
            Log.info("pairing with \(id) accepted here")
            prompt.link.accept()
        } else {
            Log.info("pairing with \(id) \(reason)")
            if let peer = peers[id] {
                setStayDisconnected(peer, true)
                failConnectWaiters(peer, .rejected("pairing with \(id) was \(reason)"))
            }
            prompt.link.refuse(logReason: "pairing \(reason)")
        }
    }

    /// The peer an authenticated link belongs to: the one we dialled, or for an incoming link
    /// the address it came from with the listen port it announces.
    private func peer(for link: PeerLink, dialled: PeerID?, hello: Hello) -> Peer? {
        if let dialled { return peers[dialled] }
        let id: PeerID
        let announced = hello.listenPort != 0
        switch link.remote {
        case .ip(let endpoint):
            id = PeerID(ipHost: endpoint.host, port: announced ? hello.listenPort : endpoint.port)
        case .bluetooth(let address):
            guard let bluetooth = PeerID(bluetoothAddress: address) else { return nil }
            id = bluetooth
        }
        let peer = peers[id] ?? Peer(id: id, name: hello.name, redialable: false)
        if id.transport == .ip { peer.redialable = peer.redialable || announced }
        peers[id] = peer
        return peer
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    static func bytes(hex: String) -> [UInt8]? {
        guard hex.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }

    // MARK: Delivery

    /// Sends queued messages the window allows, continuing the link's run: each TEXT names its
    /// predecessor so the receiver notices one lost to a rejected record.
    func sendQueuedMessages(to peer: Peer) {
        guard let link = peer.link else { return }
        while peer.inFlightBytes < Self.sendWindowBytes {
            let batch = store.pending(peer: peer.id.description, after: peer.sentUpTo, limit: 64)
            guard !batch.isEmpty else { return }
            for message in batch {
                // Stored messages passed Send's checks; one that no longer encodes is a bug.
                let text = try! TextFrame(seq: message.seq, previousSeq: peer.lastSentInRun,
                                          messageID: MessageID(hex: message.id)!, sentAtMs: message.sentAtMs,
                                          text: message.text)
                link.send(.text(text))
                if !peer.hasUnacknowledged { peer.lastAckProgress = .now }
                peer.lastSentInRun = message.seq
                peer.sentUpTo = message.seq
                let bytes = message.text.utf8.count + 64
                peer.inFlight.append((message.seq, bytes))
                peer.inFlightBytes += bytes
                if peer.inFlightBytes >= Self.sendWindowBytes { return }
            }
        }
    }

    /// Sends again every run the peer stopped acknowledging (a record carrying a TEXT or an ACK
    /// was rejected on the way); the receiver drops duplicates.
    func resendStalledRuns() {
        for peer in peers.values where peer.isConnected && peer.hasUnacknowledged
            && ContinuousClock.now - peer.lastAckProgress > Self.resendAfter {
            Log.info("\(peer.id) acknowledged nothing for \(Self.resendAfter): sending its queue again")
            peer.restartRun()
            sendQueuedMessages(to: peer)
        }
    }
}

extension PeerVoiceService: PeerLinkDelegate {
    func linkDidAuthenticate(_ link: PeerLink) {
        guard let entry = pendingLinks[ObjectIdentifier(link)], let hello = link.peerHello,
              let result = link.result else { return }
        if hello.instanceID == instance || result.remoteStaticKey == identity.publicKey {
            link.drop(reason: "connected to itself")
            if let id = entry.peer, let peer = peers[id] {
                connectFailed(peer, .failed("\(id) is this peervoiced itself"))
            }
            return
        }
        guard let peer = peer(for: link, dialled: entry.peer, hello: hello) else {
            link.drop(reason: "no peer id for \(link.remote)")
            return
        }
        pendingLinks[ObjectIdentifier(link)] = (link, peer.id)
        let key = Self.hex(result.remoteStaticKey)
        if peer.pinnedKey == key {
            if !link.isOutgoing { pairingLimiter.giveBack(host: Self.host(of: link.remote)) }
            link.accept()
        } else if let pinned = peer.pinnedKey {
            // An incoming link from a pinned peer with another key (a dialled one fails earlier,
            // inside the key exchange, before we reveal who we are).
            Log.warning("\(peer.id) presented identity key \(key.prefix(16))… but \(pinned.prefix(16))… is pinned: refused. If it was reinstalled, RemovePeer \(peer.id) and connect again to compare codes")
            link.refuse(logReason: "identity key differs from the pinned one")
        } else if refusesFirstContact(over: link) {
            Log.info("first contact from \(link.remote) refused: not discoverable (StartDiscovery, or --listen, accepts them)")
            link.refuse(logReason: "first contact while not discoverable")
        } else if pairingPrompts[peer.id] != nil {
            link.drop(reason: "a pairing prompt for \(peer.id) is already pending")
        } else {
            setState(peer, .pairing)
            peer.name = hello.name
            let timeout = Timer.after(milliseconds: Self.pairingTimeoutMs) { [unowned self] in
                guard let prompt = pairingPrompts.removeValue(forKey: peer.id) else { return }
                answer(prompt, for: peer.id, accept: false, reason: "not confirmed within \(Self.pairingTimeoutMs / 1000) s")
            }
            pairingPrompts[peer.id] = PairingPrompt(link: link, timeout: timeout)
            Log.info("first contact with \(peer.id): waiting for ConfirmPairing")
            emit(.pairingRequested(peer.id, name: hello.name, passkey: result.verificationCode))
        }
    }

    func linkMayContinueAfterCommitment(_ link: PeerLink) -> Bool {
        guard pairingLimiter.allow(host: Self.host(of: link.remote), nowMs: Self.nowMs()) else {
            Log.warning("too many key exchanges from \(Self.host(of: link.remote)) within a minute: closing \(link.remote) without going on (each one could be a guess at a pairing code)")
            return false
        }
        return true
    }

    static func host(of remote: RemoteEndpoint) -> String {
        switch remote {
        case .ip(let endpoint): endpoint.host
        case .bluetooth(let address): address
        }
    }

    func linkDidOpen(_ link: PeerLink) {
        guard let entry = pendingLinks.removeValue(forKey: ObjectIdentifier(link)), let id = entry.peer,
              let peer = peers[id], let hello = link.peerHello, let result = link.result else {
            link.drop(reason: "opened for no known peer")
            return
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
        peer.pinnedKey = Self.hex(result.remoteStaticKey)
        peer.backoffMs = 0
        peer.stayDisconnected = false
        peer.resetDelivery()
        stopDialling(peer)
        remember(peer)
        listenForKnownPeers()
        Log.info("\(peer.id) connected (\(link.isOutgoing ? "dialled" : "incoming"), key \(peer.pinnedKey!.prefix(16))…)")
        setState(peer, .connected)
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.success(())) }
        sendQueuedMessages(to: peer)
        peer.voice.destination = Self.voiceDestination(of: peer, link: link, hello: hello)
        if options.voice.autoStart { peer.voice.wanted = true }
        beginVoice(peer)
    }

    /// Voice goes to the voice port the peer announced, else to the address we dialled (a relay
    /// in between carries voice too), else to the peer's listen port.
    private static func voiceDestination(of peer: Peer, link: PeerLink, hello: Hello) -> IPEndpoint? {
        guard peer.id.transport == .ip else { return nil }
        if link.isOutgoing && hello.voicePort == 0 { return IPEndpoint(host: peer.id.host, port: peer.id.port) }
        return hello.voiceDestinationPort.map { IPEndpoint(host: peer.id.host, port: $0) }
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
            guard text.previousSeq == 0 || text.previousSeq == peer.lastReceivedInRun else {
                // A TEXT before this one was lost (a rejected record): without an ACK past it,
                // the sender sends the run again.
                Log.debug("\(peer.id): TEXT \(text.seq) follows \(text.previousSeq), not \(peer.lastReceivedInRun): waiting for the resend")
                return
            }
            do {
                let isNew = try store.receive(peer: peer.id.description, senderInstance: hello.instanceID.hex, seq: text.seq,
                                              id: text.messageID.hex, text: text.text, sentAtMs: text.sentAtMs,
                                              nowMs: Self.nowMs())
                if isNew { emit(.messageReceived(peer.id, messageID: text.messageID.hex, text: text.text)) }
                peer.lastReceivedInRun = text.seq
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
            peer.acknowledged(upTo: seq)
            sendQueuedMessages(to: peer)
        case .voiceStart, .voiceStop, .voiceReport, .voice:
            peerSentVoiceFrame(frame, peer: peer)
        case .hello, .keepalive, .goodbye, .pairing:
            break
        }
    }

    /// One ACK per read rather than per message: stored messages are acknowledged together.
    func linkDidDrainInput(_ link: PeerLink) {
        guard let peer = linkOwners[ObjectIdentifier(link)], peer.owesAck else { return }
        peer.owesAck = false
        link.send(.ack(seq: peer.receivedUpTo))
    }

    func linkDidClose(_ link: PeerLink, reason: LinkCloseReason) {
        bluetoothLinkDidClose(link)
        if let entry = pendingLinks.removeValue(forKey: ObjectIdentifier(link)) {
            pendingLinkClosed(link, peer: entry.peer.flatMap { peers[$0] }, reason: reason)
            return
        }
        guard let peer = linkOwners.removeValue(forKey: ObjectIdentifier(link)) else { return }
        endVoice(peer, reason: "the link closed")
        peer.link = nil
        Log.info("\(peer.id) disconnected: \(reason)")
        if case .goodbye(.userDisconnected) = reason { setStayDisconnected(peer, true) }
        setState(peer, .disconnected)
        scheduleRedial(peer)
    }

    /// A link that never opened: the key exchange or the pairing failed, or it was dropped.
    private func pendingLinkClosed(_ link: PeerLink, peer: Peer?, reason: LinkCloseReason) {
        Log.info("link with \(peer?.id.description ?? link.remote.description) closed before opening: \(reason)")
        guard let peer, !peer.isConnected else { return }
        if let prompt = pairingPrompts[peer.id], prompt.link === link {
            pairingPrompts[peer.id] = nil
            prompt.timeout.cancel()
        }
        let error: ServiceError
        switch reason {
        case .refusedByPeer:
            setStayDisconnected(peer, true)
            error = .rejected("\(peer.id) refused the pairing")
        case .handshakeFailed(.unexpectedRemoteKey):
            setStayDisconnected(peer, true)
            Log.warning("\(peer.id) presented an identity key other than the pinned one: refused. If it was reinstalled, RemovePeer \(peer.id) and connect again to compare codes")
            error = .rejected("\(peer.id) presented an identity key other than the pinned one: it may be an impostor. If it was reinstalled, RemovePeer \(peer.id) and Connect again to compare codes")
        default:
            // A first contact that failed is not retried on its own: each try would ask a person.
            if peer.pinnedKey == nil { peer.stayDisconnected = true }
            error = .failed("\(peer.id): \(reason)")
        }
        connectFailed(peer, error)
    }
}
