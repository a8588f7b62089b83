import GIO
import PeerVoiceBus
import PeerVoiceCore

/// Where a link's other end is.
enum RemoteEndpoint: CustomStringConvertible {
    case ip(IPEndpoint)
    case bluetooth(address: String)

    var description: String {
        switch self {
        case .ip(let endpoint): endpoint.description
        case .bluetooth(let address): address
        }
    }

    var transport: Transport {
        switch self {
        case .ip: .ip
        case .bluetooth: .bluetooth
        }
    }
}

/// What a link reports to whoever owns it (the service).
protocol PeerLinkDelegate: AnyObject {
    /// An incoming dial's message 1 arrived (`dialProof`: its proof field, nil at a version
    /// without one). Return false to refuse it as any stranger is refused: no message 2, the
    /// stream closed `DialGate.refusalDelay` after message 1 arrived (docs/SECURITY.md §11.2).
    func linkMayAnswer(_ link: PeerLink, dialProof: DialProofClaim?) -> Bool
    /// An incoming key exchange passed message 3: the verification code is fixed, so a man in
    /// the middle has had one guess. Return false to end the link at once (rate limit).
    func linkMayContinueAfterCommitment(_ link: PeerLink) -> Bool
    /// The key exchange is done: `link.peerHello` and `link.result` say who the peer is. Nothing
    /// flows until the owner declares its status (`declare(.known)` for a pinned key,
    /// `declare(.asking)` before asking its person) and the link opens (docs/PROTOCOL.md §7.3).
    func linkDidAuthenticate(_ link: PeerLink)
    /// We declared `known` but the peer is asking its person (it lost our key): ask ours too,
    /// then `accept()` or `refuse(logReason:)`.
    func linkPeerIsAsking(_ link: PeerLink)
    /// Both sides accepted: frames flow (to its `frameReceiver`).
    func linkDidOpen(_ link: PeerLink)
    /// The link is gone. `goodbye` is the peer's reason if it said goodbye.
    func linkDidClose(_ link: PeerLink, reason: LinkCloseReason)
}

/// Where an open link's frames go (`PeerLinks`), all but the link's own (HELLO, KEEPALIVE,
/// GOODBYE, PAIRING).
protocol LinkFrameReceiver: AnyObject {
    /// One frame body, in order; valid only during the call. Throwing ends the link as a
    /// protocol error.
    func link(_ link: PeerLink, received body: ArraySlice<UInt8>) throws
    /// Every frame of one read has been handed over: a good moment to acknowledge them together.
    func linkDidDrainInput(_ link: PeerLink)
}

/// Why a link ended, as far as the owner needs to act on it.
enum LinkCloseReason: CustomStringConvertible {
    /// The peer said goodbye.
    case goodbye(GoodbyeReason)
    /// The peer refused to pair with us.
    case refusedByPeer
    /// The key exchange failed (including a pinned peer presenting another key).
    case handshakeFailed(HandshakeError)
    /// The peer's preamble announced protocol versions that share none with ours.
    case incompatibleVersions(VersionRange)
    /// We closed it, or the transport failed; the text is for the log.
    case other(String)

    var description: String {
        switch self {
        case .goodbye(let reason): "the peer said goodbye (\(reason))"
        case .refusedByPeer: "the peer refused to pair"
        case .handshakeFailed(let error): "key exchange failed: \(error)"
        case .incompatibleVersions(let versions): "the peer speaks protocol \(versions), this side \(VersionRange.supported)"
        case .other(let text): text
        }
    }
}

