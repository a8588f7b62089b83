import CoreTestSupport
import PeerVoiceCore
import Sodium
import XCTest

/// The handshake with real libsodium: agreement, man in the middle, commitment, tampering,
/// low-order keys.
final class HandshakeSodiumTests: XCTestCase {
    let crypto = LibSodium()

    private func handshake(_ role: HandshakeRole, _ identity: StaticIdentity, _ payload: String,
                           crypto: any CryptoPrimitives = LibSodium()) throws -> Handshake {
        try Handshake(role: role, identity: identity, payload: Array(payload.utf8), crypto: crypto)
    }

    // MARK: - Honest runs

    func testHandshakeAgreesOnEverything() throws {
        let alice = StaticIdentity.generate(using: crypto), bob = StaticIdentity.generate(using: crypto)
        let initiator = try handshake(.initiator, alice, "hello from alice")
        let responder = try handshake(.responder, bob, "hello from bob")
        let messages = try exchange(initiator, responder)
        XCTAssertEqual(messages.map(\.count), [33, 33, 33, 65 + 14, 65 + 16])
        XCTAssertEqual(messages.map { $0[0] }, [0x21, 0x22, 0x23, 0x24, 0x25])

        let i = try XCTUnwrap(initiator.result), r = try XCTUnwrap(responder.result)
        XCTAssertEqual(i.verificationCode, r.verificationCode)
        XCTAssertEqual(i.verificationCode.count, 6)
        XCTAssertTrue(i.verificationCode.allSatisfy(\.isNumber))
        XCTAssertEqual(i.handshakeHash, r.handshakeHash)
        XCTAssertEqual(i.handshakeHash.count, 32)

        // Keys per direction match across the sides and differ from each other.
        XCTAssertEqual(i.sendKey, r.receiveKey)
        XCTAssertEqual(i.receiveKey, r.sendKey)
        XCTAssertEqual(i.initiatorToResponderKey, r.initiatorToResponderKey)
        XCTAssertEqual(i.responderToInitiatorKey, r.responderToInitiatorKey)
        XCTAssertNotEqual(i.sendKey, i.receiveKey)
        XCTAssertEqual(i.exporterKey, r.exporterKey)
        XCTAssertNotEqual(i.exporterKey, i.sendKey)
        XCTAssertNotEqual(i.exporterKey, i.receiveKey)
        XCTAssertEqual(Set([i.sendKey, i.receiveKey, i.exporterKey].map(\.count)), [32])

        // Each learns the other's identity and payload.
        XCTAssertEqual(i.remoteStaticKey, bob.publicKey)
        XCTAssertEqual(r.remoteStaticKey, alice.publicKey)
        XCTAssertEqual(i.localStaticKey, alice.publicKey)
        XCTAssertEqual(i.remotePayload, Array("hello from bob".utf8))
        XCTAssertEqual(r.remotePayload, Array("hello from alice".utf8))

        // The static keys never travel in the clear.
        for message in messages {
            XCTAssertFalse(contains(message, alice.publicKey))
            XCTAssertFalse(contains(message, bob.publicKey))
            XCTAssertFalse(contains(message, Array("hello from".utf8)))
        }
    }

    func testEveryLinkGetsFreshKeys() throws {
        let alice = StaticIdentity.generate(using: crypto), bob = StaticIdentity.generate(using: crypto)
        var sendKeys = Set<[UInt8]>(), hashes = Set<[UInt8]>()
        for _ in 0..<20 {
            let initiator = try handshake(.initiator, alice, "a"), responder = try handshake(.responder, bob, "b")
            try exchange(initiator, responder)
            sendKeys.insert(initiator.result!.sendKey)
            sendKeys.insert(initiator.result!.receiveKey)
            hashes.insert(initiator.result!.handshakeHash)
        }
        XCTAssertEqual(sendKeys.count, 40)
        XCTAssertEqual(hashes.count, 20)
    }

    func testCodeDerivationFollowsTheSpec() throws {
        // Recompute h3 and the code from messages 1-3 as docs/SECURITY.md describes them.
        let initiator = try handshake(.initiator, .generate(using: crypto), "x")
        let responder = try handshake(.responder, .generate(using: crypto), "y")
        let messages = try exchange(initiator, responder)
        var h = crypto.hash(Array(Handshake.protocolName.utf8), key: nil)
        for message in messages.prefix(3) {
            h = crypto.hash(h + [message[0]], key: nil)
            h = crypto.hash(h + Array(message[1...]), key: nil)
        }
        let digest = crypto.hash(Array("PeerVoice v2 code".utf8) + h, key: nil)
        let value = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000
        XCTAssertEqual(initiator.result?.verificationCode, String(format: "%06llu", value))
        // And the commitment: c = H("PeerVoice v2 commit" || e_i), e_i being msg3's key.
        XCTAssertEqual(Array(messages[0][1...]), crypto.hash(Array("PeerVoice v2 commit".utf8) + Array(messages[2][1...]), key: nil))
    }

