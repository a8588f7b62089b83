import PeerVoiceCore
import XCTest

/// Mumble's control framing, voice packets and room addresses (PeerVoiceCore/Rooms), on bytes
/// written out by hand from docs/dev/network-protocol. The protobuf bodies: MumbleProtobufTests.
final class MumbleWireTests: XCTestCase {
    func testTheStreamSplitsIntoMessagesWhereverTheReadsEnd() throws {
        // A UserState body (its bytes are the codec's concern, MumbleProtobufTests), split across three reads.
        let body: [UInt8] = [0x08, 0x05, 0x1A, 0x03, 0x62, 0x6F, 0x62, 0x28, 0x02, 0x48, 0x01, 0xC0, 0x02, 0x07]
        let frame = MumbleFrameDecoder.frame(.userState, body: body)
        XCTAssertEqual(frame.prefix(6), [0x00, 0x09, 0x00, 0x00, 0x00, UInt8(body.count)])
        var decoder = MumbleFrameDecoder()
        decoder.append(frame.prefix(4))
        XCTAssertNil(try decoder.next())
        decoder.append(frame.dropFirst(4).prefix(5))
        XCTAssertNil(try decoder.next())
        decoder.append(frame.dropFirst(9) + MumbleFrameDecoder.frame(.ping, body: []))
        let (type, decoded) = try XCTUnwrap(try decoder.next())
        XCTAssertEqual(type, 9)
        XCTAssertEqual(decoded, body)
        XCTAssertEqual(try decoder.next()?.type, 3)
        XCTAssertNil(try decoder.next())
    }

    func testALengthBeyondEightMebibytesIsRefusedFromThePrefixAndTheDecoderStaysFailed() {
        var decoder = MumbleFrameDecoder()
        decoder.append([0x00, 0x07, 0x01, 0x00, 0x00, 0x00])
        XCTAssertThrowsError(try decoder.next()) { error in
            XCTAssertEqual(error as? MumbleProtocolError, .messageTooLong(type: 7, bytes: 0x0100_0000))
        }
        decoder.append([0x00, 0x03, 0x00, 0x00, 0x00, 0x00])
        XCTAssertThrowsError(try decoder.next())
    }

    func testAVoicePacketFromTheServerNamesTalkerSequenceAndEnd() throws {
        // Opus, target 0, session 3, sequence 300 (two-byte varint), length 2 with the end bit (0x2002).
        let bytes: [UInt8] = [0x80, 0x03, 0x81, 0x2C, 0xA0, 0x02, 0xAA, 0xBB, 0x01, 0x02]
        let packet = try XCTUnwrap(try MumbleVoicePacket.fromServer(bytes[...]))
        XCTAssertEqual(packet.session, 3)
        XCTAssertEqual(packet.sequence, 300)
        XCTAssertEqual(Array(packet.opus), [0xAA, 0xBB])
        XCTAssertTrue(packet.isLast)
        XCTAssertEqual(packet.fromServer, Array(bytes.prefix(8)))
        // What we send has no session; the server adds it.
        XCTAssertEqual(MumbleVoicePacket(sequence: 300, opus: [0xAA, 0xBB], isLast: true).fromClient,
                       [0x80, 0x81, 0x2C, 0xA0, 0x02, 0xAA, 0xBB])
        // CELT (type 3) is not ours to play; a frame cut short or a negative session is refused.
        XCTAssertNil(try MumbleVoicePacket.fromServer([0x60, 0x01, 0x01, 0x00][...]))
        XCTAssertThrowsError(try MumbleVoicePacket.fromServer([0x80, 0x03, 0x01, 0x05, 0xAA][...]))
        XCTAssertThrowsError(try MumbleVoicePacket.fromServer([0x80, 0xFC, 0x01, 0x00][...]))
    }

    func testMumbleVarintsRoundTripAtEveryWidth() throws {
        for value: UInt64 in [0, 0x7F, 0x80, 0x3FFF, 0x4000, 0x1F_FFFF, 0x20_0000, 0xFFF_FFFF, 0x1000_0000, 0xFFFF_FFFF, 1 << 40] {
            let packet = MumbleVoicePacket(session: 1, sequence: value, opus: [], isLast: false)
            XCTAssertEqual(try MumbleVoicePacket.fromServer(packet.fromServer[...])?.sequence, value)
        }
    }

