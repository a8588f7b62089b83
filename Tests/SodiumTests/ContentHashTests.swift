import PeerVoiceCore
import Sodium
import XCTest

/// A transfer's file hash: BLAKE2b-256 through libsodium, the value `b2sum -l 256` prints,
/// however the content is cut into pieces.
final class ContentHashTests: XCTestCase {
    private let sodium = LibSodium()

    private func hash(_ pieces: [[UInt8]]) -> String {
        var hasher = sodium.makeHasher()
        for piece in pieces { hasher.update(piece) }
        return hasher.finish().map { String(format: "%02x", $0) }.joined()
    }

    func testTheHashIsWhatB2sumPrints() {
        // printf abc | b2sum -l 256; printf '' | b2sum -l 256
        XCTAssertEqual(hash([Array("abc".utf8)]), "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319")
        XCTAssertEqual(hash([]), "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8")
    }

    func testPiecesMakeNoDifferenceAndZerosCountAsBytes() {
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let whole = hash([bytes])
        XCTAssertEqual(hash([Array(bytes[..<1]), Array(bytes[1..<65_537]), [], Array(bytes[65_537...])]), whole)
        XCTAssertEqual(whole, sodium.hash(bytes, key: nil).map { String(format: "%02x", $0) }.joined(), "the one-shot hash agrees")
        var zeros = sodium.makeHasher()
        zeros.update([7])
        zeros.updateWithZeros(200_000)
        XCTAssertEqual(zeros.finish(), sodium.hash([7] + [UInt8](repeating: 0, count: 200_000), key: nil))
    }
}
