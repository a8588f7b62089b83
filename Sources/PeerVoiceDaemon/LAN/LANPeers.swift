import Foundation
import GIO
import Glibc
import PeerVoiceCore
import Sodium

/// The service's side of `LANDiscovery`, and the default listener. Without `--listen`
/// peervoiced listens on the LAN (port 47800, else any free one) while discoverable or while it
/// has known peers, and accepts first contacts there only while discoverable (`refusesFirstContact`);
/// while not discoverable it answers only dials that prove our presence secret (`decide(on:over:)`),
/// so a stranger who dials learns nothing about who listens.
///
/// What it advertises: while discoverable, its name and key; otherwise, while it has paired peers,
/// only a presence tag under a random name, both new every 15-minute epoch (`PresenceTag`), so that
/// its peers find it and nobody else can follow it. It browses whenever either is true; found
/// advertisements are reported only while discoverable, and a known peer's always becomes a
/// candidate route. PRESENCE is its frame (a `LinkComponent`): our secret goes to each peer whose
/// link opens, and each peer's is kept.
final class LANPeers: LinkComponent {
    /// The default listener's port, when it is free.
    static let defaultPort: UInt16 = 47800

    private let options: Options
    private let fingerprint: String
    private let crypto: LibSodium
    private let ip: IPTransport
    private let registry: PeerRegistry
    private let clock: WallClock
    /// The display name now (SetName changes it).
    private let displayName: () -> String
    /// The instance name while discoverable: the display name when discovery started (a rename
    /// changes only the TXT record until the next StartDiscovery).
    private var advertisedName = ""
    /// Whether we offer voice (the advertisement says so).
    private let offersVoice: () -> Bool
    private let emit: (ServiceEvent) -> Void
    /// Avahi, unless `--no-lan`.
    private var discovery: LANDiscovery?
    /// How each advertisement found is named, and whether `PeerFound` reported it (`PeerLost`
    /// follows only then, naming it the same way).
    private var found: [LANFoundService: (ref: PeerRef, reported: Bool)] = [:]
    /// StartDiscovery was called (and not StopDiscovery since).
    private(set) var isDiscovering = false
    /// The computer is going to sleep or asleep: nothing is advertised or browsed.
    private var asleep = false
    /// What paired peers recognise our presence advertisements by and prove dials with
    /// (PRESENCE): the current one in `presence.key`, older ones some peers still hold in
    /// `presence-older.key`.
    private var presenceSecrets: PresenceSecrets
    private let presenceSecretPath: String
    private var olderSecretsPath: String { presenceSecretPath.replacingOccurrences(of: "presence.key", with: "presence-older.key") }
    /// Which dials the default listener answers while not discoverable, and the proofs it accepted.
    private var dialGate = DialGate()
    /// The presence advertisement's instance name: random, new every epoch.
    private var presenceName = ""
    private var presenceEpoch: UInt64?
    private var epochTimer: EventSource?
    /// An advertisement gave a known peer a candidate route: dial it if messages wait.
    var knownPeerAppeared: (Peer) -> Void = { _ in }

    init(options: Options, fingerprint: String, crypto: LibSodium, ip: IPTransport, registry: PeerRegistry, links: PeerLinks,
         clock: WallClock, displayName: @escaping () -> String, offersVoice: @escaping () -> Bool,
         emit: @escaping (ServiceEvent) -> Void) throws {
        presenceSecretPath = options.stateDirectory + "/presence.key"
        presenceSecrets = PresenceSecrets(current: try Self.loadOrCreatePresenceSecret(at: presenceSecretPath, crypto: crypto))
        self.options = options
        self.fingerprint = fingerprint
        self.crypto = crypto
        self.ip = ip
        self.registry = registry
        self.clock = clock
        self.displayName = displayName
        self.offersVoice = offersVoice
        self.emit = emit
        links.register(self, frames: [.presence])
        if let text = FileManager.default.contents(atPath: olderSecretsPath).map({ String(decoding: $0, as: UTF8.self) }) {
            presenceSecrets = PresenceSecrets(current: presenceSecrets.current,
                                              older: PresenceSecrets.older(fromFileContents: text) ?? [])
        }
    }

