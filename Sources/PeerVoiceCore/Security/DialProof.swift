/// The proof in handshake message 1 (docs/SECURITY.md §3.4): that the initiator holds the
/// responder's presence secret, which only the responder's paired peers received (PRESENCE). A
/// responder that is not discoverable answers only a dial that proves it (``DialGate``), so a
/// stranger who dials it learns no key, no HELLO, nothing that tells one installation from another.
///
/// `proof = the first 16 bytes of HK(S_r, "PeerVoice dial proof" || u64be(epoch) || c)`: keyed
/// BLAKE2b under the responder's presence secret `S_r` over the 15-minute presence epoch and the
/// commitment `c` of message 1, which binds the initiator's ephemeral key. An initiator without
/// the secret sends 16 random bytes instead, which an observer cannot tell from a proof.
public enum DialProof {
    /// Bytes of the proof field.
    public static let byteCount = 16
    /// The protocol version whose message 1 carries the field (a link agreed at an older version
    /// has none), and the one place that names it.
    public static let protocolVersion: UInt16 = 8
    private static let label = Array("PeerVoice dial proof".utf8)

    /// The proof of holding `secret` for `epoch` (``PresenceTag/epoch(unixSeconds:)``), bound to
    /// message 1's `commitment`.
    public static func make(secret: PresenceSecret, epoch: UInt64, commitment: [UInt8], crypto: any CryptoPrimitives) -> [UInt8] {
        var message = label
        message.appendBigEndian(epoch)
        message += commitment
        return Array(crypto.hash(message, key: secret.bytes).prefix(byteCount))
    }

    /// Whether the agreed protocol version lays message 1 out with the proof field.
    public static func isCarried(atVersion version: UInt16) -> Bool { version >= protocolVersion }
}

/// What the initiator proves with: the responder's presence secret, and the epoch its clock says.
public struct DialProofKey: Sendable {
    public let secret: PresenceSecret
    public let epoch: UInt64

    public init(secret: PresenceSecret, epoch: UInt64) {
        self.secret = secret
        self.epoch = epoch
    }
}

/// Message 1 as the responder received it, for ``DialGate``: the commitment and the proof field.
public struct DialProofClaim: Equatable, Sendable {
    public let commitment: [UInt8]
    public let proof: [UInt8]

    public init(commitment: [UInt8], proof: [UInt8]) {
        self.commitment = commitment
        self.proof = proof
    }
}
