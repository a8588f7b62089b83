import GIO
import OpenSSLCrypto
import PeerVoiceCore
import Sodium

/// Who a link was dialled for: a known peer (by one of its routes), or an address whose key is
/// not known yet.
enum DialTarget: Equatable {
    case peer(PeerID)
    case contact(PeerAddress)
}

/// Every connection to a peer, from the dial to its open link: dialling routes in turn and
/// redialling peers with queued messages; links in their key exchange and pairing; which of two
/// links to one peer stays. It is every link's delegate until the link opens, then hands it to
/// `PeerLinks`, whose components take its frames (it sees none of them).
final class PeerConnections {
    /// First and longest wait between redials of a dropped peer with pending messages.
    static let firstRedial: Duration = .milliseconds(250)
    static let maxRedial: Duration = .seconds(5)

    /// A link not yet open: who it was dialled for (nil: incoming) and, for a known peer, the dial
    /// that made it; once authenticated, the peer its key names and the route it came by (nil when
    /// it cannot be dialled back).
    private struct PendingLink {
        let link: PeerLink
        let dialled: DialTarget?
        var dial: PeerDial?
        var peer: PeerID?
        var route: PeerAddress?
    }

    /// How a known peer is being redialled: the wait, growing while dials fail, and its timer.
    private struct Redial {
        var backoff: Duration = .zero
        var timer: EventSource?
    }

    private let instance: InstanceID
    private let identity: StaticIdentity
    private let crypto: LibSodium
    /// Links at protocol 11 or later seal their records with it (`LinkCipher`).
    private let aesGCM = OpenSSLAESGCM()
    private let ip: IPTransport
    private let registry: PeerRegistry
    private let links: PeerLinks
    private let clock: WallClock
    private let pairing: PairingPrompts
    private let delivery: MessageDelivery
    private let bluetooth: BluetoothPeers
    private let lan: LANPeers
    /// What our HELLO says (it changes when voice or the listener comes or goes).
    private let hello: () -> Hello
    private let emit: (ServiceEvent) -> Void
    /// What a peer's object shows changed without an event of its own.
    var peerChanged: (PeerRef) -> Void = { _ in }

    private var pendingLinks: [ObjectIdentifier: PendingLink] = [:]
    /// Known peers being dialled now, by the route tried.
    private var dials: [PeerID: PeerDial] = [:]
    private var redials: [PeerID: Redial] = [:]
    /// The computer is going to sleep or asleep: no dials until it wakes.
    private var asleep = false

    init(instance: InstanceID, identity: StaticIdentity, crypto: LibSodium, ip: IPTransport, registry: PeerRegistry,
         links: PeerLinks, clock: WallClock, pairing: PairingPrompts, delivery: MessageDelivery, bluetooth: BluetoothPeers,
         lan: LANPeers, hello: @escaping () -> Hello, emit: @escaping (ServiceEvent) -> Void) {
        self.instance = instance
        self.identity = identity
        self.crypto = crypto
        self.ip = ip
        self.registry = registry
        self.links = links
        self.clock = clock
        self.pairing = pairing
        self.delivery = delivery
        self.bluetooth = bluetooth
        self.lan = lan
        self.hello = hello
        self.emit = emit
        pairing.onRefused = { [unowned self] id, error in
            guard let peer = registry[id] else { return }
            registry.setStayDisconnected(peer, true)
            failConnectWaiters(peer, error)
        }
    }

    /// Accepts links on the IP listener (`--listen`, or the default LAN listener).
    func start() {
        ip.onIncoming = { [unowned self] connection, remote in
            // A host that used up its key exchanges is turned away before any work.
            if pairing.turnsAway(host: remote.host) {
                Log.info("turned away \(remote): too many key exchanges from \(remote.host) within a minute")
                connection.closeAfterFlushing()
                return
            }
            startLink(PeerLink(connection: connection, remote: .ip(remote), isOutgoing: false), dialled: nil)
        }
    }

    /// Whether `peer` is connected or on its way there (dialling, waiting to redial, in a key
    /// exchange or pairing).
    func isBusy(_ peer: Peer) -> Bool {
        links.isConnected(peer.id) || dials[peer.id] != nil || redials[peer.id]?.timer != nil || hasPendingLink(peer)
    }

