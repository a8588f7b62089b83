/// Mumble's legacy voice packet (1.2–1.4, and 1.5 servers talking to older clients), the body of
/// a UDPTunnel message (and, encrypted, of a UDP datagram): a header byte (codec type in the top
/// three bits, target in the low five), from the server the talker's session, then the sequence
/// number (both in Mumble's own varint, not protobuf's), then for Opus one varint whose low 13
/// bits are the frame's length and whose bit 0x2000 marks the talker's last frame, then the frame;
/// positional audio may follow and is ignored.
public struct MumbleVoicePacket: Sendable, Equatable {
    /// Codec type 4 in the header: Opus. 0 CELT Alpha, 2 Speex, 3 CELT Beta, 1 a UDP ping.
    public static let opusType: UInt8 = 4
    /// The most an Opus frame may claim (13 bits).
    public static let maxFrameBytes = 0x1FFF

    public var target: UInt8
    /// The talker (server to client only).
    public var session: UInt32?
    public var sequence: UInt64
    public var opus: ArraySlice<UInt8>
    /// The talker stopped after this frame.
    public var isLast: Bool

    public init(target: UInt8 = 0, session: UInt32? = nil, sequence: UInt64, opus: ArraySlice<UInt8>, isLast: Bool) {
        self.target = target
        self.session = session
        self.sequence = sequence
        self.opus = opus
        self.isLast = isLast
    }

    public enum DecodeError: Error, Equatable, Sendable {
        case truncated
        /// A session or sequence the varint says is negative, or a session beyond 32 bits.
        case invalidNumber
        case frameTooLong(Int)
    }

    /// A packet from the server; nil for codecs other than Opus (nothing here can play them).
    public static func fromServer(_ bytes: ArraySlice<UInt8>) throws(DecodeError) -> MumbleVoicePacket? {
        var reader = MumbleVarintReader(bytes)
        guard let header = reader.byte() else { throw .truncated }
        guard header >> 5 == opusType else { return nil }
        guard let session = UInt32(exactly: try reader.unsigned()) else { throw .invalidNumber }
        let sequence = try reader.unsigned()
        let opusHeader = try reader.unsigned()
        let length = Int(opusHeader & UInt64(maxFrameBytes))
        guard opusHeader >> 14 == 0 else { throw .frameTooLong(Int(clamping: opusHeader)) }
        guard let frame = reader.take(length) else { throw .truncated }
        return MumbleVoicePacket(target: header & 0x1F, session: session, sequence: sequence,
                                 opus: frame, isLast: opusHeader & 0x2000 != 0)
    }

    /// How much audio the Opus packet holds, from its TOC byte (RFC 6716 §3.1); nil for an empty
    /// or unreadable one.
    public var opusDurationMicroseconds: Int? {
        guard let toc = opus.first else { return nil }
        let config = Int(toc >> 3)
        let frameUs = switch config {
        case 0...11: [10_000, 20_000, 40_000, 60_000][config % 4]  // SILK
        case 12...15: [10_000, 20_000][config % 2]  // hybrid
        default: [2_500, 5_000, 10_000, 20_000][config % 4]  // CELT
        }
        switch toc & 3 {
        case 0: return frameUs
        case 1, 2: return 2 * frameUs
        default:
            guard opus.count > 1 else { return nil }
            return Int(opus[opus.startIndex + 1] & 0x3F) * frameUs
        }
    }

    /// The packet as a client sends it (no session: the server adds ours).
    public var fromClient: [UInt8] {
        precondition(opus.count <= Self.maxFrameBytes, "an Opus frame of \(opus.count) bytes")
        var out: [UInt8] = [Self.opusType << 5 | (target & 0x1F)]
        MumbleVarint.append(sequence, to: &out)
        MumbleVarint.append(UInt64(opus.count) | (isLast ? 0x2000 : 0), to: &out)
        out += opus
        return out
    }

    /// The packet as a server relays it to the others.
    public var fromServer: [UInt8] {
        var out = fromClient
        var sessionBytes: [UInt8] = []
        MumbleVarint.append(UInt64(session ?? 0), to: &sessionBytes)
        out.insert(contentsOf: sessionBytes, at: 1)
        return out
    }
}

/// Mumble's variable-length integer: the leading bits of the first byte say how many follow
/// (0: 7 bits; 10: 14; 110: 21; 1110: 28; 111100: a 32-bit value follows; 111101: 64-bit;
/// 111110: the negation of the varint that follows; 111111xx: ~xx).
public enum MumbleVarint {
    public static func append(_ value: UInt64, to out: inout [UInt8]) {
        switch value {
        case ..<0x80: out.append(UInt8(value))
        case ..<0x4000: out += [0x80 | UInt8(value >> 8), UInt8(value & 0xFF)]
        case ..<0x20_0000: out += [0xC0 | UInt8(value >> 16), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
        case ..<0x1000_0000:
            out += [0xE0 | UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
        case ..<0x1_0000_0000:
            out.append(0xF0)
            out += (0..<4).reversed().map { UInt8(value >> (8 * UInt64($0)) & 0xFF) }
        default:
            out.append(0xF4)
            out += (0..<8).reversed().map { UInt8(value >> (8 * UInt64($0)) & 0xFF) }
        }
    }
}

struct MumbleVarintReader {
    private var bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    mutating func byte() -> UInt8? { bytes.popFirst() }

    mutating func take(_ count: Int) -> ArraySlice<UInt8>? {
        guard bytes.count >= count else { return nil }
        defer { bytes = bytes.dropFirst(count) }
        return bytes.prefix(count)
    }

    /// A varint that must not be negative (sessions, sequences, lengths).
    mutating func unsigned() throws(MumbleVoicePacket.DecodeError) -> UInt64 {
        guard let first = byte() else { throw .truncated }
        func following(_ count: Int, _ initial: UInt64) throws(MumbleVoicePacket.DecodeError) -> UInt64 {
            guard let rest = take(count) else { throw .truncated }
            return rest.reduce(initial) { $0 << 8 | UInt64($1) }
        }
        switch first {
        case 0x00..<0x80: return UInt64(first)
        case 0x80..<0xC0: return try following(1, UInt64(first & 0x3F))
        case 0xC0..<0xE0: return try following(2, UInt64(first & 0x1F))
        case 0xE0..<0xF0: return try following(3, UInt64(first & 0x0F))
        case 0xF0..<0xF4: return try following(4, 0)
        case 0xF4..<0xF8: return try following(8, 0)
        default: throw .invalidNumber  // negative forms
        }
    }
}
