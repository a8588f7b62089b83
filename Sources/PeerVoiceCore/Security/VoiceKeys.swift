/// Keys of one voice session, fresh for every session (and for every restart of one).
///
/// Each side picks a random 16-byte session ID for the direction it sends in, whenever it starts
/// or restarts sending voice, and announces it to the peer over the sealed link before its first
/// voice record. The key of a direction is
///
///     key = BLAKE2b-256(key: link exporter key, "PeerVoice v2 voice" || direction || sessionID)
///
/// so each sender alone guarantees its key is new (a peer cannot make us reuse one by repeating an
/// ID), the voice keys are independent of the link's own keys, and record counters start at 0
/// under every new key. Voice records use ``RecordPurpose/voice`` and, over UDP,
/// ``RecordOpener/Mode/datagram(windowSize:)``.
public struct VoiceKeys: Sendable {
    public static let sessionIDBytes = 16
    static let label = Array("PeerVoice v2 voice".utf8)

    public let localSessionID: [UInt8]
    public let remoteSessionID: [UInt8]
    public let sendKey: [UInt8]
    public let receiveKey: [UInt8]
    public let sendDirection: RecordDirection
    public let receiveDirection: RecordDirection
    private let crypto: any CryptoPrimitives

    /// A new random session ID for this side's sending direction.
    public static func makeSessionID(crypto: any CryptoPrimitives) -> [UInt8] {
        crypto.randomBytes(sessionIDBytes)
    }

    /// The voice key of one direction.
    public static func key(exporterKey: [UInt8], direction: RecordDirection, sessionID: [UInt8],
                           crypto: any CryptoPrimitives) -> [UInt8] {
        crypto.hash(label + [direction.rawValue] + sessionID, key: exporterKey)
    }

    public init(link: HandshakeResult, localSessionID: [UInt8], remoteSessionID: [UInt8]) throws(VoiceKeyError) {
        guard localSessionID.count == Self.sessionIDBytes else { throw .wrongSessionIDSize(bytes: localSessionID.count) }
        guard remoteSessionID.count == Self.sessionIDBytes else { throw .wrongSessionIDSize(bytes: remoteSessionID.count) }
        crypto = link.crypto
        self.localSessionID = localSessionID
        self.remoteSessionID = remoteSessionID
        sendDirection = link.sendDirection
        receiveDirection = link.receiveDirection
        sendKey = Self.key(exporterKey: link.exporterKey, direction: sendDirection, sessionID: localSessionID, crypto: crypto)
        receiveKey = Self.key(exporterKey: link.exporterKey, direction: receiveDirection, sessionID: remoteSessionID, crypto: crypto)
    }

    public func makeSealer() -> RecordSealer {
        RecordSealer(key: sendKey, direction: sendDirection, purpose: .voice, crypto: crypto)
    }

    /// `.datagram` for UDP; `.stream` when voice is interleaved on an RFCOMM link.
    public func makeOpener(mode: RecordOpener.Mode = .datagram(windowSize: RecordOpener.defaultWindowSize)) -> RecordOpener {
        RecordOpener(key: receiveKey, direction: receiveDirection, purpose: .voice, mode: mode, crypto: crypto)
    }
}

public enum VoiceKeyError: Error, Equatable, Sendable, CustomStringConvertible {
    case wrongSessionIDSize(bytes: Int)

    public var description: String {
        switch self {
        case .wrongSessionIDSize(let bytes):
            return "voice session ID of \(bytes) bytes (must have \(VoiceKeys.sessionIDBytes))"
        }
    }
}