    // MARK: - Man in the middle

    /// Mallory sits between Alice (who dials) and Bob: she answers Alice as a responder and dials
    /// Bob as an initiator, with her own ephemeral and static keys on both sides. Both handshakes
    /// complete, but the two honest sides see codes that match only by chance (1 in 10^6).
    func testManInTheMiddleGetsDifferentCodes() throws {
        let alice = StaticIdentity.generate(using: crypto), bob = StaticIdentity.generate(using: crypto)
        let mallory = StaticIdentity.generate(using: crypto)
        var matches = 0
        let attempts = 200
        for _ in 0..<attempts {
            let aliceSide = try handshake(.initiator, alice, "alice")
            let malloryAsResponder = try handshake(.responder, mallory, "bob")
            let malloryAsInitiator = try handshake(.initiator, mallory, "alice")
            let bobSide = try handshake(.responder, bob, "bob")
            // Interleaved the way a relay would: Alice's msg1 makes Mallory dial Bob, etc.
            try malloryAsResponder.readMessage(try aliceSide.writeMessage())
            try bobSide.readMessage(try malloryAsInitiator.writeMessage())
            try malloryAsInitiator.readMessage(try bobSide.writeMessage())
            try aliceSide.readMessage(try malloryAsResponder.writeMessage())
            try malloryAsResponder.readMessage(try aliceSide.writeMessage())
            try bobSide.readMessage(try malloryAsInitiator.writeMessage())
            try aliceSide.readMessage(try malloryAsResponder.writeMessage())
            try malloryAsInitiator.readMessage(try bobSide.writeMessage())
            try malloryAsResponder.readMessage(try aliceSide.writeMessage())
            try bobSide.readMessage(try malloryAsInitiator.writeMessage())

            let a = try XCTUnwrap(aliceSide.result), b = try XCTUnwrap(bobSide.result)
            if a.verificationCode == b.verificationCode { matches += 1 }
            XCTAssertNotEqual(a.handshakeHash, b.handshakeHash)
            XCTAssertNotEqual(a.sendKey, b.receiveKey)
            // A pinned key would also catch her: each side sees Mallory's key, not the other's.
            XCTAssertEqual(a.remoteStaticKey, mallory.publicKey)
            XCTAssertEqual(b.remoteStaticKey, mallory.publicKey)
        }
        // Expected 200 / 10^6 = 0.0002 matches; allowing 1 keeps the test from ever being flaky.
        XCTAssertLessThanOrEqual(matches, 1, "\(matches) of \(attempts) MITM attempts gave equal codes")
    }

    /// A searching MITM wants to choose her ephemeral key after seeing the honest side's, to make
    /// the codes match. Toward Bob she is the initiator and must commit first: once msg1 is sent,
    /// revealing any other key than the committed one is refused.
    func testCommitmentStopsASearchingManInTheMiddle() throws {
        let bobSide = try handshake(.responder, .generate(using: crypto), "bob")
        let committed = crypto.x25519KeyPair()
        try bobSide.readMessage([0x21] + Handshake.commitment(to: committed.publicKey, crypto: crypto))
        let bobsEphemeral = Array(try bobSide.writeMessage()[1...])
        XCTAssertEqual(bobsEphemeral.count, 32)
        // She now searches for an ephemeral key giving a code of her choice...
        let searched = crypto.x25519KeyPair()
        assertThrows(HandshakeError.commitmentMismatch) { try bobSide.readMessage([0x23] + searched.publicKey) }
        XCTAssertEqual(bobSide.nextAction, .failed(.commitmentMismatch))

        // The committed key is accepted (new attempt; Bob's side is now closed for good).
        let again = try handshake(.responder, .generate(using: crypto), "bob")
        try again.readMessage([0x21] + Handshake.commitment(to: committed.publicKey, crypto: crypto))
        _ = try again.writeMessage()
        XCTAssertNoThrow(try again.readMessage([0x23] + committed.publicKey))
        XCTAssertNotNil(again.verificationCode)
    }

