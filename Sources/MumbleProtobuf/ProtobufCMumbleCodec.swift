import CProtobufC
import Glibc
import MumbleProtoC
import PeerVoiceCore

/// Mumble's control messages through protobuf-c, with the C that protoc-c generated from
/// proto/Mumble.proto (`MumbleProtoC`). The only importer of CProtobufC and MumbleProtoC.
///
/// A server's bytes are untrusted: a body over ``MumbleControlBounds/maxBodyBytes`` is refused
/// before protobuf-c sees it, protobuf-c checks every length against what is left and skips fields
/// the .proto does not name, and each string and list is cut here to its bound before it becomes a
/// Swift value. Nothing protobuf-c allocates outlives a call.
public struct ProtobufCMumbleCodec: MumbleControlCodec {
    public init() {}

    public func decode(type: UInt16, body: [UInt8]) throws(MumbleProtocolError) -> MumbleServerMessage {
        guard let known = MumbleMessageType(rawValue: type) else { return .ignored(type) }
        let reader = Reader(type: type, body: body)
        switch known {
        case .udpTunnel:
            return .voice(body)
        case .authenticate:
            return .ignored(type)
        case .version:
            return try reader.read(mumble_proto__version__unpack, mumble_proto__version__free_unpacked) { message throws(MumbleProtocolError) in
                .version(message.has_version != 0 ? message.version : nil)
            }
        case .ping:
            return try reader.read(mumble_proto__ping__unpack, mumble_proto__ping__free_unpacked) { _ in .ping }
        case .reject:
            return try reader.read(mumble_proto__reject__unpack, mumble_proto__reject__free_unpacked) { message throws(MumbleProtocolError) in
                let kind = message.has_type != 0 ? MumbleRejectKind(rawValue: UInt32(truncatingIfNeeded: message.type.rawValue)) : nil
                return .reject(kind, reason: text(message.reason))
            }
        case .serverSync:
            return try reader.read(mumble_proto__server_sync__unpack, mumble_proto__server_sync__free_unpacked) { message throws(MumbleProtocolError) in
                .serverSync(session: try reader.required(message.has_session, message.session, field: 1),
                            welcome: text(message.welcome_text))
            }
        case .channelRemove:
            return try reader.read(mumble_proto__channel_remove__unpack, mumble_proto__channel_remove__free_unpacked) { message throws(MumbleProtocolError) in
                .channelRemove(try reader.required(message.has_channel_id, message.channel_id, field: 1))
            }
        case .channelState:
            return try reader.read(mumble_proto__channel_state__unpack, mumble_proto__channel_state__free_unpacked) { message throws(MumbleProtocolError) in
                .channelState(MumbleChannelState(
                    id: try reader.required(message.has_channel_id, message.channel_id, field: 1),
                    parent: optional(message.has_parent, message.parent), name: name(message.name)))
            }
        case .userRemove:
            return try reader.read(mumble_proto__user_remove__unpack, mumble_proto__user_remove__free_unpacked) { message throws(MumbleProtocolError) in
                .userRemove(session: try reader.required(message.has_session, message.session, field: 1),
                            reason: text(message.reason), ban: message.has_ban != 0 && message.ban != 0)
            }
        case .userState:
            return try reader.read(mumble_proto__user_state__unpack, mumble_proto__user_state__free_unpacked) { message throws(MumbleProtocolError) in
                .userState(MumbleUserState(
                    session: try reader.required(message.has_session, message.session, field: 1),
                    name: name(message.name), userID: optional(message.has_user_id, message.user_id),
                    channel: optional(message.has_channel_id, message.channel_id),
                    mute: flag(message.has_mute, message.mute), deaf: flag(message.has_deaf, message.deaf),
                    suppress: flag(message.has_suppress, message.suppress),
                    selfMute: flag(message.has_self_mute, message.self_mute),
                    selfDeaf: flag(message.has_self_deaf, message.self_deaf)))
            }
        case .textMessage:
            return try reader.read(mumble_proto__text_message__unpack, mumble_proto__text_message__free_unpacked) { message throws(MumbleProtocolError) in
                guard let words = text(message.message) else { throw .missingField(type: type, field: 5) }
                return .textMessage(MumbleTextMessage(
                    actor: optional(message.has_actor, message.actor), sessions: targets(message.session, message.n_session),
                    channels: targets(message.channel_id, message.n_channel_id), trees: targets(message.tree_id, message.n_tree_id),
                    text: words))
            }
        case .permissionDenied:
            return try reader.read(mumble_proto__permission_denied__unpack, mumble_proto__permission_denied__free_unpacked) { message throws(MumbleProtocolError) in
                .permissionDenied(MumblePermissionDenied(
                    kind: message.has_type != 0 ? MumbleDenyKind(rawValue: UInt32(truncatingIfNeeded: message.type.rawValue)) : nil,
                    reason: text(message.reason), name: name(message.name)))
            }
        case .cryptSetup:
            return try reader.read(mumble_proto__crypt_setup__unpack, mumble_proto__crypt_setup__free_unpacked) { message throws(MumbleProtocolError) in
                .cryptSetup(key: try reader.bytes(message.has_key, message.key, field: 1),
                            clientNonce: try reader.bytes(message.has_client_nonce, message.client_nonce, field: 2),
                            serverNonce: try reader.bytes(message.has_server_nonce, message.server_nonce, field: 3))
            }
        case .codecVersion:
            return try reader.read(mumble_proto__codec_version__unpack, mumble_proto__codec_version__free_unpacked) { message throws(MumbleProtocolError) in
                .codecVersion(opus: message.has_opus != 0 && message.opus != 0)
            }
        }
    }

