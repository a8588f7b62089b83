/// The protobuf wire format (varints, length-delimited fields), as much of it as Mumble's
/// control messages use, written here rather than generated: a room reads eleven messages and
/// writes six, each a handful of scalar and string fields (PROTOCOL.md "Rooms").
///
/// The reader trusts nothing: every length is checked against what is left, varints stop at ten
/// bytes, and unknown fields of any wire type are skipped, so a newer server's additions are
/// ignored rather than refused.
public enum ProtobufError: Error, Equatable, Sendable {
    /// The message ends inside a field.
    case truncated
    /// A varint longer than ten bytes.
    case overlongVarint
    /// A wire type protobuf does not define (3 and 4 are the deprecated groups, refused too).
    case unsupportedWireType(UInt8)
    /// Field number 0, which protobuf forbids.
    case invalidFieldNumber
}

/// One field as it appeared on the wire.
public enum ProtobufValue: Sendable, Equatable {
    case varint(UInt64)
    case fixed64(UInt64)
    case bytes(ArraySlice<UInt8>)
    case fixed32(UInt32)

    /// The value as an unsigned integer (varint fields), nil for any other wire type.
    public var uint: UInt64? {
        if case .varint(let value) = self { return value }
        return nil
    }

    /// The value as a 32-bit unsigned integer: nil for another wire type or a larger value.
    public var uint32: UInt32? { uint.flatMap { UInt32(exactly: $0) } }

    public var bool: Bool? { uint.map { $0 != 0 } }

    /// A length-delimited field's bytes.
    public var bytes: ArraySlice<UInt8>? {
        if case .bytes(let value) = self { return value }
        return nil
    }

    /// A string field: UTF-8, invalid sequences replaced (a server's text is shown, never parsed further).
    public var string: String? { bytes.map { String(decoding: $0, as: UTF8.self) } }
}

/// Reads the fields of one message in order.
public struct ProtobufReader {
    private let bytes: ArraySlice<UInt8>
    private var position: Int

    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        position = bytes.startIndex
    }

    /// The next field's number and value, or nil at the end of the message.
    public mutating func next() throws(ProtobufError) -> (field: UInt32, value: ProtobufValue)? {
        guard position < bytes.endIndex else { return nil }
        let key = try varint()
        let field = key >> 3
        guard field != 0, let number = UInt32(exactly: field) else { throw .invalidFieldNumber }
        switch UInt8(key & 7) {
        case 0:
            return (number, .varint(try varint()))
        case 1:
            return (number, .fixed64(UInt64(littleEndian: try fixed(8))))
        case 2:
            let length = try varint()
            guard length <= UInt64(bytes.endIndex - position) else { throw .truncated }
            let start = position
            position += Int(length)
            return (number, .bytes(bytes[start..<position]))
        case 5:
            return (number, .fixed32(UInt32(truncatingIfNeeded: try fixed(4))))
        case let other:
            throw .unsupportedWireType(other)
        }
    }

    /// The next bare varint, for the bytes of a packed repeated field; nil at their end.
    public mutating func nextPackedVarint() throws(ProtobufError) -> UInt64? {
        guard position < bytes.endIndex else { return nil }
        return try varint()
    }

    private mutating func varint() throws(ProtobufError) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<10 {
            guard position < bytes.endIndex else { throw .truncated }
            let byte = bytes[position]
            position += 1
            value |= UInt64(byte & 0x7F) << (7 * UInt64(index))
            if byte & 0x80 == 0 { return value }
        }
        throw .overlongVarint
    }

    private mutating func fixed(_ count: Int) throws(ProtobufError) -> UInt64 {
        guard bytes.endIndex - position >= count else { throw .truncated }
        var value: UInt64 = 0
        for index in 0..<count { value |= UInt64(bytes[position + index]) << (8 * UInt64(index)) }
        position += count
        return value
    }
}

/// Writes the fields of one message.
public struct ProtobufWriter {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func uint(_ field: UInt32, _ value: UInt64) {
        key(field, wireType: 0)
        varint(value)
    }

    public mutating func bool(_ field: UInt32, _ value: Bool) { uint(field, value ? 1 : 0) }

    public mutating func bytes(_ field: UInt32, _ value: some Collection<UInt8>) {
        key(field, wireType: 2)
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    public mutating func string(_ field: UInt32, _ value: String) { bytes(field, Array(value.utf8)) }

    private mutating func key(_ field: UInt32, wireType: UInt64) { varint(UInt64(field) << 3 | wireType) }

    private mutating func varint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }
}
