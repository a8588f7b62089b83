// libFuzzer target: the framing layer and the frame codec (Sources/PeerVoiceCore/Wire).
//
// Input layout (everything optional; missing bytes read as 0):
//   byte 0   flags: bit 0 the decoders expect a preamble, bit 1 put a valid preamble in front of
//            the stream, bit 2 maxBodyBytes = Handshake.maxMessageBytes, bit 3 decoder A uses
//            nextBody() (else next()), bits 4+6 also decode a large synthetic body, bit 5
//            maxBodyBytes from bytes 3-4
//   byte 1-2 how decoder A's input is cut into appends (a split point and a chunk pattern); when
//            the top 4 bits are set, decoder A gets a 64 KiB frame first (so that it compacts)
//   byte 3-4 maxBodyBytes when bit 5 is set
//   rest     the stream (also given whole to Frame(body:) and Frame(datagram:))
//
// Properties checked (any failure traps, so libFuzzer records a crash):
//   - decoding does not depend on how the stream is cut into append() calls (A: chunked and
//     drained after every append, B and C: one append), frames, errors and leftover bytes alike;
//   - next() (B) is nextBody() (C) followed by Frame(body:), up to the first error;
//   - a failed decoder keeps throwing the same error (next() and nextBody(), more bytes or not);
//   - every decoded frame re-encodes to exactly the body it came from (the encoding is canonical),
//     encoded() is that body behind its u32 length, and both decode back to the same frame
//     (Frame(body:), Frame(datagram:), a fresh FrameDecoder);
//   - Frame(body:) gives the same answer for an Array and for a slice that does not start at 0;
//   - Frame(datagram:) agrees with its specification in terms of Frame(body:);
//   - identifiers survive their hex and byte forms; Hello.truncatedName cuts any text to at most
//     256 bytes at a character boundary, no more than needed, and the result fits a HELLO;
//   - the first 8 bytes as a preamble: Preamble.check and a FrameDecoder agree; what they accept
//     shares a version with this side and announces itself again the same way; the next 8 bytes
//     as two HELLO capability words: LinkProtocol.negotiate agrees on the version both preambles
//     give, never carries a feature one side lacks or its version does not have, and refuses
//     exactly the HELLOs whose highest version is not the preamble's.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

/// Where a decoder ended up: what it produced, then the error or the leftover byte count.
struct Outcome: Equatable {
    var frames: [Frame] = []
    var error: WireError?
    var leftover = 0
}

/// Drains `decoder` with next(), appending to `outcome`; returns false once it has thrown.
func drainFrames(_ decoder: inout FrameDecoder, into outcome: inout Outcome) -> Bool {
    while true {
        do throws(WireError) {
            guard let frame = try decoder.next() else { return true }
            outcome.frames.append(frame)
        } catch {
            outcome.error = error
            return false
        }
    }
}

/// Drains `decoder` with nextBody(); returns false once it has thrown.
func drainBodies(_ decoder: inout FrameDecoder, into bodies: inout [[UInt8]], error: inout WireError?) -> Bool {
    while true {
        do throws(WireError) {
            guard let body = try decoder.nextBody() else { return true }
            bodies.append(body)
        } catch let thrown {
            error = thrown
            return false
        }
    }
}

/// A failed decoder must keep throwing the same error, whatever comes next.
func checkSticky(_ decoder: inout FrameDecoder, _ expected: WireError, extra: ArraySlice<UInt8>) {
    for round in 0..<2 {
        if round == 1 { decoder.append(extra.isEmpty ? [0, 0, 0, 1, 4] : Array(extra)) }
        do throws(WireError) {
            let frame = try decoder.next()
            check(false, "failed decoder returned \(String(describing: frame)) instead of rethrowing \(expected)")
        } catch {
            check(error == expected, "failed decoder threw \(error) after \(expected)")
        }
        do throws(WireError) {
            let body = try decoder.nextBody()
            check(false, "failed decoder returned body \(String(describing: body)) instead of rethrowing \(expected)")
        } catch {
            check(error == expected, "failed decoder's nextBody threw \(error) after \(expected)")
        }
    }
}

/// Byte equality with memcmp (the generic comparisons are slow under coverage instrumentation).
func sameBytes(_ a: [UInt8], _ b: ArraySlice<UInt8>) -> Bool {
    guard a.count == b.count else { return false }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { y in a.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, a.count) == 0 } }
}

