import PeerVoiceCore
import XCTest

/// The streams of one link (docs/PROTOCOL.md §13.3-13.6): opening, windows, closing and resets,
/// as tables of exchanges between two multiplexers, A the link's initiator and B its responder.
final class ChannelMultiplexerTests: XCTestCase {
    private let chess = try! ChannelName("org.example.Chess")
    /// Small windows so the tables stay readable: 64 KiB per stream, credit back in 16 KiB steps,
    /// growing to 256 KiB at most.
    private static let limits = ChannelLimits(streamWindowBytes: 65_536, windowUpdateBytes: 16_384,
                                              maxStreamWindowBytes: 262_144, maxStreams: 4)

    /// Two ends of a link and what the last frame meant on arrival.
    private struct Link {
        var a = ChannelMultiplexer(isInitiator: true, limits: ChannelMultiplexerTests.limits)
        var b = ChannelMultiplexer(isInitiator: false, limits: ChannelMultiplexerTests.limits)

        /// A frame from A arrives at B; B's event, and B's automatic reply (which goes back to A).
        @discardableResult
        mutating func toB(_ frame: ChannelFrame?, file: StaticString = #filePath, line: UInt = #line) throws -> ChannelEvent? {
            let frame = try XCTUnwrap(frame, "A had nothing to send", file: file, line: line)
            let (event, reply) = try b.receive(frame, nowUs: 0)
            if let reply { _ = try a.receive(reply, nowUs: 0) }
            return event
        }

        @discardableResult
        mutating func toA(_ frame: ChannelFrame?, file: StaticString = #filePath, line: UInt = #line) throws -> ChannelEvent? {
            let frame = try XCTUnwrap(frame, "B had nothing to send", file: file, line: line)
            let (event, reply) = try a.receive(frame, nowUs: 0)
            if let reply { _ = try b.receive(reply, nowUs: 0) }
            return event
        }

        /// A opens `mode` to `channel` and B's app accepts it; the stream's id.
        mutating func openAccepted(_ channel: ChannelName, _ mode: StreamMode = .stream) throws -> StreamID {
            let (id, open) = try XCTUnwrap(a.open(channel, mode: mode))
            XCTAssertEqual(try toB(open), .openRequested(id, channel, mode))
            XCTAssertEqual(try toA(b.accept(id)), .accepted(id))
            return id
        }
    }

    // MARK: Opening

