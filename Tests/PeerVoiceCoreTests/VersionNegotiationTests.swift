import CoreTestSupport
import PeerVoiceCore
import XCTest

/// Version negotiation (docs/PROTOCOL.md §3 and §3.1): what each preamble announces, the version
/// two sides agree on, and what a link carries at it.
final class VersionNegotiationTests: XCTestCase {
    private func preamble(_ lowest: UInt16, _ highest: UInt16) -> [UInt8] {
        Array("PVLK".utf8) + [UInt8(lowest >> 8), UInt8(lowest & 0xFF), UInt8(highest >> 8), UInt8(highest & 0xFF)]
    }

    private func range(_ lowest: UInt16, _ highest: UInt16) -> VersionRange { VersionRange(lowest: lowest, highest: highest)! }

    // MARK: Preambles

    func testThePreambleAnnouncesTheLowestThenTheHighestVersion() {
        XCTAssertEqual(Preamble.bytes, preamble(6, 11))
        XCTAssertEqual(Preamble.bytes(announcing: VersionRange(only: 6)), preamble(6, 0), "one version: bytes 6-7 are 0, as version 6 sent them")
        XCTAssertEqual(Preamble.bytes(announcing: range(7, 9)), preamble(7, 9))
        XCTAssertEqual(VersionRange.supported, range(Wire.minimumProtocolVersion, Wire.protocolVersion))
    }

    /// Each peer's preamble against this side's 6-11: what it speaks, or why it is refused.
    func testAPreambleIsAcceptedWhenItSharesAVersionWithThisSide() {
        let table: [(bytes: [UInt8], outcome: Result<VersionRange, WireError>)] = [
            (preamble(6, 0), .success(VersionRange(only: 6))),   // version 6 (the previous release)
            (preamble(6, 7), .success(range(6, 7))),             // the release that brought channels
            (preamble(6, 8), .success(range(6, 8))),             // the release that brought the dial proof
            (preamble(6, 9), .success(range(6, 9))),             // the release that brought file transfers
            (preamble(6, 10), .success(range(6, 10))),           // the release that brought SHA-256 file hashes
            (preamble(6, 11), .success(range(6, 11))),           // this release
            (preamble(7, 0), .success(VersionRange(only: 7))),
            (preamble(8, 9), .success(range(8, 9))),
            (preamble(9, 10), .success(range(9, 10))),           // a newer side that still speaks 9
            (preamble(6, 0xABCD), .success(range(6, 0xABCD))),
            (preamble(5, 0), .failure(.unsupportedVersion(5))),   // version 5: one version, too old
            (preamble(5, 7), .failure(.unsupportedVersion(5))),   // up to 5, bytes 6-7 meant nothing
            (preamble(10, 11), .success(range(10, 11))),         // a newer side that still speaks 10
            (preamble(11, 12), .success(range(11, 12))),         // a newer side that still speaks 11
            (preamble(12, 0), .failure(.unsupportedVersion(12))),
            (preamble(12, 13), .failure(.unsupportedVersions(range(12, 13)))),
            (preamble(7, 3), .failure(.invalidVersionRange(lowest: 7, highest: 3))),
        ]
        for (bytes, outcome) in table {
            let actual = Result { () throws(WireError) in try Preamble.check(bytes) }
            XCTAssertEqual(actual, outcome, "\(bytes)")
        }
    }

    /// A side of version 5 or older is turned away as soon as bytes 4-5 are in; any other
    /// preamble is decided once all 8 bytes are.
    func testTheDecoderDecidesAsSoonAsTheBytesThatDecideHaveCome() throws {
        var old = FrameDecoder()
        old.append(preamble(5, 0).prefix(6))
        assertThrows(WireError.unsupportedVersion(5)) { try old.next() }

        var newer = FrameDecoder()
        newer.append(preamble(12, 13).prefix(7))
        XCTAssertNil(try newer.next(), "12-13 needs bytes 6-7 to be told apart from 12 alone")
        XCTAssertNil(newer.peerVersions)
        newer.append(preamble(12, 13).suffix(1))
        assertThrows(WireError.unsupportedVersions(range(12, 13))) { try newer.next() }

        var current = FrameDecoder()
        current.append(preamble(6, 0) + Frame.keepalive.encoded())
        XCTAssertEqual(try current.next(), .keepalive)
        XCTAssertEqual(current.peerVersions, VersionRange(only: 6))
    }