func bigEndianPrefix(_ count: Int) -> [UInt8] {
    [UInt8(truncatingIfNeeded: count >> 24), UInt8(truncatingIfNeeded: count >> 16),
     UInt8(truncatingIfNeeded: count >> 8), UInt8(truncatingIfNeeded: count)]
}

/// `frame` was decoded from `body`: check the round trips.
func checkRoundTrip(_ frame: Frame, body: ArraySlice<UInt8>) {
    let encodedBody = frame.encodedBody()
    check(sameBytes(encodedBody, body), "\(frame) re-encodes to a different body (\(encodedBody.count) vs \(body.count) bytes)")
    check(encodedBody.first == frame.type.rawValue, "\(frame) body starts with the wrong type byte")
    check(encodedBody.count <= Wire.maxFrameBodyBytes, "\(frame) body is over the limit")
    let encoded = frame.encoded()
    check(encoded.count == Wire.lengthPrefixBytes + encodedBody.count, "\(frame) encoded() has the wrong size")
    check(Array(encoded.prefix(4)) == bigEndianPrefix(encodedBody.count), "\(frame) encoded() has the wrong length prefix")
    check(sameBytes(encodedBody, encoded.dropFirst(4)), "\(frame) encoded() differs from its body")
    check(sameBytes(Wire.lengthPrefixed(encodedBody), encoded[...]), "Wire.lengthPrefixed differs from encoded()")

    do {
        let viaBody = try Frame(body: encodedBody)
        check(viaBody == frame, "\(frame) does not survive Frame(body:)")
        let viaDatagram = try Frame(datagram: encoded)
        check(viaDatagram == frame, "\(frame) does not survive Frame(datagram:)")
    } catch {
        check(false, "\(frame) re-encoded does not decode: \(error)")
    }
    var decoder = FrameDecoder(expectingPreamble: false)
    decoder.append(encoded)
    do {
        let first = try decoder.next()
        check(first == frame, "\(frame) does not survive a fresh FrameDecoder")
        let second = try decoder.next()
        check(second == nil, "FrameDecoder produced a second frame from one")
        check(decoder.bufferedByteCount == 0, "FrameDecoder kept bytes of a consumed frame")
    } catch {
        check(false, "\(frame) re-encoded does not go through FrameDecoder: \(error)")
    }
    _ = frame.description
    // Identifiers survive their hex and byte forms.
    switch frame {
    case .hello(let hello):
        check(InstanceID(hex: hello.instanceID.hex) == hello.instanceID, "instance id hex round trip")
        check(InstanceID(hex: hello.instanceID.hex.uppercased()) == hello.instanceID, "instance id HEX round trip")
        check(InstanceID(bytes: hello.instanceID.bytes) == hello.instanceID, "instance id bytes round trip")
        check(Hello.truncatedName(hello.name) == hello.name, "a valid name was truncated")
    case .text(let text):
        check(MessageID(hex: text.messageID.hex) == text.messageID, "message id hex round trip")
        check(MessageID(bytes: text.messageID.bytes) == text.messageID, "message id bytes round trip")
    default:
        break
    }
}

/// Names from elsewhere (host names, settings) are cut to fit a HELLO at a character boundary.
func checkNames(_ bytes: ArraySlice<UInt8>) {
    let name = String(decoding: bytes, as: UTF8.self)
    let cut = Hello.truncatedName(name)
    check(cut.utf8.count <= Wire.maxNameBytes, "truncatedName left \(cut.utf8.count) bytes")
    check(name.utf8.starts(with: cut.utf8), "truncatedName is not a prefix of the name")
    if name.utf8.count <= Wire.maxNameBytes { check(cut == name, "truncatedName changed a name that fits") }
    check(cut.count == name.count || cut.utf8.count + (name.dropFirst(cut.count).first?.utf8.count ?? 0) > Wire.maxNameBytes,
          "truncatedName cut more than needed")
    check((try? Hello(instanceID: InstanceID(bytes: [UInt8](repeating: 1, count: 16))!, capabilities: [], listenPort: 0,
                      voicePort: 0, name: cut)) != nil, "a truncated name does not fit a HELLO")
    // Arbitrary text as hex: parses only as 32 hex digits, and then back to the same digits.
    let hex = String(decoding: bytes.prefix(32), as: UTF8.self)
    if let id = MessageID(hex: hex) {
        check(id.hex == hex.lowercased(), "hex \(hex) parsed to \(id.hex)")
    } else {
        check(hex.utf8.count != 32 || !hex.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x46).contains($0) || (0x61...0x66).contains($0) }),
              "32 hex digits did not parse: \(hex)")
    }
}