    // MARK: Connect and Disconnect

    /// Connects to `target`: a known peer (by id or route), or a new address. Completes with the
    /// peer's id once the link is open.
    func connect(_ target: PeerRef, completion: @escaping ConnectWaiter) {
        if case .address(let address) = target, let unavailable = bluetooth.unavailable(for: address.transport) {
            return completion(.failure(unavailable))
        }
        let peer: Peer
        switch target {
        case .id:
            do throws(ServiceError) { peer = try registry.resolve(target) } catch { return completion(.failure(error)) }
        case .address(let address):
            let owners = registry.owners(of: address)
            guard owners.count == 1 else {
                // A new address (or one several peers used): whoever answers is identified by its key.
                let contact = registry.addContact(at: address)
                contact.connectWaiters.append(completion)
                if contact.dial == nil && !pendingLinks.values.contains(where: { $0.dialled == .contact(address) }) {
                    dial(contact)
                }
                return
            }
            peer = owners[0]
        }
        if links.isConnected(peer.id) { return completion(.success(peer.id)) }
        registry.setStayDisconnected(peer, false)
        peer.connectWaiters.append(completion)
        if dials[peer.id] == nil && !hasPendingLink(peer) {
            if case .address(let address) = target { dial(peer, preferring: address) } else { dial(peer) }
        }
    }

    /// Ends `peer`'s link and every dial of it; it stays disconnected until the next `Connect`.
    /// Its waiting `Connect`s are told that `method` (Disconnect, RemovePeer) was called on `ref`.
    func disconnect(_ peer: Peer, by method: String, ref: PeerRef) {
        registry.setStayDisconnected(peer, true)
        stopDialling(peer)
        failConnectWaiters(peer, .failed("\(method)(\(ref)) was called while connecting"))
        if let link = links.link(of: peer.id) {
            link.close(goodbye: .userDisconnected, logReason: "\(method) was called")
        } else {
            registry.setState(peer, .disconnected)
        }
    }

    /// Stops a dial to an address whose key is not known yet, if `ref` names one; its Connect
    /// fails saying that `method` was called.
    func abandonContact(_ ref: PeerRef, because method: String) -> Bool {
        guard case .address(let address) = ref, let contact = registry.contact(at: address) else { return false }
        stopDialling(contact)
        contactFailed(contact, .failed("\(method)(\(address)) was called while connecting"))
        return true
    }

    /// The computer is going to sleep: every link says goodbye (its peer redials later instead of
    /// waiting for the silence limit) and nothing is dialled until `wake()`.
    func sleep() {
        asleep = true
        for peer in registry.all { stopDialling(peer) }
        for (_, link) in links.openLinks { link.close(goodbye: .shuttingDown, logReason: "the computer is going to sleep") }
        for contact in registry.allContacts {
            stopDialling(contact)
            contactFailed(contact, .failed("\(contact.address): the computer went to sleep while connecting"))
        }
    }

    /// Back from sleep: peers with messages waiting are dialled at once.
    func wake() {
        asleep = false
        redialNow()
    }

    /// A new network or address: routes that failed may work now, so peers with messages
    /// waiting are dialled at once rather than after their backoff.
    func redialNow() {
        redials = [:]
        for peer in registry.all { scheduleRedial(peer, immediately: true) }
    }

    /// `peer` was removed: nothing of its dials is left.
    func forget(_ peer: PeerID) {
        redials[peer] = nil
    }

    // MARK: Dialling

    /// Dials `peer` on its routes, best first (IP before Bluetooth, then the most recent);
    /// `preferred` first when the caller named a route.
    private func dial(_ peer: Peer, preferring preferred: PeerAddress? = nil) {
        redials[peer.id]?.timer = nil
        guard !asleep else {
            return connectFailed(peer, .notAvailable("the computer is going to sleep: Connect again once it is awake"))
        }
        var order = peer.dialOrder
        if let preferred {
            order.removeAll { $0 == preferred }
            order.insert(preferred, at: 0)
        }
        if bluetooth.unavailable(for: .bluetooth) != nil { order.removeAll { $0.transport == .bluetooth } }
        guard let first = order.first else {
            return connectFailed(peer, .notAvailable("no route to \(peer.id) can be used now: Connect to one of its addresses"))
        }
        registry.setState(peer, .connecting)
        dialRoute(peer, PeerDial(address: first, remaining: Array(order.dropFirst())))
    }

