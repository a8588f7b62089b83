import PeerVoiceCore
import XCTest

/// What every ``ContentHashing`` must do, whichever library implements it: its hash as hex for a
/// content given in pieces, and that neither the pieces nor zeros added as a hole change it.
public enum ContentHashChecks {
    /// The hash of the pieces' concatenation, in lowercase hex (what `b2sum`/`sha256sum` print).
    public static func hex(_ hashing: any ContentHashing, _ pieces: [[UInt8]]) -> String {
        var hasher = hashing.makeHasher()
        for piece in pieces { hasher.update(piece) }
        return hasher.finish().map { String(format: "%02x", $0) }.joined()
    }

    /// 300,000 bytes hashed whole and in uneven pieces (one empty) give one hash; a byte then
    /// 200,000 zeros added by `updateWithZeros` hash as those bytes do.
    public static func assertPiecesAndZerosMakeNoDifference(_ hashing: any ContentHashing,
                                                            file: StaticString = #filePath, line: UInt = #line) {
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let whole = hex(hashing, [bytes])
        XCTAssertEqual(hex(hashing, [Array(bytes[..<1]), Array(bytes[1..<65_537]), [], Array(bytes[65_537...])]), whole,
                       file: file, line: line)
        var zeros = hashing.makeHasher()
        zeros.update([7])
        zeros.updateWithZeros(200_000)
        XCTAssertEqual(zeros.finish().map { String(format: "%02x", $0) }.joined(),
                       hex(hashing, [[7] + [UInt8](repeating: 0, count: 200_000)]), file: file, line: line)
    }
}
