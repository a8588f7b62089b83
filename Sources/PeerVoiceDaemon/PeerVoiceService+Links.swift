import GIO
import PeerVoiceBus
import PeerVoiceCore

/// A first-contact prompt waiting for a person's `ConfirmPairing`.
struct PairingPrompt {
    let link: PeerLink
    let timeout: EventSource
}

/// Who a link was dialled for: a known peer (by one of its routes), or an address whose key is
/// not known yet.
enum DialTarget: Equatable {
    case peer(PeerID)
    case contact(PeerAddress)
}

/// A link not yet open: who it was dialled for (nil: incoming), and once authenticated, the peer
/// its key names and the route it came by (nil when it cannot be dialled back).
struct PendingLink {
    let link: PeerLink
    let dialled: DialTarget?
    var peer: PeerID?
    var route: PeerAddress?
}

extension PeerVoiceService {
    /// First and longest wait between redials of a dropped peer with pending messages.
    static let firstRedialMs: UInt32 = 250
    static let maxRedialMs: UInt32 = 5_000

    // MARK: Dialling

    /// Dials `peer` on its routes, best first (IP before Bluetooth, then the most recent);
    /// `preferred` first when the caller named a route.
    func dial(_ peer: Peer, preferring preferred: PeerAddress? = nil) {
        peer.redialTimer = nil
        var order = peer.routes.sorted(by: PeerRoute.dialOrder).map(\.address)
        if let preferred {
            order.removeAll { $0 == preferred }
            order.insert(preferred, at: 0)
        }
        if bluetoothUnavailable(for: .bluetooth) != nil { order.removeAll { $0.transport == .bluetooth } }
        guard let first = order.first else {
            return connectFailed(peer, .notAvailable("no route to \(peer.id) can be used now: Connect to one of its addresses"))
        }
        setState(peer, .connecting)
        dialRoute(peer, PeerDial(address: first, remaining: Array(order.dropFirst())))
    }

    private func dialRoute(_ peer: Peer, _ dial: PeerDial) {
        peer.dial = dial
        Log.debug("dialling \(peer.id) at \(dial.address)")
        dial.attempt = dialAddress(
            dial.address, for: .peer(peer.id), mayPair: !peer.connectWaiters.isEmpty,
            isCurrent: { [unowned self, weak peer] in peer.map { peers[$0.id] === $0 && $0.dial === dial } ?? false },
            opened: { [weak peer] in peer?.dial = nil }
        ) { [unowned self, weak peer] error in
            guard let peer else { return }
            peer.dial = nil
            if let next = dial.remaining.first {
                Log.info("\(dial.address) of \(peer.id): \(error.message); trying \(next)")
                dialRoute(peer, PeerDial(address: next, remaining: Array(dial.remaining.dropFirst())))
            } else {
                Log.info("\(error.message)")
                connectFailed(peer, error)
            }
        }
    }

    /// Dials an address whose key is not known yet.
    func dial(_ contact: Contact) {
        setState(contact, .connecting)
        Log.debug("dialling \(contact.address)")
        let address = contact.address
        if address.transport == .bluetooth, contact.name.isEmpty, let device = bluetooth?.device(address.description) {
            contact.name = device.name
        }
        // Every outcome arrives on a later main-loop turn, once `attempt` is set.
        var attempt: DialAttempt?
        attempt = dialAddress(
            address, for: .contact(address), mayPair: !contact.connectWaiters.isEmpty,
            isCurrent: { [unowned self, weak contact] in contact.map { contacts[address] === $0 && $0.dial === attempt } ?? false },
            opened: { [weak contact] in contact?.dial = nil }
        ) { [unowned self, weak contact] error in
            guard let contact else { return }
            contact.dial = nil
            Log.info("\(error.message)")
            contactFailed(contact, error)
        }
        contact.dial = attempt
    }

