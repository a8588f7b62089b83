/// Identifies one file transfer: 16 random bytes chosen by its sender, the same at both ends and
/// across every stream that carries it (a transfer resumes on a new stream after a reconnection).
public typealias TransferID = Identifier<TransferIdentity>

/// What a ``TransferID`` names (a type tag, never instantiated).
public enum TransferIdentity {}

/// Constants of file transfers (docs/PROTOCOL.md §15): the channel they run on, the limits a
/// receiver enforces, and the protocol numbers (kept in ``Capabilities``' catalogue).
public enum TransferWire {
    /// The HELLO capability bit of a side that receives files (docs/PROTOCOL.md §5.1). A transfer
    /// is offered only on a link that carries it.
    public static let capability = Capabilities.transfers
    /// The protocol version that brings file transfers.
    public static let protocolVersion: UInt16 = capability.introducedIn!

    /// The app channel (docs/PROTOCOL.md §13) each transfer runs on, one `stream`-mode stream per
    /// attempt, opened by the sender. The service registers it itself; no app can.
    public static let channel = "org.example.PeerVoice.Transfer"

    /// Most entries (files and folders) one transfer may hold.
    public static let maxEntries = 100_000
    /// Longest relative path of an entry, in bytes of UTF-8 (Linux's `PATH_MAX` less its NUL).
    public static let maxPathBytes = 4_095
    /// Longest single name (one path component), in bytes (Linux's `NAME_MAX`).
    public static let maxNameBytes = 255
    /// Deepest nesting of an entry, in path components.
    public static let maxDepth = 64
    /// Largest message on a transfer stream after its length prefix (an OFFER with its manifest).
    public static let maxMessageBytes = 16 * 1024 * 1024
    /// Largest DATA payload.
    public static let maxDataBytes = 1024 * 1024
    /// Longest text in ABORT, in bytes of UTF-8.
    public static let maxReasonBytes = 1_024
    /// Bytes of a file's content hash (BLAKE2b-256 or SHA-256: ``ContentHashAlgorithm``).
    public static let hashBytes = 32
}
