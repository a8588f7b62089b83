import GIO
import PeerVoiceCore

/// Bluetooth: the service's side of `BluetoothTransport`. A Bluetooth address is a route like an
/// IP one; only dialling differs (pair if needed, then `ConnectProfile`), and its links run over
/// RFCOMM channels BlueZ hands over. BlueZ knows devices by address, so its prompts and found
/// devices carry the address until a link proves the key. PeerVoiceService.swift calls in here through one-line
/// hooks (start, stop, discovery, dial, confirmPairing, linkDidClose, peerList).
extension PeerVoiceService {
    func startBluetooth() {
        let transport = BluetoothTransport(adapter: options.adapter, defaultAgent: options.defaultAgent)
        transport.delegate = self
        bluetooth = transport
        transport.start()
    }

    func stopBluetooth() {
        bluetooth?.stop()
    }

    /// NotAvailable, saying why, for a Bluetooth address while Bluetooth cannot be used; else nil.
    func bluetoothUnavailable(for transport: Transport) -> ServiceError? {
        guard transport == .bluetooth else { return nil }
        guard let bluetooth else { return .notAvailable("Bluetooth is not available: BlueZ is not running") }
        return bluetooth.unavailableReason.map { .notAvailable($0) }
    }

    func startBluetoothDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard let bluetooth else { return completion(.failure(.notAvailable("Bluetooth is not available: BlueZ is not running"))) }
        bluetooth.startDiscovery(completion: completion)
    }

    func stopBluetoothDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard let bluetooth else { return completion(.failure(.notAvailable("Bluetooth is not available: BlueZ is not running"))) }
        bluetooth.stopDiscovery(completion: completion)
    }

    /// Dials a Bluetooth address: pairs only when someone waits in Connect (`mayPair`), so a
    /// redial for queued messages never asks a person. The channel arrives through
    /// `bluetoothChannelOpened`, which ends the dial; `failed` is called otherwise.
    func dialBluetooth(_ address: PeerAddress, mayPair: Bool, failed: @escaping (ServiceError) -> Void) {
        guard let bluetooth else {
            return failed(.notAvailable("Bluetooth is not available: BlueZ is not running"))
        }
        bluetooth.connect(address, mayPair: mayPair) { result in
            switch result {
            case .success:
                failed(.failed("BlueZ connected \(address) but handed over no channel"))
            case .failure(let error):
                Log.debug("dialling \(address) over Bluetooth: \(error.message)")
                failed(error)
            }
        }
    }

    /// ConfirmPairing for an address: answers the question BlueZ's agent asked about it; false
    /// if there is none.
    func answerBluetoothPairing(_ address: PeerAddress, accept: Bool) -> Bool {
        address.transport == .bluetooth && (bluetooth?.answerPairing(address, accept: accept) ?? false)
    }

    /// `linkDidClose`'s hook: a Bluetooth link's channel is released in BlueZ too.
    func bluetoothLinkDidClose(_ link: PeerLink) {
        bluetooth?.linkClosed(link)
    }

    /// ListPeers rows for devices BlueZ knows to offer PeerVoice that are no peer's route.
    func bluetoothPeerSummaries(excluding taken: Set<PeerAddress>) -> [PeerSummary] {
        (bluetooth?.peerVoiceDevices ?? []).compactMap { device in
            guard let address = PeerAddress(bluetoothAddress: device.address), !taken.contains(address) else { return nil }
            return PeerSummary(ref: .address(address), name: device.name, transport: .bluetooth, state: .disconnected)
        }
    }

    /// How the API names a device found at `address`: the known peer it is a route of, or the address.
    private func ref(for address: PeerAddress) -> PeerRef {
        let owners = peers.values.filter { $0.hasRoute(address) }
        return owners.count == 1 ? .id(owners[0].id) : .address(address)
    }

    /// The contact for a device pairing with us in BlueZ, added if new (its state shows the pairing).
    private func bluetoothContact(_ address: PeerAddress, name: String) -> Contact {
        if let contact = contacts[address] { return contact }
        let contact = Contact(address: address)
        contact.name = name
        contacts[address] = contact
        return contact
    }
}

extension PeerVoiceService: BluetoothTransportDelegate {
    func bluetoothStateChanged(_ properties: [ServiceProperty]) {
        // An adapter appearing or going changes whether Bluetooth discovery can run.
        emit(.propertiesChanged(properties.contains(.adapter) ? properties + [.discoveryMethods] : properties))
    }

    func bluetoothFound(_ address: PeerAddress, name: String) {
        emit(.peerFound(ref(for: address), name: name))
    }

    func bluetoothLost(_ address: PeerAddress) {
        emit(.peerLost(ref(for: address)))
    }

    func bluetoothPairingPrompt(_ address: PeerAddress, name: String, passkey: String, needsAnswer: Bool) {
        // BlueZ pairs devices, not keys: the prompt names the address.
        let contact = bluetoothContact(address, name: name)
        if needsAnswer { setState(contact, .pairing) }
        emit(.pairingRequested(.address(address), name: name.isEmpty ? contact.name : name, passkey: passkey,
                               kind: needsAnswer ? .confirm : .display))
    }

    func bluetoothPairingPromptEnded(_ address: PeerAddress, outcome: BluezAgent.Outcome) {
        emit(.pairingSettled(.address(address), accepted: outcome == .accepted))
        guard let contact = contacts[address] else { return }
        if contact.dial != nil {
            // Our own Connect: its Pair call reports how the pairing ended.
            if outcome == .accepted { setState(contact, .connecting) }
            return
        }
        guard !pendingLinks.values.contains(where: { $0.dialled == .contact(address) }) else { return }
        guard outcome == .accepted else {
            return contactFailed(contact, .rejected("Bluetooth pairing with \(address) was not accepted"))
        }
        // The other computer paired with us and should open its channel now.
        setState(contact, .connecting)
        bluetooth?.expectChannel(from: address) { [weak self, weak contact] in
            guard let self, let contact, contacts[address] === contact, contact.dial == nil,
                  !pendingLinks.values.contains(where: { $0.dialled == .contact(address) }) else { return }
            contactFailed(contact, .failed("\(address) paired but did not connect"))
        }
    }

    func bluetoothChannelOpened(_ address: PeerAddress, name: String, fd: Int32, outgoing: Bool) -> Bool {
        let dialled: DialTarget?
        if let peer = peers.values.first(where: { $0.dial?.address == address }) {
            peer.dial = nil
            dialled = .peer(peer.id)
        } else if let contact = contacts[address] {
            if contact.name.isEmpty { contact.name = name }
            contact.dial = nil
            dialled = .contact(address)
        } else if outgoing {
            // Disconnect was called while BlueZ was still connecting.
            return false
        } else {
            dialled = nil
        }
        let link = PeerLink(connection: StreamConnection(socket: Socket(adopting: fd)),
                            remote: .bluetooth(address: address.description), isOutgoing: outgoing)
        bluetooth?.linkStarted(link, peer: address)
        startLink(link, dialled: dialled)
        return true
    }

    func bluetoothChannelCloseRequested(_ address: PeerAddress) {
        let remote = address.description
        if let peer = peers.values.first(where: { $0.link.map { $0.remote.description == remote && $0.transport == .bluetooth } ?? false }) {
            Log.info("BlueZ asked to close the channel to \(address)")
            try? disconnect(.id(peer.id))
        } else if let entry = pendingLinks.values.first(where: { $0.link.transport == .bluetooth && $0.link.remote.description == remote }) {
            Log.info("BlueZ asked to close the channel to \(address)")
            entry.link.drop(reason: "BlueZ asked to close the channel")
        }
    }
}
