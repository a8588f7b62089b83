/// The name an app registers and peers open streams to, e.g. `org.example.Chess`
/// (docs/PROTOCOL.md §13.1): 3–255 bytes of `[A-Za-z0-9._-]` with at least one dot, compared
/// byte for byte.
public struct ChannelName: Hashable, Sendable, CustomStringConvertible {
    public static let minBytes = 3
    public static let maxBytes = 255

    public let value: String

    /// - Throws: ``ChannelNameError`` saying what is wrong with `value`.
    public init(_ value: String) throws(ChannelNameError) {
        try self.init(bytes: Array(value.utf8))
    }

    /// Checks bytes from the wire or the bus.
    public init(bytes: some Collection<UInt8>) throws(ChannelNameError) {
        guard bytes.count >= Self.minBytes else { throw .tooShort(bytes: bytes.count) }
        guard bytes.count <= Self.maxBytes else { throw .tooLong(bytes: bytes.count) }
        if let bad = bytes.first(where: { !Self.isAllowed($0) }) { throw .invalidByte(bad) }
        guard bytes.contains(UInt8(ascii: ".")) else { throw .noDot }
        value = String(decoding: bytes, as: UTF8.self)
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }

    public var description: String { value }
}

/// Why a string is not a channel name; the description says how to write one.
public enum ChannelNameError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooShort(bytes: Int)
    case tooLong(bytes: Int)
    /// A byte other than `A-Z a-z 0-9 . _ -` (the first one found).
    case invalidByte(UInt8)
    case noDot

    public var description: String {
        let rule = "a channel name is 3 to 255 characters of A-Z, a-z, 0-9, '.', '_' and '-' with at least one dot, e.g. org.example.Chess"
        switch self {
        case .tooShort(let bytes): return "\(bytes) bytes is too short: \(rule)"
        case .tooLong(let bytes): return "\(bytes) bytes is too long: \(rule)"
        case .invalidByte(let byte):
            let shown = (0x21...0x7E).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
            return "\(shown) is not allowed: \(rule)"
        case .noDot: return "no dot: \(rule)"
        }
    }
}
