import PeerVoiceCore
import XCTest

/// The channel frames' bytes (docs/PROTOCOL.md §13.2) and the channel name rules (§13.1).
final class ChannelFrameTests: XCTestCase {
    private let chess = try! ChannelName("org.example.Chess")

    func testEveryFrameHasTheDocumentedBytesAndDecodesToItself() throws {
        let cases: [(ChannelFrame, [UInt8])] = [
            (.open(StreamID(rawValue: 1), mode: .messages, window: 0x40000, datagramPort: 0, channel: try ChannelName("a.b")),
             [0x30, 0, 0, 0, 1, 2, 0, 4, 0, 0, 0, 0, 3, 0x61, 0x2E, 0x62]),
            (.open(StreamID(rawValue: 3), mode: .datagrams, window: 0, datagramPort: 47801, channel: try ChannelName("a.b")),
             [0x30, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0xBA, 0xB9, 3, 0x61, 0x2E, 0x62]),
            (.accept(StreamID(rawValue: 2), window: 0x40000, datagramPort: 0), [0x31, 0, 0, 0, 2, 0, 4, 0, 0, 0, 0]),
            (.accept(StreamID(rawValue: 4), window: 0, datagramPort: 1), [0x31, 0, 0, 0, 4, 0, 0, 0, 0, 0, 1]),
            (.refuse(StreamID(rawValue: 3), .notRegistered), [0x32, 0, 0, 0, 3, 1]),
            (.data(StreamID(rawValue: 5), endOfMessage: true, sentAtUs: 0x01020304, payload: [0xAA, 0xBB]),
             [0x33, 0, 0, 0, 5, 1, 1, 2, 3, 4, 0xAA, 0xBB]),
            (.data(StreamID(rawValue: 5), endOfMessage: false, sentAtUs: 0, payload: [7]), [0x33, 0, 0, 0, 5, 0, 0, 0, 0, 0, 7]),
            (.window(StreamID(rawValue: 6), increment: 65536), [0x34, 0, 0, 0, 6, 0, 1, 0, 0]),
            (.close(StreamID(rawValue: 7)), [0x35, 0, 0, 0, 7]),
            (.reset(StreamID(rawValue: 8), .appAborted), [0x36, 0, 0, 0, 8, 1]),
            (.datagram(StreamID(rawValue: 9), payload: [1, 2, 3]), [0x37, 0, 0, 0, 9, 1, 2, 3]),
            (.feedback(receivedBytes: 0x0102, delayUs: 0xFFFF_FFFF), [0x38, 0, 0, 0, 0, 0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFF]),
        ]
        for (frame, bytes) in cases {
            XCTAssertEqual(frame.encodedBody(), bytes, "\(frame)")
            XCTAssertEqual(frame.bodyByteCount, bytes.count, "\(frame)")
            XCTAssertEqual(try ChannelFrame(body: bytes), frame)
            XCTAssertTrue(ChannelFrame.isChannelFrame(bytes))
        }
    }

