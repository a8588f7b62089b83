// libFuzzer target: the frames of a hosted call (protocol version 6; Sources/PeerVoiceCore/Wire/
// GroupFrames.swift): RELAYED_VOICE, PARTICIPANTS and RELAY_REPORT, which a host and its
// participants send each other (docs/PROTOCOL.md §5.12-5.14).
//
// Input layout (missing bytes read as 0):
//   byte 0   bits 0-1: 0 RELAYED_VOICE, 1 PARTICIPANTS, 2 RELAY_REPORT (the rest of the input is
//            the body after that type byte); 3: a PARTICIPANTS list built through the API, from
//            entries of (u8 source, u8 frameMs, u8 flags, u8 id seed, u8 name length, name bytes)
//
// Checked on every input:
//   - a body that decodes is a frame of the type it starts with, re-encodes to exactly the same
//     bytes (the encoding is canonical) and goes through Frame(datagram:) and FrameDecoder alike;
//   - what the decoders accept keeps the documented limits: sources 1-255; at most 7 entries,
//     sources and peer ids distinct, frameMs 10 or 20, names of at most 256 bytes of UTF-8
//     without NUL, only the speaking flag; payloads of at most 1275 bytes; loss at most 100 %;
//   - a relayed packet's VOICE frame has its seq, timestamp and payload;
//   - a list built through the API either throws one of the documented errors or encodes to a
//     body that decodes to the same list.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

let bodyTypes: [UInt8] = [FrameType.relayedVoice.rawValue, FrameType.participants.rawValue, FrameType.relayReport.rawValue]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Input(Array(UnsafeBufferPointer(start: data, count: size)))
    let mode = Int(input.u8() & 3)
    if mode == 3 {
        buildList(&input)
    } else {
        decode([bodyTypes[mode]] + Array(input.rest))
    }
    return 0
}

func decode(_ body: [UInt8]) {
    let result = Result { () throws(WireError) in try Frame(body: body) }
    guard case .success(let frame) = result else {
        if case .failure(let error) = result { _ = error.description }
        return
    }
    trace("decoded \(frame)")
    check(frame.type.rawValue == body[0], "\(frame) came from a body of type \(body[0])")
    check(frame.encodedBody() == body, "\(frame) re-encodes to different bytes")
    check((try? Frame(datagram: frame.encoded())) == frame, "\(frame) does not survive Frame(datagram:)")
    var decoder = FrameDecoder(expectingPreamble: false)
    decoder.append(frame.encoded())
    check((try? decoder.next()) == frame, "\(frame) does not survive FrameDecoder")
    _ = frame.description
    switch frame {
    case .relayedVoice(let relayed):
        check(relayed.payload.count <= Wire.maxOpusPayloadBytes, "relayed payload of \(relayed.payload.count) bytes")
        let voice = relayed.voice
        check(voice.seq == relayed.seq && voice.timestamp == relayed.timestamp && voice.payload == relayed.payload,
              "the relayed packet's VOICE frame differs")
    case .participants(let list):
        checkList(list)
    case .relayReport(let report):
        check(report.lossPercent <= 100, "loss of \(report.lossPercent) %")
    default:
        check(false, "a \(frame.type) from a body of a call's frame type")
    }
}

func checkList(_ list: [CallParticipant]) {
    check(list.count <= Wire.maxCallParticipants, "a list of \(list.count)")
    check(Set(list.map(\.source)).count == list.count, "a source named twice")
    check(Set(list.map(\.peer)).count == list.count, "a peer named twice")
    for entry in list {
        check(entry.source.rawValue != 0, "source 0")
        check(entry.frameMs == 10 || entry.frameMs == 20, "\(entry.frameMs) ms frames")
        check(entry.name.utf8.count <= Wire.maxNameBytes && !entry.name.utf8.contains(0), "a name that HELLO would not carry")
        check(PeerID(entry.peer.description) == entry.peer, "a peer id that does not parse back")
    }
}

let base32Digits = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)

func buildList(_ input: inout Input) {
    var list: [CallParticipant] = []
    while !input.isEmpty && list.count < 9 {
        let sourceByte = input.u8(), frameMs = input.u8(), flags = input.u8(), seed = input.u8()
        let name = String(decoding: input.take(Int(input.u8()) * 2), as: UTF8.self)
        let id = PeerID("pv:" + String(decoding: (0..<26).map { base32Digits[(Int(seed) &+ $0 * Int(flags | 1)) % 32] }, as: UTF8.self))!
        guard let source = RelaySource(rawValue: sourceByte) else { continue }
        do throws(WireError) {
            list.append(try CallParticipant(source: source, peer: id, frameMs: frameMs, speaking: flags & 1 != 0, name: name))
        } catch {
            check(error == .unsupportedFrameDuration(frameMs) || error == .nameTooLong(bytes: name.utf8.count)
                  || (error == .nameNotUTF8 && name.utf8.contains(0)), "CallParticipant threw \(error)")
        }
    }
    do throws(WireError) {
        let frame = try Frame.participants(checking: list)
        checkList(list)
        check((try? Frame(body: frame.encodedBody())) == frame, "a built list does not decode to itself")
    } catch {
        switch error {
        case .tooManyParticipants, .duplicateParticipant, .duplicateParticipantPeer: break
        default: check(false, "Frame.participants(checking:) threw \(error)")
        }
    }
}