    private func dialRoute(_ peer: Peer, _ dial: PeerDial) {
        dials[peer.id] = dial
        Log.debug("dialling \(peer.id) at \(dial.address)")
        let id = peer.id
        dial.attempt = dialAddress(
            dial.address, for: .peer(id), mayPair: !peer.connectWaiters.isEmpty,
            isCurrent: { [unowned self, weak peer] in peer.map { registry.isCurrent($0) && dials[id] === dial } ?? false },
            opened: { [unowned self] in dials[id] = nil }
        ) { [unowned self, weak peer] error in
            guard let peer else { return }
            dials[id] = nil
            // A candidate stays while its advertisement does (a dial that timed out in a brief
            // outage proves nothing, and the advertisement is not announced again: simulation
            // seed 1402); only another key answering there drops it.
            dialNextRoute(peer, after: dial, error)
        }
    }

    /// Tries the route after `dial`'s, or fails the dial with `error` when none is left.
    private func dialNextRoute(_ peer: Peer, after dial: PeerDial, _ error: ServiceError) {
        if let next = dial.remaining.first {
            Log.info("\(dial.address) of \(peer.id): \(error.message); trying \(next)")
            dialRoute(peer, PeerDial(address: next, remaining: Array(dial.remaining.dropFirst())))
        } else {
            Log.info("\(error.message)")
            connectFailed(peer, error)
        }
    }

    /// Dials an address whose key is not known yet.
    private func dial(_ contact: Contact) {
        registry.setState(contact, .connecting)
        Log.debug("dialling \(contact.address)")
        let address = contact.address
        if contact.name.isEmpty, let name = bluetooth.deviceName(address) { contact.name = name }
        // Every outcome arrives on a later main-loop turn, once `attempt` is set.
        var attempt: DialAttempt?
        attempt = dialAddress(
            address, for: .contact(address), mayPair: !contact.connectWaiters.isEmpty,
            isCurrent: { [unowned self, weak contact] in contact.map { registry.isCurrent($0) && $0.dial === attempt } ?? false },
            opened: { [weak contact] in contact?.dial = nil }
        ) { [unowned self, weak contact] error in
            guard let contact else { return }
            contact.dial = nil
            Log.info("\(error.message)")
            contactFailed(contact, error)
        }
        contact.dial = attempt
    }

