/// A peer's connection state, as `PeerStateChanged` and `ListPeers` show it.
public enum PeerState: String, Sendable {
    case connecting, pairing, connected, disconnected
}

/// Whether voice with a peer is running, as `VoiceStateChanged` shows it.
public enum VoiceState: String, Sendable {
    case active, stopped
}

/// What a pairing prompt asks of a person, as `PairingPrompt` names it.
public enum PairingKind: String, Sendable {
    /// Compare the code with the other screen, then accept or reject (`ConfirmPairing`).
    case confirm
    /// Only show the code, to be typed or confirmed on the other device (BlueZ's DisplayPasskey):
    /// there is nothing to answer here.
    case display
}

/// The service's read-only bus properties.
public enum ServiceProperty: String, CaseIterable, Sendable {
    case muted = "Muted"
    case discovering = "Discovering"
    case version = "Version"
    case listenAddress = "ListenAddress"
    case adapter = "Adapter"
    /// This service's own peer id and key fingerprint (what others see and compare).
    case id = "Id"
    case fingerprint = "Fingerprint"
    case discoveryMethods = "DiscoveryMethods"
    case audioProcessing = "AudioProcessing"
    /// The display name and visibility a person chose (`SetName`, `SetVisible`).
    case name = "Name"
    case visible = "Visible"
    /// Our microphone holds speech (unmuted).
    case speaking = "Speaking"
    /// The others in the calls our voice peers host (their PARTICIPANTS lists).
    case participants = "Participants"
}

/// Something the service tells every client: each case is one bus signal.
///
/// A peer is named by its id once its key is known; before that (a Bluetooth device found or
/// pairing in BlueZ, a dial to an address under way) by its address. `peerIdentified` says
/// which id an address turned out to belong to, before any other event under that id.
public enum ServiceEvent: Equatable, Sendable {
    case peerFound(PeerRef, name: String)
    case peerLost(PeerRef)
    case peerIdentified(PeerAddress, PeerID)
    case peerStateChanged(PeerRef, PeerState)
    /// A pairing prompt (`PairingPrompt`, and `PairingRequested` for older clients).
    case pairingRequested(PeerRef, name: String, passkey: String, kind: PairingKind = .confirm)
    /// The peer's prompt was answered or abandoned, wherever that happened (`PairingSettled`).
    case pairingSettled(PeerRef, accepted: Bool)
    case messageReceived(PeerID, messageID: String, text: String)
    case messageDelivered(PeerID, messageID: String)
    case messageFailed(PeerID, messageID: String, reason: String)
    case muteChanged(Bool)
    case voiceStateChanged(PeerID, VoiceState)
    /// Properties whose values changed (sent as `PropertiesChanged`).
    case propertiesChanged([ServiceProperty])
}
