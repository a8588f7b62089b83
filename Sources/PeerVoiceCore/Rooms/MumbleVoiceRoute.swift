/// What a room's UDP datagram holds once it has been decrypted (the legacy UDP format, 1.2–1.4):
/// the header byte's top three bits say the type; a ping (type 1) carries one Mumble varint, the
/// sender's timestamp, which the server sends back as it came.
public enum MumbleUDPMessage: Sendable, Equatable {
    /// Header type 1.
    public static let pingType: UInt8 = 1

    case ping(timestamp: UInt64)
    case voice(MumbleVoicePacket)
    /// Another codec's voice, or a type this client does not know: passed over.
    case ignored

    /// Decodes what a server sent (voice names its talker); throws on bytes that claim more than they hold.
    public init(fromServer plain: ArraySlice<UInt8>) throws(MumbleVoicePacket.DecodeError) {
        guard let header = plain.first else { throw .truncated }
        if header >> 5 == Self.pingType {
            var reader = MumbleVarintReader(plain.dropFirst())
            self = .ping(timestamp: try reader.unsigned())
        } else if let voice = try MumbleVoicePacket.fromServer(plain) {
            self = .voice(voice)
        } else {
            self = .ignored
        }
    }

    /// A ping as a client sends it (over UDP, or inside UDPTunnel).
    public static func ping(timestamp: UInt64) -> [UInt8] {
        var out: [UInt8] = [pingType << 5]
        MumbleVarint.append(timestamp, to: &out)
        return out
    }
}

/// Which way a room's voice goes, decided as Mumble's clients do: through the TLS connection (the
/// UDPTunnel message, which works wherever the connection does) until the server echoes one of
/// our encrypted UDP pings, then over UDP; back to the tunnel when no echo has come for
/// ``fallbackAfterNs``, still pinging, and over UDP again at the next echo. Pure state: the room
/// gives it the time.
public struct MumbleVoiceRoute: Sendable {
    public enum Path: String, Sendable {
        case tcp, udp
    }

    /// How often a ping goes out over UDP, whichever path voice takes.
    public static let pingIntervalNs: Int64 = 1_000_000_000
    /// No echo for this long (three pings in a row lost): back to the tunnel.
    public static let fallbackAfterNs: Int64 = 3_000_000_000 + pingIntervalNs / 2
    /// An echo of a ping older than this is not taken as news of the path now.
    static let echoMaxAgeNs: Int64 = 10_000_000_000

    public private(set) var path = Path.tcp
    /// The last echo's round trip.
    public private(set) var roundTripNs: Int64?
    private let startNs: Int64
    private var lastEchoNs: Int64?
    /// The newest timestamp we sent (microseconds since `startNs`, as Mumble's clients count).
    private var newestPing: UInt64 = 0

    public init(nowNs: Int64) { startNs = nowNs }

    /// The next ping's plaintext (encrypt it, send it over UDP).
    public mutating func nextPing(nowNs: Int64) -> [UInt8] {
        newestPing = max(newestPing + 1, UInt64(max(0, nowNs - startNs) / 1_000))
        return MumbleUDPMessage.ping(timestamp: newestPing)
    }

    /// An authentic ping came back over UDP: true when voice now switches to UDP. An echo of a
    /// timestamp we never sent, or too old to say anything about the path now, changes nothing.
    public mutating func echoed(timestamp: UInt64, nowNs: Int64) -> Bool {
        let sentNs = startNs + Int64(clamping: timestamp) * 1_000
        guard timestamp <= newestPing, nowNs - sentNs <= Self.echoMaxAgeNs else { return false }
        lastEchoNs = nowNs
        roundTripNs = max(0, nowNs - sentNs)
        guard path == .tcp else { return false }
        path = .udp
        return true
    }

    /// Checked at each ping: true when voice falls back to the tunnel now.
    public mutating func check(nowNs: Int64) -> Bool {
        guard path == .udp, let lastEchoNs, nowNs - lastEchoNs > Self.fallbackAfterNs else { return false }
        path = .tcp
        return true
    }
}
