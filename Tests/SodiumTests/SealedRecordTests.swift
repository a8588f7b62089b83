import PeerVoiceCore
import Sodium
import XCTest

/// Sealed records and voice keys with real XChaCha20-Poly1305.
final class SealedRecordTests: XCTestCase {
    let crypto = LibSodium()

    private func pair(mode: RecordOpener.Mode = .stream, purpose: RecordPurpose = .link,
                      key: [UInt8]? = nil) -> (RecordSealer, RecordOpener) {
        let key = key ?? crypto.randomBytes(32)
        return (RecordSealer(key: key, direction: .initiatorToResponder, purpose: purpose, crypto: crypto),
                RecordOpener(key: key, direction: .initiatorToResponder, purpose: purpose, mode: mode, crypto: crypto))
    }

    private func assertRejects(_ opener: inout RecordOpener, _ record: [UInt8], _ expected: RecordError,
                               file: StaticString = #filePath, line: UInt = #line) {
        do {
            let plaintext = try opener.open(record)
            XCTFail("accepted \(plaintext.count) bytes; expected \(expected)", file: file, line: line)
        } catch {
            XCTAssertEqual(error, expected, file: file, line: line)
        }
    }

    func testSealingInPlaceMakesTheSameRecordAndAnOpenerTakesItFromASlice() throws {
        let key = crypto.randomBytes(32)
        var sealer = RecordSealer(key: key, direction: .responderToInitiator, purpose: .link, crypto: crypto)
        var inPlace = RecordSealer(key: key, direction: .responderToInitiator, purpose: .link, crypto: crypto)
        var opener = RecordOpener(key: key, direction: .responderToInitiator, purpose: .link, mode: .stream, crypto: crypto)
        for size in [0, 1, 16, 4_000, 65_546] {
            let plaintext = crypto.randomBytes(size)
            let expected = try sealer.seal(plaintext)
            // The plaintext behind 3 bytes of something else and the 8-byte header, room for the tag after it.
            var buffer = [UInt8](repeating: 0xEE, count: 3) + [UInt8](repeating: 0, count: 8) + plaintext + [UInt8](repeating: 0, count: 16)
            try buffer.withUnsafeMutableBytes { try inPlace.sealInPlace(UnsafeMutableRawBufferPointer(rebasing: $0[3...]), plaintextBytes: size) }
            XCTAssertEqual(Array(buffer[3...]), expected, "\(size) bytes")
            XCTAssertEqual(try opener.open(buffer[3...]), plaintext, "opened from a slice of a larger buffer")
        }
        var tampered = try sealer.seal([1, 2, 3])
        tampered[9] ^= 1
        assertRejects(&opener, tampered, .tampered(counter: 5))
    }

    func testRoundTripAndLayout() throws {
        var (sealer, opener) = pair()
        for size in [0, 1, 15, 16, 17, 1000, 65_569] {
            let plaintext = crypto.randomBytes(size)
            let record = try sealer.seal(plaintext)
            XCTAssertEqual(record.count, size + SealedRecord.overheadBytes)
            // At least 15 bytes: a shorter ciphertext equals its plaintext by chance too often
            // (one in 256 for one byte).
            if size >= 15 { XCTAssertNotEqual(Array(record[8..<8 + min(size, 16)]), Array(plaintext.prefix(16)), "encrypted") }
            XCTAssertEqual(try opener.open(record), plaintext)
        }
        XCTAssertEqual(SealedRecord.overheadBytes, 24)
        XCTAssertEqual(opener.acceptedCount, 7)
        XCTAssertEqual(opener.rejections, RecordRejections())
        // The largest v1 body sealed still fits the v1 framing limit.
        XCTAssertLessThanOrEqual(65_569 + SealedRecord.overheadBytes, Wire.maxFrameBodyBytes)
    }

    func testCountersStartAtZeroAndStrictlyIncrease() throws {
        var (sealer, _) = pair()
        for expected in UInt64(0)..<1000 {
            let record = try sealer.seal([1, 2, 3])
            let counter = record.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            XCTAssertEqual(counter, expected)
        }
        XCTAssertEqual(sealer.nextCounter, 1000)
    }

