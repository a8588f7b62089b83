import Foundation
import CoreTestSupport
import PeerVoiceCore
import SeededRandom
import XCTest

/// The handshake state machine (ordering, sizes, timing of what it reveals) with a deterministic
/// stand-in for the cryptography. The cryptographic properties (MITM, tampering, low-order points,
/// real keys) are tested with libsodium in SodiumTests.
final class HandshakeTests: XCTestCase {

    private func makePair(initiatorPayload: [UInt8] = Array("I-hello".utf8),
                          responderPayload: [UInt8] = Array("R-hello".utf8),
                          crypto: FakeCrypto = FakeCrypto()) throws -> (Handshake, Handshake) {
        let initiator = try Handshake(role: .initiator, identity: .generate(using: crypto), payload: initiatorPayload, crypto: crypto)
        let responder = try Handshake(role: .responder, identity: .generate(using: crypto), payload: responderPayload, crypto: crypto)
        return (initiator, responder)
    }

    // MARK: - Ordering

    func testActionsFollowThePattern() throws {
        let (initiator, responder) = try makePair()
        XCTAssertEqual(initiator.nextAction, .send(.commitment))
        XCTAssertEqual(responder.nextAction, .receive(.commitment))
        try responder.readMessage(try initiator.writeMessage())
        XCTAssertEqual(initiator.nextAction, .receive(.responderEphemeral))
        XCTAssertEqual(responder.nextAction, .send(.responderEphemeral))
        try initiator.readMessage(try responder.writeMessage())
        XCTAssertEqual(initiator.nextAction, .send(.initiatorEphemeral))
        try responder.readMessage(try initiator.writeMessage())
        XCTAssertEqual(responder.nextAction, .send(.responderIdentity))
        try initiator.readMessage(try responder.writeMessage())
        XCTAssertEqual(initiator.nextAction, .send(.initiatorIdentity))
        XCTAssertEqual(responder.nextAction, .receive(.initiatorIdentity))
        try responder.readMessage(try initiator.writeMessage())
        XCTAssertEqual(initiator.nextAction, .complete)
        XCTAssertEqual(responder.nextAction, .complete)
        XCTAssertEqual(HandshakeMessage.allCases.map(\.number), [1, 2, 3, 4, 5])
        XCTAssertEqual(HandshakeMessage.allCases.map(\.sender), [.initiator, .responder, .initiator, .responder, .initiator])
    }

    func testMessageSizes() throws {
        let (initiator, responder) = try makePair(initiatorPayload: [UInt8](repeating: 1, count: 27),
                                                  responderPayload: [UInt8](repeating: 2, count: 283))
        let sizes = try exchange(initiator, responder).map(\.count)
        XCTAssertEqual(sizes, [33, 33, 33, 65 + 283, 65 + 27])
        XCTAssertEqual(Handshake.identityMessageOverhead, 65)
        XCTAssertEqual(Handshake.maxPayloadBytes, 959)
    }

    func testWritingOutOfTurnFailsForGood() throws {
        let (initiator, responder) = try makePair()
        assertThrows(HandshakeError.outOfTurn(attempted: "writeMessage()", next: .commitment)) { _ = try responder.writeMessage() }
        // The error is final.
        XCTAssertEqual(responder.nextAction, .failed(.outOfTurn(attempted: "writeMessage()", next: .commitment)))
        assertThrows(HandshakeError.outOfTurn(attempted: "writeMessage()", next: .commitment)) {
            try responder.readMessage(try initiator.writeMessage())
        }
    }

    func testReadingWhenItIsOurTurnFails() throws {
        let (initiator, responder) = try makePair()
        try responder.readMessage(try initiator.writeMessage())
        // The responder must answer msg1 before reading anything else: a second message from the
        // initiator (it did not wait) is a protocol error.
        assertThrows(HandshakeError.outOfTurn(attempted: "readMessage(_:)", next: .responderEphemeral)) {
            try responder.readMessage([0x23] + [UInt8](repeating: 7, count: 32))
        }
    }

    func testUnexpectedMessageType() throws {
        let (initiator, responder) = try makePair()
        _ = try initiator.writeMessage()
        // The initiator awaits msg2; a msg4-typed message (skipping msg2/msg3) is refused.
        assertThrows(HandshakeError.unexpectedMessage(type: 0x24, expected: .responderEphemeral)) {
            try initiator.readMessage([0x24] + [UInt8](repeating: 0, count: 80))
        }
        assertThrows(HandshakeError.unexpectedMessage(type: 0x04, expected: .commitment)) {
            try responder.readMessage(Frame.keepalive.encodedBody() + [UInt8](repeating: 0, count: 32))
        }
        XCTAssertTrue(HandshakeError.unexpectedMessage(type: 0x01, expected: .commitment).description
            .contains("unknown type 0x01"))
    }

