/// What a completed ``Handshake`` yields: who the peer is and the keys of this link.
///
/// Fresh for every link (both ephemeral keys are new), so keys never carry over between links.
public struct HandshakeResult: Sendable {
    public let role: HandshakeRole
    /// This side's long-term public key.
    public let localStaticKey: [UInt8]
    /// The peer's long-term public key: pin it after the first confirmed contact, and refuse the
    /// link if a pinned peer presents another one.
    public let remoteStaticKey: [UInt8]
    /// The peer's handshake payload (its HELLO body), authenticated.
    public let remotePayload: [UInt8]
    /// The final transcript hash h: covers every handshake message, so both static keys, both
    /// ephemeral keys and both payloads. Equal on both sides; usable as a channel binding.
    public let handshakeHash: [UInt8]
    /// The 6 digits both people compare on first contact (see ``Handshake/verificationCode``).
    public let verificationCode: String
    /// Seals what this side sends (the initiator's is the peer's ``receiveKey``).
    public let sendKey: [UInt8]
    /// Opens what the peer sends.
    public let receiveKey: [UInt8]
    /// The link's export secret, from which voice-session keys are derived (``VoiceKeys``);
    /// never used to seal anything itself.
    public let exporterKey: [UInt8]
    let crypto: any CryptoPrimitives

    /// The direction this side's records travel in.
    public var sendDirection: RecordDirection { role == .initiator ? .initiatorToResponder : .responderToInitiator }
    /// The direction the peer's records travel in.
    public var receiveDirection: RecordDirection { role == .initiator ? .responderToInitiator : .initiatorToResponder }

    /// Keys by direction, whichever side this is.
    public var initiatorToResponderKey: [UInt8] { role == .initiator ? sendKey : receiveKey }
    public var responderToInitiatorKey: [UInt8] { role == .initiator ? receiveKey : sendKey }

    /// The sealer for every frame body this side sends on the link (stream records), with the
    /// cipher of the version the link runs at.
    public func makeLinkSealer(_ cipher: LinkCipher) -> RecordSealer {
        RecordSealer(aead: cipher.keyed(sendKey, crypto: crypto), direction: sendDirection, purpose: .link,
                     rekeyLimit: cipher.rekeyLimit)
    }

    /// The opener for the peer's frame bodies on the link, in ``RecordOpener/Mode/stream`` mode.
    public func makeLinkOpener(_ cipher: LinkCipher) -> RecordOpener {
        RecordOpener(aead: cipher.keyed(receiveKey, crypto: crypto), direction: receiveDirection, purpose: .link, mode: .stream)
    }

    /// Keys of a voice session in which this side sends under `localSessionID` and the peer under
    /// `remoteSessionID` (see ``VoiceKeys``).
    public func voiceKeys(localSessionID: [UInt8], remoteSessionID: [UInt8]) throws(VoiceKeyError) -> VoiceKeys {
        try VoiceKeys(link: self, localSessionID: localSessionID, remoteSessionID: remoteSessionID)
    }
}
