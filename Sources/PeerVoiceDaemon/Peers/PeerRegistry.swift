import PeerVoiceCore

/// The peers the service knows, by key, and the addresses being dialled whose key is not known
/// yet. Paired peers are kept in `peers.json` (`PeerDirectory`); a peer's state changes are
/// announced from here (`PeerStateChanged`).
final class PeerRegistry {
    private var peers: [PeerID: Peer] = [:]
    private var contacts: [PeerAddress: Contact] = [:]
    private let directory: PeerDirectory
    private let emit: (ServiceEvent) -> Void

    /// Every paired peer from the directory, disconnected.
    init(directory: PeerDirectory, emit: @escaping (ServiceEvent) -> Void) {
        self.directory = directory
        self.emit = emit
        for known in directory.all {
            let peer = Peer(id: known.id, key: known.key, name: known.name, routes: known.routes, paired: true)
            peer.instance = known.instance.flatMap { InstanceID(hex: $0) }
            peer.stayDisconnected = known.stayDisconnected
            peer.presenceSecret = known.presenceSecret
            if let volume = known.volume { try? peer.playback.setVolume(volume) }  // a bad value in the file: 1.0
            peer.playback.muted = known.muted ?? false
            peers[known.id] = peer
        }
    }

    subscript(id: PeerID) -> Peer? { peers[id] }

    var all: Dictionary<PeerID, Peer>.Values { peers.values }

    var hasPairedPeers: Bool { peers.values.contains(where: \.paired) }

    /// Whether `peer` is still the one known under its id (not removed, nor replaced).
    func isCurrent(_ peer: Peer) -> Bool { peers[peer.id] === peer }

    /// The peer `key` names, met now for the first time (unpaired) if it is not known.
    func peer(withKey key: PublicKey, id: PeerID, name: String) -> Peer {
        if let peer = peers[id] { return peer }
        let peer = Peer(id: id, key: key, name: name, routes: [], paired: false)
        peers[id] = peer
        return peer
    }

    /// Forgets a peer that is not worth remembering (never paired, nothing queued).
    func drop(_ peer: Peer) {
        if isCurrent(peer) { peers[peer.id] = nil }
    }

    /// Unpins `peer`'s key: it is a stranger from now on.
    func remove(_ peer: PeerID) throws {
        try directory.remove(id: peer)
        peers[peer] = nil
    }

    func owners(of address: PeerAddress) -> [Peer] { peers.values.filter { $0.hasRoute(address) } }

    /// The peer `ref` names: its id, or an address that is a route of exactly one known peer.
    func resolve(_ ref: PeerRef) throws(ServiceError) -> Peer {
        switch ref {
        case .id(let id):
            guard let peer = peers[id] else {
                throw .unknownPeer("\(id) is not a known peer: Connect to its address first (ListPeers shows known peers)")
            }
            return peer
        case .address(let address):
            let matches = owners(of: address)
            guard matches.count <= 1 else {
                throw .invalidArgument("\(address) is a route of several peers (\(matches.map(\.id.description).sorted().joined(separator: ", "))): name the peer by its id")
            }
            guard let peer = matches.first else {
                throw .unknownPeer("\(address) is not the address of a known peer: Connect to it first (ListPeers shows known peers)")
            }
            return peer
        }
    }

    /// How the API names a device found at `address`: the known peer it is a route of, or the address.
    func ref(for address: PeerAddress) -> PeerRef {
        let owners = owners(of: address)
        return owners.count == 1 ? .id(owners[0].id) : .address(address)
    }

    // MARK: Contacts

    func contact(at address: PeerAddress) -> Contact? { contacts[address] }

    var allContacts: Dictionary<PeerAddress, Contact>.Values { contacts.values }

    /// The contact for `address`, added if new.
    func addContact(at address: PeerAddress) -> Contact {
        if let contact = contacts[address] { return contact }
        let contact = Contact(address: address)
        contacts[address] = contact
        return contact
    }

    func isCurrent(_ contact: Contact) -> Bool { contacts[contact.address] === contact }

    /// Forgets `contact`: its address turned out to be a peer's, or its dial ended.
    func remove(_ contact: Contact) {
        if isCurrent(contact) { contacts[contact.address] = nil }
    }

    // MARK: State

    /// `reason`: why, when a person can act on it (`StateReason`); every other change clears it.
    func setState(_ peer: Peer, _ state: PeerState, reason: String = "") {
        guard peer.state != state else { return }
        peer.state = state
        peer.stateReason = reason
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
}
