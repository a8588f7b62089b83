import CoreTestSupport
import PeerVoiceCore
import Sodium
import XCTest

/// A transfer's file hash: BLAKE2b-256 through libsodium, the value `b2sum -l 256` prints,
/// however the content is cut into pieces.
final class ContentHashTests: XCTestCase {
    private let sodium = LibSodium()

    func testTheHashIsWhatB2sumPrints() {
        XCTAssertEqual(sodium.algorithm, .blake2b256)
        // printf abc | b2sum -l 256; printf '' | b2sum -l 256
        XCTAssertEqual(ContentHashChecks.hex(sodium, [Array("abc".utf8)]), "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319")
        XCTAssertEqual(ContentHashChecks.hex(sodium, []), "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8")
    }

    func testPiecesMakeNoDifferenceAndZerosCountAsBytes() {
        ContentHashChecks.assertPiecesAndZerosMakeNoDifference(sodium)
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        XCTAssertEqual(ContentHashChecks.hex(sodium, [bytes]), sodium.hash(bytes, key: nil).map { String(format: "%02x", $0) }.joined(),
                       "the one-shot hash agrees")
    }
}