    /// Dials one address for `target`. Over IP the connection becomes a link here; over Bluetooth
    /// BlueZ hands the channel to `bluetoothChannelOpened`. An outcome counts only while
    /// `isCurrent()` holds; `opened` runs just before the link starts.
    private func dialAddress(_ address: PeerAddress, for target: DialTarget, mayPair: Bool,
                             isCurrent: @escaping () -> Bool, opened: @escaping () -> Void,
                             failed: @escaping (ServiceError) -> Void) -> DialAttempt {
        switch address.transport {
        case .ip:
            let endpoint = IPEndpoint(host: address.host, port: address.port)
            return ip.dial(endpoint) { [unowned self] result in
                guard isCurrent() else { return }
                switch result {
                case .success(let connection):
                    opened()
                    startLink(PeerLink(connection: connection, remote: .ip(endpoint), isOutgoing: true), dialled: target)
                case .failure(let error):
                    failed(error)
                }
            }
        case .bluetooth:
            dialBluetooth(address, mayPair: mayPair) { error in
                if isCurrent() { failed(error) }
            }
            return DialAttempt()
        }
    }

    /// Starts the key exchange on a new connection (`dialled` nil: incoming).
    func startLink(_ link: PeerLink, dialled: DialTarget?) {
        pendingLinks[ObjectIdentifier(link)] = PendingLink(link: link, dialled: dialled)
        link.delegate = self
        var pinned: PublicKey?
        if case .peer(let id) = dialled, let peer = peers[id], peer.paired { pinned = peer.key }
        link.start(hello: localHello, identity: identity, pinnedKey: pinned?.bytes, crypto: crypto)
    }

    private var localHello: Hello {
        // Every field is in range by construction; a HELLO that cannot be built is a bug.
        try! Hello(instanceID: instance, capabilities: voice == nil ? [.text] : [.text, .voice],
                   listenPort: ip.listenPort, voicePort: voicePort,
                   name: Hello.truncatedName(settings.name))
    }

    func connectFailed(_ peer: Peer, _ error: ServiceError) {
        failConnectWaiters(peer, error)
        setState(peer, .disconnected)
        if !peer.paired && !peer.isConnected && store.history(peer: peer.id.description, max: 1).isEmpty {
            // Never paired and nothing queued: not worth remembering.
            if peers[peer.id] === peer { peers[peer.id] = nil }
        } else {
            scheduleRedial(peer)
        }
    }

    func contactFailed(_ contact: Contact, _ error: ServiceError) {
        let waiters = contact.connectWaiters
        contact.connectWaiters = []
        setState(contact, .disconnected)
        if contacts[contact.address] === contact { contacts[contact.address] = nil }
        // The state change showed the contact's object as it was: its removal shows now.
        peersChanged()
        waiters.forEach { $0(.failure(error)) }
    }

    /// Dials `peer` again later if it has messages waiting and may be dialled.
    func scheduleRedial(_ peer: Peer, immediately: Bool = false) {
        guard peer.paired, !peer.routes.isEmpty, !peer.stayDisconnected, !peer.isConnected, peer.dial == nil,
              peer.redialTimer == nil, !hasPendingLink(peer), store.hasPending(peer: peer.id.description) else { return }
        peer.backoffMs = immediately ? 0 : min(Self.maxRedialMs, max(Self.firstRedialMs, peer.backoffMs * 2))
        peer.redialTimer = Timer.after(milliseconds: peer.backoffMs) { [unowned self, weak peer] in
            guard let peer, peers[peer.id] === peer else { return }
            dial(peer)
        }
    }

    func stopDialling(_ peer: Peer) {
        peer.dial?.attempt?.cancel()
        peer.dial = nil
        peer.redialTimer = nil
        if let prompt = pairingPrompts.removeValue(forKey: peer.id) {
            prompt.timeout.cancel()
            emit(.pairingSettled(.id(peer.id), accepted: false))
        }
        for (key, entry) in pendingLinks where entry.peer == peer.id || entry.dialled == .peer(peer.id) {
            pendingLinks[key] = nil
            entry.link.drop(reason: "no longer wanted")
        }
    }

