import Foundation

/// Where a message stands, as `History` and the bus API report it.
public enum MessageStatus: String, Sendable {
    /// Came from the peer.
    case received
    /// Accepted by `Send`, not yet acknowledged by the peer.
    case queued
    /// The peer acknowledged it.
    case delivered
    /// Given up on (expired, or the peer was removed); reported with `MessageFailed`.
    case failed
}

/// One entry of a peer's history, either direction.
public struct StoredMessage: Equatable, Sendable {
    /// Opaque message id (the same at both ends).
    public var id: String
    public var status: MessageStatus
    /// Unix time in milliseconds on this machine's clock: when `Send` accepted it, or when it was
    /// received. Local time keeps history order and expiry independent of the peer's clock.
    public var timeMs: UInt64
    public var text: String
    /// The sender's per-peer sequence number (ours for outgoing messages, theirs for received ones).
    public var seq: UInt64

    public init(id: String, status: MessageStatus, timeMs: UInt64, text: String, seq: UInt64) {
        self.id = id
        self.status = status
        self.timeMs = timeMs
        self.text = text
        self.seq = seq
    }
}

/// A message waiting in a peer's outbox: what the link layer sends, oldest first.
public struct OutgoingMessage: Equatable, Sendable {
    /// Per-peer sequence number, from 1, never reused for that peer; the peer acknowledges by it.
    public var seq: UInt64
    public var id: String
    /// Unix time in milliseconds when `Send` accepted it.
    public var sentAtMs: UInt64
    public var text: String

    public init(seq: UInt64, id: String, sentAtMs: UInt64, text: String) {
        self.seq = seq
        self.id = id
        self.sentAtMs = sentAtMs
        self.text = text
    }
}

/// Bounds that keep the store's memory and disk use finite. The defaults are the product's;
/// tests override them to reach the edges quickly.
public struct MessageStoreLimits: Sendable, Equatable {
    /// Most unacknowledged messages per peer; `enqueue` beyond it throws `outboxFull`. Default 10 000.
    public var maxQueuedPerPeer: Int
    /// Most bytes of unacknowledged text (UTF-8) per peer. Default 64 MiB.
    public var maxQueuedBytesPerPeer: Int
    /// A queued message older than this fails at the next `expire`, with or after those queued
    /// before it. Default 7 days.
    public var expiryMs: UInt64
    /// Messages per peer kept for `history` (pending ones are kept regardless). Default 1 000.
    public var historyPerPeer: Int
    /// Sender instances per peer whose duplicate-detection mark is remembered, most recently used
    /// first. A peer gets a new instance only when its own store is reset, so this bounds what a
    /// misbehaving peer can make us keep without affecting honest ones. Default 64.
    public var maxSenderInstancesPerPeer: Int
    /// How far a journal may outgrow twice its live contents before it is rewritten. Default 1 MiB.
    public var compactionSlackBytes: Int

    public init(
        maxQueuedPerPeer: Int = 10_000,
        maxQueuedBytesPerPeer: Int = 64 << 20,
        expiryMs: UInt64 = 7 * 24 * 60 * 60 * 1000,
        historyPerPeer: Int = 1_000,
        maxSenderInstancesPerPeer: Int = 64,
        compactionSlackBytes: Int = 1 << 20
    ) {
        self.maxQueuedPerPeer = maxQueuedPerPeer
        self.maxQueuedBytesPerPeer = maxQueuedBytesPerPeer
        self.expiryMs = expiryMs
        self.historyPerPeer = historyPerPeer
        self.maxSenderInstancesPerPeer = maxSenderInstancesPerPeer
        self.compactionSlackBytes = compactionSlackBytes
    }
}

/// Why the store refused an operation. Descriptions are meant for people and logs, so they name
/// peers and files but never contain message text.
public enum MessageStoreError: Error, Equatable, CustomStringConvertible {
    /// The peer's outbox is at a limit; `limit` says which, e.g. "10000 messages".
    case outboxFull(peer: String, limit: String)
    /// A malformed peer id, message id, sender instance or sequence number.
    case invalidArgument(String)
    /// The disk refused (full, read-only, failing); nothing was changed.
    case io(StorageError)

    public var description: String {
        switch self {
        case let .outboxFull(peer, limit):
            return "the outbox for \(peer) is full (limit: \(limit)); wait for delivery or remove the peer"
        case let .invalidArgument(what):
            return "invalid argument: \(what)"
        case let .io(error):
            return "message store I/O error: \(error)"
        }
    }
}
