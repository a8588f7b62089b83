import OpenSSLCrypto
import PeerVoiceCore
import XCTest

/// OCB2-AES128 and Mumble's packet crypto against real libcrypto: the OCB paper's vectors (as
/// Mumble's TestCrypt checks them), round trips, tampering, replays and the nonce window.
final class MumbleCryptTests: XCTestCase {
    static let key: [UInt8] = Array(0...15)
    static let nonce: [UInt8] = [0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00]

    static func hex(_ s: String) -> [UInt8] {
        var out = [UInt8]()
        var index = s.startIndex
        while index < s.endIndex {
            let next = s.index(index, offsetBy: 2)
            out.append(UInt8(s[index..<next], radix: 16)!)
            index = next
        }
        return out
    }

    func makeOCB() throws -> OCB2 { OCB2(cipher: try XCTUnwrap(OpenSSLAES128(key: Self.key))) }

    func testAESKnownAnswer() throws {
        // FIPS-197 appendix C.1.
        let aes = try XCTUnwrap(OpenSSLAES128(key: Self.key))
        let plain = Self.hex("00112233445566778899aabbccddeeff")
        XCTAssertEqual(aes.encrypt(plain), Self.hex("69c4e0d86a7b0430d8cdb78070b4c55a"))
        XCTAssertEqual(aes.decrypt(aes.encrypt(plain)), plain)
        XCTAssertNil(OpenSSLAES128(key: Array(Self.key.prefix(15))))
    }

    func testOCB2KnownAnswers() throws {
        // draft-krovetz-ocb-00 with key = nonce = 00..0f.
        let ocb = try makeOCB()
        let empty = ocb.seal([], nonce: Self.key)
        XCTAssertEqual(empty.ciphertext, [])
        XCTAssertEqual(empty.tag, Self.hex("BF3108130773AD5EC70EC69E7875A7B0"))
        let long = ocb.seal(Array(0..<40), nonce: Self.key)
        XCTAssertEqual(long.ciphertext, Self.hex(
            "F75D6BC8B4DC8D66B836A2B08B32A6369F1CD3C5228D79FD6C267F5F6AA7B231C7DFB9D59951AE9C"))
        XCTAssertEqual(long.tag, Self.hex("9DB0CDF880F73E3E10D4EB3217766688"))
        let opened = try XCTUnwrap(ocb.open(long.ciphertext, nonce: Self.key))
        XCTAssertEqual(opened.plain, Array(0..<40))
        XCTAssertEqual(opened.tag, long.tag)
    }

    func testOCB2RoundTripsEveryLength() throws {
        let ocb = try makeOCB()
        for length in 0..<128 {
            let plain = (0..<length).map { UInt8(truncatingIfNeeded: $0 + 1) }
            let sealed = ocb.seal(plain, nonce: Self.nonce)
            let opened = try XCTUnwrap(ocb.open(sealed.ciphertext, nonce: Self.nonce), "length \(length)")
            XCTAssertEqual(opened.plain, plain, "length \(length)")
            XCTAssertEqual(opened.tag, sealed.tag, "length \(length)")
        }
    }

    /// The XEX* counter-measure: a second-to-last block of 15 zero bytes is sent with its first
    /// bit flipped (still authentic), and the forgery's last block is refused by the decrypter.
    func testXEXStarCounterMeasure() throws {
        let ocb = try makeOCB()
        var plain = [UInt8](repeating: 0, count: 32)
        plain[15] = 0x42
        plain[16] = 7
        let sealed = ocb.seal(plain, nonce: Self.nonce)
        let opened = try XCTUnwrap(ocb.open(sealed.ciphertext, nonce: Self.nonce))
        var flipped = plain
        flipped[0] ^= 1
        XCTAssertEqual(opened.plain, flipped)
        XCTAssertEqual(opened.tag, sealed.tag)
        // A ciphertext whose last block decrypts to the offset (the attack's requirement): its
        // last block must equal E(δ·2 ⊕ len) ⊕ δ·2 in its first 15 bytes; build it with the cipher.
        let aes = try XCTUnwrap(OpenSSLAES128(key: Self.key))
        let delta = OCB2.double(aes.encrypt(Self.nonce))
        var lengthBlock = [UInt8](repeating: 0, count: 16)
        lengthBlock[15] = 128
        let pad = aes.encrypt(zip(lengthBlock, delta).map { $0 ^ $1 })
        let forged = zip(pad, delta).map { $0 ^ $1 }
        XCTAssertNil(ocb.open(forged, nonce: Self.nonce))
    }

