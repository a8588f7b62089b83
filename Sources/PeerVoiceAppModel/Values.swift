/// A peer's state as the list shows it: the service's states, and `nearby` for a peer that was
/// found (`PeerFound`) but is not known to the service yet.
public enum PeerState: String, Equatable, Sendable {
    case nearby, connecting, pairing, connected, disconnected

    /// The service's state names (`ListPeers`, `PeerStateChanged`); unknown names read as disconnected.
    public init(service name: String) {
        self = PeerState(rawValue: name).flatMap { $0 == .nearby ? nil : $0 } ?? .disconnected
    }
}

/// One row of the peers list.
public struct PeerRow: Equatable, Sendable {
    public var id: String
    /// The name the peer gave itself; "" when not known yet.
    public var name: String
    /// "bluetooth" or "ip".
    public var transport: String
    public var state: PeerState
    public var voiceActive = false
    /// Its voice, as it reaches us, holds speech now (the peer object's `Speaking`).
    public var speaking = false
    /// The volume its voice plays at here, 0.0–2.0 (the peer object's `Volume`).
    public var volume = 1.0
    /// Its voice is not played here (the peer object's `Muted`, `SetPeerMuted`).
    public var mutedHere = false

    public init(id: String, name: String, transport: String, state: PeerState, voiceActive: Bool = false,
                speaking: Bool = false, volume: Double = 1, mutedHere: Bool = false) {
        self.id = id
        self.name = name
        self.transport = transport
        self.state = state
        self.voiceActive = voiceActive
        self.speaking = speaking
        self.volume = volume
        self.mutedHere = mutedHere
    }

    /// What the row (and its accessible name) shows: the peer's name, or its id when it has none.
    public var displayName: String { name.isEmpty ? id : name }
}

/// A pairing code on screen.
public struct PairingQuestion: Equatable, Sendable {
    public enum Kind: String, Equatable, Sendable {
        /// Both sides show the code and a person accepts or rejects it here.
        case confirm
        /// The code is only to be read out or typed on the other device (BlueZ's DisplayPasskey).
        case show
    }

    public var peer: String
    public var name: String
    /// 6 digits, or "" when there is nothing to compare.
    public var passkey: String
    public var kind: Kind

    public init(peer: String, name: String, passkey: String, kind: Kind) {
        self.peer = peer
        self.name = name
        self.passkey = passkey
        self.kind = kind
    }

    /// "123 456": two groups of three, for reading aloud.
    public var groupedPasskey: String {
        guard passkey.count == 6 else { return passkey }
        return String(passkey.prefix(3)) + " " + String(passkey.suffix(3))
    }

    /// Whether the dialog asks (Accept, Reject) or only shows.
    public var asks: Bool { kind == .confirm }
}

public enum MessageState: Equatable, Sendable {
    case received, queued, delivered
    case failed(String)

    /// A `History` status ("received", "queued", "delivered", "failed").
    public init(history status: String) {
        switch status {
        case "received": self = .received
        case "delivered": self = .delivered
        case "failed": self = .failed("")
        default: self = .queued
        }
    }
}

public struct ChatMessage: Equatable, Sendable {
    public let id: String
    public let incoming: Bool
    public var text: String
    public var state: MessageState
    /// Unix time in milliseconds.
    public let timeMs: UInt64

    public init(id: String, incoming: Bool, text: String, state: MessageState, timeMs: UInt64) {
        self.id = id
        self.incoming = incoming
        self.text = text
        self.state = state
        self.timeMs = timeMs
    }

    /// `History`'s `(ssts)` row: id, status, time, text.
    public init(historyID id: String, status: String, timeMs: UInt64, text: String) {
        let state = MessageState(history: status)
        self.init(id: id, incoming: state == .received, text: text, state: state, timeMs: timeMs)
    }
}

public enum ServiceStatus: Equatable, Sendable {
    /// Not on the bus yet; activation is under way.
    case starting
    case running
    /// Activation failed; the reason is for people.
    case unavailable(String)
}

/// Whether the hold button mutes while held (the original app's Touch Down = mute, Touch Up =
/// unmute) or opens the microphone while held (push to talk).
public enum HoldMode: Equatable, Sendable {
    case holdToMute, holdToTalk
}

/// Which peer actions make sense now.
public struct PeerActions: Equatable, Sendable {
    public var connect = false
    public var disconnect = false
    public var voice = false
    public var send = false
    public var voiceLabel = ""

    public init(connect: Bool = false, disconnect: Bool = false, voice: Bool = false, send: Bool = false,
                voiceLabel: String = "") {
        self.connect = connect
        self.disconnect = disconnect
        self.voice = voice
        self.send = send
        self.voiceLabel = voiceLabel
    }
}

/// Whether a voice holds speech now, as an indicator shows it: the state, and the words for it
/// (the indicator's accessible name, "Speaking" or "Silent" for a peer).
public struct SpeakingIndicator: Equatable, Sendable {
    public var speaking: Bool
    public var name: String

    public init(speaking: Bool, name: String) {
        self.speaking = speaking
        self.name = name
    }
}

/// The selected peer's volume and mute here, as its controls show them.
public struct PeerPlayback: Equatable, Sendable {
    /// 0.0–2.0, as `SetVolume` takes it.
    public var volume: Double
    public var mutedHere: Bool

    public init(volume: Double, mutedHere: Bool) {
        self.volume = volume
        self.mutedHere = mutedHere
    }

    /// The volume as the slider shows it: 0 to 200 %.
    public var percent: Double { (volume * 100).rounded() }
}
