import PeerVoiceCore
import XCTest

/// The link's record rule (docs/PROTOCOL.md §4.1): a record that does not open is dropped and the
/// link goes on until the eighth; a record that opens after a gap in the counters ends the link.
final class LinkRecordOpenerTests: XCTestCase {
    private let key = [UInt8](repeating: 7, count: 32)

    private func makeEnds() -> (RecordSealer, LinkRecordOpener) {
        let crypto = FakeCrypto()
        return (RecordSealer(key: key, direction: .initiatorToResponder, purpose: .link, crypto: crypto),
                LinkRecordOpener(RecordOpener(key: key, direction: .initiatorToResponder, purpose: .link, mode: .stream, crypto: crypto)))
    }

    private func open(_ opener: inout LinkRecordOpener, _ record: [UInt8]) throws(LinkRecordOpener.Ending) -> [UInt8]? {
        var buffer: [UInt8] = []
        guard case .opened(let bytes) = try opener.open(record, into: &buffer) else { return nil }
        return Array(buffer[0..<bytes])
    }

    func testRecordsInOrderOpen() throws {
        var (sealer, opener) = makeEnds()
        for n in 0..<50 { XCTAssertEqual(try open(&opener, try sealer.seal([UInt8(n)])), [UInt8(n)]) }
        XCTAssertEqual(opener.rejections.total, 0)
    }

    /// Forged, truncated and replayed records lose nothing of the peer's: each is dropped, the
    /// next record still opens, and the eighth ends the link.
    func testRecordsThatDoNotOpenAreDroppedUntilTheEighth() throws {
        var (sealer, opener) = makeEnds()
        var good = try sealer.seal([0])
        XCTAssertEqual(try open(&opener, good), [0])
        for n in 1...7 {
            let bad: [UInt8]
            switch n % 3 {
            case 0: bad = good.enumerated().map { $0.offset == good.count - 1 ? $0.element ^ 0x80 : $0.element }
            case 1: bad = Array(good.prefix(20))
            default: bad = good
            }
            XCTAssertNil(try open(&opener, bad), "bad record \(n) opened")
            good = try sealer.seal([UInt8(n)])
            XCTAssertEqual(try open(&opener, good), [UInt8(n)], "the record after bad record \(n)")
        }
        XCTAssertEqual(opener.rejections.total, 7)
        XCTAssertThrowsError(try open(&opener, good)) { error in
            XCTAssertEqual(error as? LinkRecordOpener.Ending, .tooManyRejected(8))
            XCTAssertEqual("\(error)", "8 records failed to open")
        }
    }

    /// Simulation seeds 22 and 141: a record changed on the way does not open; the next one does,
    /// but one of the peer's is missing: the link ends instead of handing on a stream with a hole.
    func testARecordLostOnTheWayEndsTheLinkAtTheNext() throws {
        var (sealer, opener) = makeEnds()
        XCTAssertEqual(try open(&opener, try sealer.seal([1])), [1])
        var changed = try sealer.seal([2])
        changed[10] ^= 1
        XCTAssertNil(try open(&opener, changed))
        let next = try sealer.seal([3])
        XCTAssertThrowsError(try open(&opener, next)) { error in
            XCTAssertEqual(error as? LinkRecordOpener.Ending, .recordsLost(expected: 1, received: 2))
        }
    }

    /// Reordered records: the later one opens first, after a gap.
    func testReorderedRecordsEndTheLink() throws {
        var (sealer, opener) = makeEnds()
        _ = try sealer.seal([1])
        let second = try sealer.seal([2])
        XCTAssertThrowsError(try open(&opener, second)) { error in
            XCTAssertEqual(error as? LinkRecordOpener.Ending, .recordsLost(expected: 0, received: 1))
        }
    }
}