    func testMessageAfterCompletionIsRejected() throws {
        let (initiator, responder) = try makePair()
        let messages = try exchange(initiator, responder)
        assertThrows(HandshakeError.unexpectedMessage(type: 0x25, expected: nil)) { try responder.readMessage(messages[4]) }
        assertThrows(HandshakeError.outOfTurn(attempted: "writeMessage()", next: nil)) { _ = try initiator.writeMessage() }
    }

    // MARK: - Sizes

    func testSizeLimits() throws {
        let crypto = FakeCrypto()
        let identity = StaticIdentity.generate(using: crypto)
        XCTAssertThrowsError(try Handshake(role: .initiator, identity: identity, payload: [UInt8](repeating: 0, count: 960),
                                           crypto: crypto)) { error in
            XCTAssertEqual(error as? HandshakeError, .payloadTooLarge(bytes: 960))
        }

        // Checked before anything else, even the type.
        let responder = try Handshake(role: .responder, identity: identity, payload: [], crypto: crypto)
        assertThrows(HandshakeError.messageTooLarge(bytes: 1025)) { try responder.readMessage([UInt8](repeating: 0x21, count: 1025)) }
        let another = try Handshake(role: .responder, identity: identity, payload: [], crypto: crypto)
        assertThrows(HandshakeError.emptyMessage) { try another.readMessage([]) }

        for count in [1, 32, 34, 100] {
            let fresh = try Handshake(role: .responder, identity: identity, payload: [], crypto: crypto)
            assertThrows(HandshakeError.wrongMessageSize(.commitment, bytes: count, allowed: 33...33)) {
                try fresh.readMessage([0x21] + [UInt8](repeating: 9, count: count - 1))
            }
        }
    }

    func testShortIdentityMessageIsRejected() throws {
        let (initiator, responder) = try makePair()
        try responder.readMessage(try initiator.writeMessage())
        try initiator.readMessage(try responder.writeMessage())
        try responder.readMessage(try initiator.writeMessage())
        let message4 = try responder.writeMessage()
        assertThrows(HandshakeError.wrongMessageSize(.responderIdentity, bytes: 64, allowed: 65...1024)) { try initiator.readMessage(message4.prefix(64)) }
        XCTAssertEqual(HandshakeError.wrongMessageSize(.responderIdentity, bytes: 64, allowed: 65...1024).description,
                       "handshake message 4 (responder's identity and payload) has 64 bytes (must have 65-1024)")
    }

    func testLargestPayloadFillsTheLargestMessage() throws {
        let big = [UInt8](repeating: 0xAB, count: Handshake.maxPayloadBytes)
        let (initiator, responder) = try makePair(initiatorPayload: big, responderPayload: big)
        let messages = try exchange(initiator, responder)
        XCTAssertEqual(messages[3].count, Handshake.maxMessageBytes)
        XCTAssertEqual(messages[4].count, Handshake.maxMessageBytes)
        XCTAssertEqual(responder.result?.remotePayload, big)
    }

    func testEmptyPayloads() throws {
        let (initiator, responder) = try makePair(initiatorPayload: [], responderPayload: [])
        let messages = try exchange(initiator, responder)
        XCTAssertEqual(messages[3].count, 65)
        XCTAssertEqual(initiator.result?.remotePayload, [])
        XCTAssertEqual(responder.result?.remotePayload, [])
    }

    // MARK: - What is known when