    /// Dials one address for `target`: the connection (TCP) or channel (RFCOMM) becomes a link
    /// here. An outcome counts only while `isCurrent()` holds; `opened` runs just before the link
    /// starts.
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
                    let dial: PeerDial? = if case .peer(let id) = target { dials[id] } else { nil }
                    opened()
                    startLink(PeerLink(connection: connection, remote: .ip(endpoint), isOutgoing: true), dialled: target, by: dial)
                case .failure(let error):
                    failed(error)
                }
            }
        case .bluetooth:
            return bluetooth.dial(address, mayPair: mayPair) { [unowned self] result in
                switch result {
                case .success(let channel):
                    guard isCurrent() else {
                        Socket(adopting: channel.fd).close()
                        return bluetooth.channelEnded(channel.peer)
                    }
                    let dial: PeerDial? = if case .peer(let id) = target { dials[id] } else { nil }
                    if case .contact = target, let contact = registry.contact(at: address), contact.name.isEmpty { contact.name = channel.name }
                    opened()
                    startLink(Self.link(over: channel, outgoing: true), dialled: target, by: dial)
                case .failure(let error):
                    if isCurrent() { failed(error) }
                }
            }
        }
    }

    private static func link(over channel: BluetoothChannel, outgoing: Bool) -> PeerLink {
        PeerLink(connection: StreamConnection(socket: Socket(adopting: channel.fd)),
                 remote: .bluetooth(address: channel.peer.description), isOutgoing: outgoing)
    }

    /// BlueZ keeps a copy of a Bluetooth link's channel: it is released once the link is gone.
    private func releaseChannel(of link: PeerLink) {
        guard case .bluetooth(let address) = link.remote, let peer = PeerAddress(bluetoothAddress: address) else { return }
        bluetooth.channelEnded(peer)
    }

    /// Starts the key exchange on a new connection (`dialled` nil: incoming).
    private func startLink(_ link: PeerLink, dialled: DialTarget?, by dial: PeerDial? = nil) {
        pendingLinks[ObjectIdentifier(link)] = PendingLink(link: link, dialled: dialled, dial: dial)
        link.delegate = self
        var pinned: PublicKey?
        var proofKey: DialProofKey?
        if case .peer(let id) = dialled, let peer = registry[id], peer.paired {
            pinned = peer.key
            // Its presence secret proves the dial, so that it answers us while not discoverable.
            proofKey = peer.presenceSecret.map { DialProofKey(secret: $0, epoch: PresenceTag.epoch(unixSeconds: clock.nowMs() / 1000)) }
        }
        link.start(hello: hello(), identity: identity, pinnedKey: pinned?.bytes, proofKey: proofKey, crypto: crypto, aesGCM: aesGCM)
    }

    /// `reason`: for the peer object's `StateReason`, when a person can act on it.
    private func connectFailed(_ peer: Peer, _ error: ServiceError, reason: String = "") {
        failConnectWaiters(peer, error)
        registry.setState(peer, .disconnected, reason: reason)
        if !peer.paired && !links.isConnected(peer.id) && delivery.history(of: peer.id, max: 1).isEmpty {
            // Never paired and nothing queued: not worth remembering.
            registry.drop(peer)
        } else {
            scheduleRedial(peer)
        }
    }

    private func contactFailed(_ contact: Contact, _ error: ServiceError) {
        let waiters = contact.connectWaiters
        contact.connectWaiters = []
        registry.setState(contact, .disconnected)
        registry.remove(contact)
        // The state change showed the contact's object as it was: its removal shows now.
        peerChanged(.address(contact.address))
        waiters.forEach { $0(.failure(error)) }
    }

    /// Dials `peer` again later if it has messages waiting, still holds an older presence secret
    /// of ours, or a link component (file transfers) waits for it, and may be dialled.
    func scheduleRedial(_ peer: Peer, immediately: Bool = false) {
        var redial = redials[peer.id] ?? Redial()
        guard !asleep, peer.paired, !peer.routes.isEmpty, !peer.stayDisconnected, !links.isConnected(peer.id), dials[peer.id] == nil,
              redial.timer == nil, !hasPendingLink(peer),
              delivery.hasPending(for: peer.id) || lan.awaitsPresenceSecret(peer.id) || links.isWanted(peer.id) else { return }
        redial.backoff = immediately ? .zero : min(Self.maxRedial, max(Self.firstRedial, redial.backoff * 2))
        redial.timer = Timer.after(redial.backoff) { [unowned self, weak peer] in
            guard let peer, registry.isCurrent(peer) else { return }
            dial(peer)
        }
        redials[peer.id] = redial
    }

    private func stopDialling(_ peer: Peer) {
        dials.removeValue(forKey: peer.id)?.attempt?.cancel()
        redials[peer.id]?.timer = nil
        pairing.withdraw(peer.id)
        for (key, entry) in pendingLinks where entry.peer == peer.id || entry.dialled == .peer(peer.id) {
            pendingLinks[key] = nil
            entry.link.drop(reason: "no longer wanted")
        }
    }

    private func stopDialling(_ contact: Contact) {
        contact.dial?.cancel()
        contact.dial = nil
        for (key, entry) in pendingLinks where entry.dialled == .contact(contact.address) && entry.peer == nil {
            pendingLinks[key] = nil
            entry.link.drop(reason: "no longer wanted")
        }
    }

    private func hasPendingLink(_ peer: Peer) -> Bool {
        pendingLinks.values.contains { $0.peer == peer.id || $0.dialled == .peer(peer.id) }
    }

    private func failConnectWaiters(_ peer: Peer, _ error: ServiceError) {
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.failure(error)) }
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

    private static func host(of remote: RemoteEndpoint) -> String {
        switch remote {
        case .ip(let endpoint): endpoint.host
        case .bluetooth(let address): address
        }
    }

}

// MARK: Bluetooth channels

