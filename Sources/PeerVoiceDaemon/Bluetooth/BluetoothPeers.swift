import PeerVoiceCore

/// Where the other computers' channels and pairings go (`PeerConnections`).
protocol BluetoothChannelReceiver: AnyObject {
    /// The other computer opened a channel: returns whether a link takes it (else it is closed).
    func bluetoothIncomingChannel(_ channel: BluetoothChannel) -> Bool
    /// Someone other than us asked BlueZ to close the channel to `address`.
    func bluetoothChannelCloseRequested(_ address: PeerAddress)
    /// BlueZ's pairing of `address` ended (a prompt here was answered or abandoned).
    func bluetoothPairingEnded(_ address: PeerAddress, accepted: Bool)
}

/// The service's side of `BluetoothTransport`. A Bluetooth address is a route like an IP one;
/// only dialling differs (pair if needed, then `ConnectProfile`), and its links run over RFCOMM
/// channels BlueZ hands over: ours to the dial's completion, the other computer's to the
/// `receiver`. BlueZ knows devices by address, so its prompts and found devices carry the address
/// until a link proves the key.
final class BluetoothPeers {
    private static let notRunning = "Bluetooth is not available: BlueZ is not running"

    private let adapter: String?
    private let defaultAgent: Bool
    private let registry: PeerRegistry
    private let emit: (ServiceEvent) -> Void
    /// BlueZ, once started.
    private var transport: BluetoothTransport?
    /// Where the other computers' channels go.
    weak var receiver: BluetoothChannelReceiver?

    init(adapter: String?, defaultAgent: Bool, registry: PeerRegistry, emit: @escaping (ServiceEvent) -> Void) {
        self.adapter = adapter
        self.defaultAgent = defaultAgent
        self.registry = registry
        self.emit = emit
    }

    func start() {
        let transport = BluetoothTransport(adapter: adapter, defaultAgent: defaultAgent)
        transport.delegate = self
        self.transport = transport
        transport.start()
    }

    func stop() {
        transport?.stop()
    }

    var isDiscovering: Bool { transport?.isDiscovering ?? false }
    var adapterName: String { transport?.adapterName ?? "" }
    /// Whether StartDiscovery can use Bluetooth now (DiscoveryMethods).
    var canDiscover: Bool { transport.map { $0.unavailableReason == nil } ?? false }

    /// NotAvailable, saying why, for a Bluetooth address while Bluetooth cannot be used; else nil.
    func unavailable(for transport: Transport) -> ServiceError? {
        guard transport == .bluetooth else { return nil }
        guard let bluetooth = self.transport else { return .notAvailable(Self.notRunning) }
        return bluetooth.unavailableReason.map { .notAvailable($0) }
    }

    func startDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard let transport else { return completion(.failure(.notAvailable(Self.notRunning))) }
        transport.startDiscovery(completion: completion)
    }

    func stopDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard let transport else { return completion(.failure(.notAvailable(Self.notRunning))) }
        transport.stopDiscovery(completion: completion)
    }

    /// Dials a Bluetooth address: pairs only when someone waits in Connect (`mayPair`), so a
    /// redial for queued messages never asks a person. `completion` gets the channel, or why
    /// there is none; cancelling the returned attempt abandons the dial.
    func dial(_ address: PeerAddress, mayPair: Bool,
              completion: @escaping (Result<BluetoothChannel, ServiceError>) -> Void) -> DialAttempt {
        guard let transport else {
            completion(.failure(.notAvailable(Self.notRunning)))
            return DialAttempt {}
        }
        return transport.connect(address, mayPair: mayPair) { result in
            if case .failure(let error) = result { Log.debug("dialling \(address) over Bluetooth: \(error.message)") }
            completion(result)
        }
    }

    /// The service is done with its channel to `address` (its link ended, or it did not take it).
    func channelEnded(_ address: PeerAddress) {
        transport?.channelEnded(address)
    }

    /// The name BlueZ knows for a Bluetooth address, if it knows the device.
    func deviceName(_ address: PeerAddress) -> String? {
        guard address.transport == .bluetooth else { return nil }
        return transport?.device(address.description)?.name
    }

    /// ConfirmPairing for an address: answers the question BlueZ's agent asked about it; false
    /// if there is none.
    func answerPairing(_ address: PeerAddress, accept: Bool) -> Bool {
        address.transport == .bluetooth && (transport?.answerPairing(address, accept: accept) ?? false)
    }

    /// The other computer paired with us: its channel should come soon, else `timedOut`.
    func expectChannel(from address: PeerAddress, timedOut: @escaping () -> Void) {
        transport?.expectChannel(from: address, orElse: timedOut)
    }

    /// ListPeers rows for devices BlueZ knows to offer PeerVoice that are no peer's route.
    func summaries(excluding taken: Set<PeerAddress>) -> [PeerSummary] {
        (transport?.peerVoiceDevices ?? []).compactMap { device in
            guard let address = PeerAddress(bluetoothAddress: device.address), !taken.contains(address) else { return nil }
            return Self.summary(of: device, at: address)
        }
    }

    /// The ListPeers row of the device at `address`, if BlueZ knows it to offer PeerVoice.
    func summary(of address: PeerAddress) -> PeerSummary? {
        guard address.transport == .bluetooth, let device = transport?.device(address.description),
              device.uuids.contains(BluezProfile.uuid) else { return nil }
        return Self.summary(of: device, at: address)
    }

    private static func summary(of device: BluezDevice, at address: PeerAddress) -> PeerSummary {
        PeerSummary(ref: .address(address), name: device.name, transport: .bluetooth, state: .disconnected)
    }
}

extension BluetoothPeers: BluetoothTransportDelegate {
    func bluetoothStateChanged(_ properties: [ServiceProperty]) {
        // An adapter appearing or going changes whether Bluetooth discovery can run.
        emit(.propertiesChanged(properties.contains(.adapter) ? properties + [.discoveryMethods] : properties))
    }

    func bluetoothFound(_ address: PeerAddress, name: String) {
        emit(.peerFound(registry.ref(for: address), name: name))
    }

    func bluetoothLost(_ address: PeerAddress) {
        emit(.peerLost(registry.ref(for: address)))
    }

    func bluetoothPairingPrompt(_ address: PeerAddress, name: String, passkey: String, needsAnswer: Bool) {
        // BlueZ pairs devices, not keys: the prompt names the address, and a contact shows its state.
        let contact = registry.addContact(at: address)
        if contact.name.isEmpty { contact.name = name }
        if needsAnswer { registry.setState(contact, .pairing) }
        emit(.pairingRequested(.address(address), name: name.isEmpty ? contact.name : name, passkey: passkey,
                               kind: needsAnswer ? .confirm : .display))
    }

    func bluetoothPairingPromptEnded(_ address: PeerAddress, outcome: BluezAgent.Outcome) {
        emit(.pairingSettled(.address(address), accepted: outcome == .accepted))
        receiver?.bluetoothPairingEnded(address, accepted: outcome == .accepted)
    }

    func bluetoothIncomingChannel(_ channel: BluetoothChannel) -> Bool {
        receiver?.bluetoothIncomingChannel(channel) ?? false
    }

    func bluetoothChannelCloseRequested(_ address: PeerAddress) {
        receiver?.bluetoothChannelCloseRequested(address)
    }
}