/// Frame(body:) on an array and on a slice with a non-zero start must agree.
func decodeBody(_ body: ArraySlice<UInt8>) -> Result<Frame, WireError> {
    let viaSlice = Result { () throws(WireError) in try Frame(body: body) }
    let viaArray = Result { () throws(WireError) in try Frame(body: Array(body)) }
    check(viaSlice == viaArray, "Frame(body:) differs between slice and array: \(viaSlice) vs \(viaArray)")
    switch viaSlice {
    case .success(let frame): checkRoundTrip(frame, body: body)
    case .failure(let error): _ = error.description
    }
    return viaSlice
}

/// Frame(datagram:) as the documentation describes it, in terms of Frame(body:).
func checkDatagram(_ datagram: [UInt8]) {
    let actual = Result { () throws(WireError) in try Frame(datagram: datagram) }
    let expected: Result<Frame, WireError>
    if datagram.count < 4 {
        expected = .failure(.datagramTooShort(bytes: datagram.count))
    } else {
        let declared = UInt32(datagram[0]) << 24 | UInt32(datagram[1]) << 16 | UInt32(datagram[2]) << 8 | UInt32(datagram[3])
        if declared == 0 {
            expected = .failure(.emptyFrame)
        } else if declared > Wire.maxFrameBodyBytes {
            expected = .failure(.frameTooLarge(bodyBytes: declared))
        } else if datagram.count - 4 != Int(declared) {
            expected = .failure(.datagramLengthMismatch(declaredBodyBytes: declared, actualBodyBytes: datagram.count - 4))
        } else {
            expected = Result { () throws(WireError) in try Frame(body: datagram[4...]) }
        }
    }
    check(actual == expected, "Frame(datagram:) gave \(actual), expected \(expected)")
    switch actual {
    case .success(let frame): checkRoundTrip(frame, body: datagram[4...])
    case .failure(let error): _ = error.description
    }
}

/// The largest TEXT frame (stream form, 65 581 bytes), past FrameDecoder's compaction threshold.
let compactionFiller: [UInt8] = {
    let text = String(repeating: "a", count: Wire.maxTextBytes)
    let frame = try! TextFrame(seq: 1, messageID: MessageID(bytes: [UInt8](repeating: 0x11, count: 16))!, sentAtMs: 0, text: text)
    return Frame.text(frame).encoded()
}()