/// One peer-link connection speaking the wire protocol (docs/PROTOCOL.md, docs/SECURITY.md) over
/// a byte stream: preamble both ways, the authenticated key exchange carrying each side's HELLO,
/// PAIRING status and decisions, then sealed frames, with keepalives so a silent peer is noticed.
///
/// Pairing: each side first sends its status, `known` (the peer's key is pinned) or `asking`
/// (first contact: its person is being asked). Two `known`s open the link. Otherwise both
/// people are asked (a `known` side that hears `asking` asks too) and each sends `accept` or
/// `refuse`; two `accept`s open it. An `accept` where nobody asked is a protocol error, so no
/// side can open a link its peer's person never saw.
final class PeerLink {
    /// Sent when nothing else was sent for this long.
    static let keepaliveInterval: Duration = .seconds(1)
    /// A peer silent this long is gone (reported `disconnected` well within 5 s).
    static let silenceLimit: Duration = .seconds(4)
    /// Time allowed from connect to the end of the key exchange. The wait for a person's
    /// confirmation after it is the owner's (`PeerVoiceBus.pairingConfirmationWindow`), with
    /// keepalives flowing meanwhile.
    static let handshakeLimit: Duration = .seconds(10)
    /// Time allowed for the peer's PAIRING decision once the key exchange is done: its person's
    /// confirmation window, plus slack for the network.
    static let pairingLimit = PeerVoiceBus.pairingConfirmationWindow + .seconds(5)

    enum Phase: Equatable {
        /// `refusing`: an incoming dial refused before message 2, waiting out the refusal delay.
        case handshaking, refusing, awaitingPairing, open, closed
    }

    weak var delegate: PeerLinkDelegate?
    /// Takes the frames once the link is open.
    weak var frameReceiver: LinkFrameReceiver?
    let remote: RemoteEndpoint
    /// True if we dialled (we are the handshake's initiator).
    let isOutgoing: Bool
    private(set) var phase = Phase.handshaking
    /// The peer's HELLO, from the key exchange.
    private(set) var peerHello: Hello?
    /// Keys, the peer's long-term key and the verification code, once authenticated.
    private(set) var result: HandshakeResult?
    /// The version the link runs at and the features both sides have on it, once authenticated.
    /// A frame of a feature it does not carry is never sent (`send`).
    private(set) var negotiated: LinkProtocol?
    /// What our HELLO announces.
    private var localCapabilities: Capabilities = []
    /// Records the peer sent that failed to open, by reason.
    var rejectedRecords: RecordRejections { opener?.rejections ?? RecordRejections() }

    /// The link's output queue emptied (channels send bulk data only into an empty one).
    var outputDrained: () -> Void = {}

    private let connection: StreamConnection
    private var decoder = FrameDecoder()
    /// Where records open (`sealedRecord`); what is handed on from it is valid until the next record.
    private var plaintextBuffer = [UInt8](repeating: 0, count: Wire.maxFrameBodyBytes)
    private var handshake: Handshake?
    /// What the key exchange needs, kept until the peer's preamble says which version (hence
    /// which message 1) the link runs at: the initiator waits for it before message 1.
    private var handshakeInputs: (payload: [UInt8], identity: StaticIdentity, pinnedKey: [UInt8]?,
                                  proofKey: DialProofKey?, crypto: any CryptoPrimitives, aesGCM: any AESGCMPrimitives)?
    /// What the link's records are sealed with: fixed by the agreed version when the key
    /// exchange starts, before the first record.
    private var cipher: LinkCipher?
    /// The responder has sent message 2: from then on a failure closes at once.
    private var answered = false
    private var sealer: RecordSealer?
    private var opener: LinkRecordOpener?
    /// The PAIRING exchange: statuses and decisions both ways (PeerVoiceCore).
    private var pairing = PairingExchange()
    private var timer: EventSource?
    private let clock = ContinuousClock()
    private let startedAt: ContinuousClock.Instant
    private var authenticatedAt: ContinuousClock.Instant?
    private var lastReceived: ContinuousClock.Instant
    private var lastSent: ContinuousClock.Instant

    init(connection: StreamConnection, remote: RemoteEndpoint, isOutgoing: Bool) {
        self.connection = connection
        self.remote = remote
        self.isOutgoing = isOutgoing
        startedAt = clock.now
        lastReceived = startedAt
        lastSent = startedAt
    }

