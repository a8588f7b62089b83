/// Why bytes from a peer are not a valid PeerVoice stream or frame, or why a frame cannot be built.
///
/// Descriptions are meant for log lines: they say what was wrong and never quote message text.
public enum WireError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The stream does not start with the magic `"PVLK"`.
    case notPeerVoice
    /// The peer's preamble announces one protocol version, which we do not speak.
    case unsupportedVersion(UInt16)
    /// The peer's preamble announces a range of protocol versions sharing none with ours.
    case unsupportedVersions(VersionRange)
    /// The peer's preamble announces a highest version below its lowest.
    case invalidVersionRange(lowest: UInt16, highest: UInt16)
    /// The highest version in the peer's preamble (in the clear) is not the one its HELLO
    /// (authenticated) names: the stream was altered on the way.
    case versionsAltered(preamble: UInt16, hello: UInt16)
    /// A frame declared a body length of 0.
    case emptyFrame
    /// A frame declared a body longer than ``Wire/maxFrameBodyBytes``.
    case frameTooLarge(bodyBytes: UInt32)
    /// The body's type byte is not a frame type of this version.
    case unknownFrameType(UInt8)
    /// The body is too short for the fixed fields of its type (or, for HELLO, for the declared name).
    case frameTooShort(FrameType, bodyBytes: Int, requiredBytes: Int)
    /// Bytes follow the last field of a frame that allows nothing more.
    case trailingBytes(FrameType, count: Int)
    /// A HELLO display name is longer than ``Wire/maxNameBytes``.
    case nameTooLong(bytes: Int)
    /// A HELLO display name is not valid UTF-8.
    case nameNotUTF8
    /// A TEXT frame has sequence number 0; numbering starts at 1.
    case zeroSequence
    /// A TEXT frame carries no text.
    case emptyText
    /// A TEXT frame's text is longer than ``Wire/maxTextBytes``.
    case textTooLong(bytes: Int)
    /// A TEXT frame's text is not valid UTF-8.
    case textNotUTF8
    /// A TEXT frame whose previous sequence number is not below its own.
    case previousSequenceNotBefore(seq: UInt64, previous: UInt64)
    /// A VOICE_START frame with a frame length other than 10 or 20 ms.
    case unsupportedFrameDuration(UInt8)
    /// A PAIRING frame whose decision byte is neither 0 nor 1.
    case invalidPairingDecision(UInt8)
    /// A VOICE frame's Opus payload is longer than ``Wire/maxOpusPayloadBytes``.
    case voicePayloadTooLong(bytes: Int)
    /// A VOICE_REPORT frame's loss percentage is over 100.
    case invalidLossPercent(UInt8)
    /// A RELAYED_VOICE, PARTICIPANTS entry or RELAY_REPORT names source 0.
    case invalidRelaySource
    /// A PARTICIPANTS entry's peer id is not 26 lower-case base32 characters.
    case invalidPeerID
    /// A PARTICIPANTS list longer than ``Wire/maxCallParticipants``.
    case tooManyParticipants(Int)
    /// Two PARTICIPANTS entries with the same source.
    case duplicateParticipant(source: UInt8)
    /// Two PARTICIPANTS entries with the same peer id.
    case duplicateParticipantPeer
    /// A flags byte with a bit this version does not define.
    case reservedFlags(FrameType, UInt8)
    /// A datagram is shorter than the 4-byte length prefix.
    case datagramTooShort(bytes: Int)
    /// A datagram's length prefix does not match the bytes that follow it.
    case datagramLengthMismatch(declaredBodyBytes: UInt32, actualBodyBytes: Int)

    public var description: String {
        switch self {
        case .notPeerVoice:
            return "not a PeerVoice stream (the first bytes are not \"PVLK\")"
        case .unsupportedVersion(let version):
            return "peer speaks protocol version \(version); this side speaks versions \(VersionRange.supported)"
        case .unsupportedVersions(let versions):
            return "peer speaks protocol versions \(versions); this side speaks versions \(VersionRange.supported)"
        case .invalidVersionRange(let lowest, let highest):
            return "preamble announces protocol versions \(lowest) to \(highest): the highest is below the lowest"
        case .versionsAltered(let preamble, let hello):
            return "the peer's preamble announced protocol versions up to \(preamble) but its authenticated HELLO says \(hello): the preamble was altered on the way"
        case .emptyFrame:
            return "frame with an empty body (length 0)"
        case .frameTooLarge(let bodyBytes):
            return "frame of \(bodyBytes) bytes is over the limit (\(Wire.maxFrameBodyBytes) bytes; \(Handshake.maxMessageBytes) during the handshake)"
        case .unknownFrameType(let type):
            return "unknown frame type 0x\(hex2(type))"
        case .frameTooShort(let type, let bodyBytes, let requiredBytes):
            return "\(type) frame of \(bodyBytes) bytes is too short (needs \(requiredBytes))"
        case .trailingBytes(let type, let count):
            return "\(type) frame has \(count) unexpected trailing byte\(count == 1 ? "" : "s")"
        case .nameTooLong(let bytes):
            return "display name of \(bytes) bytes exceeds the \(Wire.maxNameBytes)-byte limit"
        case .nameNotUTF8:
            return "display name is not valid UTF-8 without NUL"
        case .zeroSequence:
            return "TEXT frame with sequence number 0 (numbering starts at 1)"
        case .emptyText:
            return "TEXT frame with empty text"
        case .textTooLong(let bytes):
            return "text of \(bytes) bytes exceeds the \(Wire.maxTextBytes)-byte limit"
        case .textNotUTF8:
            return "text is not valid UTF-8 without NUL"
        case .previousSequenceNotBefore(let seq, let previous):
            return "TEXT frame with sequence number \(seq) claims to follow \(previous)"
        case .unsupportedFrameDuration(let ms):
            return "VOICE_START with \(ms) ms frames (10 or 20 supported)"
        case .invalidPairingDecision(let value):
            return "PAIRING frame with decision \(value) (must be 0 or 1)"
        case .voicePayloadTooLong(let bytes):
            return "Opus payload of \(bytes) bytes exceeds the \(Wire.maxOpusPayloadBytes)-byte limit"
        case .invalidLossPercent(let value):
            return "VOICE_REPORT with \(value) % loss (at most 100)"
        case .invalidRelaySource:
            return "relay source 0 (sources are 1-255)"
        case .invalidPeerID:
            return "PARTICIPANTS entry whose peer id is not \(PeerID.base32Characters) lower-case base32 characters"
        case .tooManyParticipants(let count):
            return "PARTICIPANTS list of \(count) entries (at most \(Wire.maxCallParticipants))"
        case .duplicateParticipant(let source):
            return "PARTICIPANTS names source \(source) twice"
        case .duplicateParticipantPeer:
            return "PARTICIPANTS names one peer twice"
        case .reservedFlags(let type, let flags):
            return "\(type) frame with reserved flag bits set (0x\(hex2(flags)))"
        case .datagramTooShort(let bytes):
            return "datagram of \(bytes) bytes is shorter than a length prefix"
        case .datagramLengthMismatch(let declared, let actual):
            return "datagram declares a \(declared)-byte frame but carries \(actual) bytes"
        }
    }
}

private func hex2(_ byte: UInt8) -> String {
    let digits = String(byte, radix: 16)
    return digits.count == 1 ? "0" + digits : digits
}