extension PeerConnections: BluetoothChannelReceiver {
    /// The other computer's channel becomes a link: for the contact that waits for it (the person
    /// accepted its Bluetooth pairing here), else an incoming link like any other.
    func bluetoothIncomingChannel(_ channel: BluetoothChannel) -> Bool {
        let address = channel.peer
        var dialled: DialTarget?
        if let contact = registry.contact(at: address), contact.dial == nil {
            if contact.name.isEmpty { contact.name = channel.name }
            dialled = .contact(address)
        }
        startLink(Self.link(over: channel, outgoing: false), dialled: dialled)
        return true
    }

    /// Someone other than us asked BlueZ to close the channel to `address`.
    func bluetoothChannelCloseRequested(_ address: PeerAddress) {
        let remote = address.description
        if let peer = links.openLinks.first(where: { $0.link.remote.description == remote && $0.link.transport == .bluetooth })?.peer {
            Log.info("BlueZ asked to close the channel to \(address)")
            disconnect(peer, by: "Disconnect", ref: .id(peer.id))
        } else if let entry = pendingLinks.values.first(where: { $0.link.transport == .bluetooth && $0.link.remote.description == remote }) {
            Log.info("BlueZ asked to close the channel to \(address)")
            entry.link.drop(reason: "BlueZ asked to close the channel")
        }
    }

    /// BlueZ's pairing of `address` ended: our own dial goes on, or the other computer that paired
    /// with us should open its channel now.
    func bluetoothPairingEnded(_ address: PeerAddress, accepted: Bool) {
        guard let contact = registry.contact(at: address) else { return }
        if contact.dial != nil {
            // Our own Connect: its Pair call reports how the pairing ended.
            if accepted { registry.setState(contact, .connecting) }
            return
        }
        guard !pendingLinks.values.contains(where: { $0.dialled == .contact(address) }) else { return }
        guard accepted else {
            return contactFailed(contact, .rejected("Bluetooth pairing with \(address) was not accepted"))
        }
        registry.setState(contact, .connecting)
        bluetooth.expectChannel(from: address) { [weak self, weak contact] in
            guard let self, let contact, registry.isCurrent(contact), contact.dial == nil,
                  !pendingLinks.values.contains(where: { $0.dialled == .contact(address) }) else { return }
            contactFailed(contact, .failed("\(address) paired but did not connect"))
        }
    }
}

extension PeerConnections: PeerLinkDelegate {
    func linkDidAuthenticate(_ link: PeerLink) {
        guard var entry = pendingLinks[ObjectIdentifier(link)], let hello = link.peerHello,
              let result = link.result, let key = PublicKey(bytes: result.remoteStaticKey),
              let (address, dialable) = Self.address(of: link, hello: hello) else { return }
        let id = PeerID(key: key, using: crypto)
        let status = PairingExchange.status(
            isItself: hello.instanceID == instance || key.bytes == identity.publicKey,
            keyPinned: registry[id]?.paired ?? false, refusesFirstContact: lan.refusesFirstContact(over: link),
            promptPending: pairing.isPending(for: id))
        if status == .itself {
            link.drop(reason: "connected to itself")
            let error = ServiceError.failed("\(address) is this peervoiced itself")
            switch entry.dialled {
            case .peer(let id): if let peer = registry[id] { connectFailed(peer, error) }
            case .contact(let address): if let contact = registry.contact(at: address) { contactFailed(contact, error) }
            case nil: break
            }
            return
        }
        if case .peer(let dialledID) = entry.dialled, dialledID != id {
            // Only an unpaired peer is dialled without its key: another device answers at its route.
            link.drop(reason: "\(address) answered with the key of \(id), not of \(dialledID)")
            if let peer = registry[dialledID] { connectFailed(peer, .rejected("another device (\(id)) answered at \(address), not \(dialledID)")) }
            return
        }
        let peer = registry.peer(withKey: key, id: id, name: hello.name)
        if peer.name.isEmpty || !peer.paired { peer.name = hello.name }
        if case .contact(let dialledAddress) = entry.dialled, let contact = registry.contact(at: dialledAddress) {
            // The address turned out to be this peer: its Connect waits for the peer now.
            registry.remove(contact)
            peer.connectWaiters += contact.connectWaiters
            contact.connectWaiters = []
        }
        entry.peer = id
        entry.route = dialable ? address : nil
        // The key is proven: the address is this peer's route (kept across restarts once paired).
        if dialable { peer.noteRoute(address, seenAtMs: clock.nowMs()) }
        pendingLinks[ObjectIdentifier(link)] = entry
        // Before any signal under the id; the found object (a contact) gives way to the peer's.
        emit(.peerIdentified(address, id))
        switch status {
        case .known:
            if !link.isOutgoing { pairing.giveBack(host: Self.host(of: link.remote)) }
            link.declare(.known)
        case .refuse:
            Log.info("first contact from \(link.remote) refused: not discoverable (StartDiscovery, or --listen, accepts them)")
            link.refuse(logReason: "first contact while not discoverable")
        case .alreadyAsking:
            link.drop(reason: "a pairing prompt for \(id) is already pending")
        case .asking:
            link.declare(.asking)
            ask(about: peer, over: link)
        case .itself:
            break  // closed above
        }
    }