    /// Sends our preamble and starts reading; the key exchange starts once the peer's preamble
    /// has come (message 1's layout depends on the version it agrees).
    /// `pinnedKey`: the key the peer must present (we never reveal ourselves to another one).
    /// `proofKey`: what a dial proves with (the responder's presence secret), when we have it.
    func start(hello: Hello, identity: StaticIdentity, pinnedKey: [UInt8]?, proofKey: DialProofKey?, crypto: any CryptoPrimitives,
               aesGCM: any AESGCMPrimitives) {
        localCapabilities = hello.capabilities
        connection.onBytes = { [unowned self] bytes in received(bytes) }
        connection.onClose = { [unowned self] reason in
            // Message 1 unanswered: most likely a listener that is not discoverable and took us
            // for a stranger (docs/SECURITY.md §11.2); it tells nobody more.
            let unanswered = isOutgoing && handshake?.nextAction == .receive(.responderEphemeral)
            finish(.other(unanswered ? "\(reason) without answering the key exchange (a PeerVoice that is not discoverable answers only its paired peers)" : reason))
        }
        connection.onDrained = { [unowned self] in outputDrained() }
        decoder.maxBodyBytes = Handshake.maxMessageBytes
        handshakeInputs = (Frame.hello(hello).encodedBody(), identity, pinnedKey, proofKey, crypto, aesGCM)
        connection.start()
        connection.send(Preamble.bytes)
        timer = Timer.every(.milliseconds(250)) { [weak self] in
            self?.checkLiveness()
            return true
        }
    }

    var transport: Transport { remote.transport }

    /// Sends our pairing status once: `known` (the peer's key is pinned here) or `asking` (we
    /// ask our person now).
    func declare(_ status: PairingDecision) {
        guard phase == .awaitingPairing, pairing.declare(status) else { return }
        sendSealed(.pairing(status))
        openIfAgreed()
    }

    /// Our person confirmed the code.
    func accept() {
        guard phase == .awaitingPairing, pairing.accept() else { return }
        sendSealed(.pairing(.accept))
        openIfAgreed()
    }

    /// Our side refuses the peer: it is told, and the link ends.
    func refuse(logReason: String) {
        guard phase == .awaitingPairing else { return }
        sendSealed(.pairing(.refuse))
        connection.closeAfterFlushing()
        finish(.other(logReason))
    }

    /// Sends a frame on an open link, if the link carries its feature.
    func send(_ frame: Frame) {
        guard phase == .open, carries(frame) else { return }
        sendSealed(frame)
    }

    /// Sends a VOICE (or RELAYED_VOICE) frame on an open link unless earlier output still waits to be written: voice
    /// that would queue behind a backlog (a long message, a slow Bluetooth channel) arrives too
    /// late to be played, so it is dropped instead, and the receiver conceals it. Returns whether
    /// it was sent.
    func sendVoice(_ voice: Frame) -> Bool {
        guard phase == .open, !connection.hasPendingOutput, carries(voice) else { return false }
        sendSealed(voice)
        return true
    }

    /// Seals and sends a channel frame body on the open link (`ChannelLink`).
    func sendChannelFrame(_ body: [UInt8]) {
        guard phase == .open else { return }
        sendSealed(body: body)
    }

    /// Seals and sends, in place, a channel frame whose body the caller has put at
    /// `SealedFrameLayout.bodyOffset` of a buffer with room for the length prefix and seal around
    /// it: the bulk path, without copies of the body. `frame` may be reused once this returns.
    func sendChannelFrameInPlace(_ frame: inout [UInt8], bodyBytes: Int) {
        guard phase == .open, var sealer else { return }
        guard !sealer.shouldRekey else { return drop(reason: "rekeying: the link's record counter is half used") }
        let recordBytes = SealedRecord.overheadBytes + bodyBytes
        let sealed = frame.withUnsafeMutableBytes { buffer in
            let record = UnsafeMutableRawBufferPointer(rebasing: buffer[Wire.lengthPrefixBytes...])
            return Result { () throws(RecordError) in try sealer.sealInPlace(record, plaintextBytes: bodyBytes) }
        }
        if case .failure(let error) = sealed { return drop(reason: "cannot seal: \(error)") }
        self.sealer = sealer
        for index in 0..<Wire.lengthPrefixBytes { frame[index] = UInt8(truncatingIfNeeded: recordBytes >> (8 * (Wire.lengthPrefixBytes - 1 - index))) }
        connection.send(frame[0..<(Wire.lengthPrefixBytes + recordBytes)])
        lastSent = clock.now
    }

