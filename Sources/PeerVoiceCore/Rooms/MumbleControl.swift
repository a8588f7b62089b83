/// Mumble's control channel (mumble-voip/mumble docs/dev/network-protocol): inside TLS, each
/// message is a 6-byte prefix (u16 type, u32 body length, big-endian) and a protobuf body, except
/// UDPTunnel (type 1), whose body is a voice packet (``MumbleVoicePacket``).
public enum MumbleMessageType: UInt16, Sendable {
    case version = 0
    case udpTunnel = 1
    case authenticate = 2
    case ping = 3
    case reject = 4
    case serverSync = 5
    case channelRemove = 6
    case channelState = 7
    case userRemove = 8
    case userState = 9
    case textMessage = 11
    case permissionDenied = 12
    case cryptSetup = 15
    case codecVersion = 21
}

public enum MumbleProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A length prefix beyond ``MumbleFrameDecoder/maxBodyBytes``, or a protobuf body beyond
    /// ``MumbleControlBounds/maxBodyBytes``.
    case messageTooLong(type: UInt16, bytes: UInt32)
    /// A body that is not the protobuf its type says.
    case malformed(type: UInt16)
    /// A field the message cannot go without (a UserState without session, a TextMessage without text).
    case missingField(type: UInt16, field: UInt32)
    /// A bytes field longer than it can be (a CryptSetup key or nonce over 16 bytes).
    case fieldTooLong(type: UInt16, field: UInt32, bytes: Int)

    public var description: String {
        switch self {
        case .messageTooLong(let type, let bytes): "message of type \(type) announces \(bytes) bytes"
        case .malformed(let type): "message of type \(type) is not valid protobuf"
        case .missingField(let type, let field): "message of type \(type) lacks field \(field)"
        case .fieldTooLong(let type, let field, let bytes): "message of type \(type) has \(bytes) bytes in field \(field)"
        }
    }
}

/// How much of a server's message reaches the rest of PeerVoice (SECURITY.md): a codec refuses a
/// longer protobuf body before decoding it, and cuts longer strings and lists to these sizes.
public enum MumbleControlBounds {
    /// A protobuf body (every type but UDPTunnel): 1 MiB, eight times the largest text message
    /// (an inline image) murmurd sends by default.
    public static let maxBodyBytes = 1 << 20
    /// A user or channel name, in UTF-8 bytes.
    public static let maxNameBytes = 512
    /// A text message, a welcome text, a reason, in UTF-8 bytes.
    public static let maxTextBytes = 256 * 1024
    /// The sessions, channels or trees a TextMessage names, each.
    public static let maxTargets = 64
    /// A CryptSetup key or nonce (AES-128: 16 bytes); a longer one is refused, not cut.
    public static let maxCryptBytes = 16
}

/// Mumble's protobuf bodies and PeerVoice's message values, both ways. The core declares it and
/// imports no C; the daemon's `MumbleProtobuf` module implements it with protobuf-c, generated
/// from proto/Mumble.proto.
public protocol MumbleControlCodec: Sendable {
    /// A server's message of `type` (any number: unknown types come back `.ignored`, UDPTunnel as
    /// `.voice`), its strings and lists cut to ``MumbleControlBounds``; unknown fields are skipped.
    func decode(type: UInt16, body: [UInt8]) throws(MumbleProtocolError) -> MumbleServerMessage
    /// A client message's type and body: protobuf, or for `.voice` the packet as it is.
    func encode(_ message: MumbleClientMessage) -> (type: MumbleMessageType, body: [UInt8])
}

extension MumbleControlCodec {
    /// A client message as it goes on the wire: prefix and body.
    public func frame(_ message: MumbleClientMessage) -> [UInt8] {
        let (type, body) = encode(message)
        return MumbleFrameDecoder.frame(type, body: body)
    }
}

/// Splits the server's byte stream into messages, bounding what it holds.
///
/// Once it has thrown it keeps throwing: the connection cannot be trusted any more.
public struct MumbleFrameDecoder: Sendable {
    /// Mumble's own clients refuse messages over 8 MiB - 1 (0x7FFFFF); so do we.
    public static let maxBodyBytes = 0x7F_FFFF
    public static let prefixBytes = 6

    private var buffer: [UInt8] = []
    private var readIndex = 0
    private var failure: MumbleProtocolError?

    public init() {}

    public mutating func append(_ bytes: some Sequence<UInt8>) {
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            readIndex = 0
        } else if readIndex >= 64 * 1024 && readIndex * 2 >= buffer.count {
            buffer.removeSubrange(0..<readIndex)
            readIndex = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next message's type and body, or nil when more bytes are needed.
    public mutating func next() throws(MumbleProtocolError) -> (type: UInt16, body: [UInt8])? {
        if let failure { throw failure }
        let available = buffer.count - readIndex
        guard available >= Self.prefixBytes else { return nil }
        let type = UInt16(buffer[readIndex]) << 8 | UInt16(buffer[readIndex + 1])
        let length = (2..<6).reduce(UInt32(0)) { $0 << 8 | UInt32(buffer[readIndex + $1]) }
        guard length <= Self.maxBodyBytes else {
            let error = MumbleProtocolError.messageTooLong(type: type, bytes: length)
            failure = error
            throw error
        }
        guard available - Self.prefixBytes >= Int(length) else { return nil }
        let start = readIndex + Self.prefixBytes
        readIndex = start + Int(length)
        return (type, Array(buffer[start..<readIndex]))
    }

    /// One message as it goes on the wire.
    public static func frame(_ type: MumbleMessageType, body: [UInt8]) -> [UInt8] {
        let length = UInt32(body.count)
        var out: [UInt8] = [UInt8(type.rawValue >> 8), UInt8(type.rawValue & 0xFF)]
        out += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
        return out + body
    }
}

/// Why a server refused us (Reject.type), in the words a person reads in the room's `Error`.
public enum MumbleRejectKind: UInt32, Sendable {
    case none = 0, wrongVersion, invalidUsername, wrongUserPassword, wrongServerPassword,
         usernameInUse, serverFull, noCertificate, authenticatorFail
}

public struct MumbleChannelState: Sendable, Equatable {
    public var id: UInt32
    public var parent: UInt32?
    public var name: String?

