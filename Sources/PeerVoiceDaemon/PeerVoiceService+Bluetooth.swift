import GIO
import PeerVoiceCore

/// Bluetooth peers: the service's side of `BluetoothTransport`. A Bluetooth peer is a `Peer` like
/// an IP one; only dialling differs (pair if needed, then `ConnectProfile`), and its links run
/// over RFCOMM channels BlueZ hands over. PeerVoiceService.swift calls in here through one-line
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

    /// NotAvailable, saying why, for a Bluetooth peer while Bluetooth cannot be used; else nil.
    func bluetoothUnavailable(for id: PeerID) -> ServiceError? {
        guard id.transport == .bluetooth else { return nil }
        guard let bluetooth else { return .notAvailable("Bluetooth is not available: BlueZ is not running") }
        return bluetooth.unavailableReason.map { .notAvailable($0) }
    }

    func startBluetoothDiscovery() throws(ServiceError) {
        guard let bluetooth else { throw .notAvailable("Bluetooth is not available: BlueZ is not running") }
        try bluetooth.startDiscovery()
    }

    func stopBluetoothDiscovery() throws(ServiceError) {
        guard let bluetooth else { throw .notAvailable("Bluetooth is not available: BlueZ is not running") }
        try bluetooth.stopDiscovery()
    }

    /// `dial` for Bluetooth peers. Pairs only when someone waits in Connect: a redial for queued
    /// messages never asks a person.
    func dialBluetooth(_ peer: Peer) {
        let attempt = DialAttempt()
        peer.dial = attempt
        guard let bluetooth else {
            peer.dial = nil
            return connectFailed(peer, .notAvailable("Bluetooth is not available: BlueZ is not running"))
        }
        if peer.name.isEmpty, let device = bluetooth.device(peer.id.description) { peer.name = device.name }
        bluetooth.connect(peer.id, mayPair: !peer.connectWaiters.isEmpty) { [weak self, weak peer] result in
            // A channel that opened took over from the dial (bluetoothChannelOpened cleared it).
            guard let self, let peer, peers[peer.id] === peer, peer.dial === attempt else { return }
            peer.dial = nil
            switch result {
            case .success:
                connectFailed(peer, .failed("BlueZ connected \(peer.id) but handed over no channel"))
            case .failure(let error):
                Log.debug("dialling \(peer.id) over Bluetooth: \(error.message)")
                connectFailed(peer, error)
            }
        }
    }

    /// ConfirmPairing's routing: a question BlueZ's agent asked about this peer is answered first;
    /// false means there is none, so the link-level prompt (if any) is the one meant.
    func answerBluetoothPairing(_ id: PeerID, accept: Bool) -> Bool {
        id.transport == .bluetooth && (bluetooth?.answerPairing(id, accept: accept) ?? false)
    }

    /// `linkDidClose`'s hook: a Bluetooth link's channel is released in BlueZ too.
    func bluetoothLinkDidClose(_ link: PeerLink) {
        bluetooth?.linkClosed(link)
    }

    /// ListPeers rows for devices BlueZ knows to offer PeerVoice that are not peers yet.
    func bluetoothPeerSummaries(excluding known: Set<PeerID>) -> [PeerSummary] {
        (bluetooth?.peerVoiceDevices ?? []).compactMap { device in
            guard let id = PeerID(bluetoothAddress: device.address), !known.contains(id) else { return nil }
            return PeerSummary(id: id, name: device.name, state: .disconnected)
        }
    }

    /// The peer for a Bluetooth device, added to the known peers if new.
    private func bluetoothPeer(_ id: PeerID, name: String) -> Peer {
        if let peer = peers[id] { return peer }
        let peer = Peer(id: id, name: name, redialable: true)
        peers[id] = peer
        return peer
    }
}

extension PeerVoiceService: BluetoothTransportDelegate {
    func bluetoothStateChanged(_ properties: [ServiceProperty]) {
        // An adapter appearing or going changes whether Bluetooth discovery can run.
        emit(.propertiesChanged(properties.contains(.adapter) ? properties + [.discoveryMethods] : properties))
    }

    func bluetoothFound(_ peer: PeerID, name: String) {
        emit(.peerFound(peer, name: name))
    }

    func bluetoothLost(_ peer: PeerID) {
        emit(.peerLost(peer))
    }

    func bluetoothPairingPrompt(_ id: PeerID, name: String, passkey: String, needsAnswer: Bool) {
        let peer = bluetoothPeer(id, name: name)
        if needsAnswer { setState(peer, .pairing) }
        emit(.pairingRequested(id, name: name.isEmpty ? peer.name : name, passkey: passkey))
    }

    func bluetoothPairingPromptEnded(_ id: PeerID, outcome: BluezAgent.Outcome) {
        guard let peer = peers[id], !peer.isConnected else { return }
        if peer.dial != nil {
            // Our own Connect: its Pair call reports how the pairing ended.
            if outcome == .accepted { setState(peer, .connecting) }
            return
        }
        guard !hasPendingLink(peer) else { return }
        guard outcome == .accepted else {
            return connectFailed(peer, .rejected("Bluetooth pairing with \(id) was not accepted"))
        }
        // The other computer paired with us and should open its channel now.
        setState(peer, .connecting)
        bluetooth?.expectChannel(from: id) { [weak self, weak peer] in
            guard let self, let peer, peers[id] === peer, !peer.isConnected, peer.dial == nil, !hasPendingLink(peer) else { return }
            connectFailed(peer, .failed("\(id) paired but did not connect"))
        }
    }

    func bluetoothChannelOpened(_ id: PeerID, name: String, fd: Int32, outgoing: Bool) -> Bool {
        if outgoing, let peer = peers[id], peer.dial == nil, peer.stayDisconnected {
            // Disconnect was called while BlueZ was still connecting.
            return false
        }
        let peer = bluetoothPeer(id, name: name)
        if outgoing { peer.dial = nil }
        let link = PeerLink(connection: StreamConnection(socket: Socket(adopting: fd)),
                            remote: .bluetooth(address: id.description), isOutgoing: outgoing)
        bluetooth?.linkStarted(link, peer: id)
        startLink(link, for: id)
        return true
    }

    func bluetoothChannelCloseRequested(_ id: PeerID) {
        guard let peer = peers[id], peer.isConnected || hasPendingLink(peer) else { return }
        Log.info("BlueZ asked to close the channel to \(id)")
        try? disconnect(id)
    }
}
