import MumbleProtobuf
import PeerVoiceCore
import XCTest

/// Mumble's control messages through protobuf-c (the `MumbleProtobuf` adapter), on bytes written
/// out by hand from Mumble's src/Mumble.proto: what a server sends is decoded, bounded and checked;
/// what we send is what Mumble's own clients send.
final class MumbleControlCodecTests: XCTestCase {
    private let codec = ProtobufCMumbleCodec()

    /// A protobuf key byte (field numbers below 16).
    private func key(_ field: UInt8, _ wireType: UInt8) -> UInt8 { field << 3 | wireType }

    /// A length-delimited field.
    private func bytes(_ field: UInt8, _ value: [UInt8]) -> [UInt8] {
        precondition(value.count < 0x80)
        return [key(field, 2), UInt8(value.count)] + value
    }

    func testAUserStateDecodesAndANewerServersFieldIsSkipped() throws {
        // session 5, name "bob", user_id 3, channel 2, self_mute true; then an unknown field 40
        // (varint) and the texture (11, bytes) this .proto leaves out.
        let body: [UInt8] = [0x08, 0x05] + bytes(3, Array("bob".utf8)) + [0x20, 0x03, 0x28, 0x02, 0x48, 0x01, 0xC0, 0x02, 0x07]
            + bytes(11, [0xFF, 0xD8])
        XCTAssertEqual(try codec.decode(type: 9, body: body),
                       .userState(MumbleUserState(session: 5, name: "bob", userID: 3, channel: 2, selfMute: true)))
    }

    func testTextMessageTargetsReadPackedOrOneByOne() throws {
        // actor 1, channel_id packed [0, 2], session 7 unpacked, message "hi"
        let body: [UInt8] = [0x08, 0x01, 0x1A, 0x02, 0x00, 0x02, 0x10, 0x07, 0x2A, 0x02, 0x68, 0x69]
        XCTAssertEqual(try codec.decode(type: 11, body: body),
                       .textMessage(MumbleTextMessage(actor: 1, sessions: [7], channels: [0, 2], trees: [], text: "hi")))
        XCTAssertThrowsError(try codec.decode(type: 11, body: [0x08, 0x01])) { error in
            XCTAssertEqual(error as? MumbleProtocolError, .missingField(type: 11, field: 5))
        }
    }

    func testARejectCarriesTheServersReason() throws {
        let body = [key(1, 0), 4] + bytes(2, Array("Invalid server password".utf8))
        XCTAssertEqual(try codec.decode(type: 4, body: body), .reject(.wrongServerPassword, reason: "Invalid server password"))
        // A kind this version does not know still brings the reason.
        XCTAssertEqual(try codec.decode(type: 4, body: [key(1, 0), 42] + bytes(2, Array("no".utf8))), .reject(nil, reason: "no"))
    }

    func testCryptSetupCarriesAKeyAResyncOrARequest() throws {
        let key = [UInt8](0..<16), client = [UInt8](16..<32), server = [UInt8](32..<48)
        let full = bytes(1, key) + bytes(2, client) + bytes(3, server)
        XCTAssertEqual(try codec.decode(type: 15, body: full), .cryptSetup(key: key, clientNonce: client, serverNonce: server))
        // The server's resync: only its nonce; its request for ours: nothing at all.
        XCTAssertEqual(try codec.decode(type: 15, body: bytes(3, server)), .cryptSetup(key: nil, clientNonce: nil, serverNonce: server))
        XCTAssertEqual(try codec.decode(type: 15, body: []), .cryptSetup(key: nil, clientNonce: nil, serverNonce: nil))
        // Our answer carries our encrypt nonce as client_nonce (field 2); our request is empty.
        XCTAssertEqual(codec.frame(.cryptSetup(clientNonce: client)), [0x00, 0x0F, 0x00, 0x00, 0x00, 0x12, 0x12, 0x10] + client)
        XCTAssertEqual(codec.frame(.cryptSetup(clientNonce: nil)), [0x00, 0x0F, 0x00, 0x00, 0x00, 0x00])
        // A 17-byte key is no AES-128 key.
        XCTAssertThrowsError(try codec.decode(type: 15, body: bytes(1, key + [0]))) { error in
            XCTAssertEqual(error as? MumbleProtocolError, .fieldTooLong(type: 15, field: 1, bytes: 17))
        }
    }