    func stopDialling(_ contact: Contact) {
        contact.dial?.cancel()
        contact.dial = nil
        for (key, entry) in pendingLinks where entry.dialled == .contact(contact.address) && entry.peer == nil {
            pendingLinks[key] = nil
            entry.link.drop(reason: "no longer wanted")
        }
    }

    func hasPendingLink(_ peer: Peer) -> Bool {
        pendingLinks.values.contains { $0.peer == peer.id || $0.dialled == .peer(peer.id) }
    }

    func failConnectWaiters(_ peer: Peer, _ error: ServiceError) {
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.failure(error)) }
    }

    func setState(_ peer: Peer, _ state: PeerState) {
        guard peer.state != state else { return }
        peer.state = state
        emit(.peerStateChanged(.id(peer.id), state))
    }

    func setState(_ contact: Contact, _ state: PeerState) {
        guard contact.state != state else { return }
        contact.state = state
        emit(.peerStateChanged(.address(contact.address), state))
    }

    func setStayDisconnected(_ peer: Peer, _ stay: Bool) {
        peer.stayDisconnected = stay
        if peer.paired { remember(peer) }
    }

    /// Saves what we know about a paired `peer` (name, instance, routes, redial choice).
    func remember(_ peer: Peer) {
        do {
            try directory.save(peer.known)
        } catch {
            Log.warning("could not remember \(peer.id) in the state directory: \(error)")
        }
    }

    // MARK: Pairing

    /// Shows the 6-digit code for `peer` and waits for the person's `ConfirmPairing`.
    private func askPerson(about peer: Peer, link: PeerLink) {
        guard let result = link.result else { return }
        setState(peer, .pairing)
        let window = PeerVoiceBus.pairingConfirmationWindow
        let timeout = Timer.after(milliseconds: UInt32(window.wholeMilliseconds)) { [unowned self] in
            guard let prompt = pairingPrompts.removeValue(forKey: peer.id) else { return }
            answer(prompt, for: peer.id, accept: false, reason: "not confirmed within \(window.components.seconds) s")
        }
        pairingPrompts[peer.id] = PairingPrompt(link: link, timeout: timeout)
        Log.info("\(peer.paired ? "\(peer.id) asks its person to compare codes" : "first contact with \(peer.id)"): waiting for ConfirmPairing")
        emit(.pairingRequested(.id(peer.id), name: peer.name, passkey: result.verificationCode))
    }

    /// Answers a pairing prompt: the link opens once the peer's person accepts too.
    func answer(_ prompt: PairingPrompt, for id: PeerID, accept: Bool, reason: String) {
        prompt.timeout.cancel()
        emit(.pairingSettled(.id(id), accepted: accept))
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

    /// The address an authenticated link came by, for `PeerIdentified`, and whether it is a route
    /// to dial back: what we dialled; an incoming IP link's source host at the listen port its
    /// HELLO announced (its source port, not dialable, when it announced none); a Bluetooth address.
    private static func address(of link: PeerLink, hello: Hello) -> (address: PeerAddress, dialable: Bool)? {
        switch link.remote {
        case .ip(let endpoint):
            if link.isOutgoing { return (PeerAddress(ipHost: endpoint.host, port: endpoint.port), true) }
            let announced = hello.listenPort != 0
            return (PeerAddress(ipHost: endpoint.host, port: announced ? hello.listenPort : endpoint.port), announced)
        case .bluetooth(let address):
            return PeerAddress(bluetoothAddress: address).map { ($0, true) }
        }
    }

    static func host(of remote: RemoteEndpoint) -> String {
        switch remote {
        case .ip(let endpoint): endpoint.host
        case .bluetooth(let address): address
        }
    }

    // MARK: Delivery

    /// Sends queued messages the window allows, continuing the link's run: each TEXT names its
    /// predecessor so the receiver notices one lost to a rejected record.
    func sendQueuedMessages(to peer: Peer) {
        guard let link = peer.link else { return }
        while peer.delivery.hasRoom {
            let batch = store.pending(peer: peer.id.description, after: peer.delivery.sentUpTo, limit: 64)
            guard !batch.isEmpty else { return }
            for message in batch {
                let previous = peer.delivery.send(seq: message.seq, textBytes: message.text.utf8.count, now: .now)
                // Stored messages passed Send's checks; one that no longer encodes is a bug.
                let text = try! TextFrame(seq: message.seq, previousSeq: previous,
                                          messageID: MessageID(hex: message.id)!, sentAtMs: message.sentAtMs,
                                          text: message.text)
                link.send(.text(text))
                if !peer.delivery.hasRoom { return }
            }
        }
    }

    /// Sends again every run the peer stopped acknowledging (a record carrying a TEXT or an ACK
    /// was rejected on the way); the receiver drops duplicates.
    func resendStalledRuns() {
        let now = ContinuousClock.now
        for peer in peers.values where peer.isConnected && peer.delivery.isStalled(now: now) {
            Log.info("\(peer.id) acknowledged nothing for \(LinkDelivery.resendAfter): sending its queue again")
            peer.delivery.restartRun(now: now)
            sendQueuedMessages(to: peer)
        }
    }
}

