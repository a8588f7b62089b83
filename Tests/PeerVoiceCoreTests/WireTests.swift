import Foundation
import CoreTestSupport
import PeerVoiceCore
import SeededRandom
import XCTest

final class WireTests: XCTestCase {

    // MARK: - Preamble

    func testPreambleBytes() {
        // Version 11 announces 6 (its lowest, the one a version-6 receiver checks) to 11.
        XCTAssertEqual(Preamble.bytes, [0x50, 0x56, 0x4C, 0x4B, 0x00, 0x06, 0x00, 0x0B])
        XCTAssertEqual(Preamble.byteCount, 8)
    }

    func testPreambleCheck() throws {
        XCTAssertNoThrow(try Preamble.check(Preamble.bytes))
        // The reserved field is ignored on receipt.
        XCTAssertNoThrow(try Preamble.check([0x50, 0x56, 0x4C, 0x4B, 0x00, 0x06, 0xAB, 0xCD]))
        // Version 5 lacks the call's frames, 4 PRESENCE, 2 VOICE_REPORT: each would close the
        // link on one, so they are refused up front.
        assertThrows(WireError.unsupportedVersion(5)) { try Preamble.check([0x50, 0x56, 0x4C, 0x4B, 0x00, 0x05, 0x00, 0x00]) }
        assertThrows(WireError.unsupportedVersion(4)) { try Preamble.check([0x50, 0x56, 0x4C, 0x4B, 0x00, 0x04, 0x00, 0x00]) }
        assertThrows(WireError.unsupportedVersion(2)) { try Preamble.check([0x50, 0x56, 0x4C, 0x4B, 0x00, 0x02, 0x00, 0x00]) }
        assertThrows(WireError.notPeerVoice) { try Preamble.check(Array("GET / HT".utf8)) }
        assertThrows(WireError.notPeerVoice) { try Preamble.check(Array(Preamble.bytes.prefix(7))) }
        assertThrows(WireError.notPeerVoice) { try Preamble.check(Preamble.bytes + [0]) }
        assertThrows(WireError.unsupportedVersion(1)) { try Preamble.check([0x50, 0x56, 0x4C, 0x4B, 0x00, 0x01, 0x00, 0x00]) }
        assertThrows(WireError.unsupportedVersion(0)) { try Preamble.check([0x50, 0x56, 0x4C, 0x4B, 0x00, 0x00, 0x00, 0x00]) }
    }

    func testDecoderRejectsWrongMagicAtFirstWrongByte() {
        var decoder = FrameDecoder()
        decoder.append([0x50, 0x56])  // "PV": so far so good
        XCTAssertNil(try decoder.next())
        decoder.append([0x58])  // "PVX"
        assertThrows(WireError.notPeerVoice) { try decoder.next() }
    }

    func testDecoderRejectsHTTP() {
        var decoder = FrameDecoder()
        decoder.append(Array("GET / HTTP/1.1\r\n".utf8))
        assertThrows(WireError.notPeerVoice) { try decoder.next() }
    }

    func testDecoderRejectsWrongVersionBeforeReservedBytes() {
        var decoder = FrameDecoder()
        decoder.append([0x50, 0x56, 0x4C, 0x4B, 0x00, 0x01])
        assertThrows(WireError.unsupportedVersion(1)) { try decoder.next() }

        var other = FrameDecoder()
        other.append([0x50, 0x56, 0x4C, 0x4B, 0xFF, 0xFF, 0, 0])
        assertThrows(WireError.unsupportedVersion(65535)) { try other.next() }
    }

    func testDecoderWaitsForWholePreamble() throws {
        var decoder = FrameDecoder()
        for byte in Preamble.bytes {
            XCTAssertNil(try decoder.next())
            decoder.append([byte])
        }
        XCTAssertNil(try decoder.next())
        XCTAssertEqual(decoder.bufferedByteCount, 0)
        decoder.append(Frame.keepalive.encoded())
        XCTAssertEqual(try decoder.next(), .keepalive)
    }

    func testDecoderWithoutPreamble() throws {
        var decoder = FrameDecoder(expectingPreamble: false)
        decoder.append(Frame.ack(seq: 7).encoded())
        XCTAssertEqual(try decoder.next(), .ack(seq: 7))
        XCTAssertNil(try decoder.next())
    }

    // MARK: - Exact byte layouts

    func testHelloLayout() throws {
        let id = try XCTUnwrap(InstanceID(hex: "000102030405060708090a0b0c0d0e0f"))
        let hello = try Hello(
            instanceID: id, capabilities: [.text, .voice], listenPort: 47800, voicePort: 0x1234, name: "Ada")
        XCTAssertEqual(Frame.hello(hello).encoded(), [
            0x00, 0x00, 0x00, 30,  // body length 1 + 16 + 4 + 2 + 2 + 2 + 3
            0x01,
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
            0x00, 0x00, 0x00, 0x03,  // capabilities
            0xBA, 0xB8,  // 47800
            0x12, 0x34,
            0x00, 0x03, 0x41, 0x64, 0x61,
        ])
    }

    func testTextLayout() throws {
        let messageID = try XCTUnwrap(MessageID(hex: "F0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF"))
        let text = try TextFrame(seq: 0x0102030405060708, previousSeq: 0x0102030405060707, messageID: messageID,
                                 sentAtMs: 1_700_000_000_000, text: "hé")
        XCTAssertEqual(Frame.text(text).encoded(), [
            0x00, 0x00, 0x00, 44,  // 1 + 8 + 8 + 16 + 8 + 3
            0x02,
            0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
            0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x07,
            0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF,
            0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x00,  // 1_700_000_000_000
            0x68, 0xC3, 0xA9,
        ])
    }

