// libFuzzer target: what a Mumble server sends a room: the control stream's framing
// (Sources/PeerVoiceCore/Rooms/), every message type's protobuf through the room's codec
// (Sources/MumbleProtobuf/: protobuf-c and the C protoc-c generated from proto/Mumble.proto), the
// room model fed with what decodes, and the legacy voice packets inside UDPTunnel messages.
//
// Input layout: byte 0 is a chunk size seed (how the stream is cut into reads); the rest is the
// server's byte stream (6-byte prefix, body, …).
//
// Checked on every input:
//   - framing does not depend on how the stream is cut into reads (same messages, same error);
//   - a failed decoder keeps failing;
//   - decoding a body twice gives the same message or the same error;
//   - what decodes is within MumbleControlBounds: names, texts, target lists, CryptSetup fields;
//   - a decoded TextMessage, CryptSetup client nonce or UserState change we also send (self-mute, channel)
//     encodes to a body that decodes to the same values;
//   - every decoded voice packet re-encodes to bytes that decode to the same packet (Mumble's
//     varints are not canonical: a 0 may come in four bytes, so the bytes themselves may differ);
//   - an Opus packet's duration from its TOC byte is between 0 and 63 frames of 60 ms;
//   - the room model stays consistent: every user in our channel is in the model, and a channel
//     path lookup of a channel's own path finds a channel (or nil for a broken tree), never traps.
#if canImport(Glibc)
import Glibc
#endif
import MumbleProtobuf
import PeerVoiceCore

let codec = ProtobufCMumbleCodec()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Input(Array(UnsafeBufferPointer(start: data, count: size)))
    let chunk = Int(input.u8()) + 1
    let stream = Array(input.rest)

    let whole = drain(stream, chunk: stream.count + 1)
    let pieces = drain(stream, chunk: chunk)
    check(whole.messages.count == pieces.messages.count && zip(whole.messages, pieces.messages).allSatisfy { $0 == $1 },
          "chunking changed the messages")
    check(whole.error == pieces.error, "chunking changed the error: \(String(describing: whole.error)) vs \(String(describing: pieces.error))")

    var model = MumbleRoomModel()
    for (type, body) in whole.messages {
        trace("message \(type), \(body.count) bytes")
        let result = Result { () throws(MumbleProtocolError) in try codec.decode(type: type, body: body) }
        let again = Result { () throws(MumbleProtocolError) in try codec.decode(type: type, body: body) }
        check(result == again, "decoding twice gave \(again), then \(result)")
        guard case .success(let message) = result else { continue }
        checkBounded(message)
        checkRoundTrip(message)
        _ = model.apply(message)
        if case .voice(let packet) = message, let voice = try? MumbleVoicePacket.fromServer(packet[...]) {
            let again = try? MumbleVoicePacket.fromServer(voice.fromServer[...])
            check(again == voice, "voice packet re-encodes to \(String(describing: again)), not \(voice)")
            // The TOC reading a room uses to pick what it plays: at most 63 frames of 60 ms.
            if let duration = voice.opusDurationMicroseconds { check(duration >= 0 && duration <= 63 * 60_000, "duration \(duration)") }
        }
    }
    for user in model.usersInOwnChannel { check(model.users[user.session] == user, "user \(user.session) not in the model") }
    for id in model.channels.keys {
        let path = model.path(of: id)
        // In bytes, not Characters: a name that starts with a combining mark makes "/" and it one
        // Character (the target's first finding through protobuf-c: its own check, not the model).
        check(path.utf8.first == UInt8(ascii: "/"), "path \(path)")
        _ = model.channel(atPath: path.unicodeScalars.split(separator: "/").map { String(String.UnicodeScalarView($0)) })
    }
    return 0
}

func checkBounded(_ message: MumbleServerMessage) {
    func name(_ string: String?) { check((string?.utf8.count ?? 0) <= MumbleControlBounds.maxNameBytes, "name of \(string?.utf8.count ?? 0) bytes") }
    func text(_ string: String?) { check((string?.utf8.count ?? 0) <= MumbleControlBounds.maxTextBytes, "text of \(string?.utf8.count ?? 0) bytes") }
    switch message {
    case .channelState(let channel): name(channel.name)
    case .userState(let user): name(user.name)
    case .reject(_, let reason), .userRemove(_, let reason, _): text(reason)
    case .permissionDenied(let denied):
        text(denied.reason)
        name(denied.name)
    case .serverSync(_, let welcome): text(welcome)
    case .textMessage(let message):
        text(message.text)
        for list in [message.sessions, message.channels, message.trees] { check(list.count <= MumbleControlBounds.maxTargets, "\(list.count) targets") }
    case .cryptSetup(let key, let clientNonce, let serverNonce):
        for field in [key, clientNonce, serverNonce] {
            check((field?.count ?? 0) <= MumbleControlBounds.maxCryptBytes, "a CryptSetup field of \(field?.count ?? 0) bytes")
        }
    default: break
    }
}

func checkRoundTrip(_ message: MumbleServerMessage) {
    func decoded(_ sent: MumbleClientMessage) -> MumbleServerMessage? {
        let (type, body) = codec.encode(sent)
        return try? codec.decode(type: type.rawValue, body: body)
    }
    switch message {
    case .textMessage(let text):
        let back = decoded(.textMessage(sessions: text.sessions, channels: text.channels, text: text.text))
        check(back == .textMessage(MumbleTextMessage(actor: nil, sessions: text.sessions, channels: text.channels, trees: [], text: text.text)),
              "text message came back as \(String(describing: back))")
    case .cryptSetup(_, let clientNonce, _):
        // What we send is our nonce alone (or nothing).
        let back = decoded(.cryptSetup(clientNonce: clientNonce))
        check(back == .cryptSetup(key: nil, clientNonce: clientNonce, serverNonce: nil), "CryptSetup came back as \(String(describing: back))")
    case .userState(let user):
        if let muted = user.selfMute {
            let back = decoded(.selfMute(session: user.session, muted: muted))
            check(back == .userState(MumbleUserState(session: user.session, selfMute: muted)), "self-mute came back as \(String(describing: back))")
        }
        if let channel = user.channel {
            let back = decoded(.joinChannel(session: user.session, channel: channel))
            check(back == .userState(MumbleUserState(session: user.session, channel: channel)), "channel came back as \(String(describing: back))")
        }
    default: break
    }
}

struct Drained {
    var messages: [(UInt16, [UInt8])] = []
    var error: MumbleProtocolError?
}

func drain(_ stream: [UInt8], chunk: Int) -> Drained {
    var decoder = MumbleFrameDecoder()
    var out = Drained()
    var offset = 0
    while offset < stream.count, out.error == nil {
        decoder.append(stream[offset..<min(stream.count, offset + chunk)])
        offset += chunk
        do {
            while let (type, body) = try decoder.next() { out.messages.append((type, body)) }
        } catch {
            out.error = error
            decoder.append([0, 0, 0, 0, 0, 0])
            check((try? decoder.next()) == nil, "a failed decoder decoded again")
        }
    }
    return out
}
