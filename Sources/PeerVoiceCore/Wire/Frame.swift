/// One unit of the peer-link protocol, as carried in one frame body.
///
/// Every value is valid by construction (the payload types' initializers check their limits),
/// so ``encoded()`` cannot fail.
public enum Frame: Equatable, Sendable {
    /// Introduces the sender; travels as the payload of the key exchange (docs/SECURITY.md).
    case hello(Hello)
    /// One text message.
    case text(TextFrame)
    /// Cumulative acknowledgement: every TEXT with sequence number `<= seq` has been received and stored.
    case ack(seq: UInt64)
    /// Sent when a link is otherwise idle, so that both ends know it is alive.
    case keepalive
    /// The sender is closing the link on purpose; with ``GoodbyeReason/userDisconnected`` it asks
    /// not to be redialled.
    case goodbye(GoodbyeReason)
    /// One Opus packet of live audio.
    case voice(VoiceFrame)
    /// The sender's pairing status or decision after the handshake (docs/PROTOCOL.md §7.3);
    /// nothing but KEEPALIVE, PAIRING and GOODBYE flows until the link is open.
    case pairing(PairingDecision)
    /// The sender starts (or restarts) sending voice under a fresh session id, from which both
    /// sides derive the keys that seal its VOICE packets (docs/SECURITY.md, voice keys).
    case voiceStart(VoiceStart)
    /// The sender stopped its voice session.
    case voiceStop
    /// How much of the peer's voice the sender loses (lost or too late to play, 0–100 %), so
    /// that the peer's encoder spends bits on in-band FEC only when they are needed.
    case voiceReport(lossPercent: UInt8)
    /// The sender's presence secret (32 bytes), sent once a link is open, so that this paired peer
    /// can recognise the sender's presence advertisements on a LAN (docs/PROTOCOL.md §12).
    case presence(secret: [UInt8])
    /// One participant's Opus packet, relayed by the host of the call (docs/GROUP.md).
    case relayedVoice(RelayedVoiceFrame)
    /// The host's list of the others in its call (every entry valid, sources and peers distinct,
    /// at most ``Wire/maxCallParticipants``: build it with ``participants(checking:)``).
    case participants([CallParticipant])
    /// A listener's loss of one relayed source, and whether it hears that participant directly.
    case relayReport(RelayReport)

    /// The frame's type byte.
    public var type: FrameType {
        switch self {
        case .hello: return .hello
        case .text: return .text
        case .ack: return .ack
        case .keepalive: return .keepalive
        case .goodbye: return .goodbye
        case .voice: return .voice
        case .pairing: return .pairing
        case .voiceStart: return .voiceStart
        case .voiceStop: return .voiceStop
        case .voiceReport: return .voiceReport
        case .presence: return .presence
        case .relayedVoice: return .relayedVoice
        case .participants: return .participants
        case .relayReport: return .relayReport
        }
    }
}

/// The first byte of a frame body.
public enum FrameType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case hello = 0x01
    case text = 0x02
    case ack = 0x03
    case keepalive = 0x04
    case goodbye = 0x05
    case pairing = 0x06
    case voiceStart = 0x07
    case voiceStop = 0x08
    case voiceReport = 0x09
    case presence = 0x0A
    case participants = 0x0B
    case relayReport = 0x0C
    case voice = 0x10
    case relayedVoice = 0x11

    /// The frame's name as the protocol document writes it, e.g. `"HELLO"`.
    public var description: String {
        switch self {
        case .hello: return "HELLO"
        case .text: return "TEXT"
        case .ack: return "ACK"
        case .keepalive: return "KEEPALIVE"
        case .goodbye: return "GOODBYE"
        case .voice: return "VOICE"
        case .pairing: return "PAIRING"
        case .voiceStart: return "VOICE_START"
        case .voiceStop: return "VOICE_STOP"
        case .voiceReport: return "VOICE_REPORT"
        case .presence: return "PRESENCE"
        case .participants: return "PARTICIPANTS"
        case .relayReport: return "RELAY_REPORT"
        case .relayedVoice: return "RELAYED_VOICE"
        }
    }
}

/// The byte of a PAIRING frame. Each side first sends its status (`known` or `asking`, or
/// `refuse`); where a side asks its person, each side then sends its person's decision.
public enum PairingDecision: UInt8, Sendable, CustomStringConvertible {
    /// The sender will not pair with the peer; the link ends.
    case refuse = 0
    /// The sender's person accepted the peer (only after an `asking` from either side).
    case accept = 1
    /// First contact at the sender: it is asking its person to compare the code now.
    case asking = 2
    /// The sender has the peer's key pinned; if the peer is `known` too the link opens.
    case known = 3

    public var description: String {
        switch self {
        case .refuse: "refuse"
        case .accept: "accept"
        case .asking: "asking"
        case .known: "known"
        }
    }
}

