/// What a transfer object's `State` shows (dbus/org.example.PeerVoice.Transfer.xml).
public enum TransferState: String, Sendable, Codable, CaseIterable {
    /// The receiver's person has not answered yet (or the peer has not been reached to ask).
    case waiting
    /// Data flows.
    case active
    /// Accepted, but no stream runs (the link is down): it resumes by itself.
    case paused
    case complete
    case failed
    case cancelled
    case declined

    /// Over for good: nothing more happens to it.
    public var isFinished: Bool {
        switch self {
        case .waiting, .active, .paused: false
        case .complete, .failed, .cancelled, .declined: true
        }
    }
}

public enum TransferDirection: String, Sendable, Codable {
    case outgoing
    case incoming
}

/// Who ended a transfer: the person here (or this service), or the other side.
public enum TransferSide: Sendable, Equatable {
    case local
    case peer
}

/// A transfer's state across streams, reconnections and restarts of either service
/// (docs/PROTOCOL.md §15.5): what it shows, whether the receiver has accepted, what the other
/// side still has to be told, and what each event means for the stream and the partial data.
/// Kept on disk with the transfer, so that a restarted service answers a re-offer the way it
/// would have before.
public struct TransferLifecycle: Equatable, Sendable, Codable {
    public let direction: TransferDirection
    public private(set) var state: TransferState = .waiting
    /// Why it failed, was declined or cancelled, in words for a person; "" otherwise.
    public private(set) var error = ""
    /// The receiver's person accepted: after a reconnection or a restart it resumes rather than asks again.
    public private(set) var accepted = false
    /// Outgoing: it ended here and the receiver may not have heard (it still holds partial data,
    /// or waits for it): every later stream says so, until one that carried the ABORT ended
    /// cleanly (`peerTold`). Kept when the peer is removed, so that a receiver paired again
    /// learns it (simulation seeds 119, 134).
    public private(set) var owesPeerAbort = false
    /// A stream carries it now (not kept on disk: none runs after a restart).
    public private(set) var streamOpen = false

    public init(direction: TransferDirection) {
        self.direction = direction
    }

    private enum CodingKeys: String, CodingKey {
        case direction, state, error, accepted, owesPeerAbort
    }

    /// What an event asks of the driver.
    public struct Reaction: Equatable, Sendable {
        /// Send this on the stream (then close it when `closeStream` says so).
        public var tell: TransferMessage?
        public var closeStream = false
        /// Incoming: the partial data goes (every item not yet in place).
        public var discardPartial = false
        /// Incoming: tell the sender where to start (the durable position: the driver knows it).
        public var sendAccept = false

        public static let none = Reaction()
    }

    public enum Event: Sendable, Equatable {
        /// A stream carries the transfer: outgoing, ours opened and sent the OFFER; incoming, an
        /// OFFER for it arrived.
        case streamOpened
        /// The stream ended (the link dropped, a service stopped).
        case streamClosed
        /// Incoming: the person accepted.
        case personAccepted
        /// Outgoing: the receiver's ACCEPT arrived.
        case peerAccepted
        /// Incoming: the person declined.
        case personDeclined
        /// Outgoing: the receiver declined (ABORT declined).
        case peerDeclined(reason: String)
        case cancelled(by: TransferSide, reason: String)
        /// It cannot go on; `reason` says why. From the peer's ABORT failed, or found here.
        case failed(by: TransferSide, reason: String)
        /// Every file is in place at the receiver (incoming: placed here; outgoing: COMPLETE arrived).
        case completed
        /// Outgoing: the ABORT it owed the receiver went out.
        case peerTold

        /// What the peer's ABORT with `code` means.
        public static func peerAborted(_ code: TransferAbort, reason: String) -> Event {
            switch code {
            case .declined: .peerDeclined(reason: reason)
            case .cancelled: .cancelled(by: .peer, reason: reason)
            case .failed: .failed(by: .peer, reason: reason)
            }
        }
    }

    /// Applies `event`; events that mean nothing in the current state change nothing.
    public mutating func handle(_ event: Event) -> Reaction {
        if case .streamOpened = event { streamOpen = true }
        if case .streamClosed = event { streamOpen = false }
        if state.isFinished { return finishedReaction(to: event) }
        switch event {
        case .streamOpened:
            // The receiver resumes at once; the sender is active again once ACCEPT says from where.
            guard direction == .incoming, accepted else { return .none }
            state = .active
            return Reaction(sendAccept: true)
        case .streamClosed:
            if state == .active { state = .paused }
            return .none
        case .personAccepted:
            guard direction == .incoming, state == .waiting else { return .none }
            accepted = true
            state = streamOpen ? .active : .paused
            return Reaction(sendAccept: streamOpen)
        case .peerAccepted:
            guard direction == .outgoing else { return .none }
            accepted = true
            state = .active
            return .none
        case .personDeclined:
            guard direction == .incoming, state == .waiting else { return .none }
            finish(.declined, error: Self.declinedReason)
            return Reaction(tell: streamOpen ? .abort(.declined, reason: Self.declinedReason) : nil, closeStream: streamOpen)
        case .peerDeclined(let reason):
            guard direction == .outgoing else { return .none }
            finish(.declined, error: reason)
            return Reaction(closeStream: true)
        case .cancelled(let side, let reason):
            finish(.cancelled, error: reason)
            return ending(by: side, code: .cancelled, reason: reason)
        case .failed(let side, let reason):
            finish(.failed, error: reason)
            return ending(by: side, code: .failed, reason: reason)
        case .completed:
            finish(.complete, error: "")
            return Reaction(tell: direction == .incoming && streamOpen ? .complete : nil, closeStream: true)
        case .peerTold:
            return .none
        }
    }

    /// What both sides show when the receiver's person declines.
    public static let declinedReason = "declined by the receiver"

    private mutating func finish(_ final: TransferState, error: String) {
        state = final
        self.error = error
    }

    /// The end of a running transfer: the peer is told if it did not end it; the receiver's
    /// partial data goes; an outgoing one owes the receiver an ABORT until it is known to have
    /// arrived (the stream that carries it now may break first).
    private mutating func ending(by side: TransferSide, code: TransferAbort, reason: String) -> Reaction {
        if side == .local && direction == .outgoing { owesPeerAbort = true }
        return Reaction(tell: side == .local && streamOpen ? .abort(code, reason: reason) : nil,
                        closeStream: true, discardPartial: direction == .incoming)
    }

    /// A finished transfer answers what still comes: a re-offer learns how it ended (the
    /// receiver may have missed the ending), an owed ABORT goes with the next stream.
    private mutating func finishedReaction(to event: Event) -> Reaction {
        switch (event, direction) {
        case (.streamOpened, .incoming):
            let answer: TransferMessage = switch state {
            case .complete: .complete
            case .declined: .abort(.declined, reason: error)
            case .cancelled: .abort(.cancelled, reason: error)
            default: .abort(.failed, reason: error)
            }
            return Reaction(tell: answer, closeStream: true)
        case (.streamOpened, .outgoing):
            guard owesPeerAbort else { return Reaction(closeStream: true) }
            return Reaction(tell: .abort(state == .cancelled ? .cancelled : .failed, reason: error), closeStream: true)
        case (.peerTold, .outgoing):
            owesPeerAbort = false
            return .none
        default:
            return .none
        }
    }
}