    /// Our current presence secret: the one PRESENCE gives and presence tags use.
    var presenceSecret: PresenceSecret { presenceSecrets.current }

    func start() {
        guard options.lan else { return }
        let discovery = LANDiscovery(excludedInterfaces: options.lanExcludedInterfaces, ownFingerprint: fingerprint)
        discovery.delegate = self
        self.discovery = discovery
        discovery.start()
        if registry.hasPairedPeers { openDefaultListener() }
        updateAdvertising()
    }

    func stop() {
        discovery?.stop()
    }

    /// Whether StartDiscovery can use the LAN now (DiscoveryMethods).
    var canDiscover: Bool { discovery?.isAvailable == true }


    /// StartDiscovery's LAN half: wants LAN discovery (it starts when Avahi is there) and says
    /// why it cannot run now, if it cannot.
    func startDiscovery() -> Result<Void, ServiceError> {
        guard let discovery else { return .failure(.notAvailable("LAN discovery is off (--no-lan)")) }
        openDefaultListener()
        guard ip.isListening else {
            return .failure(.failed("LAN discovery needs a listener, and none could be opened (see the log)"))
        }
        if !isDiscovering { advertisedName = displayName() }
        isDiscovering = true
        updateAdvertising()
        emit(.propertiesChanged([.discovering]))
        if let reason = discovery.unavailableReason { return .failure(.notAvailable("LAN discovery is not available: \(reason)")) }
        return .success(())
    }

    /// StopDiscovery's LAN half: withdraws the advertisement; false when the LAN was not discovering.
    func stopDiscovery() -> Bool {
        guard discovery != nil, isDiscovering else { return false }
        isDiscovering = false
        if !registry.hasPairedPeers { closeDefaultListener() }
        // What was reported stays found quietly: no PeerLost for it later.
        for (service, entry) in found { found[service] = (entry.ref, false) }
        updateAdvertising()
        emit(.propertiesChanged([.discovering]))
        return true
    }

    /// A peer became known (a link opened): the default listener stays open for it from now on,
    /// and a presence advertisement lets it find us while we are not discoverable.
    func listenForKnownPeers() {
        guard discovery != nil else { return }
        openDefaultListener()
        updateAdvertising()
    }

    /// Going to sleep: the advertisement goes (mDNS goodbye), so nobody dials a sleeping computer.
    func sleep() {
        asleep = true
        updateAdvertising()
    }

    /// Awake again (maybe on another network): advertising and browsing start afresh.
    func wake() {
        asleep = false
        endPresenceEpoch()
        updateAdvertising()
    }

    /// A new network or address: the presence record is published afresh under a new name
    /// (browsers that resolved the old one resolve the new address; the old name must not appear
    /// on a new network, it would link the two). A named advertisement stays: Avahi updates its
    /// addresses, and publishing it again would show every browser a PeerLost and a PeerFound.
    func networkChanged() {
        endPresenceEpoch()
        updateAdvertising()
    }

    /// SetName: the advertisement's TXT record follows while discoverable.
    func nameChanged() {
        updateAdvertising()
    }

    /// A peer was removed: a new presence secret, so that it cannot recognise us any more. The
    /// remaining peers get it on their next link (`presenceSecretSent`); until then, a week at
    /// most, the secret they hold still proves their dials (docs/SECURITY.md §11.3).
    func rotatePresenceSecret() {
        let secret = Self.newPresenceSecret(crypto)
        do {
            try Self.writePresenceSecret(secret, to: presenceSecretPath)
            let paired = Set(registry.all.filter(\.paired).map(\.id))
            presenceSecrets.rotate(to: secret, paired: paired, unixSeconds: nowSeconds)
            saveOlderSecrets()
        } catch {
            Log.warning("could not replace the presence secret: \(error)")
        }
        endPresenceEpoch()
        updateAdvertising()
    }

