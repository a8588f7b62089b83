import PeerVoiceCore
import XCTest

final class LANAdvertisementTests: XCTestCase {
    private static let fingerprint = String(repeating: "0123456789abcdef", count: 4)

    private func entries(_ strings: String...) -> [[UInt8]] { strings.map { Array($0.utf8) } }

    func testEncodesVersionFirstThenWhatIsKnown() throws {
        let ad = try LANAdvertisement(name: "Ana's laptop", capabilities: [.voice, .text], fingerprint: Self.fingerprint)
        XCTAssertEqual(ad.txtEntries.map { String(decoding: $0, as: UTF8.self) },
                       ["pv=1", "n=Ana's laptop", "c=text,voice", "fp=\(Self.fingerprint)"])
        XCTAssertEqual(try LANAdvertisement(name: nil, capabilities: [], fingerprint: nil).txtEntries, entries("pv=1"))
    }

    /// A presence record carries the version and the tag, nothing else.
    func testAPresenceRecordHoldsOnlyTheTag() throws {
        let ad = try LANAdvertisement(presenceTag: "0123456789abcdef")
        XCTAssertEqual(ad.txtEntries.map { String(decoding: $0, as: UTF8.self) }, ["pv=1", "t=0123456789abcdef"])
        let decoded = try LANAdvertisement(txtEntries: ad.txtEntries)
        XCTAssertEqual(decoded, ad)
        XCTAssertNil(decoded.name)
        XCTAssertNil(decoded.fingerprint)
        XCTAssertThrowsError(try LANAdvertisement(presenceTag: "xyz"))
    }

    func testRoundTripsInAnyOrder() throws {
        let ad = try LANAdvertisement(name: "Café ☕", capabilities: [.text], fingerprint: Self.fingerprint)
        XCTAssertEqual(try LANAdvertisement(txtEntries: ad.txtEntries.reversed()), ad)
        XCTAssertEqual(try LANAdvertisement(txtEntries: ad.txtEntries), ad)
    }

    /// What a browser reads from records others wrote (valid ones).
    func testDecodesRecords() throws {
        let cases: [([[UInt8]], String?, Set<LANAdvertisement.Capability>, String?)] = [
            (entries("pv=1"), nil, [], nil),
            (entries("PV=1", "N=x"), "x", [], nil),                              // keys ignore case
            (entries("pv=1", "c=voice,text,video"), nil, [.text, .voice], nil),  // unknown capability skipped
            (entries("pv=1", "future=1", "flag"), nil, [], nil),                 // unknown keys, boolean key
            (entries("fp=\(Self.fingerprint)", "pv=1"), nil, [], Self.fingerprint),
            (entries("pv=01", "n=" + String(repeating: "é", count: 125)), String(repeating: "é", count: 125), [], nil),
        ]
        for (record, name, capabilities, fingerprint) in cases {
            let ad = try LANAdvertisement(txtEntries: record)
            XCTAssertEqual(ad.name, name, "\(record)")
            XCTAssertEqual(ad.capabilities, capabilities, "\(record)")
            XCTAssertEqual(ad.fingerprint, fingerprint, "\(record)")
        }
    }

    /// Records nobody should accept, and the error each one gets.
    func testRefusesMalformedRecords() {
        let cases: [([[UInt8]], LANAdvertisementError)] = [
            ([], .missingVersion),
            (entries("n=x"), .missingVersion),
            (entries("pv=2"), .unsupportedVersion(2)),
            (entries("pv=0"), .unsupportedVersion(0)),
            (entries("pv="), .malformedValue(key: "pv")),
            (entries("pv"), .malformedValue(key: "pv")),
            (entries("pv=1.0"), .malformedValue(key: "pv")),
            (entries("pv=999999"), .malformedValue(key: "pv")),
            (entries("pv=1", "pv=1"), .duplicateKey("pv")),
            (entries("pv=1", "n=a", "N=b"), .duplicateKey("n")),
            (entries("pv=1", ""), .emptyEntry),
            (entries("pv=1", "=x"), .malformedKey),
            (entries("pv=1", "toolongkey=x"), .malformedKey),
            ([Array("pv=1".utf8), [0x6B, 0x01, 0x3D]], .malformedKey),
            ([Array("pv=1".utf8), Array("n=".utf8) + [0xC3, 0x28]], .invalidUTF8(key: "n")),
            (entries("pv=1", "n="), .malformedValue(key: "n")),
            (entries("pv=1", "n=a\nb"), .malformedValue(key: "n")),
            (entries("pv=1", "n=" + String(repeating: "a", count: 251)), .malformedValue(key: "n")),
            ([Array("pv=1".utf8), Array(repeating: UInt8(ascii: "x"), count: 256)], .entryTooLong(256)),
            (entries("pv=1", "c=text,,voice"), .malformedValue(key: "c")),
            (entries("pv=1", "c=text voice"), .malformedValue(key: "c")),
            (entries("pv=1", "fp=abc"), .malformedValue(key: "fp")),
            (entries("pv=1", "fp=" + Self.fingerprint.uppercased()), .malformedValue(key: "fp")),
            (entries("pv=1", "t=0123"), .malformedValue(key: "t")),
            (entries("pv=1", "t=0123456789ABCDEF"), .malformedValue(key: "t")),
            (entries("pv=1", "n=x", "t=0123456789abcdef"), .malformedValue(key: "t")),
            (entries("pv=1", "fp=\(Self.fingerprint)", "t=0123456789abcdef"), .malformedValue(key: "t")),
            (Array(repeating: Array("x=1".utf8), count: 33), .tooManyEntries(33)),
        ]
        for (record, expected) in cases {
            XCTAssertThrowsError(try LANAdvertisement(txtEntries: record), "\(record)") { error in
                XCTAssertEqual(error as? LANAdvertisementError, expected, "\(record.map { String(decoding: $0, as: UTF8.self) })")
            }
        }
    }

