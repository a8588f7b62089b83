/// A peer's long-term X25519 public key: who a peer is, whatever route it arrives by.
public struct PublicKey: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == CryptoSize.publicKey else { return nil }
        self.bytes = Array(bytes)
    }

    /// From 64 hexadecimal digits (either case).
    public init?(hex: some StringProtocol) {
        guard hex.utf8.count == 2 * CryptoSize.publicKey, let bytes = Self.decodeHex(hex) else { return nil }
        self.bytes = bytes
    }

    /// 64 lowercase hex digits (peers.json).
    public var hex: String { hexString(bytes) }

    /// The key for reading aloud and comparing by eye: its 64 hex digits in 16 groups of 4.
    public var fingerprint: String {
        let digits = Array(hex)
        return stride(from: 0, to: digits.count, by: 4).map { String(digits[$0..<$0 + 4]) }.joined(separator: " ")
    }

    /// Logs show a prefix only: enough to tell keys apart, never the whole key.
    public var description: String { String(hex.prefix(16)) + "…" }

    /// Hex digits (either case) as bytes; nil for an odd count or anything else.
    static func decodeHex(_ text: some StringProtocol) -> [UInt8]? {
        var bytes: [UInt8] = []
        var high: UInt8?
        for unit in text.utf8 {
            let nibble: UInt8
            switch unit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = unit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = unit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = unit - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let first = high {
                bytes.append(first << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        return bytes
    }
}

/// A peer's id: `pv:` and 26 base32 characters (RFC 4648 alphabet, lower case: `a`–`z`, `2`–`7`)
/// spelling the first 130 bits of BLAKE2b-256("PeerVoice peer id" || public key). It is derived
/// from the key alone, so it never changes across reconnects, restarts, addresses or transports.
/// The id only names a peer; a link is accepted on the full key it proves, never on the id.
public struct PeerID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public static let prefix = "pv:"
    public static let base32Characters = 26
    /// Hashed before the key so an id cannot collide with any other use of the key's hash.
    public static let domainLabel: [UInt8] = Array("PeerVoice peer id".utf8)

    /// `pv:` and the 26 characters.
    public let description: String

    public init(key: PublicKey, using crypto: any CryptoPrimitives) {
        let digest = crypto.hash(Self.domainLabel + key.bytes, key: nil)
        description = Self.prefix + Base32.encode(digest, characters: Self.base32Characters)
    }

    /// Accepts either case and normalises to lower case; nil for anything else.
    public init?(_ text: some StringProtocol) {
        let lower = text.lowercased()
        guard lower.hasPrefix(Self.prefix) else { return nil }
        let body = lower.dropFirst(Self.prefix.count)
        guard body.count == Self.base32Characters, body.utf8.allSatisfy(Base32.isDigit) else { return nil }
        description = lower
    }

    /// The 26 characters without `pv:` (valid in a D-Bus object path).
    public var base32: Substring { description.dropFirst(Self.prefix.count) }

    public static func < (a: PeerID, b: PeerID) -> Bool { a.description < b.description }
}

/// What a bus caller names a peer by: its id, or an address (`Connect`'s target; elsewhere a
/// route of exactly one known peer).
public enum PeerRef: Hashable, Sendable, CustomStringConvertible {
    case id(PeerID)
    case address(PeerAddress)

    public init(parsing text: String) throws(ServiceError) {
        if text.lowercased().hasPrefix(PeerID.prefix) {
            guard let id = PeerID(text) else {
                throw .invalidArgument("'\(text.prefix(80))' is not a peer id: an id is pv: followed by \(PeerID.base32Characters) characters a-z and 2-7 (ListPeers shows them)")
            }
            self = .id(id)
        } else {
            self = .address(try PeerAddress(parsing: text))
        }
    }

    public var description: String {
        switch self {
        case .id(let id): id.description
        case .address(let address): address.description
        }
    }
}

/// One way a peer was reached: a transport's address, and when it last worked.
public struct PeerRoute: Codable, Equatable, Sendable {
    public var address: PeerAddress
    /// Unix ms of the last link opened on this route (0: never, e.g. a route only announced).
    public var lastSeenMs: UInt64

    public init(address: PeerAddress, lastSeenMs: UInt64) {
        self.address = address
        self.lastSeenMs = lastSeenMs
    }

    public var transport: Transport { address.transport }

    /// Dialling order: IP before Bluetooth (faster, no radio airtime), then the most recently used.
    public static func dialOrder(_ a: PeerRoute, _ b: PeerRoute) -> Bool {
        if a.transport != b.transport { return a.transport == .ip }
        return a.lastSeenMs > b.lastSeenMs
    }
}

extension Transport {
    /// Of two links open to one peer, both sides keep the better transport: TCP over RFCOMM.
    public var linkPreference: Int {
        switch self {
        case .ip: 1
        case .bluetooth: 0
        }
    }
}

/// RFC 4648 base32 without padding, lower case.
enum Base32 {
    static let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)

    static func isDigit(_ unit: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(unit) || (UInt8(ascii: "2")...UInt8(ascii: "7")).contains(unit)
    }

    /// The first `characters` × 5 bits of `bytes` (which must hold at least that many).
    static func encode(_ bytes: [UInt8], characters: Int) -> String {
        precondition(bytes.count * 8 >= characters * 5, "not enough bits")
        var out: [UInt8] = []
        out.reserveCapacity(characters)
        for index in 0..<characters {
            let bit = index * 5
            let byte = bit / 8, shift = bit % 8
            let pair = UInt16(bytes[byte]) << 8 | UInt16(byte + 1 < bytes.count ? bytes[byte + 1] : 0)
            out.append(alphabet[Int((pair >> (11 - UInt16(shift))) & 0x1F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
