/// The 8 bytes each side sends first on a byte stream: ASCII `"PVLK"`, the protocol version
/// (`u16` big-endian) and a reserved `u16` sent as 0 and ignored on receipt.
public enum Preamble {
    /// Number of bytes in a preamble.
    public static let byteCount = 8

    /// The magic that opens every PeerVoice stream.
    public static let magic: [UInt8] = Array("PVLK".utf8)

    /// The preamble this implementation sends (version ``Wire/protocolVersion``).
    public static let bytes: [UInt8] = {
        var bytes = magic
        bytes.appendBigEndian(Wire.protocolVersion)
        bytes.appendBigEndian(UInt16(0))
        return bytes
    }()

    /// Checks a peer's complete preamble.
    ///
    /// - Throws: ``WireError/notPeerVoice`` unless `bytes` is 8 bytes starting with the magic;
    ///   ``WireError/unsupportedVersion(_:)`` for any version but ``Wire/protocolVersion``.
    public static func check(_ bytes: some Collection<UInt8>) throws(WireError) {
        let bytes = Array(bytes)
        guard bytes.count == byteCount else { throw .notPeerVoice }
        _ = try checkPrefix(bytes[...])
    }

    /// Checks as much of a preamble as has arrived, so a stranger is turned away at its first
    /// wrong byte. Returns true once all 8 bytes are present and valid.
    static func checkPrefix(_ bytes: ArraySlice<UInt8>) throws(WireError) -> Bool {
        let start = bytes.startIndex
        for offset in 0..<min(bytes.count, magic.count) where bytes[start + offset] != magic[offset] {
            throw .notPeerVoice
        }
        guard bytes.count >= 6 else { return false }
        let version = UInt16(bytes[start + 4]) << 8 | UInt16(bytes[start + 5])
        guard version == Wire.protocolVersion else { throw .unsupportedVersion(version) }
        return bytes.count >= byteCount
    }
}