    func testSmallFrameLayouts() throws {
        XCTAssertEqual(Frame.ack(seq: 0x0A0B0C0D0E0F1011).encoded(),
                       [0, 0, 0, 9, 0x03, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11])
        XCTAssertEqual(Frame.keepalive.encoded(), [0, 0, 0, 1, 0x04])
        XCTAssertEqual(Frame.goodbye(.userDisconnected).encoded(), [0, 0, 0, 2, 0x05, 0])
        XCTAssertEqual(Frame.goodbye(.shuttingDown).encoded(), [0, 0, 0, 2, 0x05, 1])
        XCTAssertEqual(Frame.goodbye(.protocolError).encoded(), [0, 0, 0, 2, 0x05, 2])
        let voice = try VoiceFrame(seq: 5, timestamp: 0xDEADBEEF, payload: [0xFC, 0xFF, 0xFE])
        XCTAssertEqual(Frame.voice(voice).encoded(),
                       [0, 0, 0, 16, 0x10, 0, 0, 0, 0, 0, 0, 0, 5, 0xDE, 0xAD, 0xBE, 0xEF, 0xFC, 0xFF, 0xFE])
        XCTAssertEqual(Frame.keepalive.encodedBody(), [0x04])
        XCTAssertEqual(Wire.lengthPrefixed([0x04]), [0, 0, 0, 1, 0x04])
    }

    // MARK: - Round trips

    func testRoundTripEveryFrameType() throws {
        let frames = try sampleFrames()
        XCTAssertEqual(Set(frames.map(\.type)), Set(FrameType.allCases))
        XCTAssertEqual(try decodeStream(frames.map { $0.encoded() }), frames)
        for frame in frames {
            XCTAssertEqual(try Frame(body: frame.encodedBody()), frame)
            XCTAssertEqual(try Frame(datagram: frame.encoded()), frame)
        }
    }

    func testTextRoundTripsExactBytes() throws {
        let texts = [
            "Hello, world!",
            "x",
            "😀👍🏽🇫🇷👨‍👩‍👧",
            "你好，世界。こんにちは。안녕하세요",
            "e\u{301} vs \u{e9}",  // canonically equivalent forms must keep their own bytes
            String(repeating: "a", count: Wire.maxTextBytes),
            String(repeating: "😀", count: Wire.maxTextBytes / 4),
            String(repeating: "中", count: Wire.maxTextBytes / 3),
        ]
        for (index, text) in texts.enumerated() {
            let frame = Frame.text(try TextFrame(seq: UInt64(index + 1), messageID: .random(), sentAtMs: 42, text: text))
            let decoded = try decodeStream([frame.encoded()])
            XCTAssertEqual(decoded, [frame])
            guard case .text(let decodedText) = decoded.first else { return XCTFail("not a TEXT frame") }
            XCTAssertEqual(Array(decodedText.text.utf8), Array(text.utf8))
        }
    }

    func testLargestFramesFitTheLimit() throws {
        let text = Frame.text(try TextFrame(
            seq: .max, messageID: .random(), sentAtMs: .max, text: String(repeating: "b", count: Wire.maxTextBytes)))
        XCTAssertEqual(text.encodedBody().count, 41 + Wire.maxTextBytes)
        XCTAssertLessThanOrEqual(text.encodedBody().count, Wire.maxFrameBodyBytes)
        let hello = Frame.hello(try Hello(
            instanceID: .random(), capabilities: [], listenPort: 0, voicePort: 0,
            name: String(repeating: "n", count: Wire.maxNameBytes)))
        XCTAssertEqual(try decodeStream([hello.encoded()]), [hello])
    }

    func testUnknownCapabilityBitsAreKept() throws {
        let hello = try Hello(
            instanceID: .random(), capabilities: Capabilities(rawValue: 0xFFFF_FFFF), listenPort: 1, voicePort: 2, name: "")
        let decoded = try Frame(body: Frame.hello(hello).encodedBody())
        XCTAssertEqual(decoded, .hello(hello))
        guard case .hello(let decodedHello) = decoded else { return XCTFail("not a HELLO frame") }
        XCTAssertTrue(decodedHello.capabilities.contains([.text, .voice]))
    }

    func testUnnamedGoodbyeReasonIsKept() throws {
        XCTAssertEqual(try Frame(body: [0x05, 200]), .goodbye(GoodbyeReason(rawValue: 200)))
        XCTAssertEqual(try Frame(body: [0x05, 1]), .goodbye(.shuttingDown))
        XCTAssertEqual(GoodbyeReason(rawValue: 200).description, "reason 200")
    }

    // MARK: - Stream framing

    func testByteByByteFeeding() throws {
        let frames = try sampleFrames()
        var stream = Preamble.bytes
        for frame in frames { stream += frame.encoded() }
        var decoder = FrameDecoder()
        var decoded: [Frame] = []
        for byte in stream {
            decoder.append(CollectionOfOne(byte))
            while let frame = try decoder.next() { decoded.append(frame) }
        }
        XCTAssertEqual(decoded, frames)
        XCTAssertEqual(decoder.bufferedByteCount, 0)
    }

    func testRandomSplitPoints() throws {
        let frames = try sampleFrames()
        var stream = Preamble.bytes
        for frame in frames { stream += frame.encoded() }
        var random = SplitMix64(seed: 7)
        for _ in 0..<200 {
            var decoder = FrameDecoder()
            var decoded: [Frame] = []
            var offset = 0
            while offset < stream.count {
                let chunk = Int(random.next() % 300) + 1
                let end = min(stream.count, offset + chunk)
                decoder.append(stream[offset..<end])
                offset = end
                while let frame = try decoder.next() { decoded.append(frame) }
            }
            XCTAssertEqual(decoded, frames)
        }
    }

    func testTruncatedFrameWaitsForMoreBytes() throws {
        let frame = Frame.text(try TextFrame(seq: 1, messageID: .random(), sentAtMs: 1, text: "patience"))
        let bytes = frame.encoded()
        for cut in 0..<bytes.count {
            var decoder = FrameDecoder(expectingPreamble: false)
            decoder.append(bytes[..<cut])
            XCTAssertNil(try decoder.next(), "cut at \(cut)")
            XCTAssertNil(try decoder.next(), "cut at \(cut), asked twice")
            decoder.append(bytes[cut...])
            XCTAssertEqual(try decoder.next(), frame, "cut at \(cut)")
            XCTAssertNil(try decoder.next())
        }
    }

