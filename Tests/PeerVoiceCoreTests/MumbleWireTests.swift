import PeerVoiceCore
import XCTest

/// Mumble's control messages, voice packets and room addresses (PeerVoiceCore/Rooms), on bytes
/// written out by hand from Mumble.proto and docs/dev/network-protocol.
final class MumbleWireTests: XCTestCase {
    private func decodeAll(_ bytes: [UInt8]) throws -> [MumbleServerMessage] {
        var decoder = MumbleFrameDecoder()
        decoder.append(bytes)
        var out: [MumbleServerMessage] = []
        while let (type, body) = try decoder.next() { out.append(try MumbleServerMessage(type: type, body: body)) }
        return out
    }

    func testAUserStateDecodesFromItsProtobufAndSplitAcrossReads() throws {
        // session 5, name "bob", channel 2, self_mute true; then an unknown field 40 (varint) a newer server might add.
        let body: [UInt8] = [0x08, 0x05, 0x1A, 0x03, 0x62, 0x6F, 0x62, 0x28, 0x02, 0x48, 0x01, 0xC0, 0x02, 0x07]
        let frame: [UInt8] = [0x00, 0x09, 0x00, 0x00, 0x00, UInt8(body.count)] + body
        var decoder = MumbleFrameDecoder()
        decoder.append(frame.prefix(4))
        XCTAssertNil(try decoder.next())
        decoder.append(frame.dropFirst(4).prefix(5))
        XCTAssertNil(try decoder.next())
        decoder.append(frame.dropFirst(9))
        let (type, decoded) = try XCTUnwrap(try decoder.next())
        XCTAssertEqual(type, 9)
        XCTAssertEqual(try MumbleServerMessage(type: type, body: decoded),
                       .userState(MumbleUserState(session: 5, name: "bob", channel: 2, selfMute: true)))
        XCTAssertNil(try decoder.next())
    }

    func testTextMessageTargetsReadPackedOrOneByOne() throws {
        // actor 1, channel_id packed [0, 2], session 7 unpacked, message "hi"
        let body: [UInt8] = [0x08, 0x01, 0x1A, 0x02, 0x00, 0x02, 0x10, 0x07, 0x2A, 0x02, 0x68, 0x69]
        XCTAssertEqual(try MumbleServerMessage(type: 11, body: body),
                       .textMessage(MumbleTextMessage(actor: 1, sessions: [7], channels: [0, 2], trees: [], text: "hi")))
        XCTAssertThrowsError(try MumbleServerMessage(type: 11, body: [0x08, 0x01])) { error in
            XCTAssertEqual(error as? MumbleProtocolError, .missingField(type: 11, field: 5))
        }
    }

    func testARejectCarriesTheServersReason() throws {
        var body = ProtobufWriter()
        body.uint(1, 4)
        body.string(2, "Invalid server password")
        XCTAssertEqual(try decodeAll(MumbleFrameDecoder.frame(.reject, body: body.bytes)),
                       [.reject(.wrongServerPassword, reason: "Invalid server password")])
    }

    func testHostileBytesAreRefusedNotTrusted() {
        // A length field beyond 8 MiB is refused from the prefix alone, and the decoder stays failed.
        var decoder = MumbleFrameDecoder()
        decoder.append([0x00, 0x07, 0x01, 0x00, 0x00, 0x00])
        XCTAssertThrowsError(try decoder.next())
        decoder.append([0x00, 0x03, 0x00, 0x00, 0x00, 0x00])
        XCTAssertThrowsError(try decoder.next())
        // A string length past the end, an 11-byte varint, a group wire type, field 0.
        for body: [UInt8] in [[0x1A, 0x05, 0x61], [0x08] + Array(repeating: 0xFF, count: 10) + [0x01], [0x0B], [0x00, 0x01]] {
            XCTAssertThrowsError(try MumbleServerMessage(type: 9, body: body), "\(body)")
        }
        // A UserState without its session cannot name anyone.
        XCTAssertThrowsError(try MumbleServerMessage(type: 9, body: [0x1A, 0x01, 0x61]))
        // Types a room does not use are passed over, whatever their body.
        XCTAssertEqual(try MumbleServerMessage(type: 24, body: [0xFF]), .ignored(24))
    }

    func testClientMessagesEncodeAsMumbleProtoSaysAndAPasswordOnlyWhenGiven() throws {
        XCTAssertEqual(MumbleClientMessage.authenticate(username: "ana", password: nil).frame,
                       [0x00, 0x02, 0x00, 0x00, 0x00, 0x07, 0x0A, 0x03, 0x61, 0x6E, 0x61, 0x28, 0x01])
        XCTAssertEqual(MumbleClientMessage.selfMute(session: 3, muted: true).frame,
                       [0x00, 0x09, 0x00, 0x00, 0x00, 0x04, 0x08, 0x03, 0x48, 0x01])
        XCTAssertEqual(MumbleClientMessage.textMessage(sessions: [], channels: [2], text: "hi").frame,
                       [0x00, 0x0B, 0x00, 0x00, 0x00, 0x06, 0x18, 0x02, 0x2A, 0x02, 0x68, 0x69])
        XCTAssertEqual(MumbleClientMessage.version(0x01_03_04, release: "r", os: "o", osVersion: "v").frame.prefix(10),
                       [0x00, 0x00, 0x00, 0x00, 0x00, 0x0D, 0x08, 0x84, 0x86, 0x04])
    }

    func testCryptSetupCarriesAKeyAResyncOrARequest() throws {
        let key = [UInt8](0..<16), client = [UInt8](16..<32), server = [UInt8](32..<48)
        var body: [UInt8] = []
        for (field, value) in [(UInt8(1), key), (2, client), (3, server)] { body += [field << 3 | 2, 16] + value }
        XCTAssertEqual(try MumbleServerMessage(type: 15, body: body), .cryptSetup(key: key, clientNonce: client, serverNonce: server))
        // The server's resync: only its nonce; its request for ours: nothing at all.
        XCTAssertEqual(try MumbleServerMessage(type: 15, body: [0x1A, 16] + server), .cryptSetup(key: nil, clientNonce: nil, serverNonce: server))
        XCTAssertEqual(try MumbleServerMessage(type: 15, body: []), .cryptSetup(key: nil, clientNonce: nil, serverNonce: nil))
        // Our answer carries our encrypt nonce as client_nonce (field 2); our request is empty.
        XCTAssertEqual(MumbleClientMessage.cryptSetup(clientNonce: client).frame, [0x00, 0x0F, 0x00, 0x00, 0x00, 0x12, 0x12, 0x10] + client)
        XCTAssertEqual(MumbleClientMessage.cryptSetup(clientNonce: nil).frame, [0x00, 0x0F, 0x00, 0x00, 0x00, 0x00])
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
