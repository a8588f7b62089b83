/// Constants of the peer-link wire protocol (version 11, docs/PROTOCOL.md) and its framing layer.
///
/// The framing layer (preamble, `u32` length prefix, body) is independent of what a body
/// contains, so that the protocol (since version 2) can seal each body with an AEAD without touching it: see
/// ``FrameDecoder/nextBody()`` and ``Wire/lengthPrefixed(_:)``.
public enum Wire {
    /// The newest protocol version this implementation speaks: the highest its ``Preamble``
    /// announces (``VersionRange/supported``). Version 8's message 1 carries the dial proof
    /// (``DialProof/protocolVersion``); version 9 brought file transfers (``TransferWire``),
    /// version 10 their SHA-256 file hashes (``ContentHashes``), version 11 link records sealed
    /// with AES-256-GCM (``LinkCipher``).
    public static let protocolVersion: UInt16 = LinkCipher.aes256GCMVersion

    /// The oldest version it still speaks, with a side of the previous release: the lowest its
    /// ``Preamble`` announces.
    public static let minimumProtocolVersion: UInt16 = 6

    /// The last version whose sides announce one version only: up to 5 a preamble's bytes 6–7 say
    /// nothing, and version 6 sends them as 0 (docs/PROTOCOL.md §3).
    public static let lastVersionWithoutRange: UInt16 = 6

    /// Size of the big-endian `u32` length prefix in front of each frame body.
    public static let lengthPrefixBytes = 4

    /// Largest frame body (type byte included) a receiver accepts.
    public static let maxFrameBodyBytes = 70_000

    /// Largest TEXT message, in bytes of UTF-8.
    public static let maxTextBytes = 65_536

    /// Largest display name in a HELLO, in bytes of UTF-8.
    public static let maxNameBytes = 256

    /// Largest Opus packet a VOICE frame carries (the Opus maximum for one frame).
    public static let maxOpusPayloadBytes = 1275

    /// Puts the `u32` big-endian length prefix in front of a frame body.
    ///
    /// The caller keeps `body.count` within `1...maxFrameBodyBytes`; ``Frame/encoded()`` always does.
    public static func lengthPrefixed(_ body: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(lengthPrefixBytes + body.count)
        bytes.appendBigEndian(UInt32(truncatingIfNeeded: body.count))
        bytes.append(contentsOf: body)
        return bytes
    }
}

extension Array where Element == UInt8 {
    mutating func appendBigEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    mutating func appendBigEndian(_ value: UInt32) {
        append(UInt8(truncatingIfNeeded: value >> 24))
        append(UInt8(truncatingIfNeeded: value >> 16))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    mutating func appendBigEndian(_ value: UInt64) {
        appendBigEndian(UInt32(truncatingIfNeeded: value >> 32))
        appendBigEndian(UInt32(truncatingIfNeeded: value))
    }
}