    /// PRESENCE with the current secret went to `peer` on an open link.
    func presenceSecretSent(to peer: PeerID) {
        guard presenceSecrets.awaitsCurrent(peer) else { return }
        presenceSecrets.holdsCurrent(peer, unixSeconds: nowSeconds)
        saveOlderSecrets()
    }

    /// Whether `peer` still holds an older secret of ours (so it should be given the current one).
    func awaitsPresenceSecret(_ peer: PeerID) -> Bool {
        presenceSecrets.prune(unixSeconds: nowSeconds)
        return presenceSecrets.awaitsCurrent(peer)
    }

    /// Whether to answer an incoming dial's message 1: always while we accept first contacts
    /// there (discoverable, `--listen`, Bluetooth), otherwise only a dial proving one of our
    /// presence secrets, once.
    func decide(on dialProof: DialProofClaim?, over link: PeerLink) -> DialGate.Decision {
        let now = nowSeconds
        return dialGate.decide(dialProof, openToStrangers: !refusesFirstContact(over: link),
                               secrets: presenceSecrets.accepted(unixSeconds: now), unixSeconds: now, crypto: crypto)
    }

    private var nowSeconds: UInt64 { UInt64(clock.nowMs() / 1000) }

    private func saveOlderSecrets() {
        do {
            try Self.writeSecretFile(presenceSecrets.olderFileContents, to: olderSecretsPath)
        } catch {
            Log.warning("could not save the older presence secrets: \(error)")
        }
    }

    /// Publishes what the state calls for: our name and key while discoverable, a presence tag
    /// while we have paired peers, else nothing; and browses in either case.
    private func updateAdvertising() {
        guard let discovery else { return }
        guard !asleep else {
            endPresenceEpoch()
            return discovery.want(advertising: nil, browsing: false)
        }
        let hasPeers = registry.hasPairedPeers
        var service: LANServiceInfo?
        if ip.isListening {
            if isDiscovering {
                service = namedService()
            } else if hasPeers {
                service = presenceService()
            }
        }
        if service == nil || isDiscovering { endPresenceEpoch() }
        discovery.want(advertising: service, browsing: isDiscovering || hasPeers)
    }

    private func namedService() -> LANServiceInfo {
        let capabilities: Set<LANAdvertisement.Capability> = offersVoice() ? [.text, .voice] : [.text]
        // Every field is in range by construction (advertisableName, the identity's own fingerprint).
        let advertisement = try! LANAdvertisement(name: LANAdvertisement.advertisableName(displayName()),
                                                  capabilities: capabilities, fingerprint: fingerprint)
        return LANServiceInfo(displayName: advertisedName, port: ip.listenPort, advertisement: advertisement)
    }

    /// This epoch's presence advertisement; a timer replaces it when the epoch ends.
    private func presenceService() -> LANServiceInfo {
        let now = nowSeconds
        let epoch = PresenceTag.epoch(unixSeconds: now)
        if presenceEpoch != epoch {
            presenceEpoch = epoch
            presenceName = "PeerVoice " + crypto.randomBytes(4).map { String(format: "%02x", $0) }.joined()
            epochTimer = Timer.after(.seconds(PresenceTag.end(of: epoch) - now)) { [unowned self] in
                epochTimer = nil
                updateAdvertising()
            }
        }
        let tag = PresenceTag.tag(secret: presenceSecret, epoch: epoch, crypto: crypto)
        // A tag from PresenceTag is always well-formed.
        return LANServiceInfo(displayName: presenceName, port: ip.listenPort, advertisement: try! LANAdvertisement(presenceTag: tag))
    }