    func makePair() throws -> (MumbleCryptState, MumbleCryptState) {
        let clientNonce = [UInt8](repeating: 0x55, count: 16)
        let serverNonce = [UInt8](repeating: 0x11, count: 16)
        let sender = try XCTUnwrap(MumbleCryptState(cipher: try XCTUnwrap(OpenSSLAES128(key: Self.key)),
                                                   encryptNonce: clientNonce, decryptNonce: serverNonce))
        let receiver = try XCTUnwrap(MumbleCryptState(cipher: try XCTUnwrap(OpenSSLAES128(key: Self.key)),
                                                     encryptNonce: serverNonce, decryptNonce: clientNonce))
        return (sender, receiver)
    }

    func testPacketRoundTripAndReplayRefused() throws {
        var (sender, receiver) = try makePair()
        let secret = Array("abcdefghi\0".utf8)
        let packet = sender.encrypt(secret)
        XCTAssertEqual(packet.count, secret.count + 4)
        XCTAssertEqual(receiver.decrypt(packet), secret)
        XCTAssertNil(receiver.decrypt(packet), "the same nonce is accepted once")
        XCTAssertNil(receiver.decrypt(Array(packet.prefix(3))))
    }

    func testTamperedPacketsRefused() throws {
        var (sender, receiver) = try makePair()
        let message = Array("It was a funky funky town!\0".utf8)
        var packet = sender.encrypt(message)
        for bit in 0..<(packet.count * 8) {
            packet[bit / 8] ^= 1 << (bit % 8)
            XCTAssertNil(receiver.decrypt(packet), "bit \(bit)")
            packet[bit / 8] ^= 1 << (bit % 8)
        }
        XCTAssertEqual(receiver.decrypt(packet), message)
    }

    /// Up to 30 late packets are accepted (each once), older ones are not; losses are counted
    /// across wrap-arounds of the nonce's low byte, and 256 lost in a row cannot be recovered.
    func testLateLostAndWrapAround() throws {
        var (sender, receiver) = try makePair()
        let secret = Array("abcdefghi\0".utf8)
        let packets = (0..<128).map { _ in sender.encrypt(secret) }
        for i in 0..<30 { XCTAssertNotNil(receiver.decrypt(packets[127 - i]), "late \(i)") }
        for i in 30..<128 { XCTAssertNil(receiver.decrypt(packets[127 - i]), "too late \(i)") }
        for i in 0..<30 { XCTAssertNil(receiver.decrypt(packets[127 - i]), "replayed \(i)") }
        XCTAssertEqual(receiver.late, 29)

        for _ in 0..<128 {
            let lostBefore = receiver.lost
            var last: [UInt8] = []
            for _ in 0..<15 { last = sender.encrypt(secret) }
            XCTAssertEqual(receiver.decrypt(last), secret)
            XCTAssertEqual(receiver.lost - lostBefore, 14)
        }
        var last: [UInt8] = []
        for _ in 0..<257 { last = sender.encrypt(secret) }
        XCTAssertNil(receiver.decrypt(last), "out of the window: needs a resync")
        XCTAssertTrue(receiver.setDecryptNonce(sender.currentEncryptNonce))
        XCTAssertEqual(receiver.decrypt(sender.encrypt(secret)), secret, "after the resync")
    }
}
