/// Identifies one installation of PeerVoice: 16 random bytes chosen once and kept.
///
/// Sent in HELLO; receivers key message deduplication on it.
public typealias InstanceID = Identifier<InstanceIdentity>

/// Identifies one text message: 16 random bytes chosen by its sender.
///
/// The same at both ends of a link; its ``Identifier/hex`` is the message id the D-Bus API shows.
public typealias MessageID = Identifier<MessageIdentity>

/// What an ``InstanceID`` names (a type tag, never instantiated).
public enum InstanceIdentity {}
/// What a ``MessageID`` names (a type tag, never instantiated).
public enum MessageIdentity {}

/// A 16-byte random identifier; `Kind` keeps instance and message ids from being mixed up.
public struct Identifier<Kind>: Hashable, Sendable, CustomStringConvertible {
    let value: ID128

    init(value: ID128) {
        self.value = value
    }

    /// A new identifier from the system's cryptographically secure random source.
    public static func random() -> Identifier {
        Identifier(value: .random())
    }

    /// The identifier made of exactly 16 bytes, or nil for any other count.
    public init?(bytes: some Collection<UInt8>) {
        guard let value = ID128(bytes: bytes) else { return nil }
        self.value = value
    }

    /// Parses 32 hexadecimal digits (either case); nil for anything else.
    public init?(hex: some StringProtocol) {
        guard let value = ID128(hex: hex) else { return nil }
        self.value = value
    }

    /// The 16 bytes, in wire order.
    public var bytes: [UInt8] { value.bytes }

    /// 32 lowercase hexadecimal digits.
    public var hex: String { value.hex }

    public var description: String { hex }
}

/// 128 bits held as two integers, so identifiers are cheap to copy, hash and compare.
struct ID128: Hashable, Sendable {
    /// Bytes 0-7, big-endian.
    var high: UInt64
    /// Bytes 8-15, big-endian.
    var low: UInt64

    static let byteCount = 16

    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    static func random() -> ID128 {
        var generator = SystemRandomNumberGenerator()
        return ID128(high: generator.next(), low: generator.next())
    }

    init?(bytes: some Collection<UInt8>) {
        guard bytes.count == ID128.byteCount else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (offset, byte) in bytes.enumerated() {
            if offset < 8 {
                high = high << 8 | UInt64(byte)
            } else {
                low = low << 8 | UInt64(byte)
            }
        }
        self.init(high: high, low: low)
    }

    init?(hex: some StringProtocol) {
        let digits = hex.utf8
        guard digits.count == 2 * ID128.byteCount else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (offset, digit) in digits.enumerated() {
            guard let nibble = ID128.nibble(digit) else { return nil }
            if offset < 16 {
                high = high << 4 | UInt64(nibble)
            } else {
                low = low << 4 | UInt64(nibble)
            }
        }
        self.init(high: high, low: low)
    }

    var bytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(ID128.byteCount)
        bytes.appendBigEndian(high)
        bytes.appendBigEndian(low)
        return bytes
    }

    var hex: String {
        let alphabet = Array("0123456789abcdef".utf8)
        var digits: [UInt8] = []
        digits.reserveCapacity(2 * ID128.byteCount)
        for word in [high, low] {
            for shift in stride(from: 60, through: 0, by: -4) {
                digits.append(alphabet[Int((word >> UInt64(shift)) & 0xF)])
            }
        }
        return String(decoding: digits, as: UTF8.self)
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
