import PeerVoiceCore

/// One row of `ListPeers`.
struct PeerSummary {
    let id: PeerID
    let name: String
    let state: PeerState
}

/// The control plane: peers, messages, mute. Lives on the GLib main loop thread; every method is
/// called there, and it reports what happens through `emit`.
final class PeerVoiceService {
    var emit: (ServiceEvent) -> Void = { _ in }

    private(set) var isMuted = false
    private(set) var isDiscovering = false
    private(set) var listenAddress = ""
    private(set) var adapterName = ""

    private static let noBluetooth = "Bluetooth is not available: PeerVoice does not use BlueZ yet"
    private static let noVoice = "voice is not available: PeerVoice has no audio support yet"
    private static let noIP = "the IP transport is not available yet"

    // MARK: Discovery

    func startDiscovery() throws(ServiceError) {
        throw .notAvailable(Self.noBluetooth)
    }

    func stopDiscovery() throws(ServiceError) {
        throw .notAvailable(Self.noBluetooth)
    }

    // MARK: Peers

    func peerList() -> [PeerSummary] { [] }

    func connect(_ peer: PeerID, completion: @escaping (Result<Void, ServiceError>) -> Void) {
        completion(.failure(.notAvailable(peer.transport == .bluetooth ? Self.noBluetooth : Self.noIP)))
    }

    func disconnect(_ peer: PeerID) throws(ServiceError) {
        throw unknown(peer)
    }

    func removePeer(_ peer: PeerID) throws(ServiceError) {
        throw unknown(peer)
    }

    // MARK: Messages

    /// Queues `text` for `peer` (nil: every connected peer) and returns the message id.
    func send(_ text: String, to peer: PeerID?) throws(ServiceError) -> String {
        try MessageText.validate(text)
        guard let peer else { throw .notConnected("no peer is connected: Connect to one first") }
        throw unknown(peer)
    }

    func history(of peer: PeerID, max: Int) throws(ServiceError) -> [StoredMessage] {
        throw unknown(peer)
    }

    // MARK: Mute

    func setMuted(_ muted: Bool) {
        guard muted != isMuted else { return }
        isMuted = muted
        Log.info(muted ? "microphone muted" : "microphone unmuted")
        emit(.muteChanged(muted))
        emit(.propertiesChanged([.muted]))
    }

    func toggleMute() -> Bool {
        setMuted(!isMuted)
        return isMuted
    }

    // MARK: Pairing and voice

    func confirmPairing(_ peer: PeerID, accept: Bool) throws(ServiceError) {
        throw .invalidArgument("no pairing request is pending for \(peer)")
    }

    func startVoice(_ peer: PeerID) throws(ServiceError) {
        throw unknown(peer)
    }

    func stopVoice(_ peer: PeerID) throws(ServiceError) {
        throw unknown(peer)
    }

    private func unknown(_ peer: PeerID) -> ServiceError {
        .unknownPeer("\(peer) is not a known peer: Connect to it first (ListPeers shows known peers)")
    }
}
