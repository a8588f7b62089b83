/// The five handshake messages, in the order they travel. The raw value is the message's first
/// byte on the wire. See docs/SECURITY.md §3.
public enum HandshakeMessage: UInt8, CaseIterable, Sendable, CustomStringConvertible {
    /// msg1, initiator → responder: type, commitment H("PeerVoice v2 commit" || e_i) (33 bytes),
    /// and from ``DialProof/protocolVersion`` on the dial proof (49 bytes).
    case commitment = 0x21
    /// msg2, responder → initiator: type, e_r (33 bytes).
    case responderEphemeral = 0x22
    /// msg3, initiator → responder: type, e_i, revealing the commitment (33 bytes).
    case initiatorEphemeral = 0x23
    /// msg4, responder → initiator: type, encrypted s_r, encrypted payload (65 + payload bytes).
    case responderIdentity = 0x24
    /// msg5, initiator → responder: type, encrypted s_i, encrypted payload (65 + payload bytes).
    case initiatorIdentity = 0x25

    /// 1...5.
    public var number: Int { Int(rawValue - 0x20) }

    /// Who sends it.
    public var sender: HandshakeRole {
        switch self {
        case .commitment, .initiatorEphemeral, .initiatorIdentity: .initiator
        case .responderEphemeral, .responderIdentity: .responder
        }
    }

    /// The allowed sizes of the whole message, type byte included; message 1 is longer by the
    /// proof field at the versions that carry it.
    public func allowedByteCounts(withDialProof: Bool) -> ClosedRange<Int> {
        switch self {
        case .commitment where withDialProof: (33 + DialProof.byteCount)...(33 + DialProof.byteCount)
        case .commitment, .responderEphemeral, .initiatorEphemeral: 33...33
        case .responderIdentity, .initiatorIdentity: Handshake.identityMessageOverhead...Handshake.maxMessageBytes
        }
    }

    public var description: String {
        switch self {
        case .commitment: "message 1 (initiator's commitment)"
        case .responderEphemeral: "message 2 (responder's ephemeral key)"
        case .initiatorEphemeral: "message 3 (initiator's ephemeral key)"
        case .responderIdentity: "message 4 (responder's identity and payload)"
        case .initiatorIdentity: "message 5 (initiator's identity and payload)"
        }
    }
}

/// Which end of the link: the initiator dialled (sends messages 1, 3, 5).
public enum HandshakeRole: String, Sendable {
    case initiator
    case responder
}

/// Why a handshake failed. Once a ``Handshake`` has thrown, it keeps throwing the same error and
/// the link must be closed. Descriptions are for log lines and never contain key material.
public enum HandshakeError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The payload given to ``Handshake/init(role:identity:payload:crypto:)`` is over ``Handshake/maxPayloadBytes``.
    case payloadTooLarge(bytes: Int)
    /// A received message is over ``Handshake/maxMessageBytes``.
    case messageTooLarge(bytes: Int)
    /// A received message is empty.
    case emptyMessage
    /// A received message's type byte is not the message expected now (nil: the handshake is over).
    case unexpectedMessage(type: UInt8, expected: HandshakeMessage?)
    /// A received message has the right type but a size it cannot have (`allowed`).
    case wrongMessageSize(HandshakeMessage, bytes: Int, allowed: ClosedRange<Int>)
    /// `writeMessage()` or `readMessage(_:)` was called when it is not this side's turn to do that.
    case outOfTurn(attempted: String, next: HandshakeMessage?)
    /// The initiator's ephemeral key (msg3) does not match the commitment it sent in msg1.
    case commitmentMismatch
    /// A public key from the peer is a low-order point (the X25519 result is all zeros).
    case lowOrderPoint(HandshakeKey)
    /// An encrypted field of msg4/msg5 does not authenticate: tampered, or a man in the middle.
    case decryptionFailed(HandshakeMessage, field: HandshakeField)
    /// The peer proved a static key other than the one it was expected (pinned) to have.
    case unexpectedRemoteKey

    public var description: String {
        switch self {
        case .payloadTooLarge(let bytes):
            return "handshake payload of \(bytes) bytes exceeds the \(Handshake.maxPayloadBytes)-byte limit"
        case .messageTooLarge(let bytes):
            return "handshake message of \(bytes) bytes exceeds the \(Handshake.maxMessageBytes)-byte limit"
        case .emptyMessage:
            return "empty handshake message"
        case .unexpectedMessage(let type, let expected):
            let got = HandshakeMessage(rawValue: type).map { "\($0)" } ?? "a message of unknown type 0x\(hexString([type]))"
            if let expected { return "expected handshake \(expected), received \(got)" }
            return "received \(got) after the handshake was complete"
        case .wrongMessageSize(let message, let bytes, let allowed):
            let range = allowed.count == 1 ? "\(allowed.lowerBound)" : "\(allowed.lowerBound)-\(allowed.upperBound)"
            return "handshake \(message) has \(bytes) bytes (must have \(range))"
        case .outOfTurn(let attempted, let next):
            if let next { return "\(attempted) out of turn: next is \(next) from the \(next.sender)" }
            return "\(attempted) out of turn: the handshake is over"
        case .commitmentMismatch:
            return "the initiator's ephemeral key does not match its commitment (a man in the middle?)"
        case .lowOrderPoint(let key):
            return "the peer's \(key) is a low-order point"
        case .decryptionFailed(let message, let field):
            return "the \(field) in handshake \(message) does not authenticate (tampered, or a man in the middle)"
        case .unexpectedRemoteKey:
            return "the peer presented another static key than the one pinned for it (RemovePeer forgets a pinned key)"
        }
    }
}

/// Which public key from the peer was bad.
public enum HandshakeKey: String, Sendable, CustomStringConvertible {
    case ephemeralKey = "ephemeral key"
    case staticKey = "static key"
    public var description: String { rawValue }
}

/// Which encrypted field of msg4/msg5.
public enum HandshakeField: String, Sendable, CustomStringConvertible {
    case staticKey = "static key"
    case payload
    public var description: String { rawValue }
}
