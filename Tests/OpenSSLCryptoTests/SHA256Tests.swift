import OpenSSLCrypto
import PeerVoiceCore
import XCTest

/// A transfer's file hash between version-10 sides: SHA-256 through libcrypto, the value
/// `sha256sum` prints, however the content is cut into pieces.
final class SHA256Tests: XCTestCase {
    private let sha256 = OpenSSLSHA256()

    private func hash(_ pieces: [[UInt8]]) -> String {
        var hasher = sha256.makeHasher()
        for piece in pieces { hasher.update(piece) }
        return hasher.finish().map { String(format: "%02x", $0) }.joined()
    }

    func testTheHashIsWhatSha256sumPrints() {
        XCTAssertEqual(sha256.algorithm, .sha256)
        // printf abc | sha256sum; printf '' | sha256sum
        XCTAssertEqual(hash([Array("abc".utf8)]), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hash([]), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    func testPiecesMakeNoDifferenceAndZerosCountAsBytes() {
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let whole = hash([bytes])
        XCTAssertEqual(hash([Array(bytes[..<1]), Array(bytes[1..<65_537]), [], Array(bytes[65_537...])]), whole)
        var zeros = sha256.makeHasher()
        zeros.update([7])
        zeros.updateWithZeros(200_000)
        XCTAssertEqual(zeros.finish().map { String(format: "%02x", $0) }.joined(), hash([[7] + [UInt8](repeating: 0, count: 200_000)]))
    }
}