    func testManyFramesInOneRead() throws {
        var stream = Preamble.bytes
        let count = 50_000
        for seq in 1...count {
            stream += Frame.ack(seq: UInt64(seq)).encoded()
        }
        var decoder = FrameDecoder()
        decoder.append(stream)
        var expected: UInt64 = 1
        while let frame = try decoder.next() {
            XCTAssertEqual(frame, .ack(seq: expected))
            expected += 1
        }
        XCTAssertEqual(expected, UInt64(count) + 1)
        XCTAssertEqual(decoder.bufferedByteCount, 0)
    }

    func testInterleavedAppendsAcrossCompaction() throws {
        // Appending while a partial frame is pending, over far more bytes than the compaction threshold.
        let frame = Frame.voice(try VoiceFrame(seq: 9, timestamp: 960, payload: Array(repeating: 0xAB, count: 1000)))
        let bytes = frame.encoded()
        var decoder = FrameDecoder(expectingPreamble: false)
        var decoded = 0
        for _ in 0..<500 {
            decoder.append(bytes[..<700])
            while let next = try decoder.next() { XCTAssertEqual(next, frame); decoded += 1 }
            decoder.append(bytes[700...])
            while let next = try decoder.next() { XCTAssertEqual(next, frame); decoded += 1 }
        }
        XCTAssertEqual(decoded, 500)
        XCTAssertEqual(decoder.bufferedByteCount, 0)
    }

    func testNextBodyIsTheFramingLayerAlone() throws {
        var decoder = FrameDecoder()
        // A type byte this version does not know still frames fine; only decoding rejects it.
        decoder.append(Preamble.bytes + [0, 0, 0, 3, 0x7F, 1, 2] + Frame.keepalive.encoded())
        XCTAssertEqual(try decoder.nextBody(), [0x7F, 1, 2])
        XCTAssertEqual(try decoder.nextBody(), [0x04])
        XCTAssertNil(try decoder.nextBody())
    }

    // MARK: - Malformed framing

    func testZeroLength() {
        var decoder = FrameDecoder()
        decoder.append(Preamble.bytes + [0, 0, 0, 0])
        assertThrows(WireError.emptyFrame) { try decoder.next() }
    }

    func testLengthOverLimitIsRejectedBeforeTheBody() throws {
        var decoder = FrameDecoder()
        decoder.append(Preamble.bytes + [0x00, 0x0F, 0x42, 0x40])  // 1_000_000, no body at all
        assertThrows(WireError.frameTooLarge(bodyBytes: 1_000_000)) { try decoder.next() }

        var justOver = FrameDecoder(expectingPreamble: false)
        justOver.append([0x00, 0x01, 0x11, 0x71])  // 70_001
        assertThrows(WireError.frameTooLarge(bodyBytes: 70_001)) { try justOver.next() }

        var largest = FrameDecoder(expectingPreamble: false)
        largest.append([0xFF, 0xFF, 0xFF, 0xFF])
        assertThrows(WireError.frameTooLarge(bodyBytes: UInt32.max)) { try largest.next() }

        // Exactly at the limit is fine: the decoder waits for the body.
        var atLimit = FrameDecoder(expectingPreamble: false)
        atLimit.append([0x00, 0x01, 0x11, 0x70])  // 70_000
        XCTAssertNil(try atLimit.next())
    }

    func testDecoderStaysFailed() {
        var decoder = FrameDecoder()
        decoder.append(Preamble.bytes + [0, 0, 0, 0])
        assertThrows(WireError.emptyFrame) { try decoder.next() }
        decoder.append(Frame.keepalive.encoded())
        assertThrows(WireError.emptyFrame) { try decoder.next() }
        assertThrows(WireError.emptyFrame) { try decoder.nextBody() }

        var badBody = FrameDecoder(expectingPreamble: false)
        badBody.append([0, 0, 0, 1, 0x99] + Frame.keepalive.encoded())
        assertThrows(WireError.unknownFrameType(0x99)) { try badBody.next() }
        assertThrows(WireError.unknownFrameType(0x99)) { try badBody.next() }
    }

    // MARK: - Malformed bodies

    func testUnknownFrameTypes() {
        for type: UInt8 in [0x00, 0x0D, 0x0F, 0x12, 0xFF] {
            assertDecodeFails([type], .unknownFrameType(type))
        }
    }

    func testFixedSizeFramesRejectTrailingBytes() {
        assertDecodeFails([0x03] + be64(1) + [0], .trailingBytes(.ack, count: 1))
        assertDecodeFails([0x04, 0, 0], .trailingBytes(.keepalive, count: 2))
        assertDecodeFails([0x05, 0, 0], .trailingBytes(.goodbye, count: 1))
        assertDecodeFails(helloBody(name: Array("Ada".utf8)) + [0x41], .trailingBytes(.hello, count: 1))
    }

    func testFramesTooShort() {
        assertDecodeFails([0x03] + [0, 0, 0], .frameTooShort(.ack, bodyBytes: 4, requiredBytes: 9))
        assertDecodeFails([0x05], .frameTooShort(.goodbye, bodyBytes: 1, requiredBytes: 2))
        assertDecodeFails([0x02] + be64(1), .frameTooShort(.text, bodyBytes: 9, requiredBytes: 41))
        assertDecodeFails([0x10, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], .frameTooShort(.voice, bodyBytes: 12, requiredBytes: 13))
        assertDecodeFails(Array(helloBody(name: []).prefix(26)), .frameTooShort(.hello, bodyBytes: 26, requiredBytes: 27))
        // A name length that promises more bytes than the body holds.
        var shortName = helloBody(name: Array("Ada".utf8))
        shortName.removeLast()
        assertDecodeFails(shortName, .frameTooShort(.hello, bodyBytes: 29, requiredBytes: 30))
    }

