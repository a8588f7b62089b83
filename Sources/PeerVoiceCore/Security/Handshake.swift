/// The authenticated key exchange that starts every PeerVoice v2 link: Noise XX over X25519,
/// BLAKE2b and XChaCha20-Poly1305, with the initiator committing to its ephemeral key before it
/// sees the responder's (commit-then-reveal), so that the 6-digit ``verificationCode`` gives a
/// man in the middle one 1-in-10^6 guess per attempt. The exact bytes are in docs/SECURITY.md §3.
///
/// ```
///   initiator                                   responder
///   msg1  0x21 || H("PeerVoice v2 commit" || e_i)   →
///                                             ←   msg2  0x22 || e_r
///   msg3  0x23 || e_i                           →     (responder checks the commitment)
///         ee; verificationCode fixed here
///                                             ←   msg4  0x24 || enc(s_r) || es || enc(payload_r)
///   msg5  0x25 || enc(s_i) || se || enc(payload_i) →
///   split: one key per direction + an exporter key (voice)
/// ```
///
/// From ``DialProof/protocolVersion`` on, message 1 also carries the dial proof (``DialProof``),
/// mixed into the transcript after the commitment, so that a responder that is not discoverable
/// can refuse, before message 2, a dial from anyone but its paired peers (``DialGate``).
///
/// Pure state machine: it never does I/O. The caller sends each message from ``writeMessage()``
/// as one length-prefixed frame body and hands each received body to ``readMessage(_:)``;
/// ``nextAction`` says which comes next. Any error is final: the same error is thrown again on
/// every later call and the secrets are wiped. Not thread-safe (use it from one thread).
public final class Handshake {
    /// Bound into the transcript hash (h0 = H(name)); names the pattern and the algorithms.
    public static let protocolName = "PeerVoice_v2_XXcommit_25519_XChaChaPoly_BLAKE2b"
    /// Largest handshake message either side sends or accepts, type byte included.
    public static let maxMessageBytes = 1024
    /// msg4/msg5 without payload: type (1) + sealed static key (32 + 16) + payload tag (16).
    public static let identityMessageOverhead = 1 + CryptoSize.publicKey + CryptoSize.tag + CryptoSize.tag
    /// Largest payload (e.g. the HELLO body) one side can carry in msg4/msg5: 959 bytes.
    public static let maxPayloadBytes = maxMessageBytes - identityMessageOverhead

    static let commitLabel = Array("PeerVoice v2 commit".utf8)
    static let codeLabel = Array("PeerVoice v2 code".utf8)

    /// What the caller should do next.
    public enum Action: Equatable, Sendable {
        /// Call ``writeMessage()`` and send its result.
        case send(HandshakeMessage)
        /// Wait for the peer's next message and pass it to ``readMessage(_:)``.
        case receive(HandshakeMessage)
        /// Done: take ``result``.
        case complete
        /// The handshake failed; close the link.
        case failed(HandshakeError)
    }

    public let role: HandshakeRole
    private let crypto: any CryptoPrimitives
    private let identity: StaticIdentity
    private let payload: [UInt8]
    private let expectedRemoteStaticKey: [UInt8]?
    private let dialProof: DialProofField
    private var symmetric: SymmetricState
    private let ephemeralPublicKey: [UInt8]
    private var ephemeralSecretKey: [UInt8]
    private var remoteEphemeralKey: [UInt8]?
    private var receivedCommitment: [UInt8]?
    /// The initiator computes ee on reading msg2 (to refuse a low-order e_r before revealing e_i)
    /// and mixes it in after msg3.
    private var pendingEphemeralSecret: [UInt8]?
    private var nextIndex = 0
    private var failure: HandshakeError?