    func testOpeningAcceptingAndRefusingInEveryOrder() throws {
        let cases: [(name: String, run: (inout Link, ChannelName) throws -> Void)] = [
            ("A's streams are odd and B's even, both may open at once", { link, channel in
                let (a1, openA) = try XCTUnwrap(link.a.open(channel, mode: .stream))
                let (b1, openB) = try XCTUnwrap(link.b.open(channel, mode: .messages))
                XCTAssertEqual([a1.rawValue, b1.rawValue], [1, 2])
                XCTAssertEqual(try link.toB(openA), .openRequested(a1, channel, .stream))
                XCTAssertEqual(try link.toA(openB), .openRequested(b1, channel, .messages))
                XCTAssertEqual(link.a.open(channel, mode: .stream)?.0.rawValue, 3)
                XCTAssertEqual(link.b.open(channel, mode: .stream)?.0.rawValue, 4)
            }),
            ("no data either way before the accept", { link, channel in
                let (id, open) = try XCTUnwrap(link.a.open(channel, mode: .stream))
                XCTAssertEqual(link.a.sendCredit(id), 0)
                try link.toB(open)
                XCTAssertEqual(link.b.sendCredit(id), 0, "an offered stream sends nothing until its app takes it")
                XCTAssertEqual(try link.toA(link.b.accept(id)), .accepted(id))
                XCTAssertEqual(link.a.sendCredit(id), 65_536)
                XCTAssertEqual(link.b.sendCredit(id), 65_536)
            }),
            ("a refusal ends the stream at both ends", { link, channel in
                let (id, open) = try XCTUnwrap(link.a.open(channel, mode: .stream))
                try link.toB(open)
                XCTAssertEqual(try link.toA(link.b.refuse(id, reason: .notRegistered)), .refused(id, .notRegistered))
                XCTAssertFalse(link.a.contains(id))
                XCTAssertFalse(link.b.contains(id))
                XCTAssertNil(link.b.accept(id), "an answer after the refusal is no answer")
            }),
            ("the opener gives up before the answer: the late accept is ignored", { link, channel in
                let (id, open) = try XCTUnwrap(link.a.open(channel, mode: .stream))
                try link.toB(open)
                let reset = link.a.reset(id, reason: .appAborted)
                XCTAssertEqual(reset, .reset(id, .appAborted))
                let accept = link.b.accept(id)
                XCTAssertNil(try link.toA(accept), "crossed on the wire: A forgot the stream")
                XCTAssertEqual(try link.toB(reset), .reset(id, .appAborted))
                XCTAssertFalse(link.b.contains(id))
            }),
            ("an unanswered offer is refused, not reset, when its side gives up", { link, channel in
                let (id, open) = try XCTUnwrap(link.a.open(channel, mode: .stream))
                try link.toB(open)
                XCTAssertEqual(try link.toA(link.b.reset(id, reason: .serviceStopping)), .refused(id, .appDidNotAnswer))
            }),
            ("over the stream limit the receiver refuses on its own", { link, channel in
                for _ in 0..<4 { _ = try link.openAccepted(channel) }
                XCTAssertNil(link.a.open(channel, mode: .stream), "A keeps to the limit itself")
                var b = link.b
                var other = ChannelMultiplexer(isInitiator: true, limits: ChannelMultiplexerTests.limits)
                for _ in 0..<4 { _ = other.open(channel, mode: .stream) }
                // A peer over the limit (one that does not count) is refused without its app being asked.
                let (event, reply) = try b.receive(.open(StreamID(rawValue: 9), mode: .stream, window: 1, datagramPort: 0, channel: channel), nowUs: 0)
                XCTAssertNil(event)
                XCTAssertEqual(reply, .refuse(StreamID(rawValue: 9), .tooManyStreams))
            }),
        ]
        for (name, run) in cases {
            var link = Link()
            XCTAssertNoThrow(try run(&link, chess), name)
        }
    }

    // MARK: Windows

    /// One step on a stream from A to B: A sends, or B's app takes bytes.
    private enum Step {
        case send(Int)
        case take(Int)
    }

    func testWindowsBoundWhatWaitsAndComeBackAsTheAppReads() throws {
        let cases: [(name: String, steps: [Step], credit: Int, buffered: Int, windows: [UInt32])] = [
            ("the whole window may go at once", [.send(65_536)], 0, 65_536, []),
            ("taking less than a step gives nothing back yet", [.send(65_536), .take(16_383)], 0, 49_153, []),
            ("a step's worth comes back in one WINDOW", [.send(65_536), .take(16_384)], 16_384, 49_152, [16_384]),
            ("what was taken is given back together", [.send(40_000), .take(10_000), .take(10_000)], 45_536, 20_000, [20_000]),
            ("a reader that keeps up keeps the sender going",
             [.send(65_536), .take(65_536), .send(65_536), .take(65_536)], 65_536, 0, [65_536, 65_536]),
            ("a stopped reader stops the sender at one window", [.send(65_536), .send(0)], 0, 65_536, []),
        ]
        for (name, steps, credit, buffered, windows) in cases {
            var link = Link()
            let id = try link.openAccepted(chess)
            var sentWindows: [UInt32] = []
            for step in steps {
                switch step {
                case .send(let bytes):
                    var left = bytes
                    while left > 0 {
                        let chunk = min(left, 16_000, link.a.sendCredit(id))
                        guard chunk > 0 else { break }
                        XCTAssertEqual(try link.toB(link.a.data(id, payload: [UInt8](repeating: 1, count: chunk), endOfMessage: false, sentAtUs: 0)),
                                       .data(id, [UInt8](repeating: 1, count: chunk), endOfMessage: false), name)
                        left -= chunk
                    }
                case .take(let bytes):
                    if let window = link.b.delivered(id, bytes: bytes) {
                        guard case .window(_, let increment) = window else { return XCTFail("\(name): \(window)") }
                        sentWindows.append(increment)
                        XCTAssertEqual(try link.toA(window), .creditAvailable(id), name)
                    }
                }
            }
            XCTAssertEqual(link.a.sendCredit(id), credit, "\(name): A's credit")
            XCTAssertEqual(link.b.bufferedBytes(of: id), buffered, "\(name): B's buffer")
            XCTAssertLessThanOrEqual(link.b.bufferedBytes(of: id), Self.limits.streamWindowBytes, name)
            XCTAssertEqual(sentWindows, windows, name)
        }
    }