    func testTextSequenceZero() {
        assertDecodeFails(textBody(seq: 0, text: Array("hi".utf8)), .zeroSequence)
        XCTAssertThrowsError(try TextFrame(seq: 0, messageID: .random(), sentAtMs: 0, text: "hi")) {
            XCTAssertEqual($0 as? WireError, .zeroSequence)
        }
    }

    func testEmptyText() {
        assertDecodeFails(textBody(seq: 1, text: []), .emptyText)
        XCTAssertThrowsError(try TextFrame(seq: 1, messageID: .random(), sentAtMs: 0, text: "")) {
            XCTAssertEqual($0 as? WireError, .emptyText)
        }
    }

    func testTextOverLimit() throws {
        assertDecodeFails(textBody(seq: 1, text: Array(repeating: 0x61, count: 65_537)), .textTooLong(bytes: 65_537))
        XCTAssertThrowsError(try TextFrame(seq: 1, messageID: .random(), sentAtMs: 0, text: String(repeating: "a", count: 65_537))) {
            XCTAssertEqual($0 as? WireError, .textTooLong(bytes: 65_537))
        }
        // Through the stream decoder as well.
        var decoder = FrameDecoder(expectingPreamble: false)
        decoder.append(Wire.lengthPrefixed(textBody(seq: 1, text: Array(repeating: 0x61, count: 65_537))))
        assertThrows(WireError.textTooLong(bytes: 65_537)) { try decoder.next() }
    }

    func testBadUTF8Text() {
        let invalid: [[UInt8]] = [
            [0xFF],
            [0x61, 0x80],  // stray continuation byte
            [0xC0, 0x80],  // overlong NUL
            [0xED, 0xA0, 0x80],  // UTF-16 surrogate
            [0xF4, 0x90, 0x80, 0x80],  // above U+10FFFF
            [0x61, 0xE4, 0xB8],  // truncated sequence at the end
            [0x61, 0x00, 0x62],  // NUL: valid UTF-8, but no D-Bus string can carry it
        ]
        for bytes in invalid {
            assertDecodeFails(textBody(seq: 1, text: bytes), .textNotUTF8)
        }
    }

    func testBadHelloNames() {
        assertDecodeFails(helloBody(name: [0x41, 0xFE]), .nameNotUTF8)
        assertDecodeFails(helloBody(name: [0x41, 0x00]), .nameNotUTF8)
        assertDecodeFails(helloBody(name: Array(repeating: 0x61, count: 257)), .nameTooLong(bytes: 257))
        // The declared length alone is enough to reject.
        var declared = helloBody(name: [])
        declared[25] = 0xFF
        declared[26] = 0xFF
        assertDecodeFails(declared, .nameTooLong(bytes: 65535))
        XCTAssertThrowsError(try Hello(
            instanceID: .random(), capabilities: .text, listenPort: 0, voicePort: 0,
            name: String(repeating: "é", count: 129))) {
            XCTAssertEqual($0 as? WireError, .nameTooLong(bytes: 258))
        }
    }

    func testVoicePayloadLimit() throws {
        let fixed: [UInt8] = [0x10] + be64(1) + [0, 0, 0, 0]
        XCTAssertNoThrow(try Frame(body: fixed + Array(repeating: 1, count: 1275)))
        assertDecodeFails(fixed + Array(repeating: 1, count: 1276), .voicePayloadTooLong(bytes: 1276))
        XCTAssertThrowsError(try VoiceFrame(seq: 1, timestamp: 0, payload: Array(repeating: 0, count: 1276))) {
            XCTAssertEqual($0 as? WireError, .voicePayloadTooLong(bytes: 1276))
        }
        XCTAssertEqual(try Frame(body: fixed), .voice(try VoiceFrame(seq: 1, timestamp: 0, payload: [])))
    }

    func testBodyDecodingChecksLengths() {
        assertDecodeFails([], .emptyFrame)
        assertDecodeFails(Array(repeating: 0x02, count: 70_001), .frameTooLarge(bodyBytes: 70_001))
    }

    // MARK: - Datagrams

    func testDatagrams() throws {
        let voice = Frame.voice(try VoiceFrame(seq: 3, timestamp: 480, payload: [1, 2, 3]))
        XCTAssertEqual(try Frame(datagram: voice.encoded()), voice)
        assertThrows(WireError.datagramTooShort(bytes: 3)) { try Frame(datagram: [0, 0, 0]) }
        assertThrows(WireError.datagramLengthMismatch(declaredBodyBytes: 16, actualBodyBytes: 15)) {
            try Frame(datagram: Array(voice.encoded().dropLast()))
        }
        assertThrows(WireError.datagramLengthMismatch(declaredBodyBytes: 16, actualBodyBytes: 17)) {
            try Frame(datagram: voice.encoded() + [0])
        }
        assertThrows(WireError.emptyFrame) { try Frame(datagram: [0, 0, 0, 0]) }
        assertThrows(WireError.frameTooLarge(bodyBytes: 70_001)) { try Frame(datagram: [0x00, 0x01, 0x11, 0x71, 0x10]) }
    }

    // MARK: - Identifiers