    /// Output the kernel has not taken yet, in the service and (where it says) in the kernel's
    /// send queue: channels send bulk data only where nothing waits.
    var pendingOutputBytes: Int { connection.pendingOutputBytes }
    var ipEndpoints: (local: IPEndpoint, remote: IPEndpoint)? {
        guard case .ip(let remote) = remote, let local = connection.localEndpoint else { return nil }
        return (local, remote)
    }
    var kernelQueuedOutputBytes: Int? { connection.kernelQueuedBytes(bluetooth: transport == .bluetooth) }
    var transportReport: TransportReport? { transport == .ip ? connection.tcpReport() : nil }

    /// Closes on purpose, telling the peer why (a `userDisconnected` goodbye means "do not redial").
    func close(goodbye reason: GoodbyeReason, logReason: String) {
        guard phase != .closed else { return }
        if sealer != nil { sendSealed(.goodbye(reason)) }
        connection.closeAfterFlushing()
        finish(.other(logReason))
    }

    /// Closes without a goodbye (the peer may redial).
    func drop(reason: String) {
        guard phase != .closed else { return }
        connection.closeAfterFlushing()
        finish(.other(reason))
    }

    // MARK: Receiving

    private func received(_ bytes: ArraySlice<UInt8>) {
        lastReceived = clock.now
        // A refused dial's further bytes are read and dropped: the same close whatever it sends.
        guard phase != .refusing else { return }
        decoder.append(bytes)
        do {
            while phase == .handshaking || phase == .awaitingPairing || phase == .open, let body = try decoder.nextBodySlice() {
                if phase == .handshaking {
                    try handshakeMessage(Array(body))
                } else {
                    try sealedRecord(body)
                }
            }
            if phase == .handshaking, handshake == nil, decoder.hasCheckedPreamble { try beginHandshake() }
            if phase == .open { frameReceiver?.linkDidDrainInput(self) }
        } catch {
            failed(error)
        }
    }

    /// Ends the link over what the peer sent: a failed key exchange, or bytes that break the
    /// protocol. An incoming dial that fails before we answered it is refused like a stranger's.
    private func failed(_ error: any Error) {
        if !isOutgoing, !answered, phase == .handshaking {
            // Versions included: an incoming dial is refused like a stranger's (SECURITY.md §11.2);
            // the dialler learns from our preamble which versions we speak.
            refuseUnanswered(because: "\(error)")
        } else if let versions = Self.incompatibleVersions(error) {
            // Before any key exchange: nothing could be sealed, and the peer sees our preamble.
            Log.info("link \(remote): \(error); closing")
            connection.closeAfterFlushing()
            finish(.incompatibleVersions(versions))
        } else if let error = error as? HandshakeError {
            Log.info("link \(remote): key exchange failed: \(error)")
            connection.closeAfterFlushing()
            finish(.handshakeFailed(error))
        } else {
            Log.info("link \(remote): \(error); closing")
            close(goodbye: .protocolError, logReason: "protocol error: \(error)")
        }
    }

    private func handshakeMessage(_ body: [UInt8]) throws {
        if handshake == nil { try beginHandshake() }
        guard let handshake else { return }
        let hadCode = handshake.verificationCode != nil
        try handshake.readMessage(body)
        if !isOutgoing, !answered, delegate?.linkMayAnswer(self, dialProof: handshake.receivedDialProof) == false {
            refuseUnanswered(because: "refused before message 2")
            return
        }
        if !isOutgoing, !hadCode, handshake.verificationCode != nil,
           delegate?.linkMayContinueAfterCommitment(self) == false {
            drop(reason: "too many key exchanges from \(remote)")
            return
        }
        try advanceHandshake()
    }

