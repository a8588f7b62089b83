import Foundation
import PeerVoiceCore
import Sodium
import XCTest

/// LibSodium against published vectors, so argument order and sizes in the adapter are right.
final class LibSodiumTests: XCTestCase {
    let crypto = LibSodium()

    func testVersion() {
        XCTAssertFalse(LibSodium.version.isEmpty)
    }

    func testX25519RFC7748Vector() throws {
        let aliceSecret = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
        let alicePublic = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
        let bobSecret = hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
        let bobPublic = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
        let shared = hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
        let basePoint: [UInt8] = [9] + [UInt8](repeating: 0, count: 31)
        XCTAssertEqual(crypto.x25519(aliceSecret, basePoint), alicePublic)
        XCTAssertEqual(crypto.x25519(aliceSecret, bobPublic), shared)
        XCTAssertEqual(crypto.x25519(bobSecret, alicePublic), shared)
    }

    func testKeyPairsAgree() {
        let a = crypto.x25519KeyPair(), b = crypto.x25519KeyPair()
        XCTAssertEqual(a.publicKey.count, 32)
        XCTAssertEqual(a.secretKey.count, 32)
        XCTAssertNotEqual(a.publicKey, b.publicKey)
        XCTAssertEqual(crypto.x25519(a.secretKey, b.publicKey), crypto.x25519(b.secretKey, a.publicKey))
        XCTAssertEqual(crypto.x25519(a.secretKey, [9] + [UInt8](repeating: 0, count: 31)), a.publicKey)
    }

    func testX25519RefusesLowOrderPoints() {
        let secret = crypto.x25519KeyPair().secretKey
        for point in lowOrderPoints {
            XCTAssertNil(crypto.x25519(secret, point), hexString(point))
        }
        XCTAssertNil(crypto.x25519(secret, [1, 2, 3]), "wrong size")
    }

    func testBLAKE2b256() {
        // Independent values (Python hashlib.blake2b(digest_size=32)).
        XCTAssertEqual(crypto.hash([], key: nil), hex("0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"))
        XCTAssertEqual(crypto.hash(Array("abc".utf8), key: nil),
                       hex("bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"))
        XCTAssertEqual(crypto.hash(Array("abc".utf8), key: Array(0..<32)),
                       hex("d63a32d3e44738d7907f964316c241adaba0abfeabc32349677578a15a203f7f"))
    }

    func testXChaCha20Poly1305Vector() throws {
        // draft-irtf-cfrg-xchacha-03, A.3.1.
        let plaintext = Array("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".utf8)
        let ad = hex("50515253c0c1c2c3c4c5c6c7")
        let key = Array(UInt8(0x80)...UInt8(0x9f))
        let nonce = Array(UInt8(0x40)...UInt8(0x57))
        let expected = hex("bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b4522f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff921f9664c97637da9768812f615c68b13b52e")
            + hex("c0875924c1c7987947deafd8780acf49")
        let sealed = crypto.seal(key: key, nonce: nonce, plaintext: plaintext, associatedData: ad)
        XCTAssertEqual(sealed, expected)
        XCTAssertEqual(crypto.open(key: key, nonce: nonce, ciphertext: sealed, associatedData: ad), plaintext)
        var forged = sealed
        forged[0] ^= 1
        XCTAssertNil(crypto.open(key: key, nonce: nonce, ciphertext: forged, associatedData: ad))
        XCTAssertNil(crypto.open(key: key, nonce: nonce, ciphertext: sealed, associatedData: ad + [0]))
        XCTAssertNil(crypto.open(key: key, nonce: nonce, ciphertext: Array(sealed.prefix(15)), associatedData: ad))
    }

    func testEmptyInputs() {
        let key = crypto.randomBytes(32), nonce = crypto.randomBytes(24)
        let sealed = crypto.seal(key: key, nonce: nonce, plaintext: [], associatedData: [])
        XCTAssertEqual(sealed.count, 16)
        XCTAssertEqual(crypto.open(key: key, nonce: nonce, ciphertext: sealed, associatedData: []), [])
        XCTAssertEqual(crypto.randomBytes(0), [])
    }

    func testRandomAndWipe() {
        XCTAssertNotEqual(crypto.randomBytes(32), crypto.randomBytes(32))
        var secret = crypto.randomBytes(32)
        crypto.wipe(&secret)
        XCTAssertEqual(secret, [UInt8](repeating: 0, count: 32))
        var empty: [UInt8] = []
        crypto.wipe(&empty)
    }
}

// MARK: - Helpers shared by the SodiumTests files

func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var iterator = text.unicodeScalars.makeIterator()
    while let high = iterator.next(), let low = iterator.next() {
        bytes.append(UInt8(String(high) + String(low), radix: 16)!)
    }
    return bytes
}

func hexString(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
}

/// Curve25519 points whose X25519 product is zero for every secret key: 0, 1, the points of
/// order 8, p-1, and their non-canonical encodings (p, p+1, ...). From the libsodium and
/// "May the Fourth Be With You" blacklists.
let lowOrderPoints: [[UInt8]] = [
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
].map(hex)