    func testIdentifiers() throws {
        let hex = "00112233445566778899aabbccddeeff"
        let instance = try XCTUnwrap(InstanceID(hex: hex))
        XCTAssertEqual(instance.hex, hex)
        XCTAssertEqual(instance.bytes, [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                        0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff])
        XCTAssertEqual(InstanceID(bytes: instance.bytes), instance)
        XCTAssertEqual(InstanceID(hex: hex.uppercased()), instance)
        XCTAssertEqual(instance.description, hex)

        XCTAssertNil(InstanceID(hex: String(hex.dropLast())))
        XCTAssertNil(InstanceID(hex: hex + "0"))
        XCTAssertNil(InstanceID(hex: "g" + hex.dropFirst()))
        XCTAssertNil(InstanceID(hex: "é" + hex.dropFirst(2)))
        XCTAssertNil(InstanceID(bytes: [UInt8](repeating: 0, count: 15)))
        XCTAssertNil(MessageID(bytes: [UInt8](repeating: 0, count: 17)))

        let message = MessageID.random()
        XCTAssertEqual(message.hex.count, 32)
        XCTAssertTrue(message.hex.allSatisfy { "0123456789abcdef".contains($0) })
        XCTAssertEqual(MessageID(hex: message.hex), message)
        XCTAssertEqual(MessageID(bytes: message.bytes), message)

        var seen = Set<MessageID>()
        for _ in 0..<1000 { seen.insert(.random()) }
        XCTAssertEqual(seen.count, 1000)
        XCTAssertNotEqual(InstanceID.random(), InstanceID.random())
    }

    // MARK: - Helpers on the types

    func testVoiceDestinationPort() throws {
        func hello(listen: UInt16, voice: UInt16) throws -> Hello {
            try Hello(instanceID: .random(), capabilities: .voice, listenPort: listen, voicePort: voice, name: "x")
        }
        XCTAssertEqual(try hello(listen: 47800, voice: 47801).voiceDestinationPort, 47801)
        XCTAssertEqual(try hello(listen: 47800, voice: 0).voiceDestinationPort, 47800)
        XCTAssertNil(try hello(listen: 0, voice: 0).voiceDestinationPort)
    }

    func testTruncatedName() {
        XCTAssertEqual(Hello.truncatedName("short"), "short")
        let exact = String(repeating: "a", count: 256)
        XCTAssertEqual(Hello.truncatedName(exact), exact)
        // 255 ASCII bytes then a 4-byte emoji: the emoji does not fit and is dropped whole.
        let long = String(repeating: "a", count: 255) + "😀" + "tail"
        XCTAssertEqual(Hello.truncatedName(long), String(repeating: "a", count: 255))
        let flags = String(repeating: "🇫🇷", count: 40)  // 8 bytes each
        XCTAssertEqual(Hello.truncatedName(flags), String(repeating: "🇫🇷", count: 32))
    }

    func testDescriptionsForLogs() throws {
        XCTAssertEqual(WireError.frameTooLarge(bodyBytes: 1_000_000).description,
                       "frame of 1000000 bytes is over the limit (70000 bytes; 1024 during the handshake)")
        XCTAssertEqual(WireError.unknownFrameType(0x0A).description, "unknown frame type 0x0a")
        XCTAssertEqual(WireError.unsupportedVersion(1).description,
                       "peer speaks protocol version 1; this side speaks versions 6-11")
        XCTAssertEqual(WireError.trailingBytes(.ack, count: 1).description, "ACK frame has 1 unexpected trailing byte")
        XCTAssertEqual(WireError.frameTooShort(.text, bodyBytes: 9, requiredBytes: 33).description,
                       "TEXT frame of 9 bytes is too short (needs 33)")
        XCTAssertEqual(WireError.textTooLong(bytes: 65_537).description,
                       "text of 65537 bytes exceeds the 65536-byte limit")

        let secret = "the launch code is 1234"
        let frame = Frame.text(try TextFrame(seq: 4, messageID: .random(), sentAtMs: 9, text: secret))
        XCTAssertFalse(frame.description.contains("launch"))
        XCTAssertFalse(String(describing: frame).contains("launch"))
        XCTAssertTrue(frame.description.contains("23 bytes"))
        let hello = Frame.hello(try Hello(instanceID: .random(), capabilities: .text, listenPort: 0, voicePort: 0,
                                          name: "evil\nname"))
        XCTAssertFalse(hello.description.contains("\n"), "peer-chosen names must not break log lines")
    }

    // MARK: - Robustness

    /// Random input must only ever produce frames or errors; every frame decoded must re-encode
    /// to exactly the bytes it came from.
    func testRandomInputNeverCrashes() throws {
        var random = SplitMix64(seed: 0x5EED)
        let templates = try sampleFrames().map { $0.encoded() }
        var framesSeen = 0
        var errorsSeen = 0
        for round in 0..<20_000 {
            var stream: [UInt8]
            switch round % 4 {
            case 0:  // Pure noise, sometimes behind a valid preamble.
                stream = randomBytes(&random, count: Int(random.next() % 200))
                if random.next() % 2 == 0 { stream = Preamble.bytes + stream }
            case 1:  // Plausible lengths, known type bytes, random payloads.
                stream = Preamble.bytes
                for _ in 0..<Int(random.next() % 4) + 1 {
                    let type = FrameType.allCases[Int(random.next() % UInt64(FrameType.allCases.count))].rawValue
                    let body = [type] + randomBytes(&random, count: Int(random.next() % 64))
                    stream += Wire.lengthPrefixed(body)
                }
            case 2:  // Valid frames with a few bytes flipped.
                stream = Preamble.bytes + templates[Int(random.next() % UInt64(templates.count))]
                for _ in 0..<Int(random.next() % 3) + 1 {
                    let index = Int(random.next() % UInt64(stream.count))
                    stream[index] ^= UInt8(truncatingIfNeeded: random.next() | 1)
                }
            default:  // Valid frames cut short or with bytes appended.
                stream = Preamble.bytes + templates[Int(random.next() % UInt64(templates.count))]
                if random.next() % 2 == 0 {
                    stream.removeLast(Int(random.next() % UInt64(stream.count)))
                } else {
                    stream += randomBytes(&random, count: Int(random.next() % 16))
                }
            }

            var decoder = FrameDecoder()
            var offset = 0
            feeding: while offset < stream.count {
                let end = min(stream.count, offset + Int(random.next() % 64) + 1)
                decoder.append(stream[offset..<end])
                offset = end
                do {
                    while let frame = try decoder.next() {
                        framesSeen += 1
                        XCTAssertEqual(try Frame(body: frame.encodedBody()), frame)
                    }
                } catch {
                    errorsSeen += 1
                    break feeding
                }
            }

            // The body decoder on its own, without framing.
            let body = randomBytes(&random, count: Int(random.next() % 80))
            if let frame = try? Frame(body: body) {
                framesSeen += 1
                XCTAssertEqual(frame.encodedBody(), body)
            }
            _ = try? Frame(datagram: body)
        }
        // The loop must really have exercised both outcomes.
        XCTAssertGreaterThan(framesSeen, 1000)
        XCTAssertGreaterThan(errorsSeen, 1000)
    }

