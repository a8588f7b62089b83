/// One link's PAIRING exchange (docs/PROTOCOL.md §7.3): each side's status (`known`: the peer's
/// key is pinned here; `asking`: this side asks its person), then, if anyone asked, each person's
/// `accept`. Two `known`s open the link; otherwise two `accept`s do. An `accept` where nobody
/// asked, before the sender's status, or twice, is a protocol error, so no side can open a link
/// its peer's person never saw. Pure: the daemon's `PeerLink` and the simulation drive it.
public struct PairingExchange: Equatable, Sendable {
    /// What a side decides to declare when a link's key exchange ends, in this order of checks.
    public enum Status: Equatable, Sendable {
        /// The peer is this very service (its instance or key): close, sending nothing.
        case itself
        /// The peer's key is pinned: declare `known`.
        case known
        /// A first contact this side will not take (not discoverable): send `refuse` and close.
        case refuse
        /// A first contact while a prompt for the same peer waits: close this link, sending nothing.
        case alreadyAsking
        /// A first contact: declare `asking` and ask this side's person.
        case asking
    }

    /// The reference implementation's status for a link that just authenticated.
    public static func status(isItself: Bool, keyPinned: Bool, refusesFirstContact: Bool,
                              promptPending: Bool) -> Status {
        if isItself { return .itself }
        if keyPinned { return .known }
        if refusesFirstContact { return .refuse }
        if promptPending { return .alreadyAsking }
        return .asking
    }

    /// What the peer's PAIRING frame means for this side.
    public enum Reaction: Equatable, Sendable {
        /// Nothing to do but wait (or open: see `isAgreed`).
        case none
        /// We declared `known` but the peer is asking (it lost our key): ask our person too.
        case askOurPerson
        /// The peer refused: close the link, and do not redial until a person connects.
        case refused
    }

    /// A PAIRING that is valid on its own but not at this point of the exchange.
    public struct OutOfOrder: Error, Equatable, Sendable, CustomStringConvertible {
        public let decision: PairingDecision
        public var description: String { "PAIRING \(decision) out of order" }
    }

    /// Our status (`known` or `asking`) once declared, and the peer's once received.
    public private(set) var localStatus: PairingDecision?
    public private(set) var peerStatus: PairingDecision?
    public private(set) var acceptedLocally = false
    public private(set) var acceptedByPeer = false

    public init() {}

    /// Records our status; true if it is to be sent now (false: one was declared already).
    public mutating func declare(_ status: PairingDecision) -> Bool {
        precondition(status == .known || status == .asking, "a status is known or asking")
        guard localStatus == nil else { return false }
        localStatus = status
        return true
    }

    /// Our person accepted; true if `accept` is to be sent now (after our status, once).
    public mutating func accept() -> Bool {
        guard localStatus != nil, !acceptedLocally else { return false }
        acceptedLocally = true
        return true
    }

    /// The peer's PAIRING frame. Throws `OutOfOrder` for a protocol error.
    public mutating func received(_ decision: PairingDecision) throws(OutOfOrder) -> Reaction {
        switch (peerStatus, decision) {
        case (_, .refuse):
            return .refused
        case (nil, .known), (nil, .asking):
            peerStatus = decision
            return decision == .asking && localStatus == .known ? .askOurPerson : .none
        case (.some, .accept) where peerStatus == .asking || localStatus == .asking:
            guard !acceptedByPeer else { throw OutOfOrder(decision: decision) }
            acceptedByPeer = true
            return .none
        default:
            throw OutOfOrder(decision: decision)
        }
    }

    /// Both sides agree: two `known`s, or two `accept`s. The link is open.
    public var isAgreed: Bool {
        guard let localStatus, let peerStatus else { return false }
        return (localStatus == .known && peerStatus == .known) || (acceptedLocally && acceptedByPeer)
    }
}

/// Which of two open links to one peer both sides keep (docs/PROTOCOL.md §7.5), so they agree
/// without talking: the better transport (TCP over RFCOMM), then the link dialled by the side with
/// the smaller instance id; of two links dialled by the same side the newer (the peer restarted
/// before the old link was noticed dead).
public enum LinkTieBreak {
    /// Whether `new` replaces `existing`.
    public static func keepsNew(existing: (transport: Transport, isOutgoing: Bool),
                                new: (transport: Transport, isOutgoing: Bool),
                                ourInstance: InstanceID, peerInstance: InstanceID) -> Bool {
        if existing.transport != new.transport {
            return new.transport.linkPreference > existing.transport.linkPreference
        }
        guard existing.isOutgoing != new.isOutgoing else { return true }
        let newDialler = new.isOutgoing ? ourInstance : peerInstance
        let otherDialler = new.isOutgoing ? peerInstance : ourInstance
        return newDialler.hex < otherDialler.hex
    }
}