    func testAWindowTakenWithinAFewRoundTripsDoublesUpToItsLargest() throws {
        // A 40 ms round trip: a window taken within 160 ms held the sender back; one taken slower
        // was the app's pace (or the path's), and stays. The first window's clock starts at 0.
        let fast = [UInt32](repeating: 16_384, count: 7) + [81_920] + [UInt32](repeating: 16_384, count: 7) + [147_456]
            + [UInt32](repeating: 16_384, count: 4)
        let cases: [(name: String, msPerStep: UInt64, windows: [UInt32])] = [
            ("16 KiB every 10 ms: 64 then 128 KiB taken in 40 and 80 ms, doubling to the largest, 256 KiB", 10, fast),
            ("16 KiB every 50 ms: 64 KiB in 200 ms, the window stays", 50, [UInt32](repeating: 16_384, count: 20)),
        ]
        for (name, msPerStep, expected) in cases {
            var link = Link()
            let id = try link.openAccepted(chess)
            var windows: [UInt32] = []
            var nowUs: UInt64 = 1_000_000
            for _ in 0..<20 {
                try link.toB(link.a.data(id, payload: [UInt8](repeating: 0, count: 16_384), endOfMessage: false, sentAtUs: 0))
                nowUs += msPerStep * 1000
                let window = try XCTUnwrap(link.b.delivered(id, bytes: 16_384, nowUs: nowUs, roundTripUs: 40_000), name)
                guard case .window(_, let increment) = window else { return XCTFail(name) }
                windows.append(increment)
                try link.toA(window)
            }
            XCTAssertEqual(windows, expected, name)
            XCTAssertLessThanOrEqual(link.a.sendCredit(id), Self.limits.maxStreamWindowBytes, name)
        }
    }

    func testOneStoppedReaderLeavesTheOtherStreamsOfTheLinkGoing() throws {
        var link = Link()
        let stalled = try link.openAccepted(chess)
        let flowing = try link.openAccepted(chess)
        try link.toB(link.a.data(stalled, payload: [UInt8](repeating: 0, count: 65_536), endOfMessage: false, sentAtUs: 0))
        XCTAssertEqual(link.a.sendCredit(stalled), 0)
        for _ in 0..<10 {
            try link.toB(link.a.data(flowing, payload: [UInt8](repeating: 0, count: 65_536), endOfMessage: false, sentAtUs: 0))
            try link.toA(link.b.delivered(flowing, bytes: 65_536))
        }
        XCTAssertEqual(link.a.sendCredit(flowing), 65_536)
        XCTAssertEqual(link.b.bufferedBytes(of: stalled), 65_536)
        XCTAssertEqual(link.b.receivedDataBytes, 11 * 65_536)
    }

    // MARK: Messages