    func testHostileBytesAreRefusedNotTrusted() {
        // A string length past the end, an 11-byte varint, a group wire type, field 0.
        for body: [UInt8] in [[0x1A, 0x05, 0x61], [0x08] + Array(repeating: 0xFF, count: 10) + [0x01], [0x0B], [0x00, 0x01]] {
            XCTAssertThrowsError(try codec.decode(type: 9, body: body), "\(body)") { error in
                XCTAssertEqual(error as? MumbleProtocolError, .malformed(type: 9))
            }
        }
        // A UserState without its session cannot name anyone.
        XCTAssertThrowsError(try codec.decode(type: 9, body: bytes(3, [0x61]))) { error in
            XCTAssertEqual(error as? MumbleProtocolError, .missingField(type: 9, field: 1))
        }
        // A body over 1 MiB never reaches protobuf-c.
        let huge = [UInt8](repeating: 0, count: MumbleControlBounds.maxBodyBytes + 1)
        XCTAssertThrowsError(try codec.decode(type: 11, body: huge)) { error in
            XCTAssertEqual(error as? MumbleProtocolError, .messageTooLong(type: 11, bytes: UInt32(huge.count)))
        }
        // Types a room does not use are passed over, whatever their body; UDPTunnel is voice, not protobuf.
        XCTAssertEqual(try codec.decode(type: 24, body: [0xFF]), .ignored(24))
        XCTAssertEqual(try codec.decode(type: 1, body: [0xFF]), .voice([0xFF]))
    }

    func testLongNamesTextsAndTargetListsAreCutToTheirBounds() throws {
        // A 600-byte name of two-byte characters is cut to 512 bytes, between two characters.
        let name = String(repeating: "é", count: 300)
        let longName: [UInt8] = [0x08, 0x01, key(3, 2), 0xD8, 0x04] + Array(name.utf8)
        guard case .userState(let user) = try codec.decode(type: 9, body: longName) else { return XCTFail() }
        XCTAssertEqual(user.name, String(repeating: "é", count: 256))
        // 200 invalid bytes become 200 replacement characters of three bytes each: 170 of them fit.
        let invalid: [UInt8] = [0x08, 0x04, key(3, 2), 0xC8, 0x01] + [UInt8](repeating: 0xFF, count: 200)
        XCTAssertEqual(try codec.decode(type: 7, body: invalid),
                       .channelState(MumbleChannelState(id: 4, parent: nil, name: String(repeating: "\u{FFFD}", count: 170))))
        // A text of 300 KiB is cut to 256 KiB; 100 sessions to 64.
        let text = [UInt8](repeating: 0x61, count: 300 * 1024)
        var body: [UInt8] = (0..<100).flatMap { [key(2, 0), UInt8($0)] }
        body += [key(5, 2), 0x80, 0xE0, 0x12] + text
        guard case .textMessage(let message) = try codec.decode(type: 11, body: body) else { return XCTFail() }
        XCTAssertEqual(message.text.utf8.count, MumbleControlBounds.maxTextBytes)
        XCTAssertEqual(message.sessions, Array(0..<64))
        // A NUL inside a name ends it (protobuf-c hands strings over as C strings).
        XCTAssertEqual(try codec.decode(type: 7, body: [0x08, 0x04] + bytes(3, [0x41, 0x00, 0x42])),
                       .channelState(MumbleChannelState(id: 4, parent: nil, name: "A")))
    }

    func testClientMessagesEncodeAsMumbleProtoSaysAndAPasswordOnlyWhenGiven() throws {
        XCTAssertEqual(codec.frame(.authenticate(username: "ana", password: nil)),
                       [0x00, 0x02, 0x00, 0x00, 0x00, 0x07, 0x0A, 0x03, 0x61, 0x6E, 0x61, 0x28, 0x01])
        XCTAssertEqual(codec.encode(.authenticate(username: "ana", password: "pw")).body,
                       bytes(1, Array("ana".utf8)) + bytes(2, Array("pw".utf8)) + [0x28, 0x01])
        XCTAssertEqual(codec.frame(.selfMute(session: 3, muted: true)),
                       [0x00, 0x09, 0x00, 0x00, 0x00, 0x04, 0x08, 0x03, 0x48, 0x01])
        XCTAssertEqual(codec.frame(.joinChannel(session: 3, channel: 7)),
                       [0x00, 0x09, 0x00, 0x00, 0x00, 0x04, 0x08, 0x03, 0x28, 0x07])
        // Registering: user_id 0 for our own session.
        XCTAssertEqual(codec.frame(.register(session: 3)),
                       [0x00, 0x09, 0x00, 0x00, 0x00, 0x04, 0x08, 0x03, 0x20, 0x00])
        XCTAssertEqual(codec.frame(.textMessage(sessions: [], channels: [2], text: "hi")),
                       [0x00, 0x0B, 0x00, 0x00, 0x00, 0x06, 0x18, 0x02, 0x2A, 0x02, 0x68, 0x69])
        XCTAssertEqual(codec.frame(.ping(timestamp: 300)), [0x00, 0x03, 0x00, 0x00, 0x00, 0x03, 0x08, 0xAC, 0x02])
        // Voice goes through the tunnel as it is.
        XCTAssertEqual(codec.frame(.voice([0x80, 0x01])), [0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x80, 0x01])
        XCTAssertEqual(codec.frame(.version(0x01_03_04, release: "r", os: "o", osVersion: "v")),
                       [0x00, 0x00, 0x00, 0x00, 0x00, 0x0D, 0x08, 0x84, 0x86, 0x04] + bytes(2, [0x72]) + bytes(3, [0x6F]) + bytes(4, [0x76]))
    }
}