func run(_ bytes: [UInt8]) {
    var input = Input(bytes)
    let flags = input.u8()
    let splitSeed = input.u16()
    let maxBodyOverride = input.u16()
    let rest = input.rest

    let expectingPreamble = flags & 1 != 0
    var stream: [UInt8] = []
    if flags & 2 != 0 { stream += Preamble.bytes }
    stream += Array(rest)
    var maxBodyBytes = Wire.maxFrameBodyBytes
    if flags & 4 != 0 { maxBodyBytes = Handshake.maxMessageBytes }
    if flags & 32 != 0 { maxBodyBytes = maxBodyOverride }
    // Decoder A alone may get a 64 KiB frame in front of the rest (after the preamble), so that
    // it compacts its buffer while it decodes the rest; it must then produce that frame, then
    // exactly what B and C produce without it.
    let filler = splitSeed & 0xF000 == 0xF000 && expectingPreamble == (flags & 2 != 0)
        && maxBodyBytes >= compactionFiller.count - Wire.lengthPrefixBytes
    var streamA = stream
    if filler { streamA.insert(contentsOf: compactionFiller, at: stream.count - rest.count) }
    let useBodies = flags & 8 != 0

    // Decoder B: the whole stream in one append, drained with next().
    var decoderB = FrameDecoder(expectingPreamble: expectingPreamble)
    decoderB.maxBodyBytes = maxBodyBytes
    decoderB.append(stream)
    var outcomeB = Outcome()
    if drainFrames(&decoderB, into: &outcomeB) { outcomeB.leftover = decoderB.bufferedByteCount }
    if let error = outcomeB.error { _ = error.description }

    // Decoder C: the same with nextBody(). next() is nextBody() then Frame(body:), stopping at
    // the first bad body; the bodies are the stream's own bytes, so the round trips check them.
    var decoderC = FrameDecoder(expectingPreamble: expectingPreamble)
    decoderC.maxBodyBytes = maxBodyBytes
    decoderC.append(stream)
    var bodiesC: [[UInt8]] = []
    var framingErrorC: WireError?
    let aliveC = drainBodies(&decoderC, into: &bodiesC, error: &framingErrorC)
    var converted = Outcome()
    for (index, body) in bodiesC.enumerated() {
        let result = index < 64 ? decodeBody(body[...]) : Result { () throws(WireError) in try Frame(body: body) }
        switch result {
        case .success(let frame): converted.frames.append(frame)
        case .failure(let error): converted.error = error
        }
        if converted.error != nil { break }
    }
    if converted.error == nil {
        converted.error = framingErrorC
        if aliveC { converted.leftover = decoderC.bufferedByteCount }
    }
    check(converted == outcomeB, "nextBody()+Frame(body:) disagrees with next(): \(converted) vs \(outcomeB)")
    if let framingErrorC { checkSticky(&decoderC, framingErrorC, extra: rest.prefix(16)) }

    // Decoder A: a data-derived cut, then chunks of data-derived sizes, drained after each append;
    // it must end exactly where B (next()) or C (nextBody()) did.
    var decoderA = FrameDecoder(expectingPreamble: expectingPreamble)
    decoderA.maxBodyBytes = maxBodyBytes
    var chunks: [ArraySlice<UInt8>] = []
    let cut = streamA.isEmpty ? 0 : (splitSeed % (streamA.count + 1))
    chunks.append(streamA[..<cut])
    var position = cut
    var state = UInt32(truncatingIfNeeded: splitSeed) &* 2654435761 | 1
    while position < streamA.count {
        state ^= state << 13; state ^= state >> 17; state ^= state << 5
        var size = splitSeed & 0xFF == 0 ? streamA.count - position : Int(state % UInt32(1 + (splitSeed & 0x3F))) + 1
        if filler && position < 70_000 { size *= 64 }  // fewer appends through the filler
        let end = min(streamA.count, position + size)
        chunks.append(streamA[position..<end])
        position = end
    }
    var outcomeA = Outcome()
    var bodiesA: [[UInt8]] = []
    var framingErrorA: WireError?
    var alive = true
    for chunk in chunks where alive {
        decoderA.append(chunk)
        alive = useBodies ? drainBodies(&decoderA, into: &bodiesA, error: &framingErrorA)
                          : drainFrames(&decoderA, into: &outcomeA)
    }
    if filler {
        if useBodies {
            check(bodiesA.first.map { sameBytes($0, compactionFiller.dropFirst(4)) } == true, "the filler body did not come first")
            bodiesA.removeFirst()
        } else {
            check(outcomeA.frames.first.map { sameBytes($0.encoded(), compactionFiller[...]) } == true, "the filler frame did not come first")
            outcomeA.frames.removeFirst()
        }
    }
    if useBodies {
        check(bodiesA == bodiesC && framingErrorA == framingErrorC, "nextBody() depends on how the stream is cut")
        if alive { check(decoderA.bufferedByteCount == decoderC.bufferedByteCount, "leftover depends on the cut") }
        if let framingErrorA { checkSticky(&decoderA, framingErrorA, extra: rest.prefix(16)) }
    } else {
        if alive { outcomeA.leftover = decoderA.bufferedByteCount }
        check(outcomeA == outcomeB, "decoding depends on how the stream is cut: \(outcomeA) vs \(outcomeB)")
        if let error = outcomeA.error { checkSticky(&decoderA, error, extra: rest.prefix(16)) }
    }

    // The raw bytes as one body, as a slice starting past 0, and as a datagram.
    if !rest.isEmpty {
        _ = decodeBody(rest)
        _ = decodeBody(rest.dropFirst())
    }
    checkDatagram(Array(rest))
    checkVersions(rest)
    checkNames(rest)

    // A large body made from the input, to reach the size limits above libFuzzer's -max_len: just
    // around the largest TEXT (65 536 bytes of text), the largest body, or anywhere up to 128 KiB.
    if flags & 0x50 == 0x50, let type = rest.first {
        let delta = Int(maxBodyOverride >> 2 & 7) - 4
        let length: Int
        switch maxBodyOverride & 3 {
        case 0: length = Frame.textFixedBytesForFuzzing + Wire.maxTextBytes + delta
        case 1: length = Wire.maxFrameBodyBytes + delta
        default: length = 1 + (maxBodyOverride << 1 | Int(flags >> 7))
        }
        var body: [UInt8] = [type]
        body.reserveCapacity(length)
        body += rest.dropFirst().isEmpty ? [0x61] : rest.dropFirst()
        // Repeat what is there, doubling, until long enough.
        while body.count < length { body += Array(body[1..<min(body.count, 1 + length - body.count)]) }
        body.removeLast(body.count - length)
        _ = decodeBody(body[...])
        checkDatagram(bigEndianPrefix(body.count) + body)
    }
}