    /// The peer's preamble has come: the key exchange starts, with message 1 laid out as the
    /// version the link runs at says; the initiator sends it now.
    private func beginHandshake() throws {
        guard let inputs = handshakeInputs else { return }
        handshakeInputs = nil
        // The preamble check refused versions we share none of, so there is an agreed one.
        let agreed = decoder.peerVersions.flatMap { decoder.supportedVersions.agreed(with: $0) } ?? Wire.minimumProtocolVersion
        cipher = LinkCipher(version: agreed, aesGCM: inputs.aesGCM)
        let proof: DialProofField = DialProof.isCarried(atVersion: agreed)
            ? .present(isOutgoing ? inputs.proofKey : nil) : .absent
        handshake = try Handshake(role: isOutgoing ? .initiator : .responder, identity: inputs.identity,
                                  payload: inputs.payload, expectedRemoteStaticKey: inputs.pinnedKey,
                                  dialProof: proof, crypto: inputs.crypto)
        try advanceHandshake()
    }

    /// Sends what the handshake wants sent; on completion, switches to sealed frames.
    private func advanceHandshake() throws {
        guard let handshake else { return }
        while case .send = handshake.nextAction {
            connection.send(Wire.lengthPrefixed(try handshake.writeMessage()))
            lastSent = clock.now
            answered = true
        }
        guard let result = handshake.result, let cipher else { return }
        guard case .hello(let hello) = try Frame(body: result.remotePayload) else {
            throw WireError.unknownFrameType(result.remotePayload.first ?? 0)
        }
        self.handshake = nil
        self.result = result
        peerHello = hello
        sealer = result.makeLinkSealer(cipher)
        opener = LinkRecordOpener(result.makeLinkOpener(cipher))
        decoder.maxBodyBytes = Wire.maxFrameBodyBytes
        phase = .awaitingPairing
        authenticatedAt = clock.now
        // The preamble arrives before any handshake message, so it has been checked by now.
        negotiated = try LinkProtocol.negotiate(local: decoder.supportedVersions, localCapabilities: localCapabilities,
                                                peerPreamble: decoder.peerVersions!, peerCapabilities: hello.capabilities)
        delegate?.linkDidAuthenticate(self)
    }

    private func sealedRecord(_ body: ArraySlice<UInt8>) throws {
        guard var opener else { return }
        let plaintext: ArraySlice<UInt8>
        do {
            // Every record opens into one buffer: no allocation per record on the bulk path.
            let outcome = try opener.open(body, into: &plaintextBuffer)
            self.opener = opener
            switch outcome {
            case .opened(let bytes):
                plaintext = plaintextBuffer[0..<bytes]
            case .dropped(let error):
                // Dropped and counted; the frames after it still count unless a gap in the
                // counters shows that it held one of the peer's (`LinkRecordOpener`).
                Log.info("link \(remote): dropped a record (\(error)); \(opener.rejections.total) so far")
                return
            }
        } catch {
            // Records lost on the way, or too many that do not open: the layers above start
            // again on the next link rather than read a stream with a hole.
            self.opener = opener
            Log.info("link \(remote): \(error); closing")
            drop(reason: "\(error)")
            return
        }
        if phase == .open, let type = plaintext.first, !Self.isOwnFrame(type) {
            try frameReceiver?.link(self, received: plaintext)
            return
        }
        let frame = try Frame(body: plaintext)
        switch (phase, frame) {
        case (_, .keepalive):
            break
        case (_, .goodbye(let reason)):
            connection.closeAfterFlushing()
            finish(.goodbye(reason))
        case (.awaitingPairing, .pairing(.refuse)):
            connection.closeAfterFlushing()
            finish(.refusedByPeer)
        case (.awaitingPairing, .pairing(let decision)):
            try peerPairing(decision)
        case (.open, .pairing), (.awaitingPairing, _), (_, .hello):
            close(goodbye: .protocolError, logReason: "protocol error: \(frame.type) \(phase == .open ? "after" : "before") pairing")
        default:
            break
        }
    }