    /// The 6-digit code both people compare on first contact ("000000"..."999999"). Known from
    /// message 3 on (the initiator after writing it, the responder after reading it): it depends
    /// only on the commitment and the two ephemeral keys, which nobody can change after msg3.
    public private(set) var verificationCode: String?
    /// The peer's long-term public key: the initiator learns it from msg4 (and may refuse to send
    /// msg5 if it is not the pinned key), the responder from msg5.
    public private(set) var remoteStaticKey: [UInt8]?
    /// The peer's payload, with the same timing as ``remoteStaticKey``.
    public private(set) var remotePayload: [UInt8]?
    /// Set once the handshake is complete.
    public private(set) var result: HandshakeResult?
    /// The responder's view of message 1's commitment and proof field, once read (nil when the
    /// agreed version has no proof field): what ``DialGate`` decides on before message 2.
    public private(set) var receivedDialProof: DialProofClaim?

    /// - Parameters:
    ///   - identity: this side's long-term key pair.
    ///   - payload: opaque bytes delivered to the peer encrypted and authenticated (the HELLO body),
    ///     at most ``maxPayloadBytes``. The responder's travels in msg4, before it knows who the
    ///     initiator is; the initiator's in msg5.
    ///   - expectedRemoteStaticKey: the key pinned for the peer, when the caller knows whom it
    ///     talks to (typically the initiator dialling a known peer). Any other key ends the
    ///     handshake with ``HandshakeError/unexpectedRemoteKey`` as soon as it is received, so an
    ///     initiator never sends msg5 (its own identity) to an impostor. Nil: accept any key and
    ///     let the caller decide from ``remoteStaticKey``.
    ///   - dialProof: whether message 1 carries the dial proof (the agreed protocol version says)
    ///     and, for an initiator, what it proves with.
    public init(role: HandshakeRole, identity: StaticIdentity, payload: [UInt8],
                expectedRemoteStaticKey: [UInt8]? = nil, dialProof: DialProofField = .absent,
                crypto: any CryptoPrimitives) throws(HandshakeError) {
        guard payload.count <= Self.maxPayloadBytes else { throw .payloadTooLarge(bytes: payload.count) }
        self.role = role
        self.crypto = crypto
        self.identity = identity
        self.payload = payload
        self.expectedRemoteStaticKey = expectedRemoteStaticKey
        self.dialProof = dialProof
        symmetric = SymmetricState(protocolName: Self.protocolName, crypto: crypto)
        let ephemeral = crypto.x25519KeyPair()
        ephemeralPublicKey = ephemeral.publicKey
        ephemeralSecretKey = ephemeral.secretKey
    }

    deinit {
        wipeSecrets()
    }

    private var nextMessage: HandshakeMessage? {
        nextIndex < HandshakeMessage.allCases.count ? HandshakeMessage.allCases[nextIndex] : nil
    }

    public var nextAction: Action {
        if let failure { return .failed(failure) }
        guard let message = nextMessage else { return .complete }
        return message.sender == role ? .send(message) : .receive(message)
    }

    public var isComplete: Bool { result != nil }

    /// Whether message 1 has the proof field.
    public var carriesDialProof: Bool {
        if case .present = dialProof { return true }
        return false
    }

    /// The transcript hash so far (after the last message written or read); equals
    /// ``HandshakeResult/handshakeHash`` once complete.
    public var transcriptHash: [UInt8] { symmetric.transcriptHash }

    // MARK: - Writing

