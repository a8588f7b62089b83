/// Opens the peer's records on a link (docs/PROTOCOL.md §4.1): the rule the daemon's `PeerLink`
/// and the simulation's link share.
///
/// A record that does not open (truncated, tampered, replayed) is dropped and counted: it may be
/// an attacker's, and the records around it still count; the link ends at the
/// ``maxRejectedRecords``-th. A record that opens after a gap in the counters means records were
/// lost or reordered on the way: what they carried (a channel stream's bytes, its credit, an
/// OPEN or CLOSE) cannot be had again in order, so the link ends at once and the layers above
/// start again on the next one (texts are resent, transfers resume, app streams end with a
/// reset) instead of reading a stream with a hole (simulation seeds 22, 141).
public struct LinkRecordOpener: Sendable {
    /// Rejected records tolerated before the link ends.
    public static let maxRejectedRecords: UInt64 = 8

    /// What became of one record.
    public enum Outcome: Equatable, Sendable {
        /// Its plaintext is the first `plaintextBytes` bytes of the buffer.
        case opened(plaintextBytes: Int)
        /// Dropped and counted; the link goes on.
        case dropped(RecordError)
    }

    /// Why the link must end.
    public enum Ending: Error, Equatable, Sendable, CustomStringConvertible {
        /// A record opened with `received` where `expected` was due (stream mode opens only
        /// counters above the last, so `received` > `expected`).
        case recordsLost(expected: UInt64, received: UInt64)
        /// This many records failed to open.
        case tooManyRejected(UInt64)

        public var description: String {
            switch self {
            case .recordsLost(let expected, let received):
                "record \(received) opened where \(expected) was due: \(received - expected) records lost or reordered on the way"
            case .tooManyRejected(let count):
                "\(count) records failed to open"
            }
        }
    }

    private var opener: RecordOpener
    /// The counter the next record must carry: 0 on a new link, then one more per record.
    private var expected: UInt64 = 0

    /// `opener` in stream mode, from the link's key exchange (`HandshakeResult.makeLinkOpener`).
    public init(_ opener: RecordOpener) {
        precondition(opener.mode == .stream, "a link's records open in stream mode")
        self.opener = opener
    }

    /// Records that failed to open, by reason.
    public var rejections: RecordRejections { opener.rejections }

    /// Opens `record` into `plaintext` (grown when too small, else reused); throws when the link must end.
    public mutating func open(_ record: some Collection<UInt8>, into plaintext: inout [UInt8]) throws(Ending) -> Outcome {
        let plaintextBytes: Int
        do {
            plaintextBytes = try opener.open(record, into: &plaintext)
        } catch {
            if opener.rejections.total >= Self.maxRejectedRecords { throw .tooManyRejected(opener.rejections.total) }
            return .dropped(error)
        }
        // Stream mode accepted it, so the newest counter is its own.
        let counter = opener.newestCounter ?? expected
        guard counter == expected else { throw .recordsLost(expected: expected, received: counter) }
        expected = counter + 1
        return .opened(plaintextBytes: plaintextBytes)
    }
}