    /// A frame whose feature the link does not carry is not sent: the peer would take it for a
    /// protocol error (its owner checks first, and says why to whoever asked).
    private func carries(_ frame: Frame) -> Bool {
        guard let negotiated, !negotiated.capabilities.isSuperset(of: frame.type.capability) else { return true }
        Log.debug("link \(remote): \(frame.type) not sent: the link runs protocol \(negotiated.version) with \(negotiated.capabilities.featureNames)")
        return false
    }

    /// The peer's versions, when `error` says they share none with ours.
    private static func incompatibleVersions(_ error: any Error) -> VersionRange? {
        switch error as? WireError {
        case .unsupportedVersion(let version): VersionRange(only: version)
        case .unsupportedVersions(let versions): versions
        default: nil
        }
    }

    /// HELLO, KEEPALIVE, GOODBYE and PAIRING: frames the link handles itself, never handed on.
    static func isOwnFrame(_ type: UInt8) -> Bool {
        switch FrameType(rawValue: type) {
        case .hello, .keepalive, .goodbye, .pairing: true
        default: false
        }
    }

    private func peerPairing(_ decision: PairingDecision) throws {
        if try pairing.received(decision) == .askOurPerson { delegate?.linkPeerIsAsking(self) }
        openIfAgreed()
    }

    private func openIfAgreed() {
        guard phase == .awaitingPairing, pairing.isAgreed else { return }
        phase = .open
        delegate?.linkDidOpen(self)
    }

    // MARK: Sending and timing

    private func sendSealed(_ frame: Frame) {
        sendSealed(body: frame.encodedBody())
    }

    private func sendSealed(body: [UInt8]) {
        guard var sealer, phase != .closed else { return }
        if sealer.shouldRekey {
            // Half the cipher's limit on one link (2^47 records, or 2^24 with AES-256-GCM): a new
            // link brings fresh keys long before the cipher's bounds are near.
            drop(reason: "rekeying: the link's record counter is half used")
            return
        }
        do {
            connection.send(Wire.lengthPrefixed(try sealer.seal(body)))
            self.sealer = sealer
            lastSent = clock.now
        } catch {
            drop(reason: "cannot seal: \(error)")
        }
    }

    /// Says nothing more to an incoming dial and closes it `DialGate.refusalDelay` after the
    /// bytes that decided it arrived, whatever they were: a stranger, a wrong proof, a replay, an
    /// older version while hidden, or bytes that are no key exchange all look the same.
    private func refuseUnanswered(because reason: String) {
        Log.info("link \(remote): \(reason); closing after \(DialGate.refusalDelay) without a word")
        phase = .refusing
        handshake = nil
        handshakeInputs = nil
        let closeAt = lastReceived + DialGate.refusalDelay
        timer?.cancel()
        timer = Timer.after(max(.zero, closeAt - clock.now)) { [weak self] in
            guard let self else { return }
            connection.closeAfterFlushing()
            finish(.other("dial refused: \(reason)"))
        }
    }

    private func checkLiveness() {
        let now = clock.now
        switch phase {
        case .handshaking where now - startedAt > Self.handshakeLimit:
            drop(reason: "the key exchange did not finish within \(Self.handshakeLimit)")
        case .awaitingPairing where now - (authenticatedAt ?? startedAt) > Self.pairingLimit:
            drop(reason: "no pairing decision within \(Self.pairingLimit)")
        case .awaitingPairing, .open:
            if now - lastReceived > Self.silenceLimit {
                drop(reason: "the peer was silent for \(Self.silenceLimit)")
            } else if now - lastSent >= Self.keepaliveInterval {
                sendSealed(.keepalive)
            }
        default:
            break
        }
    }

    private func finish(_ reason: LinkCloseReason) {
        guard phase != .closed else { return }
        phase = .closed
        timer?.cancel()
        timer = nil
        delegate?.linkDidClose(self, reason: reason)
    }
}
