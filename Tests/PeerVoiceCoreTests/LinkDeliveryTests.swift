import PeerVoiceCore
import XCTest

/// The per-link half of text delivery (docs/PROTOCOL.md §8), as tables of exchanges.
final class LinkDeliveryTests: XCTestCase {
    private let start = ContinuousClock.now

    private func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }

    // MARK: Receiving

    /// One step of what arrives on a link, and what the receiver does.
    private struct Arrival {
        let seq: UInt64
        let previous: UInt64
        /// Accepted as part of the run (stored, or a duplicate that is acknowledged again).
        let accepted: Bool
    }

    func testTheReceiverTakesOnlyUnbrokenRunsAndAcknowledgesCumulatively() {
        let cases: [(name: String, arrivals: [Arrival], ack: UInt64?)] = [
            ("a run in order", [.init(seq: 1, previous: 0, accepted: true), .init(seq: 2, previous: 1, accepted: true)], 2),
            ("a gap in numbering within a run is fine", [.init(seq: 5, previous: 0, accepted: true), .init(seq: 9, previous: 5, accepted: true)], 9),
            ("a lost TEXT breaks the run: what follows waits for the resend",
             [.init(seq: 5, previous: 0, accepted: true), .init(seq: 7, previous: 6, accepted: false)], 5),
            ("the resend starts a new run from the oldest queued",
             [.init(seq: 5, previous: 0, accepted: true), .init(seq: 7, previous: 6, accepted: false),
              .init(seq: 6, previous: 0, accepted: true), .init(seq: 7, previous: 6, accepted: true)], 7),
            ("a resent run below what was seen still acknowledges the highest",
             [.init(seq: 8, previous: 0, accepted: true), .init(seq: 3, previous: 0, accepted: true)], 8),
            ("nothing accepted, nothing owed", [.init(seq: 4, previous: 3, accepted: false)], nil),
        ]
        for (name, arrivals, ack) in cases {
            var delivery = LinkDelivery(now: start)
            for arrival in arrivals {
                let continues = delivery.continuesRun(previousSeq: arrival.previous)
                XCTAssertEqual(continues, arrival.accepted, "\(name): TEXT \(arrival.seq) after \(arrival.previous)")
                if continues { delivery.accepted(seq: arrival.seq) }
            }
            XCTAssertEqual(delivery.takeAck(), ack, name)
            XCTAssertNil(delivery.takeAck(), "\(name): one ACK per batch")
        }
    }

    // MARK: Sending

    func testEachTextNamesItsPredecessorAndARestartedRunStartsAtZero() {
        var delivery = LinkDelivery(now: start)
        XCTAssertEqual(delivery.send(seq: 1, textBytes: 10, now: at(0)), 0)
        XCTAssertEqual(delivery.send(seq: 2, textBytes: 10, now: at(1)), 1)
        XCTAssertEqual(delivery.send(seq: 5, textBytes: 10, now: at(2)), 2, "numbers may be skipped (acknowledged or failed)")
        XCTAssertEqual(delivery.sentUpTo, 5)
        delivery.restartRun(now: at(3))
        XCTAssertEqual(delivery.sentUpTo, 0, "a new run starts from the oldest queued")
        XCTAssertEqual(delivery.send(seq: 2, textBytes: 10, now: at(4)), 0)
        XCTAssertTrue(delivery.hasUnacknowledged)
    }

    func testTheWindowClosesAt2MiBAndAnAckReopensIt() {
        var delivery = LinkDelivery(now: start)
        let big = LinkDelivery.windowBytes / 2
        _ = delivery.send(seq: 1, textBytes: big, now: at(0))
        XCTAssertTrue(delivery.hasRoom)
        _ = delivery.send(seq: 2, textBytes: big, now: at(0))
        XCTAssertFalse(delivery.hasRoom, "the last one sent may cross the window; then nothing more")
        XCTAssertEqual(delivery.inFlightBytes, 2 * (big + LinkDelivery.perMessageOverheadBytes))
        delivery.acknowledged(upTo: 1, now: at(10))
        XCTAssertTrue(delivery.hasRoom)
        delivery.acknowledged(upTo: 7, now: at(20))
        XCTAssertEqual(delivery.inFlightBytes, 0)
        XCTAssertFalse(delivery.hasUnacknowledged)
    }

    func testARunIsStalledAfterTwoSecondsWithoutProgress() {
        let cases: [(name: String, steps: (inout LinkDelivery) -> Void, checkAtMs: Int, stalled: Bool)] = [
            ("nothing sent is never stalled", { _ in }, 10_000, false),
            ("2 s after the first TEXT", { _ = $0.send(seq: 1, textBytes: 1, now: self.at(0)) }, 2_001, true),
            ("within 2 s", { _ = $0.send(seq: 1, textBytes: 1, now: self.at(0)) }, 1_999, false),
            ("progress restarts the clock", {
                _ = $0.send(seq: 1, textBytes: 1, now: self.at(0))
                _ = $0.send(seq: 2, textBytes: 1, now: self.at(0))
                $0.acknowledged(upTo: 1, now: self.at(1_500))
            }, 3_000, false),
            ("an ACK that acknowledges nothing new is no progress", {
                _ = $0.send(seq: 3, textBytes: 1, now: self.at(0))
                $0.acknowledged(upTo: 2, now: self.at(1_500))
            }, 2_100, true),
            ("all acknowledged: nothing to resend", {
                _ = $0.send(seq: 1, textBytes: 1, now: self.at(0))
                $0.acknowledged(upTo: 1, now: self.at(100))
            }, 10_000, false),
        ]
        for (name, steps, checkAtMs, stalled) in cases {
            var delivery = LinkDelivery(now: start)
            steps(&delivery)
            XCTAssertEqual(delivery.isStalled(now: at(checkAtMs)), stalled, name)
        }
    }
}
