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
    /// A length prefix beyond ``MumbleFrameDecoder/maxBodyBytes``.
    case messageTooLong(type: UInt16, bytes: UInt32)
    /// A body that is not the protobuf its type says.
    case malformed(type: UInt16, ProtobufError)
    /// A field the message cannot go without (a UserState without session, a TextMessage without text).
    case missingField(type: UInt16, field: UInt32)

    public var description: String {
        switch self {
        case .messageTooLong(let type, let bytes): "message of type \(type) announces \(bytes) bytes"
        case .malformed(let type, let error): "message of type \(type) is not valid protobuf (\(error))"
        case .missingField(let type, let field): "message of type \(type) lacks field \(field)"
        }
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
    public var channel: UInt32?
    public var mute: Bool?
    public var deaf: Bool?
    public var suppress: Bool?
    public var selfMute: Bool?
    public var selfDeaf: Bool?

    public init(session: UInt32, name: String? = nil, channel: UInt32? = nil, mute: Bool? = nil, deaf: Bool? = nil,
                suppress: Bool? = nil, selfMute: Bool? = nil, selfDeaf: Bool? = nil) {
        self.session = session
        self.name = name
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

/// What a server sends, decoded from untrusted bytes; types a room does not use are `.ignored`.
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
    case permissionDenied(reason: String?)
    case codecVersion(opus: Bool)
    /// The UDP crypto's key and nonces (all three: a new key), only `serverNonce` (the server's
    /// resync of our decrypt nonce), or none (the server asks for our encrypt nonce). Lengths
    /// are checked where they are used (``MumbleCryptState``).
    case cryptSetup(key: [UInt8]?, clientNonce: [UInt8]?, serverNonce: [UInt8]?)
    case ignored(UInt16)

    public init(type: UInt16, body: [UInt8]) throws(MumbleProtocolError) {
        guard let known = MumbleMessageType(rawValue: type) else {
            self = .ignored(type)
            return
        }
        if known == .udpTunnel {
            self = .voice(body)
            return
        }
        var fields: [UInt32: [ProtobufValue]] = [:]
        var reader = ProtobufReader(body[...])
        do throws(ProtobufError) {
            while let (field, value) = try reader.next() { fields[field, default: []].append(value) }
        } catch {
            throw .malformed(type: type, error)
        }
        // A repeated scalar may come packed (one bytes field of varints) or one field per value.
        func last(_ field: UInt32) -> ProtobufValue? { fields[field]?.last }
        func required(_ field: UInt32) throws(MumbleProtocolError) -> UInt32 {
            guard let value = last(field)?.uint32 else { throw .missingField(type: type, field: field) }
            return value
        }
        func repeated(_ field: UInt32) throws(MumbleProtocolError) -> [UInt32] {
            var values: [UInt32] = []
            for value in fields[field] ?? [] {
                switch value {
                case .varint(let v): values.append(UInt32(truncatingIfNeeded: v))
                case .bytes(let packed):
                    var inner = ProtobufReader(packed)
                    do throws(ProtobufError) {
                        while let v = try inner.nextPackedVarint() { values.append(UInt32(truncatingIfNeeded: v)) }
                    } catch {
                        throw .malformed(type: type, error)
                    }
                default: continue
                }
            }
            return values
        }
        switch known {
        case .version:
            self = .version(last(1)?.uint32)
        case .ping:
            self = .ping
        case .reject:
            self = .reject(last(1)?.uint32.flatMap(MumbleRejectKind.init(rawValue:)), reason: last(2)?.string)
        case .serverSync:
            self = .serverSync(session: try required(1), welcome: last(3)?.string)
        case .channelState:
            self = .channelState(MumbleChannelState(id: try required(1), parent: last(2)?.uint32, name: last(3)?.string))
        case .channelRemove:
            self = .channelRemove(try required(1))
        case .userState:
            self = .userState(MumbleUserState(
                session: try required(1), name: last(3)?.string, channel: last(5)?.uint32,
                mute: last(6)?.bool, deaf: last(7)?.bool, suppress: last(8)?.bool,
                selfMute: last(9)?.bool, selfDeaf: last(10)?.bool))
        case .userRemove:
            self = .userRemove(session: try required(1), reason: last(3)?.string, ban: last(4)?.bool ?? false)
        case .textMessage:
            guard let text = last(5)?.string else { throw .missingField(type: type, field: 5) }
            self = .textMessage(MumbleTextMessage(actor: last(1)?.uint32, sessions: try repeated(2),
                                                  channels: try repeated(3), trees: try repeated(4), text: text))
        case .permissionDenied:
            self = .permissionDenied(reason: last(4)?.string)
        case .codecVersion:
            self = .codecVersion(opus: last(4)?.bool ?? false)
        case .cryptSetup:
            self = .cryptSetup(key: last(1)?.bytes.map(Array.init), clientNonce: last(2)?.bytes.map(Array.init),
                               serverNonce: last(3)?.bytes.map(Array.init))
        case .udpTunnel, .authenticate:
            self = .ignored(type)
        }
    }
}

/// What a client sends.
public enum MumbleClientMessage: Sendable {
    /// Our version, as 1.3's 32-bit `version` (major << 16 | minor << 8 | patch).
    case version(UInt32, release: String, os: String, osVersion: String)
    case authenticate(username: String, password: String?)
    case ping(timestamp: UInt64)
    case voice([UInt8])
    case selfMute(session: UInt32, muted: Bool)
    case joinChannel(session: UInt32, channel: UInt32)
    case textMessage(sessions: [UInt32], channels: [UInt32], text: String)
    /// Our encrypt nonce, when the server asked for it; nil: asks the server for its (a resync).
    case cryptSetup(clientNonce: [UInt8]?)

    public var frame: [UInt8] {
        var body = ProtobufWriter()
        switch self {
        case .version(let version, let release, let os, let osVersion):
            body.uint(1, UInt64(version))
            body.string(2, release)
            body.string(3, os)
            body.string(4, osVersion)
            return MumbleFrameDecoder.frame(.version, body: body.bytes)
        case .authenticate(let username, let password):
            body.string(1, username)
            if let password { body.string(2, password) }
            body.bool(5, true)  // opus
            return MumbleFrameDecoder.frame(.authenticate, body: body.bytes)
        case .ping(let timestamp):
            body.uint(1, timestamp)
            return MumbleFrameDecoder.frame(.ping, body: body.bytes)
        case .voice(let packet):
            return MumbleFrameDecoder.frame(.udpTunnel, body: packet)
        case .selfMute(let session, let muted):
            body.uint(1, UInt64(session))
            body.bool(9, muted)
            return MumbleFrameDecoder.frame(.userState, body: body.bytes)
        case .joinChannel(let session, let channel):
            body.uint(1, UInt64(session))
            body.uint(5, UInt64(channel))
            return MumbleFrameDecoder.frame(.userState, body: body.bytes)
        case .textMessage(let sessions, let channels, let text):
            for session in sessions { body.uint(2, UInt64(session)) }
            for channel in channels { body.uint(3, UInt64(channel)) }
            body.string(5, text)
            return MumbleFrameDecoder.frame(.textMessage, body: body.bytes)
        case .cryptSetup(let clientNonce):
            if let clientNonce { body.bytes(2, clientNonce) }
            return MumbleFrameDecoder.frame(.cryptSetup, body: body.bytes)
        }
    }
}