    public func encode(_ message: MumbleClientMessage) -> (type: MumbleMessageType, body: [UInt8]) {
        // protobuf-c reads strings as C strings while packing: copies, freed once packed.
        var strings = CStrings()
        defer { strings.free() }
        switch message {
        case .version(let version, let release, let os, let osVersion):
            var body = MumbleProto__Version()
            mumble_proto__version__init(&body)
            (body.has_version, body.version) = (1, version)
            body.release = strings.copy(release)
            body.os = strings.copy(os)
            body.os_version = strings.copy(osVersion)
            return (.version, pack(&body, mumble_proto__version__get_packed_size, mumble_proto__version__pack))
        case .authenticate(let username, let password):
            var body = MumbleProto__Authenticate()
            mumble_proto__authenticate__init(&body)
            body.username = strings.copy(username)
            if let password { body.password = strings.copy(password) }
            (body.has_opus, body.opus) = (1, 1)
            return (.authenticate, pack(&body, mumble_proto__authenticate__get_packed_size, mumble_proto__authenticate__pack))
        case .ping(let timestamp):
            var body = MumbleProto__Ping()
            mumble_proto__ping__init(&body)
            (body.has_timestamp, body.timestamp) = (1, timestamp)
            return (.ping, pack(&body, mumble_proto__ping__get_packed_size, mumble_proto__ping__pack))
        case .voice(let packet):
            return (.udpTunnel, packet)
        case .selfMute(let session, let muted):
            return (.userState, userState(session: session) { ($0.has_self_mute, $0.self_mute) = (1, muted ? 1 : 0) })
        case .joinChannel(let session, let channel):
            return (.userState, userState(session: session) { ($0.has_channel_id, $0.channel_id) = (1, channel) })
        case .register(let session):
            return (.userState, userState(session: session) { ($0.has_user_id, $0.user_id) = (1, 0) })
        case .textMessage(let sessions, let channels, let text):
            var body = MumbleProto__TextMessage()
            mumble_proto__text_message__init(&body)
            body.message = strings.copy(text)
            var sessions = sessions, channels = channels
            return sessions.withUnsafeMutableBufferPointer { sessions in
                channels.withUnsafeMutableBufferPointer { channels in
                    (body.n_session, body.session) = (sessions.count, sessions.baseAddress)
                    (body.n_channel_id, body.channel_id) = (channels.count, channels.baseAddress)
                    return (.textMessage, pack(&body, mumble_proto__text_message__get_packed_size, mumble_proto__text_message__pack))
                }
            }
        case .cryptSetup(let clientNonce):
            var body = MumbleProto__CryptSetup()
            mumble_proto__crypt_setup__init(&body)
            if let clientNonce { (body.has_client_nonce, body.client_nonce) = (1, strings.copy(bytes: clientNonce)) }
            return (.cryptSetup, pack(&body, mumble_proto__crypt_setup__get_packed_size, mumble_proto__crypt_setup__pack))
        }
    }

    /// A UserState from us about our own session: `session` and what `set` adds.
    private func userState(session: UInt32, _ set: (inout MumbleProto__UserState) -> Void) -> [UInt8] {
        var body = MumbleProto__UserState()
        mumble_proto__user_state__init(&body)
        (body.has_session, body.session) = (1, session)
        set(&body)
        return pack(&body, mumble_proto__user_state__get_packed_size, mumble_proto__user_state__pack)
    }

    private func pack<Message>(_ message: inout Message, _ size: (UnsafePointer<Message>?) -> Int,
                               _ pack: (UnsafePointer<Message>?, UnsafeMutablePointer<UInt8>?) -> Int) -> [UInt8] {
        withUnsafePointer(to: &message) { message in
            let count = size(message)
            return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                initialized = pack(message, buffer.baseAddress)
            }
        }
    }
}