    func testEveryFlippedBitIsTampering() throws {
        var (sealer, _) = pair()
        let key = crypto.randomBytes(32)
        sealer = RecordSealer(key: key, direction: .initiatorToResponder, purpose: .link, crypto: crypto)
        let record = try sealer.seal(Array("twelve bytes".utf8))
        for bit in 0..<(record.count * 8) {
            var forged = record
            forged[bit / 8] ^= 1 << UInt8(bit % 8)
            var opener = RecordOpener(key: key, direction: .initiatorToResponder, purpose: .link, mode: .stream, crypto: crypto)
            let counter = forged.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            assertRejects(&opener, forged, .tampered(counter: counter))
            XCTAssertEqual(opener.rejections.tampered, 1)
            // A forgery does not advance anything: the real record still opens.
            XCTAssertEqual(try opener.open(record), Array("twelve bytes".utf8))
        }
    }

    func testTruncatedRecords() throws {
        var (sealer, opener) = pair()
        let record = try sealer.seal([])
        XCTAssertEqual(record.count, 24)
        assertRejects(&opener, Array(record.prefix(23)), .truncated(bytes: 23))
        assertRejects(&opener, [], .truncated(bytes: 0))
        let longer = try sealer.seal([1, 2, 3, 4])
        assertRejects(&opener, Array(longer.dropLast()), .tampered(counter: 1))
        XCTAssertEqual(opener.rejections.truncated, 2)
        XCTAssertEqual(opener.rejections.tampered, 1)
    }

    func testStreamModeRejectsReplayAndReorderingButToleratesGaps() throws {
        var (sealer, opener) = pair(mode: .stream)
        let records = try (0..<5).map { _ in try sealer.seal([UInt8]("frame".utf8)) }
        XCTAssertNoThrow(try opener.open(records[0]))
        assertRejects(&opener, records[0], .replayed(counter: 0))
        XCTAssertNoThrow(try opener.open(records[2]))  // record 1 dropped: fine
        assertRejects(&opener, records[1], .replayed(counter: 1))  // arriving late: reordered
        XCTAssertNoThrow(try opener.open(records[3]))
        assertRejects(&opener, records[3], .replayed(counter: 3))
        XCTAssertNoThrow(try opener.open(records[4]))
        XCTAssertEqual(opener.rejections.replayed, 3)
        XCTAssertEqual(opener.newestCounter, 4)
    }

    func testDatagramWindow() throws {
        var (sealer, opener) = pair(mode: .datagram(windowSize: 64), purpose: .voice)
        let records = try (0..<200).map { _ in try sealer.seal([0xAA]) }
        XCTAssertNoThrow(try opener.open(records[100]))
        // Out of order within the window: accepted once.
        XCTAssertNoThrow(try opener.open(records[90]))
        assertRejects(&opener, records[90], .replayed(counter: 90))
        assertRejects(&opener, records[100], .replayed(counter: 100))
        // Window edge: 100 - 37 = 63 is inside, 100 - 36 = 64 is not.
        XCTAssertNoThrow(try opener.open(records[37]))
        assertRejects(&opener, records[36], .tooOld(counter: 36, newest: 100))
        // Moving ahead keeps what was seen inside the window.
        XCTAssertNoThrow(try opener.open(records[130]))
        assertRejects(&opener, records[100], .replayed(counter: 100))
        XCTAssertNoThrow(try opener.open(records[101]))
        assertRejects(&opener, records[37], .tooOld(counter: 37, newest: 130))
        // A long jump clears the window.
        XCTAssertNoThrow(try opener.open(records[199]))
        assertRejects(&opener, records[130], .tooOld(counter: 130, newest: 199))
        XCTAssertNoThrow(try opener.open(records[198]))
        XCTAssertEqual(opener.rejections.replayed, 3)
        XCTAssertEqual(opener.rejections.tooOld, 3)
        XCTAssertEqual(opener.rejections.total, 6)
        XCTAssertEqual(opener.acceptedCount, 7)
    }

    func testForgedFutureCounterDoesNotMoveTheWindow() throws {
        let key = crypto.randomBytes(32)
        var (sealer, opener) = pair(mode: .datagram(windowSize: 64), key: key)
        let first = try sealer.seal([1])
        var forged = try sealer.seal([2])
        forged.replaceSubrange(0..<8, with: [0, 0, 0, 0, 0, 1, 0, 0])  // counter 65536
        assertRejects(&opener, forged, .tampered(counter: 65_536))
        XCTAssertEqual(try opener.open(first), [1])
        XCTAssertEqual(opener.newestCounter, 0)
    }

