/// The presence secrets a side's paired peers may hold (docs/SECURITY.md §11.3): the current one,
/// and, after `RemovePeer` replaced it, each older one that a remaining peer still holds because
/// it has not been sent the new one yet. Dial proofs (``DialGate``) are accepted under all of them,
/// so a rotation never cuts the remaining peers off; an older secret goes as soon as the last of
/// its holders has been sent the current one (PRESENCE on a link), and after ``olderLifetimeSeconds``
/// at the latest, which bounds how long a removed peer, which holds it too, can still prove a dial.
/// Presence tags use the current secret alone.
public struct PresenceSecrets: Equatable, Sendable {
    /// An older secret: who still holds it, and when it stops being accepted anyway.
    public struct Older: Equatable, Sendable {
        public let secret: PresenceSecret
        public let expiresAtUnix: UInt64
        public fileprivate(set) var holders: Set<PeerID>
    }

    /// How long an older secret is accepted at most: a week, as long as queued messages wait.
    public static let olderLifetimeSeconds: UInt64 = 7 * 24 * 3600
    /// Older secrets kept at most (with the current one, ``DialGate/secretSlots``).
    public static let maxOlder = DialGate.secretSlots - 1

    public private(set) var current: PresenceSecret
    /// Newest first.
    public private(set) var older: [Older] = []

    public init(current: PresenceSecret, older: [Older] = []) {
        self.current = current
        self.older = older
    }

    /// The secrets a dial proof may be made with at `unixSeconds`, current first.
    public func accepted(unixSeconds: UInt64) -> [PresenceSecret] {
        [current] + older.filter { $0.expiresAtUnix > unixSeconds }.map(\.secret)
    }

    /// Replaces the current secret (a peer was removed). `paired` are the peers that stay: those
    /// that do not hold an older secret hold the one replaced now.
    public mutating func rotate(to secret: PresenceSecret, paired: Set<PeerID>, unixSeconds: UInt64) {
        let holdingOlder = older.reduce(into: Set<PeerID>()) { $0.formUnion($1.holders) }
        older.insert(Older(secret: current, expiresAtUnix: unixSeconds + Self.olderLifetimeSeconds,
                           holders: paired.subtracting(holdingOlder)), at: 0)
        current = secret
        for index in older.indices { older[index].holders.formIntersection(paired) }
        prune(unixSeconds: unixSeconds)
        // Three removals within a week, with peers not reached since: the oldest holders lose out.
        if older.count > Self.maxOlder { older.removeLast(older.count - Self.maxOlder) }
    }

    /// `peer` was sent the current secret on an open link (or was removed): it holds no older one.
    public mutating func holdsCurrent(_ peer: PeerID, unixSeconds: UInt64) {
        for index in older.indices { older[index].holders.remove(peer) }
        prune(unixSeconds: unixSeconds)
    }

    /// Whether `peer` still waits for the current secret.
    public func awaitsCurrent(_ peer: PeerID) -> Bool { older.contains { $0.holders.contains(peer) } }

    /// Older secrets nobody holds, or past their lifetime, go.
    public mutating func prune(unixSeconds: UInt64) {
        older.removeAll { $0.holders.isEmpty || $0.expiresAtUnix <= unixSeconds }
    }

    // MARK: The file of older secrets

    /// `presence-older.key`: one line per older secret, newest first: 64 hex digits, the unix
    /// time it expires, and the ids of its holders, separated by spaces. Key material: mode 0600.
    public var olderFileContents: String {
        older.map { entry in
            ([entry.secret.hex, String(entry.expiresAtUnix)] + entry.holders.sorted().map(\.description)).joined(separator: " ") + "\n"
        }.joined()
    }

    /// Reads ``olderFileContents``; nil when any line is malformed (the caller then keeps none).
    public static func older(fromFileContents text: String) -> [Older]? {
        var entries: [Older] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 2, let secret = PresenceSecret(hex: fields[0]), let expires = UInt64(fields[1]) else { return nil }
            var holders = Set<PeerID>()
            for field in fields.dropFirst(2) {
                guard let id = PeerID(field) else { return nil }
                holders.insert(id)
            }
            entries.append(Older(secret: secret, expiresAtUnix: expires, holders: holders))
        }
        return Array(entries.prefix(maxOlder))
    }
}