    /// Toward Alice she is the responder, and must send her ephemeral key before Alice reveals
    /// hers. After that, everything she still chooses (her static key, her payload, her msg5
    /// toward Bob) comes after the code is fixed: the code is known at msg3 and never changes.
    func testCodeIsFixedBeforeAnyoneSendsAnIdentity() throws {
        for _ in 0..<20 {
            let initiator = try handshake(.initiator, .generate(using: crypto), "i")
            let responder = try handshake(.responder, .generate(using: crypto), String(repeating: "r", count: Int.random(in: 0...300)))
            try responder.readMessage(try initiator.writeMessage())
            try initiator.readMessage(try responder.writeMessage())
            try responder.readMessage(try initiator.writeMessage())
            let codeAtMessage3 = try XCTUnwrap(initiator.verificationCode)
            XCTAssertEqual(responder.verificationCode, codeAtMessage3)
            try initiator.readMessage(try responder.writeMessage())
            try responder.readMessage(try initiator.writeMessage())
            XCTAssertEqual(initiator.result?.verificationCode, codeAtMessage3)
            XCTAssertEqual(responder.result?.verificationCode, codeAtMessage3)
        }
    }

    // MARK: - Pinning

    func testPinnedKeyIsCheckedByTheHandshake() throws {
        let alice = StaticIdentity.generate(using: crypto), bob = StaticIdentity.generate(using: crypto)
        let mallory = StaticIdentity.generate(using: crypto)

        // Alice dials Bob, whose key she pinned: it works with Bob...
        let good = try Handshake(role: .initiator, identity: alice, payload: [1], expectedRemoteStaticKey: bob.publicKey, crypto: crypto)
        try exchange(good, try handshake(.responder, bob, "b"))
        XCTAssertEqual(good.result?.remoteStaticKey, bob.publicKey)

        // ...and an impostor is refused after msg4: Alice never sends msg5 (her identity).
        let dialling = try Handshake(role: .initiator, identity: alice, payload: [1], expectedRemoteStaticKey: bob.publicKey, crypto: crypto)
        let impostor = try handshake(.responder, mallory, "b")
        try impostor.readMessage(try dialling.writeMessage())
        try dialling.readMessage(try impostor.writeMessage())
        try impostor.readMessage(try dialling.writeMessage())
        assertThrows(HandshakeError.unexpectedRemoteKey) { try dialling.readMessage(try impostor.writeMessage()) }
        XCTAssertEqual(dialling.nextAction, .failed(.unexpectedRemoteKey))
        XCTAssertThrowsError(try dialling.writeMessage())

        // A responder that expects a key checks msg5.
        let answering = try Handshake(role: .responder, identity: bob, payload: [2], expectedRemoteStaticKey: alice.publicKey, crypto: crypto)
        let caller = try handshake(.initiator, mallory, "a")
        try answering.readMessage(try caller.writeMessage())
        try caller.readMessage(try answering.writeMessage())
        try answering.readMessage(try caller.writeMessage())
        try caller.readMessage(try answering.writeMessage())
        assertThrows(HandshakeError.unexpectedRemoteKey) { try answering.readMessage(try caller.writeMessage()) }
        XCTAssertNil(answering.result)
    }

    // MARK: - Tampering

    private func tamperedRun(flip messageIndex: Int, byte: Int) throws -> HandshakeError? {
        let initiator = try handshake(.initiator, .generate(using: crypto), "initiator payload")
        let responder = try handshake(.responder, .generate(using: crypto), "responder payload")
        do {
            for index in 0..<5 {
                let (from, to) = index % 2 == 0 ? (initiator, responder) : (responder, initiator)
                var message = try from.writeMessage()
                if index == messageIndex { message[byte] ^= 0x01 }
                try to.readMessage(message)
            }
            return nil
        } catch {
            return error
        }
    }

    func testTamperedMessagesFail() throws {
        // msg1 or msg3 changed: the reveal no longer matches the commitment.
        XCTAssertEqual(try tamperedRun(flip: 0, byte: 1), .commitmentMismatch)
        XCTAssertEqual(try tamperedRun(flip: 0, byte: 32), .commitmentMismatch)
        XCTAssertEqual(try tamperedRun(flip: 2, byte: 17), .commitmentMismatch)
        // msg2 changed: the initiator derives other keys than the responder; msg4 does not open.
        XCTAssertEqual(try tamperedRun(flip: 1, byte: 1), .decryptionFailed(.responderIdentity, field: .staticKey))
        // msg4: the sealed static key (bytes 1-48) or the sealed payload (49-).
        XCTAssertEqual(try tamperedRun(flip: 3, byte: 1), .decryptionFailed(.responderIdentity, field: .staticKey))
        XCTAssertEqual(try tamperedRun(flip: 3, byte: 48), .decryptionFailed(.responderIdentity, field: .staticKey))
        XCTAssertEqual(try tamperedRun(flip: 3, byte: 49), .decryptionFailed(.responderIdentity, field: .payload))
        XCTAssertEqual(try tamperedRun(flip: 3, byte: 65 + 16), .decryptionFailed(.responderIdentity, field: .payload))
        // msg5 likewise.
        XCTAssertEqual(try tamperedRun(flip: 4, byte: 20), .decryptionFailed(.initiatorIdentity, field: .staticKey))
        XCTAssertEqual(try tamperedRun(flip: 4, byte: 60), .decryptionFailed(.initiatorIdentity, field: .payload))
        // A changed type byte.
        XCTAssertEqual(try tamperedRun(flip: 3, byte: 0), .unexpectedMessage(type: 0x25, expected: .responderIdentity))
        XCTAssertNil(try tamperedRun(flip: 99, byte: 0))
    }

