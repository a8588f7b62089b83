import PeerVoiceCore
import XCTest

/// The PAIRING exchange of one link (docs/PROTOCOL.md §7.3) and the two-links rule (§7.5), as
/// tables of exchanges.
final class PairingExchangeTests: XCTestCase {
    /// One step of a side's exchange: what it does or hears, and what follows.
    private enum Step {
        case declare(PairingDecision, sends: Bool)
        case accept(sends: Bool)
        case hear(PairingDecision, PairingExchange.Reaction)
        case hearOutOfOrder(PairingDecision)
    }

    func testTheExchangeOpensOnTwoKnownsOrTwoAcceptsAndNothingElse() throws {
        let cases: [(name: String, steps: [Step], open: Bool)] = [
            ("both pinned", [.declare(.known, sends: true), .hear(.known, .none)], true),
            ("both pinned, the peer's status first", [.hear(.known, .none), .declare(.known, sends: true)], true),
            ("first contact both sides, both accept",
             [.declare(.asking, sends: true), .hear(.asking, .none), .accept(sends: true), .hear(.accept, .none)], true),
            ("our accept before the peer's status", [.declare(.asking, sends: true), .accept(sends: true),
                                                     .hear(.asking, .none), .hear(.accept, .none)], true),
            ("we are pinned, the peer asks: our person is asked too",
             [.declare(.known, sends: true), .hear(.asking, .askOurPerson), .hear(.accept, .none), .accept(sends: true)], true),
            ("we are pinned, the peer asks, only the peer accepted",
             [.declare(.known, sends: true), .hear(.asking, .askOurPerson), .hear(.accept, .none)], false),
            ("we ask, the peer is pinned: it asks its person",
             [.declare(.asking, sends: true), .hear(.known, .none), .accept(sends: true), .hear(.accept, .none)], true),
            ("asking both, only we accepted", [.declare(.asking, sends: true), .hear(.asking, .none), .accept(sends: true)], false),
            ("a refusal at any point", [.declare(.asking, sends: true), .hear(.refuse, .refused)], false),
            ("a second status is not sent", [.declare(.known, sends: true), .declare(.known, sends: false)], false),
            ("no accept before our own status", [.accept(sends: false)], false),
            ("no second accept", [.declare(.asking, sends: true), .accept(sends: true), .accept(sends: false)], false),
            ("must reject: accept before the sender's status", [.declare(.asking, sends: true), .hearOutOfOrder(.accept)], false),
            ("must reject: accept when both were known (the link is open already)",
             [.declare(.known, sends: true), .hear(.known, .none), .hearOutOfOrder(.accept)], true),
            ("must reject: a second status", [.hear(.asking, .none), .hearOutOfOrder(.known)], false),
            ("must reject: a second accept",
             [.declare(.asking, sends: true), .hear(.asking, .none), .hear(.accept, .none), .hearOutOfOrder(.accept)], false),
        ]
        for (name, steps, open) in cases {
            var exchange = PairingExchange()
            for (index, step) in steps.enumerated() {
                let what = "\(name), step \(index + 1)"
                switch step {
                case let .declare(status, sends):
                    XCTAssertEqual(exchange.declare(status), sends, what)
                case let .accept(sends):
                    XCTAssertEqual(exchange.accept(), sends, what)
                case let .hear(decision, reaction):
                    XCTAssertEqual(try exchange.received(decision), reaction, what)
                case let .hearOutOfOrder(decision):
                    XCTAssertThrowsError(try exchange.received(decision), what) {
                        XCTAssertEqual(($0 as? PairingExchange.OutOfOrder)?.decision, decision, what)
                    }
                }
            }
            XCTAssertEqual(exchange.isAgreed, open, name)
        }
    }

    func testTheStatusASideDeclaresFollowsTheOrderOfTheChecks() {
        typealias S = PairingExchange.Status
        let cases: [(isItself: Bool, pinned: Bool, refuses: Bool, pending: Bool, status: S)] = [
            (true, true, true, true, .itself),
            (false, true, true, true, .known),
            (false, false, true, true, .refuse),
            (false, false, false, true, .alreadyAsking),
            (false, false, false, false, .asking),
        ]
        for c in cases {
            XCTAssertEqual(PairingExchange.status(isItself: c.isItself, keyPinned: c.pinned, refusesFirstContact: c.refuses,
                                                  promptPending: c.pending), c.status, "\(c)")
        }
    }

    func testBothSidesKeepTheSameOfTwoLinks() {
        let small = InstanceID(hex: "00000000000000000000000000000001")!
        let large = InstanceID(hex: "ff000000000000000000000000000000")!
        // (existing, new, as seen by the side whose instance is `us`) -> keeps new
        let cases: [(existing: (Transport, Bool), new: (Transport, Bool), us: InstanceID, peer: InstanceID, keepsNew: Bool)] = [
            ((.bluetooth, true), (.ip, false), small, large, true),   // better transport wins
            ((.ip, false), (.bluetooth, true), small, large, false),
            ((.ip, true), (.ip, false), small, large, false),         // we (small) dialled the existing one
            ((.ip, false), (.ip, true), small, large, true),          // we (small) dialled the new one
            ((.ip, false), (.ip, true), large, small, false),         // the peer (small) dialled the existing one
            ((.ip, true), (.ip, true), large, small, true),           // both ours: the newer
            ((.ip, false), (.ip, false), small, large, true),         // both the peer's: the newer
        ]
        for c in cases {
            let here = LinkTieBreak.keepsNew(existing: c.existing, new: c.new, ourInstance: c.us, peerInstance: c.peer)
            XCTAssertEqual(here, c.keepsNew, "\(c)")
            // The other side sees each link with the opposite direction, and agrees.
            let there = LinkTieBreak.keepsNew(existing: (c.existing.0, !c.existing.1), new: (c.new.0, !c.new.1),
                                              ourInstance: c.peer, peerInstance: c.us)
            XCTAssertEqual(there, here, "the two sides disagree on \(c)")
        }
    }
}