    // MARK: - A hosted call's frames (version 6)

    func testRelayedVoiceBytes() throws {
        let relayed = try RelayedVoiceFrame(source: source(4), seq: 5, timestamp: 0xDEADBEEF, payload: [0xFC, 0xFF])
        XCTAssertEqual(Frame.relayedVoice(relayed).encoded(),
                       [0, 0, 0, 16, 0x11, 4] + be64(5) + [0xDE, 0xAD, 0xBE, 0xEF, 0xFC, 0xFF])
        XCTAssertEqual(relayed.voice, try VoiceFrame(seq: 5, timestamp: 0xDEADBEEF, payload: [0xFC, 0xFF]))
        // As a voice datagram, like VOICE.
        XCTAssertEqual(try Frame(datagram: Frame.relayedVoice(relayed).encoded()), .relayedVoice(relayed))
    }

    func testRelayedVoiceRejects() {
        let fixed: [UInt8] = [0x11, 1] + be64(1) + [0, 0, 0, 0]
        assertDecodeFails(Array(fixed.dropLast()), .frameTooShort(.relayedVoice, bodyBytes: 13, requiredBytes: 14))
        assertDecodeFails([0x11, 0] + be64(1) + [0, 0, 0, 0, 0xAA], .invalidRelaySource)
        assertDecodeFails(fixed + Array(repeating: 1, count: 1276), .voicePayloadTooLong(bytes: 1276))
        XCTAssertEqual(try Frame(body: fixed + Array(repeating: 1, count: 1275)).encodedBody().count, 1289)
        XCTAssertNil(RelaySource(rawValue: 0))
    }

    func testParticipantsBytes() throws {
        let bob = try participant(3, name: "Bob", speaking: true)
        let id = Array(bob.peer.base32.utf8)
        XCTAssertEqual(id.count, 26)
        XCTAssertEqual(try Frame.participants(checking: [bob]).encodedBody(), [0x0B, 1, 3, 20, 1] + id + [0, 3] + Array("Bob".utf8))
        XCTAssertEqual(Frame.participants([]).encodedBody(), [0x0B, 0])
        XCTAssertEqual(try Frame(body: [0x0B, 1, 3, 20, 1] + id + [0, 3] + Array("Bob".utf8)), .participants([bob]))
    }

    func testParticipantsRejects() throws {
        let id = Array(try participant(1).peer.base32.utf8)
        let other = Array(try participant(1, peer: 2).peer.base32.utf8)
        func entry(_ source: UInt8, _ frameMs: UInt8 = 20, _ flags: UInt8 = 0, id: [UInt8], name: [UInt8] = []) -> [UInt8] {
            [source, frameMs, flags] + id + [UInt8(name.count >> 8), UInt8(name.count & 0xFF)] + name
        }
        assertDecodeFails([0x0B], .frameTooShort(.participants, bodyBytes: 1, requiredBytes: 2))
        assertDecodeFails([0x0B, 1], .frameTooShort(.participants, bodyBytes: 2, requiredBytes: 33))
        assertDecodeFails([0x0B, 1] + entry(1, id: id, name: Array("Bo".utf8)).dropLast(), .frameTooShort(.participants, bodyBytes: 34, requiredBytes: 35))
        assertDecodeFails([0x0B, 0, 0], .trailingBytes(.participants, count: 1))
        assertDecodeFails([0x0B, 1] + entry(1, id: id) + [0], .trailingBytes(.participants, count: 1))
        assertDecodeFails([0x0B, 8] + (1...8).flatMap { entry($0, id: id) }, .tooManyParticipants(8))
        assertDecodeFails([0x0B, 1] + entry(0, id: id), .invalidRelaySource)
        assertDecodeFails([0x0B, 1] + entry(1, 30, id: id), .unsupportedFrameDuration(30))
        assertDecodeFails([0x0B, 1] + entry(1, 20, 2, id: id), .reservedFlags(.participants, 2))
        assertDecodeFails([0x0B, 1] + entry(1, id: [0x31] + id.dropFirst()), .invalidPeerID)  // '1' is no base32 digit
        assertDecodeFails([0x0B, 1] + entry(1, id: Array(String(decoding: id, as: UTF8.self).uppercased().utf8)), .invalidPeerID)
        assertDecodeFails([0x0B, 1] + entry(1, id: id, name: [0x41, 0, 0x42]), .nameNotUTF8)
        assertDecodeFails([0x0B, 1] + entry(1, id: id, name: [0xC3, 0x28]), .nameNotUTF8)
        assertDecodeFails([0x0B, 1, 1, 20, 0] + id + [1, 1], .nameTooLong(bytes: 257))
        assertDecodeFails([0x0B, 2] + entry(5, id: id) + entry(5, id: other), .duplicateParticipant(source: 5))
        assertDecodeFails([0x0B, 2] + entry(5, id: id) + entry(6, id: id), .duplicateParticipantPeer)
        XCTAssertThrowsError(try Frame.participants(checking: try (1...8).map { try participant(UInt8($0), peer: UInt8($0)) })) {
            XCTAssertEqual($0 as? WireError, .tooManyParticipants(8))
        }
        XCTAssertThrowsError(try CallParticipant(source: source(1), peer: try participant(1).peer, frameMs: 20, speaking: false,
                                                 name: String(repeating: "a", count: 257))) {
            XCTAssertEqual($0 as? WireError, .nameTooLong(bytes: 257))
        }
        // Found by fuzz/call-frames: a name the decoder refuses must not be built either.
        XCTAssertThrowsError(try CallParticipant(source: source(1), peer: try participant(1).peer, frameMs: 20, speaking: false,
                                                 name: "a\u{0}b")) {
            XCTAssertEqual($0 as? WireError, .nameNotUTF8)
        }
    }

