import PeerVoiceCore
import XCTest

/// Peer ids, references and routes: a peer is its key, an address only a way to reach it.
final class PeerIdentityTests: XCTestCase {
    /// A stand-in hash (the id's derivation only needs some 32-byte function of its input); the
    /// real BLAKE2b is checked against a fixed vector in SodiumTests.
    private struct SumHash: CryptoPrimitives {
        func randomBytes(_ count: Int) -> [UInt8] { [UInt8](repeating: 0, count: count) }
        func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) { ([], []) }
        func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]? { nil }
        func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8] {
            (0..<32).map { index in data.enumerated().reduce(UInt8(index)) { $0 &+ $1.element &* UInt8(truncatingIfNeeded: $1.offset + 1) } }
        }
        func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] { [] }
        func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]? { nil }
        func wipe(_ bytes: inout [UInt8]) {}
    }

    func testAnIDIsPVAnd26Base32CharactersOfTheKeysHashAndOnlyOfTheKey() throws {
        let key = try XCTUnwrap(PublicKey(bytes: Array(0..<32)))
        let id = PeerID(key: key, using: SumHash())
        XCTAssertTrue(id.description.hasPrefix("pv:"))
        XCTAssertEqual(id.base32.count, 26)
        XCTAssertTrue(id.base32.allSatisfy { ("a"..."z").contains($0) || ("2"..."7").contains($0) }, id.description)
        XCTAssertEqual(PeerID(key: key, using: SumHash()), id, "the same key, the same id")
        let other = try XCTUnwrap(PublicKey(bytes: Array(1...32)))
        XCTAssertNotEqual(PeerID(key: other, using: SumHash()), id)
        // The domain label goes in front of the key.
        let digest = SumHash().hash(PeerID.domainLabel + key.bytes, key: nil)
        XCTAssertEqual(id.base32.first, Character(Unicode.Scalar(Array("abcdefghijklmnopqrstuvwxyz234567".utf8)[Int(digest[0] >> 3)])))
    }

    func testIDsParseInEitherCaseAndNothingElseParses() {
        let id = "pv:abcdefghijklmnopqrstuvwxyz"
        XCTAssertEqual(PeerID(id)?.description, id)
        XCTAssertEqual(PeerID("PV:ABCDEFGHIJKLMNOPQRSTUVWXYZ")?.description, id, "normalised to lower case")
        for bad in ["", "pv:", "pv:abcdefghijklmnopqrstuvwxy", "pv:abcdefghijklmnopqrstuvwxyza", "pv:abcdefghijklmnopqrstuvwxy1",
                    "pv:abcdefghijklmnopqrstuvwxy8", "xx:abcdefghijklmnopqrstuvwxyz", "ip:127.0.0.1:47800", "pv:abcdefghijklmnopqrstuvwxy/"] {
            XCTAssertNil(PeerID(bad), bad)
        }
    }

    func testARefIsAnIDOrAnAddressAndSaysWhatIsWrong() throws {
        XCTAssertEqual(try PeerRef(parsing: "pv:abcdefghijklmnopqrstuvwxyz"), .id(PeerID("pv:abcdefghijklmnopqrstuvwxyz")!))
        XCTAssertEqual(try PeerRef(parsing: "ip:127.0.0.1:47800"), .address(try PeerAddress(parsing: "ip:127.0.0.1:47800")))
        XCTAssertEqual(try PeerRef(parsing: "aa:bb:cc:dd:ee:ff").description, "AA:BB:CC:DD:EE:FF")
        let cases: [(String, String)] = [
            ("pv:short", "is not a peer id: an id is pv: followed by 26 characters"),
            ("PV:0000000000000000000000000", "is not a peer id"),
            ("bogus", "is not a peer id or address"),
        ]
        for (text, message) in cases {
            XCTAssertThrowsError(try PeerRef(parsing: text), text) { error in
                guard case .invalidArgument(let got) = error as? ServiceError else { return XCTFail("\(error)") }
                XCTAssertTrue(got.contains(message), got)
            }
        }
    }

    func testKeysReadAsHexAndShowAGroupedFingerprint() throws {
        let key = try XCTUnwrap(PublicKey(bytes: Array(0..<32)))
        XCTAssertEqual(PublicKey(hex: key.hex), key)
        XCTAssertEqual(PublicKey(hex: key.hex.uppercased()), key)
        XCTAssertNil(PublicKey(hex: String(key.hex.dropLast())))
        XCTAssertNil(PublicKey(hex: String(key.hex.dropLast()) + "g"))
        XCTAssertNil(PublicKey(bytes: Array(0..<31)))
        XCTAssertEqual(key.fingerprint.split(separator: " ").count, 16)
        XCTAssertEqual(key.fingerprint.replacingOccurrences(of: " ", with: ""), key.hex)
        XCTAssertEqual(key.description, "0001020304050607…", "logs show a prefix, never the whole key")
    }

    func testRoutesAreDialledIPFirstThenTheMostRecent() throws {
        let bt = PeerRoute(address: try PeerAddress(parsing: "AA:BB:CC:DD:EE:FF"), lastSeenMs: 900)
        let oldIP = PeerRoute(address: try PeerAddress(parsing: "ip:10.0.0.1:47800"), lastSeenMs: 100)
        let newIP = PeerRoute(address: try PeerAddress(parsing: "ip:10.0.0.2:47800"), lastSeenMs: 500)
        XCTAssertEqual([bt, oldIP, newIP].sorted(by: PeerRoute.dialOrder), [newIP, oldIP, bt])
        XCTAssertGreaterThan(Transport.ip.linkPreference, Transport.bluetooth.linkPreference, "TCP is kept over RFCOMM")
    }
}