/// One server body on its way through protobuf-c.
private struct Reader {
    let type: UInt16
    let body: [UInt8]

    /// Unpacks the body as `Message` (refused first when over the bound), reads what the room
    /// needs from it, frees it.
    func read<Message, Result>(
        _ unpack: (UnsafeMutablePointer<ProtobufCAllocator>?, Int, UnsafePointer<UInt8>?) -> UnsafeMutablePointer<Message>?,
        _ free: (UnsafeMutablePointer<Message>?, UnsafeMutablePointer<ProtobufCAllocator>?) -> Void,
        _ convert: (Message) throws(MumbleProtocolError) -> Result
    ) throws(MumbleProtocolError) -> Result {
        guard body.count <= MumbleControlBounds.maxBodyBytes else { throw .messageTooLong(type: type, bytes: UInt32(body.count)) }
        let unpacked = body.withUnsafeBufferPointer { unpack(nil, $0.count, $0.baseAddress) }
        guard let unpacked else { throw .malformed(type: type) }
        defer { free(unpacked, nil) }
        return try convert(unpacked.pointee)
    }

    func required(_ has: protobuf_c_boolean, _ value: UInt32, field: UInt32) throws(MumbleProtocolError) -> UInt32 {
        guard has != 0 else { throw .missingField(type: type, field: field) }
        return value
    }

    /// A CryptSetup field: refused when longer than a key or nonce can be.
    func bytes(_ has: protobuf_c_boolean, _ value: ProtobufCBinaryData, field: UInt32) throws(MumbleProtocolError) -> [UInt8]? {
        guard has != 0 else { return nil }
        guard value.len <= MumbleControlBounds.maxCryptBytes else { throw .fieldTooLong(type: type, field: field, bytes: value.len) }
        return value.len == 0 ? [] : Array(UnsafeBufferPointer(start: value.data, count: value.len))
    }
}

private func optional(_ has: protobuf_c_boolean, _ value: UInt32) -> UInt32? { has != 0 ? value : nil }

private func flag(_ has: protobuf_c_boolean, _ value: protobuf_c_boolean) -> Bool? { has != 0 ? value != 0 : nil }

private func name(_ string: UnsafeMutablePointer<CChar>?) -> String? { bounded(string, MumbleControlBounds.maxNameBytes) }

private func text(_ string: UnsafeMutablePointer<CChar>?) -> String? { bounded(string, MumbleControlBounds.maxTextBytes) }

/// A protobuf-c string (NUL-terminated: it ends at a NUL the server put inside), invalid UTF-8
/// replaced, at most `limit` bytes of UTF-8, cut between characters.
private func bounded(_ string: UnsafeMutablePointer<CChar>?, _ limit: Int) -> String? {
    guard let string else { return nil }
    let count = strnlen(string, limit + 1)
    let decoded = string.withMemoryRebound(to: UInt8.self, capacity: count) {
        String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
    }
    guard decoded.utf8.count > limit else { return decoded }
    // Longer: a longer string, or replacement characters (three bytes each) for invalid bytes.
    var kept = String.UnicodeScalarView()
    var bytes = 0
    for scalar in decoded.unicodeScalars {
        bytes += UTF8.width(scalar)
        guard bytes <= limit else { break }
        kept.append(scalar)
    }
    return String(kept)
}

/// A TextMessage's list of sessions or channels, at most ``MumbleControlBounds/maxTargets``.
private func targets(_ values: UnsafeMutablePointer<UInt32>?, _ count: Int) -> [UInt32] {
    guard let values else { return [] }
    return Array(UnsafeBufferPointer(start: values, count: min(count, MumbleControlBounds.maxTargets)))
}

/// C copies (malloc) of the strings and bytes of one message being packed.
private struct CStrings {
    private var copies: [UnsafeMutableRawPointer] = []

    mutating func copy(_ string: String) -> UnsafeMutablePointer<CChar>? {
        let copy = strdup(string)
        if let copy { copies.append(UnsafeMutableRawPointer(copy)) }
        return copy
    }

    mutating func copy(bytes: [UInt8]) -> ProtobufCBinaryData {
        guard let data = malloc(max(bytes.count, 1)) else { return ProtobufCBinaryData(len: 0, data: nil) }
        copies.append(data)
        data.copyMemory(from: bytes, byteCount: bytes.count)
        return ProtobufCBinaryData(len: bytes.count, data: data.assumingMemoryBound(to: UInt8.self))
    }

    func free() {
        for copy in copies { Glibc.free(copy) }
    }
}