    func testRelayReportBytesAndRejects() throws {
        XCTAssertEqual(Frame.relayReport(try RelayReport(source: source(3), lossPercent: 12, direct: true)).encodedBody(), [0x0C, 3, 12, 1])
        XCTAssertEqual(try Frame(body: [0x0C, 3, 0, 0]), .relayReport(try RelayReport(source: source(3), lossPercent: 0, direct: false)))
        assertDecodeFails([0x0C, 3, 0], .frameTooShort(.relayReport, bodyBytes: 3, requiredBytes: 4))
        assertDecodeFails([0x0C, 3, 0, 0, 0], .trailingBytes(.relayReport, count: 1))
        assertDecodeFails([0x0C, 0, 0, 0], .invalidRelaySource)
        assertDecodeFails([0x0C, 3, 101, 0], .invalidLossPercent(101))
        assertDecodeFails([0x0C, 3, 0, 2], .reservedFlags(.relayReport, 2))
        assertDecodeFails([0x0C, 3, 101, 2], .invalidLossPercent(101))  // the loss before the flags
    }

    func testGroupFrameDescriptionsLeaveNamesOut() throws {
        let frame = Frame.participants([try participant(3, name: "Secret name")])
        XCTAssertFalse(frame.description.contains("Secret"), frame.description)
        XCTAssertTrue(frame.description.hasPrefix("PARTICIPANTS source 3 pv:"), frame.description)
    }

    // MARK: - Fixtures

    private func source(_ value: UInt8) -> RelaySource { RelaySource(rawValue: value)! }

    /// A list entry for a made-up peer (its id from `peer`).
    private func participant(_ value: UInt8, peer: UInt8 = 1, name: String = "x", frameMs: UInt8 = 20,
                             speaking: Bool = false) throws -> CallParticipant {
        let id = PeerID("pv:" + String(repeating: "abcdefghijklmnopqrstuvwxyz234567".map { String($0) }[Int(peer) % 32], count: 26))!
        return try CallParticipant(source: source(value), peer: id, frameMs: frameMs, speaking: speaking, name: name)
    }

    private func sampleFrames() throws -> [Frame] {
        [
            .hello(try Hello(instanceID: .random(), capabilities: [.text, .voice], listenPort: 47800, voicePort: 47801, name: "Ada’s laptop 💻")),
            .hello(try Hello(instanceID: .random(), capabilities: .text, listenPort: 0, voicePort: 0, name: "")),
            .text(try TextFrame(seq: 1, messageID: .random(), sentAtMs: 1_700_000_000_123, text: "plain ASCII")),
            .text(try TextFrame(seq: 2, messageID: .random(), sentAtMs: 0, text: "emoji 😀🎉")),
            .text(try TextFrame(seq: .max, messageID: .random(), sentAtMs: .max, text: "中文 日本語 한국어")),
            .ack(seq: 0),
            .ack(seq: 12_345),
            .ack(seq: .max),
            .keepalive,
            .goodbye(.userDisconnected),
            .pairing(.accept),
            .pairing(.refuse),
            .pairing(.asking),
            .pairing(.known),
            .voiceStart(try VoiceStart(sessionID: Array(0..<16), frameMs: 20)),
            .voiceStart(try VoiceStart(sessionID: Array(repeating: 0xAB, count: 16), frameMs: 10)),
            .voiceStop,
            .voiceReport(lossPercent: 0),
            .voiceReport(lossPercent: 100),
            .presence(secret: (0..<32).map { UInt8($0) }),
            .goodbye(.shuttingDown),
            .goodbye(.protocolError),
            .goodbye(GoodbyeReason(rawValue: 77)),
            .voice(try VoiceFrame(seq: 0, timestamp: 0, payload: [])),
            .voice(try VoiceFrame(seq: 1, timestamp: .max, payload: Array(repeating: 0x5A, count: 80))),
            .voice(try VoiceFrame(seq: .max, timestamp: 960, payload: (0..<1275).map { UInt8(truncatingIfNeeded: $0) })),
            .relayedVoice(try RelayedVoiceFrame(source: source(1), seq: 1, timestamp: 0, payload: [])),
            .relayedVoice(try RelayedVoiceFrame(source: source(255), seq: .max, timestamp: .max, payload: Array(repeating: 0x5A, count: 1275))),
            .participants([]),
            .participants([try participant(3, name: "Bob’s phone 📱", speaking: true), try participant(7, peer: 2, name: "", frameMs: 10)]),
            .relayReport(try RelayReport(source: source(2), lossPercent: 0, direct: true)),
            .relayReport(try RelayReport(source: source(9), lossPercent: 100, direct: false)),
        ]
    }

    private func decodeStream(_ frames: [[UInt8]]) throws -> [Frame] {
        var decoder = FrameDecoder()
        decoder.append(Preamble.bytes)
        var decoded: [Frame] = []
        for bytes in frames {
            decoder.append(bytes)
            while let frame = try decoder.next() { decoded.append(frame) }
        }
        XCTAssertEqual(decoder.bufferedByteCount, 0)
        return decoded
    }

    private func helloBody(name: [UInt8]) -> [UInt8] {
        [0x01] + [UInt8](repeating: 0xAA, count: 16) + [0, 0, 0, 3] + [0, 1] + [0, 2]
            + [UInt8(name.count >> 8), UInt8(name.count & 0xFF)] + name
    }