    func testRoomAddressesParseWithUserPortAndChannelPath() throws {
        let url = try MumbleURL(parsing: "mumble://ana@example.org:12345/Games/Room%201?version=1.2.0")
        XCTAssertEqual(url.user, "ana")
        XCTAssertEqual(url.host, "example.org")
        XCTAssertEqual(url.port, 12345)
        XCTAssertEqual(url.channelPath, ["Games", "Room 1"])
        XCTAssertEqual(url.description, "mumble://ana@example.org:12345/Games/Room%201")
        let plain = try MumbleURL(parsing: "mumble://[::1]")
        XCTAssertEqual(plain.host, "::1")
        XCTAssertEqual(plain.port, 64738)
        XCTAssertEqual(plain.channelPath, [])
        XCTAssertThrowsError(try MumbleURL(parsing: "http://example.org"))
        XCTAssertThrowsError(try MumbleURL(parsing: "mumble://example.org:0"))
        XCTAssertThrowsError(try MumbleURL(parsing: "mumble://:64738/x"))
        XCTAssertThrowsError(try MumbleURL(parsing: "mumble://h/%zz"))
    }

    func testTheRoomModelMergesDeltasAndFindsChannelsByPath() {
        var model = MumbleRoomModel()
        _ = model.apply(.channelState(MumbleChannelState(id: 0, parent: nil, name: "Root")))
        _ = model.apply(.channelState(MumbleChannelState(id: 4, parent: 0, name: "Games")))
        _ = model.apply(.channelState(MumbleChannelState(id: 9, parent: 4, name: "Chess")))
        _ = model.apply(.userState(MumbleUserState(session: 1, name: "me", channel: 0)))
        _ = model.apply(.userState(MumbleUserState(session: 2, name: "bob", channel: 9)))
        XCTAssertEqual(model.apply(.serverSync(session: 1, welcome: nil)), .synced)
        XCTAssertEqual(model.channel(atPath: ["Games", "Chess"]), 9)
        XCTAssertNil(model.channel(atPath: ["Chess"]))
        XCTAssertEqual(model.path(of: 9), "/Games/Chess")
        XCTAssertEqual(model.path(of: 0), "/")
        XCTAssertEqual(model.usersInOwnChannel, [])
        _ = model.apply(.userState(MumbleUserState(session: 1, channel: 9)))
        _ = model.apply(.userState(MumbleUserState(session: 2, selfMute: true)))
        XCTAssertEqual(model.usersInOwnChannel.map(\.name), ["bob"])
        XCTAssertEqual(model.usersInOwnChannel.map(\.muted), [true])
        XCTAssertEqual(model.apply(.userRemove(session: 2, reason: nil, ban: false)), .users)
        XCTAssertEqual(model.usersInOwnChannel, [])
        // A parent cycle from a hostile server ends the walk instead of looping.
        _ = model.apply(.channelState(MumbleChannelState(id: 4, parent: 9, name: "Games")))
        XCTAssertFalse(model.path(of: 9).isEmpty)
    }
}

extension MumbleWireTests {
    func testADisplayNameBecomesAUserNameMumblesDefaultRuleAccepts() {
        XCTAssertEqual(MumbleURL.username(from: "Ana's laptop"), "Ana_s_laptop")
        XCTAssertEqual(MumbleURL.username(from: "Zoë-2 (work)"), "Zoë-2_(work)")  // brackets are allowed
        XCTAssertEqual(MumbleURL.username(from: "  "), "PeerVoice")
    }
}

extension MumbleWireTests {
    /// RFC 6716 §3.1: the TOC byte's config gives the frame length, its code how many frames.
    func testAnOpusPacketsDurationComesFromItsTOCByte() {
        func duration(_ bytes: [UInt8]) -> Int? {
            MumbleVoicePacket(sequence: 0, opus: bytes[...], isLast: false).opusDurationMicroseconds
        }
        XCTAssertEqual(duration([0x78]), 20_000)  // hybrid fullband 20 ms, one frame
        XCTAssertEqual(duration([0xFC]), 20_000)  // CELT fullband 20 ms
        XCTAssertEqual(duration([0x08]), 20_000)  // SILK narrowband 20 ms
        XCTAssertEqual(duration([0x00]), 10_000)  // SILK narrowband 10 ms
        XCTAssertEqual(duration([0x18]), 60_000)  // SILK narrowband 60 ms
        XCTAssertEqual(duration([0x79]), 40_000)  // two 20 ms frames
        XCTAssertEqual(duration([0x7B, 0x03]), 60_000)  // code 3: a count of three
        XCTAssertNil(duration([0x7B]))
        XCTAssertNil(duration([]))
    }
}