    func testWhatEachSideLearnsWhen() throws {
        let (initiator, responder) = try makePair()
        try responder.readMessage(try initiator.writeMessage())
        try initiator.readMessage(try responder.writeMessage())
        XCTAssertNil(initiator.verificationCode)
        XCTAssertNil(responder.verificationCode)

        try responder.readMessage(try initiator.writeMessage())
        // The code is fixed by msg3: both know it before any identity is exchanged.
        XCTAssertNotNil(initiator.verificationCode)
        XCTAssertEqual(initiator.verificationCode, responder.verificationCode)
        XCTAssertNil(initiator.remoteStaticKey)

        try initiator.readMessage(try responder.writeMessage())
        // The initiator knows who answered before revealing itself in msg5 (so it can refuse an
        // unexpected key); the responder does not know yet.
        XCTAssertNotNil(initiator.remoteStaticKey)
        XCTAssertEqual(initiator.remotePayload, Array("R-hello".utf8))
        XCTAssertNil(initiator.result)
        XCTAssertNil(responder.remoteStaticKey)

        try responder.readMessage(try initiator.writeMessage())
        XCTAssertEqual(responder.remotePayload, Array("I-hello".utf8))
        let i = try XCTUnwrap(initiator.result), r = try XCTUnwrap(responder.result)
        XCTAssertEqual(i.verificationCode, initiator.verificationCode)
        XCTAssertEqual(i.handshakeHash, r.handshakeHash)
        XCTAssertEqual(i.handshakeHash, initiator.transcriptHash)
        XCTAssertEqual(i.sendKey, r.receiveKey)
        XCTAssertEqual(i.receiveKey, r.sendKey)
        XCTAssertEqual(i.exporterKey, r.exporterKey)
        XCTAssertEqual(i.sendDirection, .initiatorToResponder)
        XCTAssertEqual(r.sendDirection, .responderToInitiator)
    }

    func testVerificationCodeIsSixDigitsZeroPadded() {
        XCTAssertEqual(Handshake.verificationCode(transcriptHash: [1, 2, 3], crypto: FakeCrypto(fixedHash: [UInt8](repeating: 0, count: 32))),
                       "000000")
        // 0x...0F4240 = 1_000_000 → 0; 0x...0F4241 → 1.
        let oneMillionAndOne: [UInt8] = [0, 0, 0, 0, 0, 0x0F, 0x42, 0x41] + [UInt8](repeating: 0xFF, count: 24)
        XCTAssertEqual(Handshake.verificationCode(transcriptHash: [], crypto: FakeCrypto(fixedHash: oneMillionAndOne)), "000001")
        let crypto = FakeCrypto()
        for index in 0..<500 {
            let code = Handshake.verificationCode(transcriptHash: crypto.hash([UInt8(index & 0xFF), UInt8(index >> 8)], key: nil),
                                                  crypto: crypto)
            XCTAssertEqual(code.count, 6)
            XCTAssertTrue(code.allSatisfy { $0.isASCII && $0.isNumber })
        }
    }

    func testTamperedCommitmentIsCaught() throws {
        let (initiator, responder) = try makePair()
        var message1 = try initiator.writeMessage()
        message1[5] ^= 0x01
        try responder.readMessage(message1)
        try initiator.readMessage(try responder.writeMessage())
        assertThrows(HandshakeError.commitmentMismatch) { try responder.readMessage(try initiator.writeMessage()) }
    }

    func testResultChannelsTalkToEachOther() throws {
        let (initiator, responder) = try makePair()
        try exchange(initiator, responder)
        var sealer = try XCTUnwrap(initiator.result).makeLinkSealer(.xChaCha20Poly1305)
        var opener = try XCTUnwrap(responder.result).makeLinkOpener(.xChaCha20Poly1305)
        XCTAssertEqual(try opener.open(try sealer.seal([1, 2, 3])), [1, 2, 3])
        var back = try XCTUnwrap(responder.result).makeLinkSealer(.xChaCha20Poly1305)
        var backOpener = try XCTUnwrap(initiator.result).makeLinkOpener(.xChaCha20Poly1305)
        XCTAssertEqual(try backOpener.open(try back.seal([4])), [4])
    }

