import OpenSSLCrypto
import PeerVoiceCore
import Sodium
import XCTest

/// OpenSSL's ChaCha20-Poly1305 against RFC 8439's vector, and XChaCha20-Poly1305 put together
/// from libsodium's HChaCha20 and it (`SplitXChaCha20`, what the service seals links with)
/// against libsodium's own, byte for byte, both ways, in place, with tampering.
final class ChaCha20Poly1305Tests: XCTestCase {
    let split = SplitXChaCha20(base: LibSodium(), bulk: OpenSSLChaCha20Poly1305())

    func testRFC8439Vector() {
        // RFC 8439 §2.8.2.
        let plaintext = Array("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".utf8)
        let key = [UInt8](0x80...0x9f)
        let nonce = MumbleCryptTests.hex("070000004041424344454647")
        let ad = MumbleCryptTests.hex("50515253c0c1c2c3c4c5c6c7")
        var sealed = [UInt8](repeating: 0, count: plaintext.count + 16)
        let aead = OpenSSLChaCha20Poly1305()
        key.withUnsafeBytes { k in nonce.withUnsafeBytes { n in ad.withUnsafeBytes { a in plaintext.withUnsafeBytes { p in
            sealed.withUnsafeMutableBytes { aead.seal(key: k, nonce: n, plaintext: p, associatedData: a, into: $0) }
        } } } }
        XCTAssertEqual(sealed, MumbleCryptTests.hex(
            "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b"
            + "1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc"
            + "3ff4def08e4b7a9de576d26586cec64b6116" + "1ae10b594f09e26a7e902ecbd0600691"))
        var opened = [UInt8](repeating: 0, count: plaintext.count)
        let ok = key.withUnsafeBytes { k in nonce.withUnsafeBytes { n in ad.withUnsafeBytes { a in sealed.withUnsafeBytes { c in
            opened.withUnsafeMutableBytes { aead.open(key: k, nonce: n, ciphertext: c, associatedData: a, into: $0) }
        } } } }
        XCTAssertTrue(ok)
        XCTAssertEqual(opened, plaintext)
    }

    func testSplitXChaCha20IsLibsodiumsByteForByte() {
        let sodium = LibSodium()
        for size in [0, 1, 15, 16, 17, 63, 64, 65, 1000, 65_536 + 16] {
            let key = sodium.randomBytes(32), nonce = sodium.randomBytes(24), ad = sodium.randomBytes(size % 11)
            let plaintext = sodium.randomBytes(size)
            let expected = sodium.seal(key: key, nonce: nonce, plaintext: plaintext, associatedData: ad)
            // In place, as a link seals DATA: the plaintext where the ciphertext goes.
            var buffer = plaintext + [UInt8](repeating: 0, count: 16)
            buffer.withUnsafeMutableBytes { buffer in
                split.seal(key: key, nonce: nonce, plaintext: UnsafeRawBufferPointer(rebasing: buffer[0..<size]), associatedData: ad, into: buffer)
            }
            XCTAssertEqual(buffer, expected, "size \(size)")
            var opened = [UInt8](repeating: 0, count: size)
            XCTAssertTrue(expected.withUnsafeBytes { c in opened.withUnsafeMutableBytes { split.open(key: key, nonce: nonce, ciphertext: c, associatedData: ad, into: $0) } })
            XCTAssertEqual(opened, plaintext, "size \(size)")
            // Any flipped bit (ciphertext, tag, associated data, nonce) fails to open.
            var tampered = expected
            tampered[size > 0 ? size / 2 : 0] ^= 1
            XCTAssertFalse(tampered.withUnsafeBytes { c in opened.withUnsafeMutableBytes { split.open(key: key, nonce: nonce, ciphertext: c, associatedData: ad, into: $0) } })
            var otherNonce = nonce
            otherNonce[size % 24] ^= 0x80
            XCTAssertFalse(expected.withUnsafeBytes { c in opened.withUnsafeMutableBytes { split.open(key: key, nonce: otherNonce, ciphertext: c, associatedData: ad, into: $0) } })
            XCTAssertFalse(expected.withUnsafeBytes { c in opened.withUnsafeMutableBytes { split.open(key: key, nonce: nonce, ciphertext: c, associatedData: ad + [1], into: $0) } })
        }
        var short = [UInt8](repeating: 0, count: 4)
        XCTAssertFalse([UInt8](repeating: 0, count: 15).withUnsafeBytes { c in short.withUnsafeMutableBytes {
            split.open(key: sodium.randomBytes(32), nonce: sodium.randomBytes(24), ciphertext: c, associatedData: [], into: $0) } })
    }

    func testSealedRecordsOpenAcrossImplementations() throws {
        // A link sealed in place (as DATA is) by one implementation opens on the other, both
        // ways: the wire is unchanged.
        let key = LibSodium().randomBytes(32)
        for (sealing, opening) in [(split as any CryptoPrimitives, LibSodium() as any CryptoPrimitives), (LibSodium(), split)] {
            var sealer = RecordSealer(key: key, direction: .initiatorToResponder, purpose: .link, crypto: sealing)
            var opener = RecordOpener(key: key, direction: .initiatorToResponder, purpose: .link, mode: .stream, crypto: opening)
            for size in [1, 100, 65_000] {
                let body = LibSodium().randomBytes(size)
                var record = [UInt8](repeating: 0, count: SealedRecord.overheadBytes + size)
                record.replaceSubrange(SealedRecord.headerBytes..<(SealedRecord.headerBytes + size), with: body)
                try record.withUnsafeMutableBytes { try sealer.sealInPlace($0, plaintextBytes: size) }
                var opened: [UInt8] = []
                let count = try opener.open(record, into: &opened)
                XCTAssertEqual(Array(opened[0..<count]), body)
            }
        }
    }
}