/// What a peer can do, as announced in HELLO (`u32` bit set): features in bits 0-15, and from
/// version 7 the highest protocol version the sender speaks in bits 16-31 (Versions.swift).
///
/// Bits this version does not know are kept as received and carry no meaning.
public struct Capabilities: OptionSet, Hashable, Sendable {
    public let rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// Bit 0: exchanges TEXT messages.
    public static let text = Capabilities(rawValue: 1 << 0)
    /// Bit 1: sends and receives VOICE.
    public static let voice = Capabilities(rawValue: 1 << 1)
    /// Bit 2: sends and takes PRESENCE (version 5; a version-6 peer has it without the bit).
    public static let presence = Capabilities(rawValue: 1 << 2)
    /// Bit 3: hosts and joins hosted calls, PARTICIPANTS, RELAY_REPORT and RELAYED_VOICE
    /// (version 6; a version-6 peer has it without the bit).
    public static let hostedCalls = Capabilities(rawValue: 1 << 3)
    /// Bit 8: app channels (docs/PROTOCOL.md §13), from version 7.
    public static let channels = Capabilities(rawValue: 1 << 8)
    /// Bit 9: file transfers (docs/PROTOCOL.md §15), from version 9.
    public static let transfers = Capabilities(rawValue: 1 << 9)
    /// Bit 10: hashes a transfer's files with SHA-256 instead of BLAKE2b-256 (docs/PROTOCOL.md
    /// §15.1), from version 10.
    public static let sha256FileHashes = Capabilities(rawValue: 1 << 10)
}

/// The HELLO frame: who the sender is and where it can be reached.
public struct Hello: Equatable, Sendable {
    /// The sender's installation.
    public let instanceID: InstanceID
    /// What the sender can do.
    public let capabilities: Capabilities
    /// TCP port the sender accepts links on; 0 when it does not listen.
    public let listenPort: UInt16
    /// UDP port the sender wants VOICE datagrams on; 0 means "use ``listenPort``".
    public let voicePort: UInt16
    /// Display name, at most ``Wire/maxNameBytes`` bytes of UTF-8 (may be empty).
    public let name: String

    /// - Throws: ``WireError/nameTooLong(bytes:)`` when `name` exceeds ``Wire/maxNameBytes``
    ///   bytes of UTF-8 (see ``truncatedName(_:)``).
    public init(
        instanceID: InstanceID,
        capabilities: Capabilities,
        listenPort: UInt16,
        voicePort: UInt16,
        name: String
    ) throws(WireError) {
        let nameBytes = name.utf8.count
        guard nameBytes <= Wire.maxNameBytes else { throw .nameTooLong(bytes: nameBytes) }
        self.instanceID = instanceID
        self.capabilities = capabilities
        self.listenPort = listenPort
        self.voicePort = voicePort
        self.name = name
    }

    /// The UDP port VOICE datagrams go to: ``voicePort``, else ``listenPort``, else nil (none).
    public var voiceDestinationPort: UInt16? {
        if voicePort != 0 { return voicePort }
        if listenPort != 0 { return listenPort }
        return nil
    }

    /// `name` cut to at most ``Wire/maxNameBytes`` bytes of UTF-8 at a character boundary,
    /// for names that come from elsewhere (a host name, a user setting).
    public static func truncatedName(_ name: String) -> String {
        guard name.utf8.count > Wire.maxNameBytes else { return name }
        var result = ""
        var bytes = 0
        for character in name {
            let length = character.utf8.count
            guard bytes + length <= Wire.maxNameBytes else { break }
            result.append(character)
            bytes += length
        }
        return result
    }
}

/// The TEXT frame: one message with its per-peer sequence number.
public struct TextFrame: Equatable, Sendable, CustomStringConvertible {
    /// Per-peer sequence number, starting at 1, never reused toward that peer.
    public let seq: UInt64
    /// The `seq` of the TEXT sent just before this one on this link, or 0 when this one starts
    /// (or restarts) the link's run: a receiver that sees a different value knows a TEXT was
    /// lost in between (a rejected record) and waits for the sender to send the run again.
    public let previousSeq: UInt64
    /// The message's identifier, the same at both ends.
    public let messageID: MessageID
    /// When the sender accepted the message, in milliseconds since the Unix epoch.
    public let sentAtMs: UInt64
    /// The message, 1 to ``Wire/maxTextBytes`` bytes of UTF-8.
    public let text: String

