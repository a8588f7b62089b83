import CoreTestSupport
import OpenSSLCrypto
import PeerVoiceCore
import Sodium
import XCTest

/// A link's records after a real key exchange (libsodium), at version 10 (XChaCha20-Poly1305) and
/// at 11 (AES-256-GCM through OpenSSL): the cipher follows the agreed version (SECURITY.md §4).
final class LinkCipherTests: XCTestCase {
    let crypto = LibSodium()
    let aesGCM = OpenSSLAESGCM()

    private func completedLink() throws -> (initiator: HandshakeResult, responder: HandshakeResult) {
        let initiator = try Handshake(role: .initiator, identity: .generate(using: crypto), payload: [1], crypto: crypto)
        let responder = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [2], crypto: crypto)
        try exchange(initiator, responder)
        return (try XCTUnwrap(initiator.result), try XCTUnwrap(responder.result))
    }

    func testTheAgreedVersionPicksTheCipher() {
        for version: UInt16 in 6...10 {
            XCTAssertEqual(LinkCipher(version: version, aesGCM: aesGCM).algorithm, .xChaCha20Poly1305, "version \(version)")
        }
        for version: UInt16 in [11, 12, .max] {
            XCTAssertEqual(LinkCipher(version: version, aesGCM: aesGCM).algorithm, .aes256GCM, "version \(version)")
        }
        XCTAssertEqual(LinkCipher.aes256GCMVersion, Wire.protocolVersion, "this build's own links seal with AES-256-GCM")
        XCTAssertEqual(LinkCipher.xChaCha20Poly1305.algorithm, .xChaCha20Poly1305)
    }

    /// Frames of every size both ways, at 10 and at 11; each record is 24 bytes longer than its
    /// frame, the layout of both versions.
    func testRecordsBothWaysAtVersionsTenAndEleven() throws {
        let (i, r) = try completedLink()
        let sizes = [0, 1, 15, 16, 17, 1000, 65_536, Wire.maxFrameBodyBytes - SealedRecord.overheadBytes]
        var recordsByVersion: [UInt16: [[UInt8]]] = [:]
        for version: UInt16 in [10, 11] {
            let cipher = LinkCipher(version: version, aesGCM: aesGCM)
            var iSealer = i.makeLinkSealer(cipher), rOpener = r.makeLinkOpener(cipher)
            var rSealer = r.makeLinkSealer(cipher), iOpener = i.makeLinkOpener(cipher)
            for (index, size) in sizes.enumerated() {
                let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) }
                let toResponder = try iSealer.seal(body), toInitiator = try rSealer.seal(body)
                XCTAssertEqual(toResponder.count, body.count + 24)
                XCTAssertEqual(Array(toResponder.prefix(8)), [0, 0, 0, 0, 0, 0, 0, UInt8(index)], "the counter in front")
                XCTAssertNotEqual(toResponder, toInitiator, "each direction its own key and nonces")
                XCTAssertEqual(try rOpener.open(toResponder), body, "version \(version), \(size) bytes")
                XCTAssertEqual(try iOpener.open(toInitiator), body, "version \(version), \(size) bytes")
                recordsByVersion[version, default: []].append(toResponder)
            }
        }
        // Version 10's records are XChaCha20-Poly1305's, as before version 11 existed.
        var before = RecordSealer(key: i.sendKey, direction: .initiatorToResponder, purpose: .link, crypto: crypto)
        for (index, size) in sizes.enumerated() {
            let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) }
            XCTAssertEqual(try before.seal(body), recordsByVersion[10]![index])
            XCTAssertNotEqual(recordsByVersion[10]![index], recordsByVersion[11]![index])
        }
    }

    /// Were a preamble edited so that one side runs at 11 and the other at 10, the records of
    /// each open at neither (the HELLO check then ends the link: PROTOCOL.md §3.1).
    func testSidesThatChoseDifferentCiphersOpenNothing() throws {
        let (i, r) = try completedLink()
        let atEleven = LinkCipher(version: 11, aesGCM: aesGCM), atTen = LinkCipher(version: 10, aesGCM: aesGCM)
        var iSealer = i.makeLinkSealer(atEleven), rOpener = r.makeLinkOpener(atTen)
        var rSealer = r.makeLinkSealer(atTen), iOpener = i.makeLinkOpener(atEleven)
        let body = Frame.pairing(.asking).encodedBody()
        assertThrows(RecordError.tampered(counter: 0)) { _ = try rOpener.open(try iSealer.seal(body)) }
        assertThrows(RecordError.tampered(counter: 0)) { _ = try iOpener.open(try rSealer.seal(body)) }
    }

    /// Any change to an AES-256-GCM record is found, and the buffer it was opened into holds
    /// nothing of the plaintext afterwards (GCM decrypts before it checks the tag).
    func testATamperedRecordAtElevenIsRejectedAndLeavesNoPlaintext() throws {
        let (i, r) = try completedLink()
        let cipher = LinkCipher(version: 11, aesGCM: aesGCM)
        var sealer = i.makeLinkSealer(cipher)
        let body = (0..<100).map { UInt8($0 + 1) }
        let record = try sealer.seal(body)
        for position in record.indices {
            var opener = r.makeLinkOpener(cipher)
            var changed = record
            changed[position] ^= 0x20
            var buffer = [UInt8](repeating: 0xEE, count: 200)
            assertThrows(RecordError.tampered(counter: changed.prefix(8).reduce(0) { $0 << 8 | UInt64($1) })) {
                _ = try opener.open(changed, into: &buffer)
            }
            XCTAssertEqual(Array(buffer.prefix(100)), [UInt8](repeating: 0, count: 100), "byte \(position) changed")
            XCTAssertEqual(opener.rejections.tampered, 1)
        }
    }

    /// The bulk path seals in place (`sendChannelFrameInPlace`): the same bytes as the array path.
    func testSealingInPlaceAtElevenGivesTheSameRecord() throws {
        let (i, r) = try completedLink()
        let cipher = LinkCipher(version: 11, aesGCM: aesGCM)
        var arrays = i.makeLinkSealer(cipher), inPlace = i.makeLinkSealer(cipher)
        var opener = r.makeLinkOpener(cipher)
        XCTAssertEqual(inPlace.rekeyLimit, LinkCipher.aes256GCMRekeyLimit)
        XCTAssertEqual(i.makeLinkSealer(.xChaCha20Poly1305).rekeyLimit, RecordSealer.defaultRekeyLimit)
        var plaintext: [UInt8] = []
        for size in [0, 1, 31, 64 * 1024] {
            let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 ^ size) }
            var frame = [UInt8](repeating: 0xCC, count: size + SealedRecord.overheadBytes + 5)
            frame.replaceSubrange(SealedRecord.headerBytes..<(SealedRecord.headerBytes + size), with: body)
            try frame.withUnsafeMutableBytes { try inPlace.sealInPlace($0, plaintextBytes: size) }
            let record = Array(frame.prefix(size + SealedRecord.overheadBytes))
            XCTAssertEqual(record, try arrays.seal(body), "\(size) bytes")
            XCTAssertEqual(Array(frame.suffix(5)), [0xCC, 0xCC, 0xCC, 0xCC, 0xCC], "nothing written past the record")
            let count = try opener.open(record, into: &plaintext)
            XCTAssertEqual(Array(plaintext.prefix(count)), body)
        }
    }
}