    func testEncoderRefusesWhatTheDecoderWould() {
        XCTAssertThrowsError(try LANAdvertisement(name: "", capabilities: [], fingerprint: nil))
        XCTAssertThrowsError(try LANAdvertisement(name: nil, capabilities: [], fingerprint: "ABC"))
    }

    func testAdvertisableNameFitsOneEntry() throws {
        let long = String(repeating: "😀", count: 100)  // 400 bytes
        let name = try XCTUnwrap(LANAdvertisement.advertisableName(long))
        XCTAssertEqual(name.utf8.count, 248)  // 62 whole emoji
        XCTAssertNoThrow(try LANAdvertisement(name: name, capabilities: [], fingerprint: nil))
        XCTAssertEqual(LANAdvertisement.advertisableName("a\u{7}b\nc"), "abc")
        XCTAssertNil(LANAdvertisement.advertisableName("\n"))
        XCTAssertNil(LANAdvertisement.advertisableName(""))
    }

    func testServiceNamesAfterCollisionsStayOneLabel() {
        XCTAssertEqual(LANServiceName.candidate(for: "laptop", attempt: 1), "laptop")
        XCTAssertEqual(LANServiceName.candidate(for: "laptop", attempt: 2), "laptop #2")
        XCTAssertEqual(LANServiceName.candidate(for: "", attempt: 1), "PeerVoice")
        let long = String(repeating: "ü", count: 40)  // 80 bytes
        XCTAssertEqual(LANServiceName.candidate(for: long, attempt: 1), String(repeating: "ü", count: 31))
        let twelfth = LANServiceName.candidate(for: long, attempt: 12)
        XCTAssertEqual(twelfth, String(repeating: "ü", count: 29) + " #12")
        XCTAssertLessThanOrEqual(twelfth.utf8.count, 63)
    }
}

final class LANRouteTests: XCTestCase {
    func testRoutesFromResolverAnswers() throws {
        let cases: [(Int32, String, UInt16, String?, String)] = [
            (0, "192.168.1.20", 47800, "eth0", "ip:192.168.1.20:47800"),
            (1, "2001:db8::7", 47800, "eth0", "ip:[2001:db8::7]:47800"),
            (1, "FE80::1", 47800, "eth0", "ip:[fe80::1%eth0]:47800"),
            (1, "febf:0:0:0:0:0:0:1", 9, "wlp2s0", "ip:[febf:0:0:0:0:0:0:1%wlp2s0]:9"),
            (1, "fec0::1", 9, nil, "ip:[fec0::1]:9"),  // not link-local: no zone needed
        ]
        for (proto, address, port, interface, expected) in cases {
            let route = try LANRoute(addressProtocol: proto, address: address, port: port, interfaceName: interface)
            XCTAssertEqual(route.description, expected)
        }
        XCTAssertEqual(try LANRoute(addressProtocol: 1, address: "fe80::1", port: 1, interfaceName: "eth0").host, "fe80::1%eth0")
    }

    func testRefusesAnswersThatAreNoRoute() {
        let cases: [(Int32, String, UInt16, String?, LANRouteError)] = [
            (0, "192.168.1.20", 0, nil, .zeroPort),
            (0, "fe80::1", 1, nil, .malformedAddress),
            (1, "192.168.1.20", 1, nil, .malformedAddress),
            (0, "pv-host-a.local", 1, nil, .malformedAddress),
            (0, "1.2.3.4%eth0", 1, nil, .malformedAddress),
            (1, "fe80::1%eth0", 1, "eth0", .malformedAddress),
            (1, "fe80::1", 1, nil, .missingZone),
            (1, "fe80::1", 1, "", .missingZone),
            (1, "fe80::1", 1, "eth0/../x", .missingZone),
            (1, "fe80::1", 1, "a-very-long-interface", .missingZone),
            (2, "1.2.3.4", 1, nil, .unknownProtocol(2)),
            (-1, "1.2.3.4", 1, nil, .unknownProtocol(-1)),
        ]
        for (proto, address, port, interface, expected) in cases {
            XCTAssertThrowsError(try LANRoute(addressProtocol: proto, address: address, port: port, interfaceName: interface),
                                 address) { XCTAssertEqual($0 as? LANRouteError, expected, address) }
        }
    }
}
