import Foundation
import GIO

/// How a first contact between two daemons went: each side's prompt, and the dialler's Connect.
public struct Pairing {
    /// The dialler's `PairingRequested` (nil if none came).
    public let dialler: BusSignal?
    /// The dialled side's `PairingRequested` (nil if none came).
    public let dialled: BusSignal?
    /// The dialler's Connect reply (failure `harness.NoReply` if it did not come in time).
    public let connect: Result<Variant, BusError>
    /// Signals the dialler had recorded when the Connect reply was dispatched.
    public let signalsBeforeReply: Int

    /// The passkeys each side showed ("" when there was no prompt).
    public var passkeys: (dialler: String, dialled: String) { (dialler?.string(2) ?? "", dialled?.string(2) ?? "") }

    /// True for exactly 6 ASCII digits.
    public static func isPasskey(_ text: String) -> Bool {
        text.utf8.count == 6 && text.utf8.allSatisfy { (0x30...0x39).contains($0) }
    }
}

extension TestPeer {
    /// The first `PairingRequested` for `peer` at or after signal index `start`, waiting up to `timeout`.
    public func pairingRequest(for peer: String, after start: Int = 0, timeout: Double = 10) -> BusSignal? {
        client.waitForSignalIndex("PairingRequested", after: start, timeout: timeout) { $0.string(0) == peer }
            .map { client.signals[$0] }
    }

    /// `PairingRequested` signals for `peer` at or after `start`.
    public func pairingRequests(for peer: String? = nil, after start: Int = 0) -> [BusSignal] {
        client.signals[min(start, client.signals.count)...]
            .filter { $0.member == "PairingRequested" && (peer == nil || $0.string(0) == peer) }
    }

    /// The id `address` turned out to belong to: the first `PeerIdentified(address, id)` at or after `start`.
    public func identified(_ address: String, after start: Int = 0) -> String? {
        client.signals[min(start, client.signals.count)...]
            .first { $0.member == "PeerIdentified" && $0.string(0) == address }?.string(1)
    }

    /// First contact: this daemon dials `address` (`other`'s own by default, or a relay in front of
    /// it) with an asynchronous Connect; waits until both daemons ask their person (here for the id
    /// the address turned out to have, on `other` for `otherSeesID`, by default this peer's id);
    /// answers `ConfirmPairing` with `accept` here and `otherAccepts` there; then waits for the
    /// Connect reply. A side that shows no prompt within `timeout` is not asked; the reply is
    /// awaited all the same.
    public func pair(with other: TestPeer, via address: String? = nil, otherSeesID: String? = nil,
                     accept: Bool = true, otherAccepts: Bool = true, timeout: Double = 15) -> Pairing {
        let dialled = address ?? other.address
        let diallerID = otherSeesID ?? id
        let mark = self.mark, otherMark = other.mark
        let connect = client.callAsync("Connect", [Variant(dialled)])
        var here: BusSignal?, there: BusSignal?
        eventually(timeout: timeout) {
            if here == nil, let dialledID = identified(dialled, after: mark) {
                here = pairingRequests(for: dialledID, after: mark).first
            }
            there = there ?? other.pairingRequests(for: diallerID, after: otherMark).first
            return (here != nil && there != nil) || connect.isDone
        }
        if let here { _ = try? client.call("ConfirmPairing", [Variant(here.string(0)), Variant(accept)]) }
        if there != nil { _ = try? other.client.call("ConfirmPairing", [Variant(diallerID), Variant(otherAccepts)]) }
        eventually(timeout: timeout) { connect.isDone }
        return Pairing(dialler: here, dialled: there,
                       connect: connect.result ?? .failure(BusError(name: "harness.NoReply", message: "no Connect reply within \(timeout) s")),
                       signalsBeforeReply: connect.signalsBefore)
    }
}
