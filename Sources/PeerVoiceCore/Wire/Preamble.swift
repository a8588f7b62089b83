/// The 8 bytes each side sends first on a byte stream: ASCII `"PVLK"`, then the protocol
/// versions it speaks: the lowest (`u16` big-endian) and the highest (`u16`, 0 when it is the
/// lowest). A version-6 receiver checks only the lowest, which is why a side that still speaks 6
/// puts it there (docs/PROTOCOL.md §3).
public enum Preamble {
    /// Number of bytes in a preamble.
    public static let byteCount = 8

    /// The magic that opens every PeerVoice stream.
    public static let magic: [UInt8] = Array("PVLK".utf8)

    /// The preamble this implementation sends (``VersionRange/supported``).
    public static let bytes = bytes(announcing: .supported)

    /// A preamble announcing `versions`.
    public static func bytes(announcing versions: VersionRange) -> [UInt8] {
        var bytes = magic
        bytes.appendBigEndian(versions.lowest)
        bytes.appendBigEndian(versions.highest == versions.lowest ? 0 : versions.highest)
        return bytes
    }

    /// Checks a peer's complete preamble against the versions this side speaks; returns the
    /// versions it announces.
    ///
    /// - Throws: ``WireError/notPeerVoice`` unless `bytes` is 8 bytes starting with the magic;
    ///   ``WireError/invalidVersionRange(lowest:highest:)`` for a highest below the lowest;
    ///   ``WireError/unsupportedVersion(_:)`` or ``WireError/unsupportedVersions(_:)`` when the
    ///   peer shares no version with `supported`.
    @discardableResult
    public static func check(_ bytes: some Collection<UInt8>, supporting supported: VersionRange = .supported) throws(WireError) -> VersionRange {
        let bytes = Array(bytes)
        guard bytes.count == byteCount, let versions = try checkPrefix(bytes[...], supporting: supported) else { throw .notPeerVoice }
        return versions
    }

    /// Checks as much of a preamble as has arrived, so a stranger is turned away at its first
    /// wrong byte and a side of version 5 or older (one version, in bytes 4-5) as soon as those
    /// have come. Returns the versions the peer speaks once all 8 bytes are there and valid.
    static func checkPrefix(_ bytes: ArraySlice<UInt8>, supporting supported: VersionRange) throws(WireError) -> VersionRange? {
        let start = bytes.startIndex
        for offset in 0..<min(bytes.count, magic.count) where bytes[start + offset] != magic[offset] {
            throw .notPeerVoice
        }
        guard bytes.count >= 6 else { return nil }
        let lowest = UInt16(bytes[start + 4]) << 8 | UInt16(bytes[start + 5])
        if lowest < Wire.lastVersionWithoutRange && !supported.contains(lowest) { throw .unsupportedVersion(lowest) }
        guard bytes.count >= byteCount else { return nil }
        let announcedHighest = UInt16(bytes[start + 6]) << 8 | UInt16(bytes[start + 7])
        // Up to version 5 bytes 6-7 were reserved; version 6 sends them as 0.
        let highest = lowest < Wire.lastVersionWithoutRange || announcedHighest == 0 ? lowest : announcedHighest
        guard let versions = VersionRange(lowest: lowest, highest: highest) else {
            throw .invalidVersionRange(lowest: lowest, highest: announcedHighest)
        }
        guard supported.agreed(with: versions) != nil else {
            throw versions.lowest == versions.highest ? .unsupportedVersion(lowest) : .unsupportedVersions(versions)
        }
        return versions
    }
}