    func testDirectionsAndPurposesNeverShareANonce() throws {
        // Even under one key (which the handshake never produces), the four labels give four
        // different nonces for the same counter, so the same plaintext seals differently and a
        // record does not open in another direction or purpose.
        let key = crypto.randomBytes(32)
        var sealed: [[UInt8]] = []
        for direction in [RecordDirection.initiatorToResponder, .responderToInitiator] {
            for purpose in [RecordPurpose.link, .voice] {
                var sealer = RecordSealer(key: key, direction: direction, purpose: purpose, crypto: crypto)
                sealed.append(try sealer.seal(Array("same plaintext".utf8)))
            }
        }
        XCTAssertEqual(Set(sealed).count, 4)
        XCTAssertEqual(Set(sealed.map { $0.prefix(8) }).count, 1, "all counter 0")
        var reverse = RecordOpener(key: key, direction: .responderToInitiator, purpose: .link, mode: .stream, crypto: crypto)
        assertRejects(&reverse, sealed[0], .tampered(counter: 0))
        var voice = RecordOpener(key: key, direction: .initiatorToResponder, purpose: .voice, mode: .stream, crypto: crypto)
        assertRejects(&voice, sealed[0], .tampered(counter: 0))
    }

    func testRekeyLimit() throws {
        var sealer = RecordSealer(key: crypto.randomBytes(32), direction: .responderToInitiator, purpose: .link,
                                  crypto: crypto, rekeyLimit: 4)
        XCTAssertEqual(RecordSealer.defaultRekeyLimit, 1 << 48)
        XCTAssertFalse(sealer.shouldRekey)
        _ = try sealer.seal([1])
        _ = try sealer.seal([2])
        XCTAssertTrue(sealer.shouldRekey)
        XCTAssertFalse(sealer.needsRekey)
        _ = try sealer.seal([3])
        _ = try sealer.seal([4])
        XCTAssertTrue(sealer.needsRekey)
        XCTAssertThrowsError(try sealer.seal([5])) { XCTAssertEqual($0 as? RecordError, .needsRekey(counter: 4)) }
        XCTAssertEqual(sealer.nextCounter, 4, "a refused seal does not use a counter")
    }

    // MARK: - Through a real handshake