    func testTwoSidesAgreeOnTheHighestVersionBothSpeak() {
        let table: [(VersionRange, VersionRange, UInt16?)] = [
            (range(6, 7), VersionRange(only: 6), 6),
            (range(6, 7), range(6, 7), 7),
            (range(6, 7), range(7, 9), 7),
            (range(6, 7), range(8, 9), nil),
            (range(7, 9), VersionRange(only: 6), nil),
            (range(7, 9), range(6, 8), 8),
        ]
        for (a, b, agreed) in table {
            XCTAssertEqual(a.agreed(with: b), agreed, "\(a) with \(b)")
            XCTAssertEqual(b.agreed(with: a), agreed, "both sides compute the same: \(b) with \(a)")
        }
    }

    /// The words a person reads when a link cannot be: which side to update.
    func testARefusalSaysWhichSideToUpdate() {
        let ours = range(6, 7)
        XCTAssertEqual(ours.refusal(of: VersionRange(only: 5), who: "bravo"),
                       "bravo runs PeerVoice protocol 5; this one needs 6 or later: update it")
        XCTAssertEqual(ours.refusal(of: range(8, 9), who: "bravo"),
                       "bravo runs PeerVoice protocol 8-9 only; this one speaks 6-7: update this one")
    }

    // MARK: Links

    private let ours: Capabilities = [.text, .voice, .presence, .hostedCalls, .highestVersion(7)]

    /// A version-6 peer announces text and voice only: presence and hosted calls come with its
    /// version. The link runs at 6.
    func testALinkWithAVersion6PeerRunsAt6WithWhatVersion6Has() throws {
        let link = try LinkProtocol.negotiate(local: range(6, 7), localCapabilities: ours,
                                              peerPreamble: VersionRange(only: 6), peerCapabilities: [.text, .voice])
        XCTAssertEqual(link, LinkProtocol(version: 6, peerVersions: VersionRange(only: 6),
                                          capabilities: [.text, .voice, .presence, .hostedCalls]))
    }

    func testALinkWithAVersion7PeerCarriesWhatBothAnnounced() throws {
        let link = try LinkProtocol.negotiate(local: range(6, 7), localCapabilities: ours, peerPreamble: range(6, 7),
                                              peerCapabilities: [.text, .presence, .highestVersion(7)])
        XCTAssertEqual(link.version, 7)
        XCTAssertEqual(link.capabilities, [.text, .presence], "no voice or hosted calls: the peer did not announce them")
    }

    /// Channels came with version 7: off on a link at 6, even when both announce them (a
    /// version-6 side cannot); a newer peer's unknown feature bits are dropped.
    func testAFeatureNewerThanTheLinkIsOff() throws {
        let newer = try LinkProtocol.negotiate(local: range(6, 7), localCapabilities: ours.union(.channels),
                                               peerPreamble: range(6, 9),
                                               peerCapabilities: [.text, .voice, .presence, .hostedCalls, .channels,
                                                                  Capabilities(rawValue: 1 << 15), .highestVersion(9)])
        XCTAssertEqual(newer.version, 7)
        XCTAssertEqual(newer.capabilities, [.text, .voice, .presence, .hostedCalls, .channels])
        let atSix = try LinkProtocol.negotiate(local: VersionRange(only: 6), localCapabilities: ours.union(.channels),
                                               peerPreamble: range(6, 7),
                                               peerCapabilities: [.text, .voice, .presence, .hostedCalls, .channels, .highestVersion(7)])
        XCTAssertEqual(atSix.version, 6)
        XCTAssertEqual(atSix.capabilities, [.text, .voice, .presence, .hostedCalls])
        // File transfers came with version 9: off on a link at 8.
        let atEight = try LinkProtocol.negotiate(local: range(6, 9), localCapabilities: ours.union([.channels, .transfers]),
                                                 peerPreamble: range(6, 8),
                                                 peerCapabilities: [.text, .channels, .transfers, .highestVersion(8)])
        XCTAssertEqual(atEight.version, 8)
        XCTAssertEqual(atEight.capabilities, [.text, .channels])
    }

    /// The preamble is in the clear, the HELLO authenticated: a man in the middle who lowers a
    /// preamble's highest version (to force version 6) is found out when the HELLO names another.
    func testAPreambleAlteredOnTheWayIsFoundOutByTheHello() {
        assertThrows(WireError.versionsAltered(preamble: 6, hello: 7)) {
            try LinkProtocol.negotiate(local: range(6, 7), localCapabilities: ours, peerPreamble: VersionRange(only: 6),
                                       peerCapabilities: [.text, .voice, .presence, .hostedCalls, .highestVersion(7)])
        }
        // A version-6 HELLO (no version in it) behind a preamble made to say 6-7.
        assertThrows(WireError.versionsAltered(preamble: 7, hello: 6)) {
            try LinkProtocol.negotiate(local: range(6, 7), localCapabilities: ours, peerPreamble: range(6, 7),
                                       peerCapabilities: [.text, .voice])
        }
    }

