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
    /// Both people confirmed pairing (its key is pinned: the peer object's `Paired`): listed
    /// under the peers, not among the devices nearby.
    public var isPaired = false

    public init(id: String, name: String, transport: String, state: PeerState, voiceActive: Bool = false,
                speaking: Bool = false, volume: Double = 1, mutedHere: Bool = false, isPaired: Bool = false) {
        self.isPaired = isPaired
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
public enum HoldMode: String, Equatable, Codable, Sendable {
    case holdToMute = "hold-to-mute"
    case holdToTalk = "hold-to-talk"
}

/// What the app itself keeps between starts (the service keeps its own settings). Fields a
/// file lacks keep their defaults.
public struct AppPreferences: Codable, Equatable, Sendable {
    public var holdMode: HoldMode = .holdToMute
    public var style: AppStyle = .followSystem

    public init(holdMode: HoldMode = .holdToMute, style: AppStyle = .followSystem) {
        self.holdMode = holdMode
        self.style = style
    }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        holdMode = (try? container.decode(HoldMode.self, forKey: .holdMode)) ?? .holdToMute
        style = (try? container.decode(AppStyle.self, forKey: .style)) ?? .followSystem
    }
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

/// An object the service publishes through its ObjectManager, decoded by its interface. The bus
/// client decodes each interface it knows (`org.example.PeerVoice.Peer` today); a transfer
/// (`org.example.PeerVoice.Transfer`) or a room (`org.example.PeerVoice.Room`) becomes a case
/// here, and the model places it: a transfer in its peer's conversation, a room as a
/// conversation of its own.
public enum ServiceObject: Equatable, Sendable {
    /// A known peer (`peers/<ID>`) or a device found but not keyed yet (`found/<ADDRESS>`).
    case peer(PeerRow)
    /// A file transfer (`transfers/<n>`).
    case transfer(TransferRow)
    /// A Mumble room (`rooms/<n>`).
    case room(RoomRow)
}

/// A Mumble room as the sidebar and its page show it (the room object's properties).
public struct RoomRow: Equatable, Sendable {
    public struct User: Equatable, Sendable {
        public var session: String
        public var name: String
        public var speaking: Bool
        public var muted: Bool

        public init(session: String, name: String, speaking: Bool, muted: Bool) {
            self.session = session
            self.name = name
            self.speaking = speaking
            self.muted = muted
        }
    }

    /// Its object's path.
    public var path: String
    /// mumble://user@host:port/channel, as the service normalised it.
    public var url: String
    /// connecting, connected, reconnecting or failed.
    public var state: String
    public var error: String
    /// "/Games"; "" while not connected.
    public var channel: String
    /// The others in our channel, by name.
    public var users: [User]

    public init(path: String, url: String, state: String, error: String, channel: String, users: [User]) {
        self.path = path
        self.url = url
        self.state = state
        self.error = error
        self.channel = channel
        self.users = users.sorted { ($0.name.lowercased(), $0.session) < ($1.name.lowercased(), $1.session) }
    }

    /// "host/Games": the server and channel, without the scheme, user and default port.
    public var title: String {
        var rest = url.hasPrefix("mumble://") ? String(url.dropFirst("mumble://".count)) : url
        if let at = rest.firstIndex(of: "@"), rest[..<at].firstIndex(of: "/") == nil { rest = String(rest[rest.index(after: at)...]) }
        rest = rest.replacing(":64738", with: "")
        return rest.hasSuffix("/") ? String(rest.dropLast()) : rest
    }
}

/// A line of a room's conversation: who said it (nil: we did) and what.
public struct RoomMessage: Equatable, Sendable {
    public var user: String?
    public var text: String
    public var timeMs: UInt64

    public init(user: String?, text: String, timeMs: UInt64) {
        self.user = user
        self.text = text
        self.timeMs = timeMs
    }
}

/// One entry of a conversation, oldest first.
public enum ConversationItem: Equatable, Sendable {
    case message(ChatMessage)
    case transfer(TransferRow)
}

/// A transfer object's state (`org.example.PeerVoice.Transfer`'s `State`).
public enum TransferState: String, Equatable, Sendable {
    case waiting, active, paused, complete, failed, cancelled, declined

    /// Unknown names (a newer service's) read as waiting: nothing is offered that could be wrong
    /// but Cancel.
    public init(service name: String) { self = TransferState(rawValue: name) ?? .waiting }

    /// It will not change any more.
    public var isFinal: Bool { [.complete, .failed, .cancelled, .declined].contains(self) }
}

/// A file transfer as its row in the peer's conversation shows it (the transfer object's
/// properties, and when the app first saw it, which places it among the bubbles).
public struct TransferRow: Equatable, Sendable {
    /// Its object's path.
    public var path: String
    public var peer: String
    public var incoming: Bool
    public var state: TransferState
    /// Each file's name relative to the transfer ("Photos/beach.jpg") and size in bytes.
    public var files: [(name: String, size: UInt64)]
    public var size: UInt64
    public var transferred: UInt64
    /// Why it failed, was declined or cancelled, in the service's words.
    public var error: String
    /// Unix time in milliseconds the app first saw it (the object carries no time).
    public var timeMs: UInt64 = 0
    /// Incoming: the file or folder it is saved as (one item), or the folder holding the items
    /// (several); "" for one of ours.
    public var destination: String

    public init(path: String, peer: String, incoming: Bool, state: TransferState, files: [(name: String, size: UInt64)],
                size: UInt64, transferred: UInt64, error: String, destination: String = "") {
        self.destination = destination
        self.path = path
        self.peer = peer
        self.incoming = incoming
        self.state = state
        self.files = files
        self.size = size
        self.transferred = transferred
        self.error = error
    }

    /// The items sent, as a person chose them: the top-level names of the files' paths, in order.
    public var items: [String] {
        var seen: [String] = []
        for file in files {
            // Split at the byte, as a file system (and the service) does: a character can hold a
            // `/` (one followed by a combining mark is one Character).
            let item = file.name.utf8.split(separator: UInt8(ascii: "/"), maxSplits: 1, omittingEmptySubsequences: false)
                .first.map { String(Substring($0)) } ?? ""
            if !seen.contains(item) { seen.append(item) }
        }
        return seen
    }

    /// 0…1 of the bytes, for the progress bar (a transfer of nothing is done when complete).
    public var fraction: Double {
        size == 0 ? (state == .complete ? 1 : 0) : min(1, Double(transferred) / Double(size))
    }

    public static func == (lhs: TransferRow, rhs: TransferRow) -> Bool {
        lhs.path == rhs.path && lhs.peer == rhs.peer && lhs.incoming == rhs.incoming && lhs.state == rhs.state
            && lhs.files.elementsEqual(rhs.files) { $0.name == $1.name && $0.size == $1.size }
            && lhs.size == rhs.size && lhs.transferred == rhs.transferred && lhs.error == rhs.error && lhs.timeMs == rhs.timeMs
            && lhs.destination == rhs.destination
    }
}

/// How fast a transfer moves, from the bytes the service reported over the last seconds.
public struct TransferRate: Equatable, Sendable {
    public var bytesPerSecond: Double
    /// Seconds left at that rate; nil when it cannot be told (nothing moves).
    public var secondsLeft: Double?

    public init(bytesPerSecond: Double, secondsLeft: Double?) {
        self.bytesPerSecond = bytesPerSecond
        self.secondsLeft = secondsLeft
    }
}

/// What the peer list shows when it has no rows to show, or `.peers`.
public enum PeerListState: Equatable, Sendable {
    /// The service is not on the bus yet (activation is under way).
    case starting
    /// The service cannot be reached: why, in words; Retry starts it.
    case serviceNotRunning(String)
    /// Nobody known or found yet, and Bluetooth can search (Search nearby).
    case noOneNearby(searching: Bool)
    /// Nobody known or found yet, and Bluetooth cannot search (off, or no adapter); the local
    /// network perhaps can.
    case bluetoothOff(canSearchNetwork: Bool, searching: Bool)
    case peers
}

/// Light, dark, or the desktop's preference (AdwStyleManager's colour scheme).
public enum AppStyle: String, CaseIterable, Codable, Sendable {
    case followSystem = "follow-system"
    case light, dark
}

/// A stage of the capture processing, by its name in `AudioProcessing`.
public enum AudioProcessingStage: String, CaseIterable, Sendable {
    case echoCancel = "echo-cancel"
    case noiseSuppression = "noise-suppression"
    case highPass = "high-pass"
    case gainControl = "gain-control"
}

/// Mumble's text (HTML, as its clients send it) as plain text for a bubble: line breaks kept,
/// tags dropped, the entities Mumble's clients write turned back into their characters.
public enum MumbleText {
    public static func plain(_ html: String) -> String {
        var text = ""
        var rest = Substring(html)
        while let open = rest.firstIndex(of: "<") {
            text += rest[..<open]
            guard let close = rest[open...].firstIndex(of: ">") else { rest = rest[open...]; break }
            let tag = rest[rest.index(after: open)..<close].lowercased()
            if tag.hasPrefix("br") || tag == "/p" || tag == "p" && !text.isEmpty { text += "\n" }
            rest = rest[rest.index(after: close)...]
        }
        text += rest
        for (entity, character) in [("&lt;", "<"), ("&gt;", ">"), ("&quot;", "\""), ("&#39;", "'"), ("&nbsp;", "\u{A0}"), ("&amp;", "&")] {
            text = text.replacing(entity, with: character)
        }
        while text.hasSuffix("\n") { text.removeLast() }
        return text
    }
}
