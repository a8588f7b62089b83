import GIO
import PeerVoiceCore

/// LAN peers: the service's side of `LANDiscovery`, and the default listener. Without `--listen`
/// peervoiced listens on the LAN (port 47800, else any free one) while discoverable or while it
/// has known peers, and accepts first contacts there only while discoverable. PeerVoiceService.swift
/// calls in here through one-line hooks (start, stop, discovery, properties); the first-contact
/// rule is checked in linkDidAuthenticate, and linkDidOpen keeps the listener open for known peers.
extension PeerVoiceService {
    /// The default listener's port, when it is free.
    static let defaultLANPort: UInt16 = 47800

    func startLAN() {
        guard options.lan else { return }
        let discovery = LANDiscovery(excludedInterfaces: options.lanExcludedInterfaces, ownFingerprint: identity.fingerprint)
        discovery.delegate = self
        lan = discovery
        discovery.start()
        if hasPairedPeers { openDefaultListener() }
    }

    func stopLAN() {
        lan?.stop()
    }

    /// What DiscoveryMethods says: the methods StartDiscovery can use now.
    var discoveryMethods: [String] {
        var methods: [String] = []
        if let bluetooth, bluetooth.unavailableReason == nil { methods.append("bluetooth") }
        if lan?.isAvailable == true { methods.append("lan") }
        return methods
    }

    var isDiscoveringOnLAN: Bool { lan?.isDiscovering ?? false }

    /// The TXT record we publish: the display name, what we can do, our key's fingerprint.
    var ownLANAdvertisement: LANAdvertisement {
        let capabilities: Set<LANAdvertisement.Capability> = voice == nil ? [.text] : [.text, .voice]
        // Every field is in range by construction (advertisableName, the identity's own fingerprint).
        return try! LANAdvertisement(name: LANAdvertisement.advertisableName(settings.name),
                                     capabilities: capabilities, fingerprint: identity.fingerprint)
    }

    /// Known peers, as far as the default listener cares: someone may dial back.
    private var hasPairedPeers: Bool { peers.values.contains(where: \.paired) }

    /// StartDiscovery's LAN half: wants LAN discovery (it starts when Avahi is there) and says
    /// why it cannot run now, if it cannot.
    func startLANDiscovery() -> Result<Void, ServiceError> {
        guard let lan else { return .failure(.notAvailable("LAN discovery is off (--no-lan)")) }
        openDefaultListener()
        guard ip.isListening else {
            return .failure(.failed("LAN discovery needs a listener, and none could be opened (see the log)"))
        }
        lan.startDiscovery(LANServiceInfo(displayName: settings.name, port: ip.listenPort, advertisement: ownLANAdvertisement))
        emit(.propertiesChanged([.discovering]))
        if let reason = lan.unavailableReason { return .failure(.notAvailable("LAN discovery is not available: \(reason)")) }
        return .success(())
    }

    /// StopDiscovery's LAN half: withdraws the advertisement; false when the LAN was not discovering.
    func stopLANDiscovery() -> Bool {
        guard let lan, lan.isDiscovering else { return false }
        lan.stopDiscovery()
        if !hasPairedPeers { closeDefaultListener() }
        emit(.propertiesChanged([.discovering]))
        return true
    }

    /// A peer became known (a link opened): the default listener stays open for it from now on.
    func listenForKnownPeers() {
        if lan != nil { openDefaultListener() }
    }

    /// Whether a first contact on `link` must be refused: it came to the default listener while
    /// we are not discoverable (an explicit `--listen` accepts first contacts at any time).
    func refusesFirstContact(over link: PeerLink) -> Bool {
        guard !link.isOutgoing, options.listen == nil, case .ip = link.remote else { return false }
        return !isDiscoveringOnLAN
    }

    /// Listens on the LAN unless `--listen` chose the address or the listener is open: port 47800
    /// on every address (IPv6 and IPv4), else any free port, else IPv4 only.
    private func openDefaultListener() {
        guard options.listen == nil, !ip.isListening else { return }
        for address in ["[::]:\(Self.defaultLANPort)", "[::]:0", "0.0.0.0:\(Self.defaultLANPort)", "0.0.0.0:0"] {
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

extension PeerVoiceService: LANDiscoveryDelegate {
    func lanAvailabilityChanged() {
        emit(.propertiesChanged([.discoveryMethods]))
    }

    /// A known peer's advertisement (its fingerprint is the key of a peer we know) is found under
    /// its id; any other under its address. Only a claim: a dial proves the key.
    func lanFound(_ route: LANRoute, advertisement: LANAdvertisement) {
        let address = PeerAddress(ipHost: route.host, port: route.port)
        let claimed = advertisement.fingerprint.flatMap { PublicKey(hex: $0) }.map { PeerID(key: $0, using: crypto) }
        let ref: PeerRef = claimed.flatMap { peers[$0]?.paired == true ? .id($0) : nil } ?? .address(address)
        lanFoundRefs[route] = ref
        emit(.peerFound(ref, name: advertisement.name ?? ""))
    }

    func lanLost(_ route: LANRoute) {
        let ref = lanFoundRefs.removeValue(forKey: route) ?? .address(PeerAddress(ipHost: route.host, port: route.port))
        emit(.peerLost(ref))
    }
}