    /// The next message this side must send. Throws ``HandshakeError/outOfTurn(attempted:next:)``
    /// if it is the peer's turn or the handshake is over.
    public func writeMessage() throws(HandshakeError) -> [UInt8] {
        if let failure { throw failure }
        guard let message = nextMessage, message.sender == role else {
            throw fail(.outOfTurn(attempted: "writeMessage()", next: nextMessage))
        }
        var bytes: [UInt8] = [message.rawValue]
        symmetric.mixHash([message.rawValue])
        switch message {
        case .commitment:
            let commitment = Self.commitment(to: ephemeralPublicKey, crypto: crypto)
            symmetric.mixHash(commitment)
            bytes += commitment
            if case .present(let key) = dialProof {
                // Without the responder's secret, random bytes an observer cannot tell from a proof.
                let proof = key.map { DialProof.make(secret: $0.secret, epoch: $0.epoch, commitment: commitment, crypto: crypto) }
                    ?? crypto.randomBytes(DialProof.byteCount)
                symmetric.mixHash(proof)
                bytes += proof
            }
        case .responderEphemeral:
            symmetric.mixHash(ephemeralPublicKey)
            bytes += ephemeralPublicKey
        case .initiatorEphemeral:
            symmetric.mixHash(ephemeralPublicKey)
            bytes += ephemeralPublicKey
            guard var ee = pendingEphemeralSecret else { preconditionFailure("msg3 before msg2") }
            pendingEphemeralSecret = nil
            afterReveal(ee: &ee)
        case .responderIdentity:
            bytes += symmetric.encryptAndHash(identity.publicKey)
            // es = DH(s_r, e_i); e_i passed the low-order check when ee was computed.
            guard let remoteEphemeralKey, var es = crypto.x25519(identity.secretKey, remoteEphemeralKey) else {
                throw fail(.lowOrderPoint(.ephemeralKey))
            }
            symmetric.mixKey(&es)
            bytes += symmetric.encryptAndHash(payload)
        case .initiatorIdentity:
            bytes += symmetric.encryptAndHash(identity.publicKey)
            // se = DH(s_i, e_r)
            guard let remoteEphemeralKey, var se = crypto.x25519(identity.secretKey, remoteEphemeralKey) else {
                throw fail(.lowOrderPoint(.ephemeralKey))
            }
            symmetric.mixKey(&se)
            bytes += symmetric.encryptAndHash(payload)
        }
        assert(bytes.count <= Self.maxMessageBytes)
        nextIndex += 1
        if nextMessage == nil { finish() }
        return bytes
    }

    // MARK: - Reading

    /// Processes the peer's next message (one whole frame body). Checks, in this order: size
    /// limit, emptiness, turn, type byte, exact size; then the content.
    public func readMessage(_ message: some Collection<UInt8>) throws(HandshakeError) {
        if let failure { throw failure }
        guard message.count <= Self.maxMessageBytes else { throw fail(.messageTooLarge(bytes: message.count)) }
        let bytes = Array(message)
        guard let type = bytes.first else { throw fail(.emptyMessage) }
        guard let expected = nextMessage else { throw fail(.unexpectedMessage(type: type, expected: nil)) }
        guard expected.sender != role else { throw fail(.outOfTurn(attempted: "readMessage(_:)", next: expected)) }
        guard type == expected.rawValue else { throw fail(.unexpectedMessage(type: type, expected: expected)) }
        let allowed = expected.allowedByteCounts(withDialProof: carriesDialProof)
        guard allowed.contains(bytes.count) else {
            throw fail(.wrongMessageSize(expected, bytes: bytes.count, allowed: allowed))
        }
        let body = Array(bytes[1...])
        symmetric.mixHash([type])
        switch expected {
        case .commitment:
            let commitment = Array(body.prefix(CryptoSize.hash))
            receivedCommitment = commitment
            symmetric.mixHash(commitment)
            if carriesDialProof {
                let proof = Array(body.dropFirst(CryptoSize.hash))
                symmetric.mixHash(proof)
                receivedDialProof = DialProofClaim(commitment: commitment, proof: proof)
            }
        case .responderEphemeral:
            // ee = DH(e_i, e_r), checked now so that e_i is never revealed to a low-order e_r.
            guard let ee = crypto.x25519(ephemeralSecretKey, body) else { throw fail(.lowOrderPoint(.ephemeralKey)) }
            pendingEphemeralSecret = ee
            remoteEphemeralKey = body
            symmetric.mixHash(body)
        case .initiatorEphemeral:
            guard let receivedCommitment,
                  constantTimeEqual(Self.commitment(to: body, crypto: crypto), receivedCommitment) else {
                throw fail(.commitmentMismatch)
            }
            guard var ee = crypto.x25519(ephemeralSecretKey, body) else { throw fail(.lowOrderPoint(.ephemeralKey)) }
            remoteEphemeralKey = body
            symmetric.mixHash(body)
            afterReveal(ee: &ee)
        case .responderIdentity, .initiatorIdentity:
            let sealedStaticBytes = CryptoSize.publicKey + CryptoSize.tag
            guard let staticKey = symmetric.decryptAndHash(Array(body[..<sealedStaticBytes])) else {
                throw fail(.decryptionFailed(expected, field: .staticKey))
            }
            // msg4: es = DH(e_i, s_r); msg5: se = DH(e_r, s_i). Either way: our ephemeral, their static.
            guard var sharedSecret = crypto.x25519(ephemeralSecretKey, staticKey) else {
                throw fail(.lowOrderPoint(.staticKey))
            }
            symmetric.mixKey(&sharedSecret)
            crypto.wipe(&ephemeralSecretKey)  // its last use on either side
            guard let peerPayload = symmetric.decryptAndHash(Array(body[sealedStaticBytes...])) else {
                throw fail(.decryptionFailed(expected, field: .payload))
            }
            if let expectedRemoteStaticKey, !constantTimeEqual(expectedRemoteStaticKey, staticKey) {
                throw fail(.unexpectedRemoteKey)
            }
            remoteStaticKey = staticKey
            remotePayload = peerPayload
        }
        nextIndex += 1
        if nextMessage == nil { finish() }
    }