    func testMessagesKeepTheirBoundariesAcrossFragments() throws {
        var link = Link()
        let id = try link.openAccepted(chess, .messages)
        let first = try link.toB(link.a.data(id, payload: [1, 2], endOfMessage: false, sentAtUs: 0))
        let last = try link.toB(link.a.data(id, payload: [3], endOfMessage: true, sentAtUs: 0))
        XCTAssertEqual(first, .data(id, [1, 2], endOfMessage: false))
        XCTAssertEqual(last, .data(id, [3], endOfMessage: true))
        // A 64 KiB message in fragments is fine; a fragment past it is not.
        XCTAssertNil(link.b.delivered(id, bytes: 3), "3 bytes are less than a step of credit")
        // A 64 KiB message in fragments is fine; a fragment past it is not (with the default, larger window).
        var a = ChannelMultiplexer(isInitiator: true)
        var b = ChannelMultiplexer(isInitiator: false)
        let (big, open) = try XCTUnwrap(a.open(chess, mode: .messages))
        _ = try b.receive(open, nowUs: 0)
        _ = try a.receive(try XCTUnwrap(b.accept(big)), nowUs: 0)
        for _ in 0..<4 { _ = try b.receive(a.data(big, payload: [UInt8](repeating: 0, count: 16_384), endOfMessage: false, sentAtUs: 0), nowUs: 0) }
        XCTAssertThrowsError(try b.receive(.data(big, endOfMessage: true, sentAtUs: 0, payload: [0]), nowUs: 0)) {
            XCTAssertEqual($0 as? ChannelProtocolError, .brokenMessage(big))
        }
    }

    // MARK: Closing

    func testCleanCloseInEachDirectionAndTheStreamIsForgottenOnceBothAreDone() throws {
        var link = Link()
        let id = try link.openAccepted(chess)
        try link.toB(link.a.data(id, payload: [1, 2, 3], endOfMessage: false, sentAtUs: 0))
        XCTAssertEqual(try link.toB(link.a.close(id)), .endOfStream(id), "EOF after every byte sent before it")
        XCTAssertEqual(link.a.sendCredit(id), 0, "nothing goes after CLOSE")
        XCTAssertNil(link.a.close(id), "one CLOSE per direction")
        // B's direction goes on after A's end.
        try link.toA(link.b.data(id, payload: [9], endOfMessage: false, sentAtUs: 0))
        XCTAssertEqual(try link.toA(link.b.close(id)), .endOfStream(id))
        XCTAssertTrue(link.a.contains(id), "A's app has not taken B's byte yet")
        XCTAssertNil(link.a.delivered(id, bytes: 1))
        XCTAssertFalse(link.a.contains(id), "A: both directions closed, nothing left for its app")
        XCTAssertTrue(link.b.contains(id), "B still holds 3 bytes for its app")
        XCTAssertNil(link.b.delivered(id, bytes: 3), "no credit after the peer's end")
        XCTAssertFalse(link.b.contains(id))
    }

    // MARK: The peer breaking the rules

