// libFuzzer target: what a Mumble server sends a room (Sources/PeerVoiceCore/Rooms/): the control
// stream's framing, every message type's protobuf decoder, the room model fed with what decodes,
// and the legacy voice packets inside UDPTunnel messages.
//
// Input layout: byte 0 is a chunk size seed (how the stream is cut into reads); the rest is the
// server's byte stream (6-byte prefix, body, …).
//
// Checked on every input:
//   - framing does not depend on how the stream is cut into reads (same messages, same error);
//   - a failed decoder keeps failing;
//   - every decoded voice packet re-encodes to bytes that decode to the same packet (Mumble's
//     varints are not canonical: a 0 may come in four bytes, so the bytes themselves may differ);
//   - an Opus packet's duration from its TOC byte is between 0 and 63 frames of 60 ms;
//   - the room model stays consistent: every user in our channel is in the model, and a channel
//     path lookup of a channel's own path finds a channel (or nil for a broken tree), never traps.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

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
        guard let message = try? MumbleServerMessage(type: type, body: body) else { continue }
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
        check(path.hasPrefix("/"), "path \(path)")
        _ = model.channel(atPath: path.split(separator: "/").map(String.init))
    }
    return 0
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