extension PeerVoiceService: PeerLinkDelegate {
    func linkDidAuthenticate(_ link: PeerLink) {
        guard var entry = pendingLinks[ObjectIdentifier(link)], let hello = link.peerHello,
              let result = link.result, let key = PublicKey(bytes: result.remoteStaticKey),
              let (address, dialable) = Self.address(of: link, hello: hello) else { return }
        if hello.instanceID == instance || key.bytes == identity.publicKey {
            link.drop(reason: "connected to itself")
            let error = ServiceError.failed("\(address) is this peervoiced itself")
            switch entry.dialled {
            case .peer(let id): if let peer = peers[id] { connectFailed(peer, error) }
            case .contact(let address): if let contact = contacts[address] { contactFailed(contact, error) }
            case nil: break
            }
            return
        }
        let id = PeerID(key: key, using: crypto)
        if case .peer(let dialledID) = entry.dialled, dialledID != id {
            // Only an unpaired peer is dialled without its key: another device answers at its route.
            link.drop(reason: "\(address) answered with the key of \(id), not of \(dialledID)")
            if let peer = peers[dialledID] { connectFailed(peer, .rejected("another device (\(id)) answered at \(address), not \(dialledID)")) }
            return
        }
        let peer = peers[id] ?? Peer(id: id, key: key, name: hello.name, routes: [], paired: false)
        peers[id] = peer
        if peer.name.isEmpty || !peer.paired { peer.name = hello.name }
        if case .contact(let dialledAddress) = entry.dialled, let contact = contacts.removeValue(forKey: dialledAddress) {
            // The address turned out to be this peer: its Connect waits for the peer now.
            peer.connectWaiters += contact.connectWaiters
            contact.connectWaiters = []
        }
        entry.peer = id
        entry.route = dialable ? address : nil
        // The key is proven: the address is this peer's route (kept across restarts once paired).
        if dialable { peer.noteRoute(address, seenAtMs: Self.nowMs()) }
        pendingLinks[ObjectIdentifier(link)] = entry
        // Before any signal under the id; the found object (a contact) gives way to the peer's.
        emit(.peerIdentified(address, id))
        if peer.paired {
            if !link.isOutgoing { pairingLimiter.giveBack(host: Self.host(of: link.remote)) }
            link.declare(.known)
        } else if refusesFirstContact(over: link) {
            Log.info("first contact from \(link.remote) refused: not discoverable (StartDiscovery, or --listen, accepts them)")
            link.refuse(logReason: "first contact while not discoverable")
        } else if pairingPrompts[id] != nil {
            link.drop(reason: "a pairing prompt for \(id) is already pending")
        } else {
            link.declare(.asking)
            askPerson(about: peer, link: link)
        }
    }