    func testWhyAFeatureIsOffNamesThePeersVersionOrItsChoice() {
        let old = LinkProtocol(version: 6, peerVersions: VersionRange(only: 6), capabilities: [.text, .voice, .presence, .hostedCalls])
        XCTAssertEqual(old.whyOff(.channels, who: "bravo"),
                       "bravo runs PeerVoice protocol 6; app channels came with protocol 7: update it")
        XCTAssertNil(old.whyOff(.voice, who: "bravo"))
        let quiet = LinkProtocol(version: 7, peerVersions: range(6, 7), capabilities: [.text])
        XCTAssertEqual(quiet.whyOff(.voice, who: "bravo"), "bravo runs a PeerVoice without voice (its service does not offer it)")
        let dialProofRelease = LinkProtocol(version: 8, peerVersions: range(6, 8), capabilities: [.text, .channels])
        XCTAssertEqual(dialProofRelease.whyOff(.transfers, who: "bravo"),
                       "bravo runs PeerVoice protocol 8; file transfers came with protocol 9: update it")
        XCTAssertEqual(TransferWire.protocolVersion, 9)
        XCTAssertEqual(TransferWire.capability.rawValue, 0x200)
        XCTAssertEqual(ContentHashes.sha256Version, 10)
        XCTAssertEqual(LinkCipher.aes256GCMVersion, 11)
        XCTAssertEqual(Capabilities.sha256FileHashes.rawValue, 0x400)
    }

    /// A transfer stream hashes its files with SHA-256 only where both sides announced it at
    /// version 10; with a version-9 side (or one that does not announce it), BLAKE2b-256 as before.
    func testTransfersHashWithSHA256OnlyWhereBothSidesAnnounceItAtVersion10() throws {
        struct Named: ContentHashing {
            let algorithm: ContentHashAlgorithm
            func makeHasher() -> any ContentHasher { fatalError("not hashed here") }
        }
        let both = ContentHashes(blake2b256: Named(algorithm: .blake2b256), sha256: Named(algorithm: .sha256))
        let blake2bOnly = ContentHashes(blake2b256: Named(algorithm: .blake2b256), sha256: nil)
        XCTAssertEqual(both.capabilities, .sha256FileHashes)
        XCTAssertEqual(blake2bOnly.capabilities, [])
        let local = ours.union([.channels, .transfers])
        func link(_ peer: VersionRange, _ features: Capabilities, localHashes: ContentHashes = both) throws -> LinkProtocol {
            try LinkProtocol.negotiate(local: .supported, localCapabilities: local.union(localHashes.capabilities), peerPreamble: peer,
                                       peerCapabilities: features.union(.highestVersion(peer.highest)))
        }
        let cases: [(String, LinkProtocol, ContentHashes, ContentHashAlgorithm)] = [
            ("two version-10 sides", try link(range(6, 10), [.text, .channels, .transfers, .sha256FileHashes]), both, .sha256),
            ("a version-9 peer", try link(range(6, 9), [.text, .channels, .transfers]), both, .blake2b256),
            ("a version-9 peer that sets bit 10 anyway", try link(range(6, 9), [.text, .channels, .transfers, .sha256FileHashes]), both,
             .blake2b256),
            ("a version-10 peer without the bit", try link(range(6, 10), [.text, .channels, .transfers]), both, .blake2b256),
            ("this side without SHA-256", try link(range(6, 10), [.text, .channels, .transfers, .sha256FileHashes],
                                                   localHashes: blake2bOnly), blake2bOnly, .blake2b256),
        ]
        for (what, negotiated, hashes, expected) in cases {
            XCTAssertEqual(hashes.hashing(on: negotiated).algorithm, expected, what)
        }
        XCTAssertEqual(both.hashing(on: nil).algorithm, .blake2b256, "no link known")
    }

    /// HELLO's capabilities field: features in bits 0-15, the highest version in bits 16-31
    /// (what a version-6 receiver ignores as reserved bits).
    func testTheHighestVersionTravelsInTheCapabilitiesUpperBits() throws {
        let hello = try Hello(instanceID: .random(), capabilities: [.text, .voice, .presence, .hostedCalls, .highestVersion(7)],
                              listenPort: 1, voicePort: 0, name: "")
        let body = Frame.hello(hello).encodedBody()
        XCTAssertEqual(Array(body[17..<21]), [0x00, 0x07, 0x00, 0x0F])
        guard case .hello(let decoded) = try Frame(body: body) else { return XCTFail("not a HELLO") }
        XCTAssertEqual(decoded.capabilities.highestVersion, 7)
        XCTAssertEqual(decoded.capabilities.features, [.text, .voice, .presence, .hostedCalls])
        XCTAssertNil(Capabilities([.text, .voice]).highestVersion, "a version-6 HELLO names no version")
    }
}
