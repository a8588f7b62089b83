/// Presence advertisements (docs/PROTOCOL.md §12, docs/SECURITY.md §11.1): while not discoverable,
/// a PeerVoice with paired peers advertises a random instance name and only a tag, the first
/// 8 bytes of BLAKE2b-256 keyed with its 32-byte presence secret over "PeerVoice presence" and the
/// current 15-minute epoch. Its paired peers learned the secret inside the encrypted link
/// (PRESENCE) and recognise the tag; to anyone else it is a new random value every epoch.
public enum PresenceTag {
    public static let epochSeconds: UInt64 = 900
    public static let tagBytes = 8
    /// `t=` in the TXT record: the tag in lower-case hex.
    public static let hexLength = tagBytes * 2
    private static let label = Array("PeerVoice presence".utf8)

    public static func epoch(unixSeconds: UInt64) -> UInt64 { unixSeconds / epochSeconds }

    /// When `epoch` ends: the advertisement is replaced then.
    public static func end(of epoch: UInt64) -> UInt64 { (epoch + 1) * epochSeconds }

    public static func tag(secret: PresenceSecret, epoch: UInt64, crypto: any CryptoPrimitives) -> String {
        var message = label
        message.appendBigEndian(epoch)
        return hexString(crypto.hash(message, key: secret.bytes).prefix(tagBytes))
    }

    /// Whether `tag` is `secret`'s for the epoch of `unixSeconds` or one next to it (clocks of two
    /// computers differ, and an advertisement outlives its epoch by a little).
    public static func matches(_ tag: String, secret: PresenceSecret, unixSeconds: UInt64, crypto: any CryptoPrimitives) -> Bool {
        let now = epoch(unixSeconds: unixSeconds)
        return [now &- 1, now, now + 1].contains { Self.tag(secret: secret, epoch: $0, crypto: crypto) == tag }
    }
}

/// The 32 random bytes a PeerVoice gives its paired peers (PRESENCE) so they recognise its
/// presence tags. Key material: kept in the state directory, never logged.
public struct PresenceSecret: Equatable, Sendable {
    public static let byteCount = 32
    public let bytes: [UInt8]

    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = Array(bytes)
    }

    /// From 64 hexadecimal digits (peers.json).
    public init?(hex: some StringProtocol) {
        guard hex.utf8.count == 2 * Self.byteCount, let bytes = PublicKey.decodeHex(hex) else { return nil }
        self.bytes = bytes
    }

    public var hex: String { hexString(bytes) }
}
