// libFuzzer target: the channel protocol's frames and one link's stream bookkeeping
// (Sources/PeerVoiceCore/Channels/; docs/PROTOCOL.md §13), which take bytes from a paired peer.
//
// Input layout (missing bytes read as 0):
//   byte 0   bit 0 clear: the rest of the input is one frame body, decoded;
//            bit 0 set: the rest is a script run against a multiplexer B (the link's responder)
//            whose peer A is honest except where the script makes it send arbitrary bytes:
//            each step is one byte `op` and its operands —
//              op % 8 == 0: A opens a stream (mode = next byte % 3 + 1) and B's app accepts
//                           (or refuses, when the byte's bit 7 is set);
//              1: A sends DATA of (next u16) bytes on stream (next byte) within its credit and
//                 message (an even count ends the message);
//              2: B's app takes (next u16) bytes of a stream's buffer;
//              3: A or B closes a stream;  4: A or B resets a stream;
//              5: raw: (next u16 % 300) bytes, decoded as a frame and handed to B as if from A;
//              6: B takes its FEEDBACK;   7: A sends a datagram.
//
// Checked on every input:
//   - a body that decodes re-encodes to exactly the same bytes, names a stream other than 0,
//     and keeps the documented limits (payloads, windows, names);
//   - whatever A sends or the raw bytes say, B either throws a ChannelProtocolError or keeps:
//     at most ChannelLimits.streamWindowBytes buffered per stream, at most maxStreams streams,
//     credit never above 2^31 - 1, and only events for streams it knows of;
//   - an honest A never makes B throw.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Input(Array(UnsafeBufferPointer(start: data, count: size)))
    if input.u8() & 1 == 0 {
        decode(Array(input.rest))
    } else {
        runScript(&input)
    }
    return 0
}

@discardableResult
func decode(_ body: [UInt8]) -> ChannelFrame? {
    let result = Result { () throws(ChannelFrameError) in try ChannelFrame(body: body) }
    guard case .success(let frame) = result else {
        if case .failure(let error) = result { _ = error.description }
        return nil
    }
    trace("decoded \(frame)")
    check(frame.encodedBody() == body, "\(frame) re-encodes to different bytes")
    check(frame.bodyByteCount == body.count, "\(frame) counts \(frame.bodyByteCount) bytes, not \(body.count)")
    check(ChannelFrame.isChannelFrame(body), "a decoded body not recognised as a channel frame")
    if let id = frame.stream { check(id.rawValue != 0, "stream 0") }
    switch frame {
    case .open(_, _, let window, _, let channel):
        check(window <= ChannelWire.maxWindowBytes, "window \(window)")
        check((try? ChannelName(channel.value)) == channel, "a channel name that does not check")
    case .accept(_, let window, _):
        check(window <= ChannelWire.maxWindowBytes, "window \(window)")
    case .window(_, let increment):
        check(increment >= 1 && increment <= ChannelWire.maxWindowBytes, "increment \(increment)")
    case .data(_, _, _, let payload):
        check(!payload.isEmpty && payload.count <= ChannelWire.maxDataBytes, "DATA of \(payload.count)")
    case .datagram(_, let payload):
        check(!payload.isEmpty && payload.count <= ChannelWire.maxDatagramBytes, "DATAGRAM of \(payload.count)")
    default:
        break
    }
    _ = frame.description
    return frame
}

let limits = ChannelLimits(streamWindowBytes: 65_536, windowUpdateBytes: 8_192, maxStreams: 8)
let channel = try! ChannelName("org.example.Fuzz")

func runScript(_ input: inout Input) {
    var a = ChannelMultiplexer(isInitiator: true, limits: limits)
    var b = ChannelMultiplexer(isInitiator: false, limits: limits)
    var known: [StreamID] = []
    var honest = true
    var now: UInt32 = 0

    /// Hands a frame to B; false once B has thrown (the link would end).
    func toB(_ frame: ChannelFrame) -> Bool {
        now &+= 97
        do throws(ChannelProtocolError) {
            let (event, reply) = try b.receive(frame, nowUs: now)
            trace("B got \(frame): \(String(describing: event))")
            if let event { checkEvent(event) }
            if let reply { _ = try? a.receive(reply, nowUs: now) }
            return true
        } catch {
            _ = error.description
            check(!honest, "an honest peer's \(frame) was rejected: \(error)")
            return false
        }
    }
    func toA(_ frame: ChannelFrame?) {
        guard let frame else { return }
        _ = try? a.receive(frame, nowUs: now)
    }
    func checkEvent(_ event: ChannelEvent) {
        switch event {
        case .openRequested(let id, _, _): check(b.contains(id), "an offer B does not keep")
        case .data(let id, let bytes, _): check(b.bufferedBytes(of: id) >= bytes.count, "data B does not count")
        default: break
        }
    }
    func pick() -> StreamID? {
        guard !known.isEmpty else { return nil }
        return known[Int(input.u8()) % known.count]
    }

    while !input.isEmpty {
        let op = input.u8() % 8
        switch op {
        case 0:
            let byte = input.u8()
            let mode = StreamMode(rawValue: byte % 3 + 1)!
            guard let (id, open) = a.open(channel, mode: mode) else { continue }
            known.append(id)
            guard toB(open) else { return }
            toA(byte & 0x80 != 0 ? b.refuse(id, reason: .appRefused) : b.accept(id))
        case 1:
            let bytes = input.u16()
            guard let id = pick() else { continue }
            let count = min(bytes, a.sendCredit(id), a.messageRoom(id))
            guard count > 0 else { continue }
            let endOfMessage = bytes & 1 == 0 || count == a.messageRoom(id)
            guard toB(a.data(id, payload: [UInt8](repeating: 0x5A, count: count), endOfMessage: endOfMessage, sentAtUs: now)) else { return }
        case 2:
            let bytes = input.u16()
            guard let id = pick() else { continue }
            toA(b.delivered(id, bytes: min(bytes, b.bufferedBytes(of: id))))
        case 3:
            let side = input.u8()
            guard let id = pick() else { continue }
            if side & 1 == 0 {
                if let close = a.close(id), !toB(close) { return }
            } else {
                toA(b.close(id))
            }
        case 4:
            let side = input.u8()
            guard let id = pick() else { continue }
            if side & 1 == 0 {
                if let reset = a.reset(id, reason: .appAborted), !toB(reset) { return }
            } else {
                toA(b.reset(id, reason: .appAborted))
            }
        case 5:
            let body = input.take(input.u16() % 300)
            guard let frame = decode(body) else { continue }
            honest = false
            guard toB(frame) else { return }
        case 6:
            if let feedback = b.takeFeedback() { toA(feedback) }
        default:
            guard let id = pick(), let datagram = a.datagram(id, payload: input.take(Int(input.u8()) + 1)) else { continue }
            guard toB(datagram) else { return }
        }
        check(b.streamCount <= limits.maxStreams, "B keeps \(b.streamCount) streams")
        for id in b.streamIDs {
            check(b.bufferedBytes(of: id) <= limits.streamWindowBytes, "B buffers \(b.bufferedBytes(of: id)) bytes of \(id)")
            check(b.sendCredit(id) <= Int(ChannelWire.maxWindowBytes), "credit over 2^31 - 1")
        }
    }
}