    private func textBody(seq: UInt64, text: [UInt8]) -> [UInt8] {
        [0x02] + be64(seq) + be64(0) + [UInt8](repeating: 0x11, count: 16) + be64(1_700_000_000_000) + text
    }

    private func be64(_ value: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    private func randomBytes(_ random: inout SplitMix64, count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    /// Checks that a body fails to decode, both alone and through the stream decoder.
    private func assertDecodeFails(_ body: [UInt8], _ expected: WireError, line: UInt = #line) {
        assertThrows(expected, line: line) { try Frame(body: body) }
        guard !body.isEmpty, body.count <= Wire.maxFrameBodyBytes else { return }
        var decoder = FrameDecoder()
        decoder.append(Preamble.bytes + Wire.lengthPrefixed(body))
        assertThrows(expected, line: line) { try decoder.next() }
    }
}

extension WireTests {
    func testPairingDecisionIsZeroOrOne() {
        XCTAssertEqual(try Frame(body: [0x06, 0x01]), .pairing(.accept))
        XCTAssertEqual(try Frame(body: [0x06, 0x00]), .pairing(.refuse))
        XCTAssertEqual(try Frame(body: [0x06, 0x02]), .pairing(.asking))
        XCTAssertEqual(try Frame(body: [0x06, 0x03]), .pairing(.known))
        XCTAssertEqual(Frame.pairing(.accept).encoded(), [0, 0, 0, 2, 0x06, 0x01])
        XCTAssertThrowsError(try Frame(body: [0x06, 0x04])) { XCTAssertEqual($0 as? WireError, .invalidPairingDecision(4)) }
        XCTAssertThrowsError(try Frame(body: [0x06])) { XCTAssertEqual($0 as? WireError, .frameTooShort(.pairing, bodyBytes: 1, requiredBytes: 2)) }
        XCTAssertThrowsError(try Frame(body: [0x06, 0x01, 0x00])) { XCTAssertEqual($0 as? WireError, .trailingBytes(.pairing, count: 1)) }
    }

    func testDecoderBodyLimitCanBeLowered() {
        var decoder = FrameDecoder(expectingPreamble: false)
        decoder.maxBodyBytes = 1024
        decoder.append([0x00, 0x00, 0x04, 0x01])  // 1025, refused before the body arrives
        XCTAssertThrowsError(try decoder.nextBody()) { XCTAssertEqual($0 as? WireError, .frameTooLarge(bodyBytes: 1025)) }
    }
}

extension WireTests {
    func testTextPreviousSequenceMustComeBefore() throws {
        XCTAssertThrowsError(try TextFrame(seq: 5, previousSeq: 5, messageID: .random(), sentAtMs: 0, text: "x")) {
            XCTAssertEqual($0 as? WireError, .previousSequenceNotBefore(seq: 5, previous: 5))
        }
        let frame = Frame.text(try TextFrame(seq: 9, previousSeq: 4, messageID: .random(), sentAtMs: 0, text: "x"))
        XCTAssertEqual(try Frame(body: frame.encodedBody()), frame)
        var body = frame.encodedBody()
        body[9 + 7] = 9  // previous seq = 9 = seq
        XCTAssertThrowsError(try Frame(body: body)) { XCTAssertEqual($0 as? WireError, .previousSequenceNotBefore(seq: 9, previous: 9)) }
    }
}

extension WireTests {
    func testVoiceStartLayoutAndLimits() throws {
        let start = try VoiceStart(sessionID: Array(0..<16), frameMs: 10)
        XCTAssertEqual(Frame.voiceStart(start).encodedBody(), [0x07] + Array(0..<16) + [10])
        XCTAssertThrowsError(try Frame(body: [0x07] + Array(0..<16) + [30])) {
            XCTAssertEqual($0 as? WireError, .unsupportedFrameDuration(30))
        }
        XCTAssertThrowsError(try Frame(body: [0x07] + Array(0..<15) + [20]))
        XCTAssertThrowsError(try Frame(body: [0x08, 0x00])) { XCTAssertEqual($0 as? WireError, .trailingBytes(.voiceStop, count: 1)) }
        XCTAssertEqual(try Frame(body: [0x08]), .voiceStop)
    }

    func testVoiceReportLayoutAndLimits() throws {
        XCTAssertEqual(Frame.presence(secret: Array(repeating: 0xAB, count: 32)).encodedBody(), [0x0A] + Array(repeating: 0xAB, count: 32))
        XCTAssertThrowsError(try Frame(body: [0x0A] + Array(repeating: 0, count: 31))) {
            XCTAssertEqual($0 as? WireError, .frameTooShort(.presence, bodyBytes: 32, requiredBytes: 33))
        }
        XCTAssertThrowsError(try Frame(body: [0x0A] + Array(repeating: 0, count: 33))) { XCTAssertEqual($0 as? WireError, .trailingBytes(.presence, count: 1)) }
        XCTAssertEqual(Frame.presence(secret: Array(repeating: 1, count: 32)).description, "PRESENCE", "a secret in a log line")
        XCTAssertEqual(Frame.voiceReport(lossPercent: 7).encodedBody(), [0x09, 7])
        XCTAssertEqual(try Frame(body: [0x09, 100]), .voiceReport(lossPercent: 100))
        for bad: UInt8 in [101, 0xFF] {
            XCTAssertThrowsError(try Frame(body: [0x09, bad])) { XCTAssertEqual($0 as? WireError, .invalidLossPercent(bad)) }
        }
        XCTAssertThrowsError(try Frame(body: [0x09])) {
            XCTAssertEqual($0 as? WireError, .frameTooShort(.voiceReport, bodyBytes: 1, requiredBytes: 2))
        }
        XCTAssertThrowsError(try Frame(body: [0x09, 5, 0])) { XCTAssertEqual($0 as? WireError, .trailingBytes(.voiceReport, count: 1)) }
        XCTAssertEqual(WireError.invalidLossPercent(101).description, "VOICE_REPORT with 101 % loss (at most 100)")
    }
}