    func testMalformedBodiesAreRejectedInTheDocumentedOrder() {
        let longName = [UInt8](repeating: 0x61, count: 255)
        let cases: [(String, [UInt8], ChannelFrameError)] = [
            ("empty", [], .emptyBody),
            ("a type this version does not know", [0x3F], .unknownType(0x3F)),
            ("OPEN too short", [0x30, 0, 0, 0, 1, 1], .tooShort(.open, bodyBytes: 6, requiredBytes: 13)),
            ("OPEN stream 0", [0x30, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3] + Array("a.b".utf8), .zeroStream(.open)),
            ("OPEN unknown mode", [0x30, 0, 0, 0, 1, 4, 0, 0, 0, 0, 0, 0, 3] + Array("a.b".utf8), .unknownMode(4)),
            ("OPEN window over 2^31-1", [0x30, 0, 0, 0, 1, 1, 0x80, 0, 0, 0, 0, 0, 3] + Array("a.b".utf8), .windowTooLarge(0x8000_0000)),
            ("OPEN name cut short", [0x30, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 4] + Array("a.b".utf8), .tooShort(.open, bodyBytes: 16, requiredBytes: 17)),
            ("OPEN bytes after the name", [0x30, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 3] + Array("a.bc".utf8), .trailingBytes(.open, count: 1)),
            ("OPEN name without a dot", [0x30, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 3] + Array("abc".utf8), .invalidChannelName(.noDot)),
            ("OPEN name too short", [0x30, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 2] + Array("a.".utf8), .invalidChannelName(.tooShort(bytes: 2))),
            ("OPEN name with a space", [0x30, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 3] + Array("a b".utf8), .invalidChannelName(.invalidByte(0x20))),
            ("OPEN 255-byte name without a dot", [0x30, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 255] + longName, .invalidChannelName(.noDot)),
            ("ACCEPT trailing", [0x31, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 9], .trailingBytes(.accept, count: 1)),
            ("REFUSE short", [0x32, 0, 0, 0, 2], .tooShort(.refuse, bodyBytes: 5, requiredBytes: 6)),
            ("DATA without payload", [0x33, 0, 0, 0, 1, 0, 0, 0, 0, 0], .emptyPayload(.data)),
            ("DATA reserved flag", [0x33, 0, 0, 0, 1, 2, 0, 0, 0, 0, 1], .reservedFlags(2)),
            ("DATA over 65536 bytes", [0x33, 0, 0, 0, 1, 0, 0, 0, 0, 0] + [UInt8](repeating: 1, count: 65537),
             .payloadTooLong(.data, bytes: 65537)),
            ("WINDOW of 0", [0x34, 0, 0, 0, 1, 0, 0, 0, 0], .zeroWindowIncrement),
            ("WINDOW over 2^31-1", [0x34, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF], .windowTooLarge(0xFFFF_FFFF)),
            ("CLOSE stream 0", [0x35, 0, 0, 0, 0], .zeroStream(.close)),
            ("RESET trailing", [0x36, 0, 0, 0, 1, 0, 0], .trailingBytes(.reset, count: 1)),
            ("DATAGRAM empty", [0x37, 0, 0, 0, 1], .emptyPayload(.datagram)),
            ("DATAGRAM over 1200 bytes", [0x37, 0, 0, 0, 1] + [UInt8](repeating: 0, count: 1201), .payloadTooLong(.datagram, bytes: 1201)),
            ("FEEDBACK short", [0x38, 0, 0], .tooShort(.feedback, bodyBytes: 3, requiredBytes: 13)),
        ]
        for (name, body, expected) in cases {
            XCTAssertThrowsError(try ChannelFrame(body: body), name) { error in
                XCTAssertEqual(error as? ChannelFrameError, expected, name)
            }
        }
    }

    func testLimitsAreInclusive() throws {
        let message = [UInt8](repeating: 0x5A, count: ChannelWire.maxDataBytes)
        let data = ChannelFrame.data(StreamID(rawValue: 1), endOfMessage: true, sentAtUs: 1, payload: message)
        XCTAssertEqual(try ChannelFrame(body: data.encodedBody()), data)
        let datagram = ChannelFrame.datagram(StreamID(rawValue: 1), payload: [UInt8](repeating: 1, count: ChannelWire.maxDatagramBytes))
        XCTAssertEqual(try ChannelFrame(body: datagram.encodedBody()), datagram)
        // The largest DATA, sealed, fits a link frame with room to spare.
        XCTAssertLessThanOrEqual(data.bodyByteCount + SealedRecord.overheadBytes, Wire.maxFrameBodyBytes)
        let name = try ChannelName(String(repeating: "a", count: 254) + ".")
        let open = ChannelFrame.open(StreamID(rawValue: 3), mode: .stream, window: ChannelWire.maxWindowBytes, datagramPort: 0, channel: name)
        XCTAssertEqual(try ChannelFrame(body: open.encodedBody()), open)
    }

    func testChannelNames() {
        let valid = ["org.example.Chess", "a.b", "x-y_z.0", ".ab", String(repeating: "b", count: 254) + "."]
        for name in valid { XCTAssertNoThrow(try ChannelName(name), name) }
        let invalid: [(String, ChannelNameError)] = [
            ("ab", .tooShort(bytes: 2)), ("abc", .noDot), ("org.exämple", .invalidByte(0xC3)),
            ("org/example", .invalidByte(0x2F)), (String(repeating: "a.", count: 128), .tooLong(bytes: 256)),
        ]
        for (name, error) in invalid {
            XCTAssertThrowsError(try ChannelName(name), name) { XCTAssertEqual($0 as? ChannelNameError, error, name) }
        }
        XCTAssertTrue(ChannelNameError.noDot.description.contains("org.example.Chess"), "the error shows how to write one")
        XCTAssertEqual(StreamMode(name: "messages"), .messages)
        XCTAssertNil(StreamMode(name: "Stream"))
    }
}