    /// - Throws: ``WireError/zeroSequence`` for `seq` 0, ``WireError/emptyText`` or
    ///   ``WireError/textTooLong(bytes:)`` when `text` is not 1 to ``Wire/maxTextBytes`` bytes of UTF-8.
    public init(seq: UInt64, previousSeq: UInt64 = 0, messageID: MessageID, sentAtMs: UInt64, text: String) throws(WireError) {
        guard seq != 0 else { throw .zeroSequence }
        guard previousSeq < seq else { throw .previousSequenceNotBefore(seq: seq, previous: previousSeq) }
        let textBytes = text.utf8.count
        guard textBytes != 0 else { throw .emptyText }
        guard textBytes <= Wire.maxTextBytes else { throw .textTooLong(bytes: textBytes) }
        self.seq = seq
        self.previousSeq = previousSeq
        self.messageID = messageID
        self.sentAtMs = sentAtMs
        self.text = text
    }

    /// Describes the frame without its text, so it can go into a log line.
    public var description: String {
        "TEXT seq \(seq) after \(previousSeq) id \(messageID.hex) sent at \(sentAtMs) ms, \(text.utf8.count) bytes of text"
    }
}

/// The GOODBYE reason code (`u8`). Codes this version does not name are kept as received.
public struct GoodbyeReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8

    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// 0: a person asked to disconnect.
    public static let userDisconnected = GoodbyeReason(rawValue: 0)
    /// 1: the service is stopping.
    public static let shuttingDown = GoodbyeReason(rawValue: 1)
    /// 2: the other side broke the protocol.
    public static let protocolError = GoodbyeReason(rawValue: 2)

    public var description: String {
        switch self {
        case .userDisconnected: return "user disconnected"
        case .shuttingDown: return "shutting down"
        case .protocolError: return "protocol error"
        default: return "reason \(rawValue)"
        }
    }
}

/// The VOICE frame: one Opus packet and where it belongs in the stream.
public struct VoiceFrame: Equatable, Sendable, CustomStringConvertible {
    /// Counts VOICE frames of one stream; lets the receiver spot loss and reordering.
    public let seq: UInt64
    /// Position of the packet's first sample on the sender's 48 kHz sample clock (wraps).
    public let timestamp: UInt32
    /// The Opus packet, 0 to ``Wire/maxOpusPayloadBytes`` bytes.
    public let payload: [UInt8]

    /// - Throws: ``WireError/voicePayloadTooLong(bytes:)`` when `payload` exceeds ``Wire/maxOpusPayloadBytes``.
    public init(seq: UInt64, timestamp: UInt32, payload: [UInt8]) throws(WireError) {
        guard payload.count <= Wire.maxOpusPayloadBytes else {
            throw .voicePayloadTooLong(bytes: payload.count)
        }
        self.seq = seq
        self.timestamp = timestamp
        self.payload = payload
    }

    public var description: String {
        "VOICE seq \(seq) timestamp \(timestamp), \(payload.count) bytes of Opus"
    }
}

extension Frame: CustomStringConvertible {
    /// Describes the frame for a log line; TEXT frames leave their text out.
    public var description: String {
        switch self {
        case .hello(let hello):
            return "HELLO from \(hello.instanceID.hex) \(hello.name.debugDescription) capabilities 0x\(String(hello.capabilities.rawValue, radix: 16)) listen port \(hello.listenPort) voice port \(hello.voicePort)"
        case .text(let text):
            return text.description
        case .ack(let seq):
            return "ACK up to seq \(seq)"
        case .keepalive:
            return "KEEPALIVE"
        case .goodbye(let reason):
            return "GOODBYE (\(reason))"
        case .voice(let voice):
            return voice.description
        case .pairing(let decision):
            return "PAIRING \(decision)"
        case .voiceStart(let start):
            return "VOICE_START \(start.frameMs) ms frames"
        case .voiceStop:
            return "VOICE_STOP"
        case .voiceReport(let lossPercent):
            return "VOICE_REPORT \(lossPercent) % lost"
        case .presence:
            // Key material: never logged.
            return "PRESENCE"
        case .relayedVoice(let relayed):
            return relayed.description
        case .participants(let list):
            return "PARTICIPANTS \(list.map(\.description).joined(separator: "; "))"
        case .relayReport(let report):
            return report.description
        }
    }
}

/// What VOICE_START carries: the sender's voice session and how it frames audio.
public struct VoiceStart: Equatable, Sendable {
    /// 16 random bytes, fresh for every session (see ``VoiceKeys``).
    public let sessionID: [UInt8]
    /// Opus frame length: 10 or 20 ms. Both sides' decoders follow the sender's.
    public let frameMs: UInt8

    public static let sessionIDBytes = 16

    public init(sessionID: [UInt8], frameMs: UInt8) throws(WireError) {
        guard sessionID.count == Self.sessionIDBytes else { throw .frameTooShort(.voiceStart, bodyBytes: 2 + sessionID.count, requiredBytes: 18) }
        guard frameMs == 10 || frameMs == 20 else { throw .unsupportedFrameDuration(frameMs) }
        self.sessionID = sessionID
        self.frameMs = frameMs
    }
}