    private func completedLink() throws -> (HandshakeResult, HandshakeResult) {
        let initiator = try Handshake(role: .initiator, identity: .generate(using: crypto), payload: [1], crypto: crypto)
        let responder = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [2], crypto: crypto)
        try responder.readMessage(try initiator.writeMessage())
        try initiator.readMessage(try responder.writeMessage())
        try responder.readMessage(try initiator.writeMessage())
        try initiator.readMessage(try responder.writeMessage())
        try responder.readMessage(try initiator.writeMessage())
        return (try XCTUnwrap(initiator.result), try XCTUnwrap(responder.result))
    }

    func testLinkChannelsBothWays() throws {
        let (i, r) = try completedLink()
        var iSealer = i.makeLinkSealer(.xChaCha20Poly1305), rOpener = r.makeLinkOpener(.xChaCha20Poly1305)
        var rSealer = r.makeLinkSealer(.xChaCha20Poly1305), iOpener = i.makeLinkOpener(.xChaCha20Poly1305)
        let body = Frame.keepalive.encodedBody()
        let toResponder = try iSealer.seal(body)
        let toInitiator = try rSealer.seal(body)
        XCTAssertNotEqual(toResponder, toInitiator)
        XCTAssertEqual(try rOpener.open(toResponder), body)
        XCTAssertEqual(try iOpener.open(toInitiator), body)
        // A record reflected back to its sender does not open.
        assertRejects(&iOpener, toResponder, .tampered(counter: 0))
    }

    func testChannelDatagramKeysArePerLinkAndDirectionAndApartFromEveryOtherKey() throws {
        let (i, r) = try completedLink()
        let iKeys = ChannelDatagramKeys(link: i), rKeys = ChannelDatagramKeys(link: r)
        XCTAssertEqual(iKeys.sendKey, rKeys.receiveKey)
        XCTAssertEqual(iKeys.receiveKey, rKeys.sendKey)
        XCTAssertNotEqual(iKeys.sendKey, iKeys.receiveKey)
        let voice = try i.voiceKeys(localSessionID: VoiceKeys.makeSessionID(crypto: crypto), remoteSessionID: VoiceKeys.makeSessionID(crypto: crypto))
        for other in [i.sendKey, i.receiveKey, i.exporterKey, voice.sendKey, voice.receiveKey] {
            XCTAssertNotEqual(iKeys.sendKey, other)
            XCTAssertNotEqual(iKeys.receiveKey, other)
        }
        var sealer = iKeys.makeSealer(), opener = rKeys.makeOpener()
        let datagram = try sealer.seal(ChannelFrame.datagram(StreamID(rawValue: 1), payload: [UInt8](repeating: 7, count: 1200)).encodedBody())
        XCTAssertEqual(datagram.count, 1205 + 24, "with its 4-byte length prefix, 1233 bytes: unfragmented under a 1500-byte MTU")
        XCTAssertEqual(try ChannelFrame(body: try opener.open(datagram)), .datagram(StreamID(rawValue: 1), payload: [UInt8](repeating: 7, count: 1200)))
        assertRejects(&opener, datagram, .replayed(counter: 0))
        // Reflected back, or opened as a voice record: it does not open.
        var back = iKeys.makeOpener()
        assertRejects(&back, datagram, .tampered(counter: 0))
        XCTAssertNotEqual(ChannelDatagramKeys(link: try completedLink().0).sendKey, iKeys.sendKey, "fresh for every link")
    }

    func testVoiceKeysAreFreshPerSession() throws {
        let (i, r) = try completedLink()
        let iSession = VoiceKeys.makeSessionID(crypto: crypto), rSession = VoiceKeys.makeSessionID(crypto: crypto)
        XCTAssertEqual(iSession.count, 16)
        let iVoice = try i.voiceKeys(localSessionID: iSession, remoteSessionID: rSession)
        let rVoice = try r.voiceKeys(localSessionID: rSession, remoteSessionID: iSession)
        XCTAssertEqual(iVoice.sendKey, rVoice.receiveKey)
        XCTAssertEqual(iVoice.receiveKey, rVoice.sendKey)
        XCTAssertNotEqual(iVoice.sendKey, iVoice.receiveKey)
        for linkKey in [i.sendKey, i.receiveKey, i.exporterKey] {
            XCTAssertNotEqual(iVoice.sendKey, linkKey)
            XCTAssertNotEqual(iVoice.receiveKey, linkKey)
        }

        var sealer = iVoice.makeSealer(), opener = rVoice.makeOpener()
        let packet = try sealer.seal(Array(repeating: 0x55, count: 1288))
        XCTAssertEqual(packet.count, 1288 + 24)
        XCTAssertEqual(try opener.open(packet).count, 1288)

        // A restarted session (new ID) has new keys, and the old session's packets do not open.
        let restarted = try i.voiceKeys(localSessionID: VoiceKeys.makeSessionID(crypto: crypto), remoteSessionID: rSession)
        XCTAssertNotEqual(restarted.sendKey, iVoice.sendKey)
        XCTAssertEqual(restarted.receiveKey, iVoice.receiveKey, "the peer's direction changes only with its own ID")
        var newOpener = try r.voiceKeys(localSessionID: rSession, remoteSessionID: restarted.localSessionID).makeOpener()
        assertRejects(&newOpener, packet, .tampered(counter: 0))

        // Different links give different voice keys for the same session IDs.
        let (other, _) = try completedLink()
        XCTAssertNotEqual(try other.voiceKeys(localSessionID: iSession, remoteSessionID: rSession).sendKey, iVoice.sendKey)

        XCTAssertThrowsError(try i.voiceKeys(localSessionID: [1, 2], remoteSessionID: rSession)) {
            XCTAssertEqual($0 as? VoiceKeyError, .wrongSessionIDSize(bytes: 2))
        }
    }

    func testVoiceKeyDerivationFollowsTheSpec() throws {
        let (i, _) = try completedLink()
        let session = [UInt8](repeating: 0x11, count: 16)
        let expected = crypto.hash(Array("PeerVoice v2 voice".utf8) + [0x01] + session, key: i.exporterKey)
        XCTAssertEqual(VoiceKeys.key(exporterKey: i.exporterKey, direction: .initiatorToResponder, sessionID: session, crypto: crypto),
                       expected)
    }
}