    func testFramesACorrectPeerNeverSendsEndTheLink() throws {
        let cases: [(name: String, setup: (inout Link) throws -> StreamID, frame: (StreamID) -> ChannelFrame, error: (StreamID) -> ChannelProtocolError)] = [
            ("OPEN with the receiver's own parity", { _ in StreamID(rawValue: 2) },
             { .open($0, mode: .stream, window: 1, datagramPort: 0, channel: self.chess) }, { .invalidOpen($0) }),
            ("OPEN reusing a number", { link in try link.openAccepted(self.chess) },
             { .open($0, mode: .stream, window: 1, datagramPort: 0, channel: self.chess) }, { .invalidOpen($0) }),
            ("DATA on a stream never opened", { _ in StreamID(rawValue: 7) },
             { .data($0, endOfMessage: false, sentAtUs: 0, payload: [1]) }, { .unknownStream(.data, $0) }),
            ("DATA beyond the window", { link in try link.openAccepted(self.chess) },
             { .data($0, endOfMessage: false, sentAtUs: 0, payload: [UInt8](repeating: 0, count: 65_537)) },
             { .windowExceeded($0, bytes: 65_537, window: 65_536) }),
            ("DATA before the receiver accepted", { link in
                let (id, open) = try XCTUnwrap(link.a.open(self.chess, mode: .stream))
                try link.toB(open)
                return id
            }, { .data($0, endOfMessage: false, sentAtUs: 0, payload: [1]) }, { .unexpected(.data, $0) }),
            ("DATA after CLOSE", { link in
                let id = try link.openAccepted(self.chess)
                try link.toB(link.a.close(id))
                return id
            }, { .data($0, endOfMessage: false, sentAtUs: 0, payload: [1]) }, { .unexpected(.data, $0) }),
            ("DATA on a datagram stream", { link in try link.openAccepted(self.chess, .datagrams) },
             { .data($0, endOfMessage: false, sentAtUs: 0, payload: [1]) }, { .unexpected(.data, $0) }),
            ("DATAGRAM on a byte stream", { link in try link.openAccepted(self.chess) },
             { .datagram($0, payload: [1]) }, { .unexpected(.datagram, $0) }),
            ("an end of message on a byte stream", { link in try link.openAccepted(self.chess) },
             { .data($0, endOfMessage: true, sentAtUs: 0, payload: [1]) }, { .endOfMessageOnByteStream($0) }),
            ("CLOSE in the middle of a message", { link in
                let id = try link.openAccepted(self.chess, .messages)
                try link.toB(link.a.data(id, payload: [1], endOfMessage: false, sentAtUs: 0))
                return id
            }, { .close($0) }, { .brokenMessage($0) }),
            ("a second CLOSE", { link in
                let id = try link.openAccepted(self.chess)
                try link.toB(link.a.close(id))
                return id
            }, { .close($0) }, { .unexpected(.close, $0) }),
            ("WINDOW over 2^31 - 1", { link in try link.openAccepted(self.chess) },
             { .window($0, increment: ChannelWire.maxWindowBytes) }, { .windowOverflow($0) }),
            ("ACCEPT of a stream that was not opening", { link in try link.openAccepted(self.chess) },
             { .accept($0, window: 1, datagramPort: 0) }, { .unexpected(.accept, $0) }),
        ]
        for (name, setup, frame, error) in cases {
            var link = Link()
            let id = try setup(&link)
            XCTAssertThrowsError(try link.b.receive(frame(id), nowUs: 0), name) {
                XCTAssertEqual($0 as? ChannelProtocolError, error(id), name)
            }
        }
    }

    func testLateFramesForAStreamThisSideResetAreIgnored() throws {
        var link = Link()
        let id = try link.openAccepted(chess)
        let reset = link.b.reset(id, reason: .appAborted)
        // What A sent before B's RESET reached it: none of it is an error at B.
        let late: [ChannelFrame] = [.data(id, endOfMessage: false, sentAtUs: 0, payload: [1]), .window(id, increment: 5), .close(id)]
        for frame in late { XCTAssertNil(try link.toB(frame), "\(frame)") }
        XCTAssertEqual(link.b.receivedDataBytes, 1, "late DATA still counts for FEEDBACK")
        XCTAssertEqual(try link.toA(reset), .reset(id, .appAborted))
        XCTAssertNil(try link.toA(.reset(id, .appAborted)), "a second RESET crossing the first")
    }

    // MARK: Feedback

    func testFeedbackReportsTheSmallestDelaySampleOfEachBatch() throws {
        var b = ChannelMultiplexer(isInitiator: false, limits: Self.limits)
        var a = ChannelMultiplexer(isInitiator: true, limits: Self.limits)
        let (id, open) = try XCTUnwrap(a.open(chess, mode: .stream))
        _ = try b.receive(open, nowUs: 0)
        _ = try a.receive(try XCTUnwrap(b.accept(id)), nowUs: 0)
        XCTAssertNil(b.takeFeedback(), "nothing received, nothing to report")
        for (sent, now) in [(UInt32(100), UInt32(5_100)), (200, 5_150), (300, 5_600)] {
            _ = try b.receive(a.data(id, payload: [0, 0], endOfMessage: false, sentAtUs: sent), nowUs: now)
        }
        XCTAssertEqual(b.takeFeedback(), .feedback(receivedBytes: 6, delayUs: 4_950))
        XCTAssertNil(b.takeFeedback())
        // Across the wrap of either clock.
        _ = try b.receive(a.data(id, payload: [0], endOfMessage: false, sentAtUs: UInt32.max - 10), nowUs: 20)
        XCTAssertEqual(b.takeFeedback(), .feedback(receivedBytes: 7, delayUs: 31))
        XCTAssertEqual(a.sentDataBytes, 7)
    }
}
