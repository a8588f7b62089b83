import CoreTestSupport
import OpenSSLCrypto
import PeerVoiceCore
import XCTest

/// A transfer's file hash between version-10 sides: SHA-256 through libcrypto, the value
/// `sha256sum` prints, however the content is cut into pieces.
final class SHA256Tests: XCTestCase {
    private let sha256 = OpenSSLSHA256()

    func testTheHashIsWhatSha256sumPrints() {
        XCTAssertEqual(sha256.algorithm, .sha256)
        // printf abc | sha256sum; printf '' | sha256sum
        XCTAssertEqual(ContentHashChecks.hex(sha256, [Array("abc".utf8)]), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(ContentHashChecks.hex(sha256, []), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    func testPiecesMakeNoDifferenceAndZerosCountAsBytes() {
        ContentHashChecks.assertPiecesAndZerosMakeNoDifference(sha256)
    }
}