    func testEveryBitOfMessage4And5IsAuthenticated() throws {
        for messageIndex in [3, 4] {
            for byte in 1..<(65 + 17) {
                let error = try tamperedRun(flip: messageIndex, byte: byte)
                guard case .decryptionFailed = error else {
                    return XCTFail("message \(messageIndex + 1) byte \(byte): \(String(describing: error))")
                }
            }
        }
    }

    // MARK: - Low-order points

    func testLowOrderEphemeralFromTheResponderIsRefusedBeforeTheReveal() throws {
        for point in lowOrderPoints {
            let initiator = try handshake(.initiator, .generate(using: crypto), "i")
            _ = try initiator.writeMessage()
            assertThrows(HandshakeError.lowOrderPoint(.ephemeralKey)) { try initiator.readMessage([0x22] + point) }
            // It never reveals its ephemeral key afterwards.
            XCTAssertThrowsError(try initiator.writeMessage())
        }
    }

    func testLowOrderEphemeralFromTheInitiatorIsRefused() throws {
        for point in lowOrderPoints {
            let responder = try handshake(.responder, .generate(using: crypto), "r")
            try responder.readMessage([0x21] + Handshake.commitment(to: point, crypto: crypto))
            _ = try responder.writeMessage()
            assertThrows(HandshakeError.lowOrderPoint(.ephemeralKey)) { try responder.readMessage([0x23] + point) }
        }
    }

    func testLowOrderStaticKeysAreRefused() throws {
        for point in lowOrderPoints.prefix(3) {
            // A hostile responder whose "identity" is a low-order point.
            let liar = StaticIdentity.generate(using: SodiumWithKeyPair { (point, LibSodium().x25519KeyPair().secretKey) })
            XCTAssertEqual(liar.publicKey, point)
            let initiator = try handshake(.initiator, .generate(using: crypto), "i")
            let responder = try handshake(.responder, liar, "r")
            try responder.readMessage(try initiator.writeMessage())
            try initiator.readMessage(try responder.writeMessage())
            try responder.readMessage(try initiator.writeMessage())
            assertThrows(HandshakeError.lowOrderPoint(.staticKey)) { try initiator.readMessage(try responder.writeMessage()) }

            // A hostile initiator likewise.
            let initiator2 = try handshake(.initiator, liar, "i")
            let responder2 = try handshake(.responder, .generate(using: crypto), "r")
            try responder2.readMessage(try initiator2.writeMessage())
            try initiator2.readMessage(try responder2.writeMessage())
            try responder2.readMessage(try initiator2.writeMessage())
            try initiator2.readMessage(try responder2.writeMessage())
            assertThrows(HandshakeError.lowOrderPoint(.staticKey)) { try responder2.readMessage(try initiator2.writeMessage()) }
        }
    }

    // MARK: - Sizes

    func testWrongSizesAreRefusedWithRealKeys() throws {
        let initiator = try handshake(.initiator, .generate(using: crypto), "i")
        _ = try initiator.writeMessage()
        assertThrows(HandshakeError.wrongMessageSize(.responderEphemeral, bytes: 32, allowed: 33...33)) { try initiator.readMessage([0x22] + [UInt8](repeating: 7, count: 31)) }
        let responder = try handshake(.responder, .generate(using: crypto), "r")
        assertThrows(HandshakeError.messageTooLarge(bytes: 4096)) { try responder.readMessage([UInt8](repeating: 0x21, count: 4096)) }
    }
}

func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard needle.count <= haystack.count else { return false }
    for start in 0...(haystack.count - needle.count) where Array(haystack[start..<start + needle.count]) == needle {
        return true
    }
    return false
}