    public init(id: UInt32, parent: UInt32?, name: String?) {
        self.id = id
        self.parent = parent
        self.name = name
    }
}

public struct MumbleUserState: Sendable, Equatable {
    public var session: UInt32
    public var name: String?
    /// The registered user's id: set once the server knows the user's certificate by this name.
    public var userID: UInt32?
    public var channel: UInt32?
    public var mute: Bool?
    public var deaf: Bool?
    public var suppress: Bool?
    public var selfMute: Bool?
    public var selfDeaf: Bool?

    public init(session: UInt32, name: String? = nil, userID: UInt32? = nil, channel: UInt32? = nil, mute: Bool? = nil,
                deaf: Bool? = nil, suppress: Bool? = nil, selfMute: Bool? = nil, selfDeaf: Bool? = nil) {
        self.session = session
        self.name = name
        self.userID = userID
        self.channel = channel
        self.mute = mute
        self.deaf = deaf
        self.suppress = suppress
        self.selfMute = selfMute
        self.selfDeaf = selfDeaf
    }
}

public struct MumbleTextMessage: Sendable, Equatable {
    public var actor: UInt32?
    public var sessions: [UInt32]
    public var channels: [UInt32]
    public var trees: [UInt32]
    public var text: String

    public init(actor: UInt32?, sessions: [UInt32], channels: [UInt32], trees: [UInt32], text: String) {
        self.actor = actor
        self.sessions = sessions
        self.channels = channels
        self.trees = trees
        self.text = text
    }
}

/// Why a server refused what we asked (PermissionDenied.type).
public enum MumbleDenyKind: UInt32, Sendable {
    case text = 0, permission, superUser, channelName, textTooLong, h9k, temporaryChannel, missingCertificate,
         userName, channelFull, nestingLimit
}

/// A PermissionDenied: what kind of refusal, and the server's words when it sent some (murmurd
/// sends a `reason` only for `text`; for the others, ``words`` says it).
public struct MumblePermissionDenied: Sendable, Equatable {
    public var kind: MumbleDenyKind?
    public var reason: String?
    /// The name refused, for `userName`.
    public var name: String?

    public init(kind: MumbleDenyKind?, reason: String? = nil, name: String? = nil) {
        self.kind = kind
        self.reason = reason
        self.name = name
    }

    /// The refusal as a person reads it.
    public var words: String {
        if let reason, !reason.isEmpty { return reason }
        switch kind {
        case .permission: return "the server's access rules do not allow it (its administrator can change them)"
        case .superUser: return "the server's SuperUser cannot be changed"
        case .missingCertificate: return "the server needs a client certificate for it, and none was presented"
        case .userName: return "the server does not accept the name \"\(name ?? "")\""
        case .channelName: return "the server does not accept that channel name"
        case .textTooLong: return "the text is longer than the server accepts"
        case .temporaryChannel: return "not allowed in a temporary channel"
        case .channelFull: return "the channel is full"
        case .nestingLimit: return "the channel would be nested too deep"
        case .text, .h9k, nil: return "permission denied"
        }
    }
}

/// What a server sends, decoded from untrusted bytes (by a ``MumbleControlCodec``); types a room
/// does not use are `.ignored`.
public enum MumbleServerMessage: Sendable, Equatable {
    case version(UInt32?)
    case voice([UInt8])
    case ping
    case reject(MumbleRejectKind?, reason: String?)
    case serverSync(session: UInt32, welcome: String?)
    case channelState(MumbleChannelState)
    case channelRemove(UInt32)
    case userState(MumbleUserState)
    case userRemove(session: UInt32, reason: String?, ban: Bool)
    case textMessage(MumbleTextMessage)
    case permissionDenied(MumblePermissionDenied)
    case codecVersion(opus: Bool)
    /// The UDP crypto's key and nonces (all three: a new key), only `serverNonce` (the server's
    /// resync of our decrypt nonce), or none (the server asks for our encrypt nonce). At most
    /// ``MumbleControlBounds/maxCryptBytes`` each; exact lengths are checked where they are used.
    case cryptSetup(key: [UInt8]?, clientNonce: [UInt8]?, serverNonce: [UInt8]?)
    case ignored(UInt16)
}

/// What a client sends.
public enum MumbleClientMessage: Sendable, Equatable {
    /// Our version, as 1.3's 32-bit `version` (major << 16 | minor << 8 | patch).
    case version(UInt32, release: String, os: String, osVersion: String)
    case authenticate(username: String, password: String?)
    case ping(timestamp: UInt64)
    /// A voice packet (or a UDP ping) through the TCP tunnel: UDPTunnel, not protobuf.
    case voice([UInt8])
    case selfMute(session: UInt32, muted: Bool)
    case joinChannel(session: UInt32, channel: UInt32)
    /// Registers our certificate under our name (UserState with `user_id` 0 for our session).
    case register(session: UInt32)
    case textMessage(sessions: [UInt32], channels: [UInt32], text: String)
    /// Our encrypt nonce, when the server asked for it; nil: asks the server for its (a resync).
    case cryptSetup(clientNonce: [UInt8]?)
}