    func linkPeerIsAsking(_ link: PeerLink) {
        guard let id = pendingLinks[ObjectIdentifier(link)]?.peer, let peer = registry[id] else { return }
        guard !pairing.isPending(for: id) else {
            return link.drop(reason: "a pairing prompt for \(id) is already pending")
        }
        // The peer lost our key (RemovePeer there, or its state): both people compare again.
        ask(about: peer, over: link)
    }

    private func ask(about peer: Peer, over link: PeerLink) {
        registry.setState(peer, .pairing)
        pairing.ask(about: peer, over: link)
    }

    /// The presence secret was replaced: the peers connected now get the new one at once (the
    /// others when they next connect, and they are dialled for it).
    func handOutPresenceSecret() {
        for peer in registry.all {
            guard let link = links.link(of: peer.id) else {
                scheduleRedial(peer, immediately: true)
                continue
            }
            lan.sendPresence(on: link, to: peer.id)
        }
    }

    func linkMayAnswer(_ link: PeerLink, dialProof: DialProofClaim?) -> Bool {
        let decision = lan.decide(on: dialProof, over: link)
        guard case .refuse(let why) = decision else { return true }
        Log.info("dial from \(link.remote) refused like a stranger's: \(why)")
        return false
    }

    func linkMayContinueAfterCommitment(_ link: PeerLink) -> Bool {
        guard pairing.allowsKeyExchange(by: Self.host(of: link.remote)) else {
            Log.warning("too many key exchanges from \(Self.host(of: link.remote)) within a minute: closing \(link.remote) without going on (each one could be a guess at a pairing code)")
            return false
        }
        return true
    }

    func linkDidOpen(_ link: PeerLink) {
        guard let entry = pendingLinks.removeValue(forKey: ObjectIdentifier(link)), let id = entry.peer,
              let peer = registry[id], let hello = link.peerHello else {
            link.drop(reason: "opened for no known peer")
            return
        }
        if let existing = links.link(of: peer.id), existing !== link {
            guard keepsNewLink(existing: existing, new: link, peerInstance: hello.instanceID) else {
                link.drop(reason: "\(peer.id) already has a better link")
                return
            }
            existing.delegate = nil
            links.close(existing, reason: "the link was replaced")
            releaseChannel(of: existing)
            existing.drop(reason: "replaced by a better link")
        }
        peer.lastTransport = link.transport
        peer.name = hello.name
        peer.instance = hello.instanceID
        peer.paired = true
        if let route = entry.route { peer.noteRoute(route, seenAtMs: clock.nowMs()) }
        peer.stayDisconnected = false
        // No new dial; a link still in its pairing exchange may open too and is then settled by
        // the two-links rule above on both sides alike (dropping it here would not be mirrored).
        dials.removeValue(forKey: id)?.attempt?.cancel()
        redials[id] = nil
        registry.remember(peer)
        lan.listenForKnownPeers()
        Log.info("\(peer.id) connected (\(link.isOutgoing ? "dialled" : "incoming") over \(link.transport), protocol \(link.negotiated?.version ?? 0) with \(link.negotiated?.capabilities.featureNames.joined(separator: ", ") ?? "nothing"), key \(peer.key))")
        registry.setState(peer, .connected)
        // A link that replaced another leaves the state as it was, not its transport or name.
        peerChanged(.id(peer.id))
        let waiters = peer.connectWaiters
        peer.connectWaiters = []
        waiters.forEach { $0(.success(peer.id)) }
        // The components (delivery, voice, presence, ...) take it from here.
        links.open(link, for: peer)
    }