    /// The next presence advertisement starts a new epoch: a new name, a new timer.
    private func endPresenceEpoch() {
        epochTimer = nil
        presenceEpoch = nil
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

// MARK: PRESENCE

extension LANPeers {
    var offeredCapabilities: Capabilities { .presence }

    /// Now that the link is open and the key pinned: what lets this peer find us on a LAN.
    func linkOpened(_ link: PeerLink, to peer: Peer) {
        sendPresence(on: link, to: peer.id)
    }

    /// Our current presence secret, on an open link (it recognises our presence tags and proves
    /// dials to us).
    func sendPresence(on link: PeerLink, to peer: PeerID) {
        link.send(.presence(secret: presenceSecret.bytes))
        presenceSecretSent(to: peer)
    }

    /// A paired peer's presence secret: its presence advertisements are recognised from now on.
    func received(_ frame: Frame, on link: PeerLink, from peer: Peer) {
        guard case .presence(let bytes) = frame else { return }
        let secret = PresenceSecret(bytes: bytes)
        guard secret != peer.presenceSecret else { return }
        peer.presenceSecret = secret
        registry.remember(peer)
    }
}

extension LANPeers: LANDiscoveryDelegate {
    func lanAvailabilityChanged() {
        emit(.propertiesChanged([.discoveryMethods]))
    }

    /// A known peer's advertisement (its fingerprint is the key of a peer we know, or its tag is
    /// one of a known peer's presence secret) gives that peer a candidate route, and while we are
    /// discoverable a named one is found under its id; any other is found under its address.
    /// Only claims: a dial, with the key pinned, proves them. Presence is never reported.
    func lanFound(_ service: LANFoundService, advertisement: LANAdvertisement) {
        let address = PeerAddress(ipHost: service.route.host, port: service.route.port)
        guard let peer = knownPeer(advertising: advertisement) else {
            guard isDiscovering, advertisement.name != nil else { return }
            found[service] = (.address(address), true)
            return emit(.peerFound(.address(address), name: advertisement.name ?? ""))
        }
        let reported = isDiscovering && advertisement.tag == nil
        found[service] = (.id(peer.id), reported)
        peer.noteCandidate(address, seenAtMs: clock.nowMs())
        if reported { emit(.peerFound(.id(peer.id), name: advertisement.name ?? "")) }
        knownPeerAppeared(peer)
    }

    func lanLost(_ service: LANFoundService) {
        guard let (ref, reported) = found.removeValue(forKey: service) else { return }
        // The route stays a candidate while another advertisement (named or presence) still claims it.
        if case .id(let id) = ref, !found.contains(where: { $0.key.route == service.route && $0.value.ref == ref }) {
            registry[id]?.dropCandidate(PeerAddress(ipHost: service.route.host, port: service.route.port))
        }
        if reported { emit(.peerLost(ref)) }
    }

    /// The paired peer an advertisement claims to be: by its key, or by its presence tag.
    private func knownPeer(advertising advertisement: LANAdvertisement) -> Peer? {
        if let key = advertisement.fingerprint.flatMap({ PublicKey(hex: $0) }) {
            return registry[PeerID(key: key, using: crypto)].flatMap { $0.paired ? $0 : nil }
        }
        guard let tag = advertisement.tag else { return nil }
        let now = nowSeconds
        return registry.all.first { peer in
            peer.paired && peer.presenceSecret.map { PresenceTag.matches(tag, secret: $0, unixSeconds: now, crypto: crypto) } == true
        }
    }

    // MARK: The presence secret

    private static func loadOrCreatePresenceSecret(at path: String, crypto: LibSodium) throws -> PresenceSecret {
        if let data = FileManager.default.contents(atPath: path),
           let secret = PresenceSecret(hex: String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) {
            return secret
        }
        let secret = newPresenceSecret(crypto)
        try writePresenceSecret(secret, to: path)
        return secret
    }

    private static func newPresenceSecret(_ crypto: LibSodium) -> PresenceSecret {
        PresenceSecret(bytes: crypto.randomBytes(PresenceSecret.byteCount))!
    }

    private static func writePresenceSecret(_ secret: PresenceSecret, to path: String) throws {
        try writeSecretFile(secret.hex + "\n", to: path)
    }

    /// Written whole (temp file, rename), readable by the user only: it is key material.
    private static func writeSecretFile(_ text: String, to path: String) throws {
        let temporary = path + ".new"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(text.utf8),
                                             attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary])
        }
        guard rename(temporary, path) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
    }
}