/// The version negotiation (PROTOCOL.md §3): bytes 0-7 as a peer's preamble, 8-15 as our and
/// the peer's HELLO capabilities.
func checkVersions(_ bytes: ArraySlice<UInt8>) {
    guard bytes.count >= 8 else { return }
    let preamble = Array(bytes.prefix(8))
    let checked = Result { () throws(WireError) in try Preamble.check(preamble) }
    var decoder = FrameDecoder()
    decoder.append(preamble)
    let decoded = Result { () throws(WireError) in _ = try decoder.next() }
    switch (checked, decoded) {
    case (.success(let versions), .success):
        check(decoder.peerVersions == versions, "FrameDecoder read \(String(describing: decoder.peerVersions)), Preamble.check \(versions)")
        check(versions.lowest <= versions.highest, "an inverted range was accepted: \(versions)")
        check(VersionRange.supported.agreed(with: versions) != nil, "\(versions) shares no version with this side")
        check((try? Preamble.check(Preamble.bytes(announcing: versions))) == versions, "\(versions) does not survive its own preamble")
    case (.failure(let error), .failure(let other)):
        check(error == other, "Preamble.check threw \(error), FrameDecoder \(other)")
        check(decoder.peerVersions == nil, "a refused preamble left peerVersions set")
    default:
        check(false, "Preamble.check gave \(checked), FrameDecoder \(decoded)")
    }
    guard case .success(let peer) = checked, bytes.count >= 16 else { return }
    var reader = Input(Array(bytes.dropFirst(8)))
    let ours = Capabilities(rawValue: reader.u32())
    let theirs = Capabilities(rawValue: reader.u32())
    let link = Result { () throws(WireError) in
        try LinkProtocol.negotiate(local: .supported, localCapabilities: ours, peerPreamble: peer, peerCapabilities: theirs)
    }
    let named = theirs.highestVersion ?? Wire.lastVersionWithoutRange
    switch link {
    case .success(let link):
        check(named == peer.highest, "a HELLO naming \(named) behind a preamble up to \(peer.highest) was taken")
        check(link.version == VersionRange.supported.agreed(with: peer), "link at \(link.version) for \(peer)")
        check(ours.features.isSuperset(of: link.capabilities), "the link carries what this side did not announce")
        check(Capabilities.available(atVersion: link.version).isSuperset(of: link.capabilities), "a feature newer than \(link.version)")
        check(link.capabilities.highestVersion == nil, "the version bits leaked into the features")
        for feature in [Capabilities.text, .voice, .presence, .hostedCalls, .channels, .transfers] {
            check((link.whyOff(feature, who: "p") == nil) == link.capabilities.contains(feature), "whyOff disagrees on \(feature)")
        }
    case .failure(let error):
        check(error == .versionsAltered(preamble: peer.highest, hello: named), "negotiate threw \(error) for \(peer), HELLO \(named)")
    }
}

extension Frame {
    /// Type, seq, previous seq, message id, sent-at: the fixed part of a TEXT body (PROTOCOL.md).
    static let textFixedBytesForFuzzing = 1 + 8 + 8 + 16 + 8
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