    /// When two links to one peer are open at once, both sides keep the better transport (TCP
    /// over RFCOMM), then the link dialled by the smaller instance id, so they agree without
    /// talking; of two links dialled by the same side the newer wins (the peer restarted before
    /// we noticed the old one die).
    private func keepsNewLink(existing: PeerLink, new: PeerLink, peerInstance: InstanceID) -> Bool {
        LinkTieBreak.keepsNew(existing: (existing.transport, existing.isOutgoing), new: (new.transport, new.isOutgoing),
                              ourInstance: instance, peerInstance: peerInstance)
    }

    func linkDidClose(_ link: PeerLink, reason: LinkCloseReason) {
        releaseChannel(of: link)
        if let entry = pendingLinks.removeValue(forKey: ObjectIdentifier(link)) {
            pendingLinkClosed(link, entry: entry, reason: reason)
            return
        }
        guard let peer = links.close(link, reason: "the link closed: \(reason)") else { return }
        Log.info("\(peer.id) disconnected: \(reason)")
        if case .goodbye(.userDisconnected) = reason { registry.setStayDisconnected(peer, true) }
        registry.setState(peer, .disconnected)
        scheduleRedial(peer)
    }

    /// A link that never opened: the key exchange or the pairing failed, or it was dropped.
    private func pendingLinkClosed(_ link: PeerLink, entry: PendingLink, reason: LinkCloseReason) {
        Log.info("link with \(entry.peer?.description ?? link.remote.description) closed before opening: \(reason)")
        if entry.peer == nil, case .contact(let address) = entry.dialled, let contact = registry.contact(at: address) {
            // The key exchange never finished: the address is still only an address.
            if case .incompatibleVersions(let versions) = reason {
                return contactFailed(contact, .notAvailable(VersionRange.supported.refusal(of: versions, who: address.description)))
            }
            return contactFailed(contact, .failed("\(address): \(reason)"))
        }
        guard let id = entry.peer ?? { if case .peer(let id) = entry.dialled { id } else { nil } }(),
              let peer = registry[id], !links.isConnected(peer.id) else { return }
        pairing.withdraw(id, askingAbout: link)
        guard !hasPendingLink(peer) else { return }
        let error: ServiceError
        switch reason {
        case .handshakeFailed(.unexpectedRemoteKey) where entry.dial.map({ peer.isCandidate($0.address) }) == true:
            // Advertisements are untrusted: only that route goes, the peer stays wanted.
            let dial = entry.dial!
            peer.dropCandidate(dial.address)
            Log.warning("an advertisement on the LAN put \(id) at \(dial.address), but another key answered there: that route is dropped")
            return dialNextRoute(peer, after: dial, .failed("another device answered at \(dial.address), where an advertisement put \(id)"))
        case .refusedByPeer:
            registry.setStayDisconnected(peer, true)
            error = .rejected("\(id) refused the pairing")
        case .incompatibleVersions(let versions):
            let words = VersionRange.supported.refusal(of: versions, who: peer.name.isEmpty ? "\(id)" : "\(peer.name) (\(id))")
            Log.info(words)
            return connectFailed(peer, .notAvailable(words), reason: words)
        case .handshakeFailed(.unexpectedRemoteKey):
            registry.setStayDisconnected(peer, true)
            Log.warning("\(link.remote) presented an identity key other than the pinned one of \(id): refused. If \(id) was reinstalled, RemovePeer \(id) and connect to its address again to compare codes")
            error = .rejected("\(link.remote) presented an identity key other than the pinned one of \(id): it may be an impostor. If \(id) was reinstalled, RemovePeer \(id) and Connect to its address again to compare codes")
        default:
            // A first contact that failed is not retried on its own: each try would ask a person.
            error = .failed("\(id): \(reason)")
        }
        connectFailed(peer, error)
    }
}
