import PeerVoiceCore
import Sodium

/// The service's side of `LANDiscovery`, and the default listener. Without `--listen`
/// peervoiced listens on the LAN (port 47800, else any free one) while discoverable or while it
/// has known peers, and accepts first contacts there only while discoverable (`refusesFirstContact`).
final class LANPeers {
    /// The default listener's port, when it is free.
    static let defaultPort: UInt16 = 47800

    private let options: Options
    private let fingerprint: String
    private let crypto: LibSodium
    private let ip: IPTransport
    private let registry: PeerRegistry
    /// Whether we offer voice (the advertisement says so).
    private let offersVoice: () -> Bool
    private let emit: (ServiceEvent) -> Void
    /// Avahi, unless `--no-lan`.
    private var discovery: LANDiscovery?
    /// How each advertisement found was reported (`PeerLost` names it the same way).
    private var foundRefs: [LANRoute: PeerRef] = [:]
    /// An advertisement gave a known peer a candidate route: dial it if messages wait.
    var knownPeerAppeared: (Peer) -> Void = { _ in }

    init(options: Options, fingerprint: String, crypto: LibSodium, ip: IPTransport, registry: PeerRegistry,
         offersVoice: @escaping () -> Bool, emit: @escaping (ServiceEvent) -> Void) {
        self.options = options
        self.fingerprint = fingerprint
        self.crypto = crypto
        self.ip = ip
        self.registry = registry
        self.offersVoice = offersVoice
        self.emit = emit
    }

    func start() {
        guard options.lan else { return }
        let discovery = LANDiscovery(excludedInterfaces: options.lanExcludedInterfaces, ownFingerprint: fingerprint)
        discovery.delegate = self
        self.discovery = discovery
        discovery.start()
        if registry.hasPairedPeers { openDefaultListener() }
    }

    func stop() {
        discovery?.stop()
    }

    /// Whether StartDiscovery can use the LAN now (DiscoveryMethods).
    var canDiscover: Bool { discovery?.isAvailable == true }

    var isDiscovering: Bool { discovery?.isDiscovering ?? false }

    /// StartDiscovery's LAN half: wants LAN discovery (it starts when Avahi is there) and says
    /// why it cannot run now, if it cannot.
    func startDiscovery() -> Result<Void, ServiceError> {
        guard let discovery else { return .failure(.notAvailable("LAN discovery is off (--no-lan)")) }
        openDefaultListener()
        guard ip.isListening else {
            return .failure(.failed("LAN discovery needs a listener, and none could be opened (see the log)"))
        }
        let capabilities: Set<LANAdvertisement.Capability> = offersVoice() ? [.text, .voice] : [.text]
        // Every field is in range by construction (advertisableName, the identity's own fingerprint).
        let advertisement = try! LANAdvertisement(name: LANAdvertisement.advertisableName(options.name),
                                                  capabilities: capabilities, fingerprint: fingerprint)
        discovery.startDiscovery(LANServiceInfo(displayName: options.name, port: ip.listenPort, advertisement: advertisement))
        emit(.propertiesChanged([.discovering]))
        if let reason = discovery.unavailableReason { return .failure(.notAvailable("LAN discovery is not available: \(reason)")) }
        return .success(())
    }

    /// StopDiscovery's LAN half: withdraws the advertisement; false when the LAN was not discovering.
    func stopDiscovery() -> Bool {
        guard let discovery, discovery.isDiscovering else { return false }
        discovery.stopDiscovery()
        if !registry.hasPairedPeers { closeDefaultListener() }
        emit(.propertiesChanged([.discovering]))
        return true
    }

    /// A peer became known (a link opened): the default listener stays open for it from now on.
    func listenForKnownPeers() {
        if discovery != nil { openDefaultListener() }
    }

    /// Whether a first contact on `link` must be refused: it came to the default listener while
    /// we are not discoverable (an explicit `--listen` accepts first contacts at any time).
    func refusesFirstContact(over link: PeerLink) -> Bool {
        guard !link.isOutgoing, options.listen == nil, case .ip = link.remote else { return false }
        return !isDiscovering
    }

    /// Listens on the LAN unless `--listen` chose the address or the listener is open: port 47800
    /// on every address (IPv6 and IPv4), else any free port, else IPv4 only.
    private func openDefaultListener() {
        guard options.listen == nil, !ip.isListening else { return }
        for address in ["[::]:\(Self.defaultPort)", "[::]:0", "0.0.0.0:\(Self.defaultPort)", "0.0.0.0:0"] {
            do {
                try ip.listen(on: address)
                emit(.propertiesChanged([.listenAddress]))
                return
            } catch {
                Log.debug("default listener: \(error.message)")
            }
        }
        Log.warning("cannot listen for IP peers on the LAN on any port (see --verbose): only dialling works")
    }

    private func closeDefaultListener() {
        guard options.listen == nil, ip.isListening else { return }
        ip.stopListening()
        emit(.propertiesChanged([.listenAddress]))
    }
}

extension LANPeers: LANDiscoveryDelegate {
    func lanAvailabilityChanged() {
        emit(.propertiesChanged([.discoveryMethods]))
    }

    /// A known peer's advertisement (its fingerprint is the key of a peer we know) is found under
    /// its id, and its address becomes a candidate route; any other is found under its address.
    /// Only a claim: a dial, with the key pinned, proves it.
    func lanFound(_ route: LANRoute, advertisement: LANAdvertisement) {
        let address = PeerAddress(ipHost: route.host, port: route.port)
        let claimed = advertisement.fingerprint.flatMap { PublicKey(hex: $0) }.map { PeerID(key: $0, using: crypto) }
        guard let id = claimed, let peer = registry[id], peer.paired else {
            foundRefs[route] = .address(address)
            return emit(.peerFound(.address(address), name: advertisement.name ?? ""))
        }
        foundRefs[route] = .id(id)
        peer.noteCandidate(address, seenAtMs: PeerVoiceService.nowMs())
        emit(.peerFound(.id(id), name: advertisement.name ?? ""))
        knownPeerAppeared(peer)
    }

    func lanLost(_ route: LANRoute) {
        let address = PeerAddress(ipHost: route.host, port: route.port)
        let ref = foundRefs.removeValue(forKey: route) ?? .address(address)
        if case .id(let id) = ref { registry[id]?.dropCandidate(address) }
        emit(.peerLost(ref))
    }
}