    func testReplayWindowAgainstAReferenceModel() throws {
        // Random delivery (duplicates, reordering, long jumps) against a set-based model.
        let crypto = FakeCrypto()
        let key = [UInt8](repeating: 5, count: 32)
        for windowSize in [64, 100, 256] {
            var sealer = RecordSealer(key: key, direction: .initiatorToResponder, purpose: .voice, crypto: crypto)
            var records: [[UInt8]] = []
            for _ in 0..<1500 { records.append(try sealer.seal([0])) }
            var opener = RecordOpener(key: key, direction: .initiatorToResponder, purpose: .voice,
                                      mode: .datagram(windowSize: windowSize), crypto: crypto)
            let effectiveSize = UInt64((windowSize + 63) / 64 * 64)
            var seen = Set<UInt64>()
            var newest: UInt64?
            var generator = SplitMix64(seed: UInt64(windowSize))
            var position = 0
            for _ in 0..<6000 {
                position = max(0, min(records.count - 1, position + Int(generator.next() % 41) - 18))
                if generator.next() % 50 == 0 { position = Int(generator.next() % UInt64(records.count)) }
                let counter = UInt64(position)
                let expectation: String
                if let newest, counter <= newest, newest - counter >= effectiveSize {
                    expectation = "tooOld"
                } else if seen.contains(counter) {
                    expectation = "replayed"
                } else {
                    expectation = "fresh"
                }
                do {
                    _ = try opener.open(records[position])
                    XCTAssertEqual(expectation, "fresh", "counter \(counter), newest \(String(describing: newest))")
                    seen.insert(counter)
                    newest = max(newest ?? 0, counter)
                } catch .replayed {
                    XCTAssertEqual(expectation, "replayed", "counter \(counter)")
                } catch .tooOld {
                    XCTAssertEqual(expectation, "tooOld", "counter \(counter)")
                } catch {
                    XCTFail("\(error)")
                }
            }
            XCTAssertEqual(opener.rejections.tampered, 0)
            XCTAssertGreaterThan(opener.rejections.replayed, 0)
            XCTAssertGreaterThan(opener.rejections.tooOld, 0)
        }
    }
}

// MARK: - Test double

/// Deterministic, insecure stand-in for the primitives: a toy hash, commutative toy "DH", XOR
/// stream with a toy tag. Enough to exercise the state machines; never a security argument.
final class FakeCrypto: CryptoPrimitives, @unchecked Sendable {
    private let lock = NSLock()
    private var state: UInt64
    private let fixedHash: [UInt8]?

    init(seed: UInt64 = 1, fixedHash: [UInt8]? = nil) {
        state = seed
        self.fixedHash = fixedHash
    }

    func randomBytes(_ count: Int) -> [UInt8] {
        lock.lock()
        defer { lock.unlock() }
        var generator = SplitMix64(seed: state)
        state &+= 0x9E37_79B9_7F4A_7C15
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    }

    private func publicKey(of secretKey: [UInt8]) -> [UInt8] { toyHash(Array("pub".utf8) + secretKey) }

    func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) {
        let secretKey = randomBytes(32)
        return (publicKey(of: secretKey), secretKey)
    }

    func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]? {
        guard publicKey.count == 32, publicKey.contains(where: { $0 != 0 }) else { return nil }
        let own = self.publicKey(of: secretKey)
        let pair = own.lexicographicallyPrecedes(publicKey) ? own + publicKey : publicKey + own
        return toyHash(Array("dh".utf8) + pair)
    }

    func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8] {
        if let fixedHash { return fixedHash }
        return toyHash((key.map { [1] + $0 } ?? [0]) + data)
    }

    func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        let body = zip(plaintext, keystream(key: key, nonce: nonce, count: plaintext.count)).map { $0 ^ $1 }
        return body + tag(key: key, nonce: nonce, ciphertext: body, associatedData: associatedData)
    }

    func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        guard ciphertext.count >= 16 else { return nil }
        let body = Array(ciphertext.dropLast(16))
        guard Array(ciphertext.suffix(16)) == tag(key: key, nonce: nonce, ciphertext: body, associatedData: associatedData) else {
            return nil
        }
        return zip(body, keystream(key: key, nonce: nonce, count: body.count)).map { $0 ^ $1 }
    }

    func wipe(_ bytes: inout [UInt8]) {
        for index in bytes.indices { bytes[index] = 0 }
    }

    private func keystream(key: [UInt8], nonce: [UInt8], count: Int) -> [UInt8] {
        var stream: [UInt8] = []
        var block: UInt32 = 0
        while stream.count < count {
            stream += toyHash(Array("ks".utf8) + key + nonce + [UInt8(block & 0xFF), UInt8(block >> 8)])
            block += 1
        }
        return Array(stream.prefix(count))
    }

    private func tag(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        let lengths = [UInt8(truncatingIfNeeded: associatedData.count), UInt8(truncatingIfNeeded: associatedData.count >> 8)]
        return Array(toyHash(Array("tag".utf8) + key + nonce + lengths + associatedData + ciphertext).prefix(16))
    }

    /// 32 bytes from four differently seeded FNV-1a-64 passes, each finished with SplitMix64.
    private func toyHash(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        for lane in 0..<4 as Range<UInt64> {
            var value: UInt64 = 0xCBF2_9CE4_8422_2325 ^ (lane &* 0x1000_0000_01B3)
            for byte in data { value = (value ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
            var mixer = SplitMix64(seed: value ^ UInt64(data.count))
            let word = mixer.next()
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
        }
        return out
    }
}