    func linkPeerIsAsking(_ link: PeerLink) {
        guard let id = pendingLinks[ObjectIdentifier(link)]?.peer, let peer = peers[id] else { return }
        guard pairingPrompts[id] == nil else {
            return link.drop(reason: "a pairing prompt for \(id) is already pending")
        }
        // The peer lost our key (RemovePeer there, or its state): both people compare again.
        askPerson(about: peer, link: link)
    }

    func linkMayContinueAfterCommitment(_ link: PeerLink) -> Bool {
        guard pairingLimiter.allow(host: Self.host(of: link.remote), nowMs: Self.nowMs()) else {
            Log.warning("too many key exchanges from \(Self.host(of: link.remote)) within a minute: closing \(link.remote) without going on (each one could be a guess at a pairing code)")
            return false
        }
        return true
    }

    func linkDidOpen(_ link: PeerLink) {
        guard let entry = pendingLinks.removeValue(forKey: ObjectIdentifier(link)), let id = entry.peer,
              let peer = peers[id], let hello = link.peerHello else {
            link.drop(reason: "opened for no known peer")
            return
        }
        if let existing = peer.link, existing !== link {
            guard keepsNewLink(existing: existing, new: link, peerInstance: hello.instanceID) else {
                link.drop(reason: "\(peer.id) already has a better link")
                return
            }
            existing.delegate = nil
            linkOwners[ObjectIdentifier(existing)] = nil
            bluetoothLinkDidClose(existing)
            existing.drop(reason: "replaced by a better link")
            endVoice(peer, reason: "the link was replaced")
        }
        peer.link = link
        peer.lastTransport = link.transport
        linkOwners[ObjectIdentifier(link)] = peer
        peer.name = hello.name
        peer.instance = hello.instanceID
        peer.paired = true
        if let route = entry.route { peer.noteRoute(route, seenAtMs: Self.nowMs()) }
        peer.backoffMs = 0
        peer.stayDisconnected = false
        peer.delivery = LinkDelivery(now: .now)
        // No new dial; a link still in its pairing exchange may open too and is then settled by
        // the two-links rule above on both sides alike (dropping it here would not be mirrored).
        peer.dial?.attempt?.cancel()
        peer.dial = nil
        peer.redialTimer = nil
        remember(peer)
        listenForKnownPeers()
        Log.info("\(peer.id) connected (\(link.isOutgoing ? "dialled" : "incoming") over \(link.transport), key \(peer.key))")
        setState(peer, .connected)
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.success(peer.id)) }
        sendQueuedMessages(to: peer)
        peer.voice.destination = Self.voiceDestination(link: link, hello: hello)
        if options.voice.autoStart { peer.voice.wanted = true }
        beginVoice(peer)
    }

    /// Voice goes to the voice port the peer announced, else to the address we dialled (a relay
    /// in between carries voice too), else to the peer's listen port.
    private static func voiceDestination(link: PeerLink, hello: Hello) -> IPEndpoint? {
        guard case .ip(let remote) = link.remote else { return nil }
        if link.isOutgoing && hello.voicePort == 0 { return remote }
        return hello.voiceDestinationPort.map { IPEndpoint(host: remote.host, port: $0) }
    }

    /// When two links to one peer are open at once, both sides keep the better transport (TCP
    /// over RFCOMM), then the link dialled by the smaller instance id, so they agree without
    /// talking; of two links dialled by the same side the newer wins (the peer restarted before
    /// we noticed the old one die).
    private func keepsNewLink(existing: PeerLink, new: PeerLink, peerInstance: InstanceID) -> Bool {
        if existing.transport != new.transport {
            return new.transport.linkPreference > existing.transport.linkPreference
        }
        guard existing.isOutgoing != new.isOutgoing else { return true }
        let newDialler = new.isOutgoing ? instance : peerInstance
        let otherDialler = new.isOutgoing ? peerInstance : instance
        return newDialler.hex < otherDialler.hex
    }

    func link(_ link: PeerLink, received frame: Frame) {
        guard let peer = linkOwners[ObjectIdentifier(link)], let hello = link.peerHello else { return }
        switch frame {
        case .text(let text):
            guard peer.delivery.continuesRun(previousSeq: text.previousSeq) else {
                Log.debug("\(peer.id): TEXT \(text.seq) follows \(text.previousSeq), not the last one of the run: waiting for the resend")
                return
            }
            do {
                let isNew = try store.receive(peer: peer.id.description, senderInstance: hello.instanceID.hex, seq: text.seq,
                                              id: text.messageID.hex, text: text.text, sentAtMs: text.sentAtMs,
                                              nowMs: Self.nowMs())
                if isNew { emit(.messageReceived(peer.id, messageID: text.messageID.hex, text: text.text)) }
                peer.delivery.accepted(seq: text.seq)
            } catch {
                // Not acknowledged, so the sender keeps it and sends it again on the next link.
                Log.error("could not store a message from \(peer.id): \(error)")
                link.drop(reason: "local storage failed")
            }
        case .ack(let seq):
            for messageID in store.acknowledge(peer: peer.id.description, upTo: seq) {
                emit(.messageDelivered(peer.id, messageID: messageID))
            }
            peer.delivery.acknowledged(upTo: seq, now: .now)
            sendQueuedMessages(to: peer)
        case .voiceStart, .voiceStop, .voiceReport, .voice:
            peerSentVoiceFrame(frame, peer: peer)
        case .hello, .keepalive, .goodbye, .pairing:
            break
        }
    }

    /// One ACK per read rather than per message: stored messages are acknowledged together.
    func linkDidDrainInput(_ link: PeerLink) {
        guard let peer = linkOwners[ObjectIdentifier(link)], let upTo = peer.delivery.takeAck() else { return }
        link.send(.ack(seq: upTo))
    }

    func linkDidClose(_ link: PeerLink, reason: LinkCloseReason) {
        bluetoothLinkDidClose(link)
        if let entry = pendingLinks.removeValue(forKey: ObjectIdentifier(link)) {
            pendingLinkClosed(link, entry: entry, reason: reason)
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
    private func pendingLinkClosed(_ link: PeerLink, entry: PendingLink, reason: LinkCloseReason) {
        Log.info("link with \(entry.peer?.description ?? link.remote.description) closed before opening: \(reason)")
        if entry.peer == nil, case .contact(let address) = entry.dialled, let contact = contacts[address] {
            // The key exchange never finished: the address is still only an address.
            return contactFailed(contact, .failed("\(address): \(reason)"))
        }
        guard let id = entry.peer ?? { if case .peer(let id) = entry.dialled { id } else { nil } }(),
              let peer = peers[id], !peer.isConnected else { return }
        if let prompt = pairingPrompts[id], prompt.link === link {
            pairingPrompts[id] = nil
            prompt.timeout.cancel()
            emit(.pairingSettled(.id(peer.id), accepted: false))
        }
        guard !hasPendingLink(peer) else { return }
        let error: ServiceError
        switch reason {
        case .refusedByPeer:
            setStayDisconnected(peer, true)
            error = .rejected("\(id) refused the pairing")
        case .handshakeFailed(.unexpectedRemoteKey):
            setStayDisconnected(peer, true)
            Log.warning("\(link.remote) presented an identity key other than the pinned one of \(id): refused. If \(id) was reinstalled, RemovePeer \(id) and connect to its address again to compare codes")
            error = .rejected("\(link.remote) presented an identity key other than the pinned one of \(id): it may be an impostor. If \(id) was reinstalled, RemovePeer \(id) and Connect to its address again to compare codes")
        default:
            // A first contact that failed is not retried on its own: each try would ask a person.
            error = .failed("\(id): \(reason)")
        }
        connectFailed(peer, error)
    }
}
