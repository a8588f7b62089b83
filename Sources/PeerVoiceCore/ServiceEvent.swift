/// A peer's connection state, as `PeerStateChanged` and `ListPeers` show it.
public enum PeerState: String, Sendable {
    case connecting, pairing, connected, disconnected
}

/// Whether voice with a peer is running, as `VoiceStateChanged` shows it.
public enum VoiceState: String, Sendable {
    case active, stopped
}

/// The service's read-only bus properties.
public enum ServiceProperty: String, CaseIterable, Sendable {
    case muted = "Muted"
    case discovering = "Discovering"
    case version = "Version"
    case listenAddress = "ListenAddress"
    case adapter = "Adapter"
    case audioProcessing = "AudioProcessing"
}

/// Something the service tells every client: each case is one bus signal.
public enum ServiceEvent: Equatable, Sendable {
    case peerFound(PeerID, name: String)
    case peerLost(PeerID)
    case peerStateChanged(PeerID, PeerState)
    case pairingRequested(PeerID, name: String, passkey: String)
    case messageReceived(PeerID, messageID: String, text: String)
    case messageDelivered(PeerID, messageID: String)
    case messageFailed(PeerID, messageID: String, reason: String)
    case muteChanged(Bool)
    case voiceStateChanged(PeerID, VoiceState)
    /// Properties whose values changed (sent as `PropertiesChanged`).
    case propertiesChanged([ServiceProperty])
}
