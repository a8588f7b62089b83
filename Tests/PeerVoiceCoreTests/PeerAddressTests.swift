import PeerVoiceCore
import XCTest

final class PeerAddressTests: XCTestCase {
    func testBluetoothAddressesAreNormalisedToUpperCase() throws {
        let peer = try PeerAddress(parsing: "aa:bb:cc:dd:ee:0f")
        XCTAssertEqual(peer.description, "AA:BB:CC:DD:EE:0F")
        XCTAssertEqual(peer.transport, .bluetooth)
        XCTAssertEqual(peer, try PeerAddress(parsing: "AA:BB:CC:DD:EE:0F"))
    }

    func testIPPeers() throws {
        let v4 = try PeerAddress(parsing: "ip:127.0.0.1:47800")
        XCTAssertEqual(v4.transport, .ip)
        XCTAssertEqual(v4.host, "127.0.0.1")
        XCTAssertEqual(v4.port, 47800)
        XCTAssertEqual(v4.description, "ip:127.0.0.1:47800")
        let v6 = try PeerAddress(parsing: "ip:[FE80::1]:9")
        XCTAssertEqual(v6.host, "fe80::1")
        XCTAssertEqual(v6.description, "ip:[fe80::1]:9")
        XCTAssertEqual(PeerAddress(ipHost: "::1", port: 47800).description, "ip:[::1]:47800")
    }

    func testLinkLocalAddressesKeepTheirZoneAsWritten() throws {
        let zoned = try PeerAddress(parsing: "ip:[FE80::1%enP1s0]:47800")
        XCTAssertEqual(zoned.host, "fe80::1%enP1s0", "the address is normalised, the interface name is not")
        XCTAssertEqual(zoned.description, "ip:[fe80::1%enP1s0]:47800")
        XCTAssertEqual(try PeerAddress(parsing: "ip:[fe80::1%e=h0]:1").host, "fe80::1%e=h0", "Linux allows such interface names")
        for bad in ["ip:[fe80::1%]:1", "ip:[fe80::1%eth 0]:1", "ip:[fe80::1%abcdefghijklmnop]:1", "ip:[fe80::1%eth0%x]:1",
                    "ip:[fe80::1%a/b]:1"] {
            XCTAssertThrowsError(try PeerAddress(parsing: bad), bad)
        }
    }

    func testMalformedIDsSayWhatIsWrong() {
        let cases: [(String, String)] = [
            ("bogus", "is not a peer id"),
            ("ip:1.2.3.4", "has no port"),
            ("ip:1.2.3.4:0", "is not a port"),
            ("ip:1.2.3.4:65536", "is not a port"),
            ("ip:256.0.0.1:80", "is not an IPv4 address"),
            ("ip:host.example:80", "numeric address"),
            ("ip:[::1]80", "ip:[ADDRESS]:PORT"),
            ("ip:[xyz]:80", "is not an IPv6 address"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try PeerAddress(parsing: text), text) { error in
                guard case ServiceError.invalidArgument(let message) = error else { return XCTFail("\(text): \(error)") }
                XCTAssertTrue(message.contains(expected), "\(text): \(message)")
            }
        }
    }

    func testMessageTextLimits() throws {
        XCTAssertThrowsError(try MessageText.validate("")) { XCTAssertEqual(($0 as? ServiceError)?.name, "InvalidArgument") }
        XCTAssertNoThrow(try MessageText.validate(String(repeating: "a", count: 65_536)))
        XCTAssertThrowsError(try MessageText.validate(String(repeating: "a", count: 65_537))) {
            XCTAssertEqual(($0 as? ServiceError)?.name, "TooLarge")
        }
        // The limit counts UTF-8 bytes, not characters: 16,385 four-byte emoji are 65,540 bytes.
        XCTAssertThrowsError(try MessageText.validate(String(repeating: "😀", count: 16_385)))
    }
}