    // MARK: - Steps shared by both sides

    /// After msg3: fix the verification code from the transcript so far, then MixKey(ee).
    private func afterReveal(ee: inout [UInt8]) {
        verificationCode = Self.verificationCode(transcriptHash: symmetric.transcriptHash, crypto: crypto)
        symmetric.mixKey(&ee)
    }

    private func finish() {
        guard let remoteStaticKey, let remotePayload, let verificationCode else {
            preconditionFailure("handshake finished without the peer's identity")
        }
        let keys = symmetric.split()
        let (send, receive) = role == .initiator ? (keys[0], keys[1]) : (keys[1], keys[0])
        result = HandshakeResult(role: role, localStaticKey: identity.publicKey, remoteStaticKey: remoteStaticKey,
                                 remotePayload: remotePayload, handshakeHash: symmetric.transcriptHash,
                                 verificationCode: verificationCode, sendKey: send, receiveKey: receive,
                                 exporterKey: keys[2], crypto: crypto)
        wipeSecrets()
    }

    private func fail(_ error: HandshakeError) -> HandshakeError {
        failure = error
        wipeSecrets()
        return error
    }

    private func wipeSecrets() {
        crypto.wipe(&ephemeralSecretKey)
        if var pending = pendingEphemeralSecret { crypto.wipe(&pending) }
        pendingEphemeralSecret = nil
        symmetric.wipe()
    }

    // MARK: - Derivations (public for documentation and tests)

    /// c = H("PeerVoice v2 commit" || e_i), 32 bytes.
    public static func commitment(to ephemeralPublicKey: [UInt8], crypto: any CryptoPrimitives) -> [UInt8] {
        crypto.hash(commitLabel + ephemeralPublicKey, key: nil)
    }

    /// The first 8 bytes of H("PeerVoice v2 code" || h3) as a big-endian u64, modulo 10^6,
    /// zero-padded to 6 digits. (The modulo bias is below 10^-13.)
    public static func verificationCode(transcriptHash: [UInt8], crypto: any CryptoPrimitives) -> String {
        let digest = crypto.hash(codeLabel + transcriptHash, key: nil)
        let digits = String(digest.bigEndianUInt64() % 1_000_000)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }
}

/// Message 1's proof field (docs/SECURITY.md §3.4), decided by the agreed protocol version.
public enum DialProofField: Sendable {
    /// The agreed version has none: message 1 is the commitment alone (33 bytes).
    case absent
    /// Message 1 carries it (49 bytes). The initiator proves with the key (the responder's
    /// presence secret), or sends random bytes when it has none; a responder passes nil and
    /// reads the claim into ``Handshake/receivedDialProof``.
    case present(DialProofKey?)
}
