import PeerVoiceCore

/// What a simulated link reports to the peer that owns it (as `PeerLinkDelegate` does in the daemon).
protocol SimulatedLinkOwner: AnyObject {
    func linkMayContinueAfterCommitment(_ link: SimulatedLink) -> Bool
    func linkDidAuthenticate(_ link: SimulatedLink)
    func linkPeerIsAsking(_ link: SimulatedLink)
    func linkDidOpen(_ link: SimulatedLink)
    func link(_ link: SimulatedLink, received frame: Frame)
    /// A channel frame's body (the daemon's link hands these to `LinkChannels`).
    func link(_ link: SimulatedLink, receivedChannelFrame body: [UInt8])
    func linkDidDrainInput(_ link: SimulatedLink)
    func linkDidClose(_ link: SimulatedLink, reason: SimulatedLink.CloseReason)
}

/// One link of a simulated peer, the simulation's model of the daemon's `PeerLink` built from
/// the same core parts: the preamble and framing (`FrameDecoder`), the key exchange
/// (`Handshake`), sealed records (`RecordSealer`, `RecordOpener`), the PAIRING exchange
/// (`PairingExchange`), the rule for records that do not open or skip (`LinkRecordOpener`),
/// keepalives and the silence, handshake and pairing limits.
final class SimulatedLink {
    enum Phase { case handshaking, awaitingPairing, open, closed }

    enum CloseReason: Equatable {
        case goodbye(GoodbyeReason)
        case refusedByPeer
        case handshakeFailed(HandshakeError)
        case other(String)
    }

    /// The same limits as the daemon's `PeerLink`.
    static let keepaliveInterval: Duration = .seconds(1)
    static let silenceLimit: Duration = .seconds(4)
    static let handshakeLimit: Duration = .seconds(10)
    static let pairingLimit: Duration = .seconds(65)
    static let livenessCheck: Duration = .milliseconds(250)

    /// Unique in the run: names the link in the history.
    let id: Int
    weak var owner: SimulatedLinkOwner?
    let isOutgoing: Bool
    /// The remote host, and the address dialled (outgoing) or the remote host (incoming).
    let remoteHost: String
    let dialledAddress: String?
    private(set) var phase = Phase.handshaking
    private(set) var peerHello: Hello?
    private(set) var result: HandshakeResult?
    private(set) var pairing = PairingExchange()

    private let end: SimulatedStream.End
    private let scheduler: Scheduler
    private var decoder = FrameDecoder()
    private var handshake: Handshake?
    private var sealer: RecordSealer?
    private var opener: LinkRecordOpener?
    /// Where records open.
    private var plaintextBuffer: [UInt8] = []
    private var timer: Scheduler.Timer?
    private let startedAt: Duration
    private var authenticatedAt: Duration?
    /// Seals the link's records at protocol 11 (the stand-in's AES-256-GCM).
    private var aesGCM: (any AESGCMPrimitives)?
    private var lastReceived: Duration
    private var lastSent: Duration

    init(id: Int, end: SimulatedStream.End, isOutgoing: Bool, dialledAddress: String?, scheduler: Scheduler) {
        self.id = id
        self.end = end
        self.isOutgoing = isOutgoing
        self.dialledAddress = dialledAddress
        remoteHost = end.remoteHost
        self.scheduler = scheduler
        startedAt = scheduler.now
        lastReceived = startedAt
        lastSent = startedAt
    }

    func start(hello: Hello, identity: StaticIdentity, pinnedKey: [UInt8]?, crypto: any CryptoPrimitives, aesGCM: any AESGCMPrimitives) {
        self.aesGCM = aesGCM
        end.onBytes = { [weak self] bytes in self?.received(bytes) }
        end.onClose = { [weak self] in self?.finish(.other("the stream closed")) }
        decoder.maxBodyBytes = Handshake.maxMessageBytes
        end.send(Preamble.bytes)
        do {
            handshake = try Handshake(role: isOutgoing ? .initiator : .responder, identity: identity,
                                      payload: Frame.hello(hello).encodedBody(), expectedRemoteStaticKey: pinnedKey,
                                      crypto: crypto)
            try advanceHandshake()
        } catch {
            failed(error)
        }
        scheduleLivenessCheck()
    }

    var transport: Transport { .ip }

    func declare(_ status: PairingDecision) {
        guard phase == .awaitingPairing, pairing.declare(status) else { return }
        sendSealed(.pairing(status))
        openIfAgreed()
    }

    func accept() {
        guard phase == .awaitingPairing, pairing.accept() else { return }
        sendSealed(.pairing(.accept))
        openIfAgreed()
    }

    func refuse(_ reason: String) {
        guard phase == .awaitingPairing else { return }
        sendSealed(.pairing(.refuse))
        end.close()
        finish(.other(reason))
    }

    func send(_ frame: Frame) {
        guard phase == .open else { return }
        sendSealed(frame)
    }

    /// A channel frame, sealed like every record once the link is open.
    func send(_ frame: ChannelFrame) {
        guard phase == .open else { return }
        sendSealed(body: frame.encodedBody())
    }

    func close(goodbye reason: GoodbyeReason, _ why: String) {
        guard phase != .closed else { return }
        if sealer != nil { sendSealed(.goodbye(reason)) }
        end.close()
        finish(.other(why))
    }

    func drop(_ reason: String) {
        guard phase != .closed else { return }
        end.close()
        finish(.other(reason))
    }

    /// The owner died with the link: no callback, the stream is left as the network leaves it.
    func abandon() {
        phase = .closed
        timer?.cancel()
        owner = nil
    }

    // MARK: Receiving

    private func received(_ bytes: [UInt8]) {
        guard phase != .closed else { return }
        lastReceived = scheduler.now
        decoder.append(bytes)
        do {
            while phase != .closed, let body = try decoder.nextBody() {
                if phase == .handshaking {
                    try handshakeMessage(body)
                } else {
                    try sealedRecord(body)
                }
            }
            if phase == .open { owner?.linkDidDrainInput(self) }
        } catch {
            failed(error)
        }
    }

    private func failed(_ error: any Error) {
        if let error = error as? HandshakeError {
            end.close()
            finish(.handshakeFailed(error))
        } else {
            close(goodbye: .protocolError, "protocol error: \(error)")
        }
    }

    private func handshakeMessage(_ body: [UInt8]) throws {
        guard let handshake else { return }
        let hadCode = handshake.verificationCode != nil
        try handshake.readMessage(body)
        if !isOutgoing, !hadCode, handshake.verificationCode != nil, owner?.linkMayContinueAfterCommitment(self) == false {
            drop("too many key exchanges")
            return
        }
        try advanceHandshake()
    }

    private func advanceHandshake() throws {
        guard let handshake else { return }
        while case .send = handshake.nextAction {
            end.send(Wire.lengthPrefixed(try handshake.writeMessage()))
            lastSent = scheduler.now
        }
        guard let result = handshake.result, let aesGCM else { return }
        guard case .hello(let hello) = try Frame(body: result.remotePayload) else {
            throw WireError.unknownFrameType(result.remotePayload.first ?? 0)
        }
        self.handshake = nil
        self.result = result
        peerHello = hello
        // Every simulated service speaks this version; the preamble has come before message 2.
        let agreed = decoder.peerVersions.flatMap { decoder.supportedVersions.agreed(with: $0) } ?? Wire.minimumProtocolVersion
        let cipher = LinkCipher(version: agreed, aesGCM: aesGCM)
        sealer = result.makeLinkSealer(cipher)
        opener = LinkRecordOpener(result.makeLinkOpener(cipher))
        decoder.maxBodyBytes = Wire.maxFrameBodyBytes
        phase = .awaitingPairing
        authenticatedAt = scheduler.now
        owner?.linkDidAuthenticate(self)
    }

    private func sealedRecord(_ body: [UInt8]) throws {
        guard var opener else { return }
        let plaintext: [UInt8]
        do {
            let outcome = try opener.open(body, into: &plaintextBuffer)
            self.opener = opener
            guard case .opened(let bytes) = outcome else { return }
            plaintext = Array(plaintextBuffer[0..<bytes])
        } catch {
            self.opener = opener
            drop("\(error)")
            return
        }
        if phase == .open, ChannelFrame.isChannelFrame(plaintext) {
            owner?.link(self, receivedChannelFrame: plaintext)
            return
        }
        let frame = try Frame(body: plaintext)
        switch (phase, frame) {
        case (_, .keepalive):
            break
        case (_, .goodbye(let reason)):
            end.close()
            finish(.goodbye(reason))
        case (.awaitingPairing, .pairing(let decision)):
            switch try pairing.received(decision) {
            case .refused:
                end.close()
                finish(.refusedByPeer)
            case .askOurPerson:
                owner?.linkPeerIsAsking(self)
                openIfAgreed()
            case .none:
                openIfAgreed()
            }
        case (.open, .pairing), (.awaitingPairing, _), (_, .hello):
            close(goodbye: .protocolError, "protocol error: \(frame.type) out of phase")
        default:
            owner?.link(self, received: frame)
        }
    }

    private func openIfAgreed() {
        guard phase == .awaitingPairing, pairing.isAgreed else { return }
        phase = .open
        owner?.linkDidOpen(self)
    }

    // MARK: Sending and timing

    private func sendSealed(_ frame: Frame) { sendSealed(body: frame.encodedBody()) }

    private func sendSealed(body: [UInt8]) {
        guard var sealer, phase != .closed else { return }
        guard let record = try? sealer.seal(body) else { return drop("cannot seal") }
        self.sealer = sealer
        end.send(Wire.lengthPrefixed(record))
        lastSent = scheduler.now
    }

    private func scheduleLivenessCheck() {
        timer = scheduler.after(Self.livenessCheck) { [weak self] in
            guard let self, phase != .closed else { return }
            checkLiveness()
            if phase != .closed { scheduleLivenessCheck() }
        }
    }

    private func checkLiveness() {
        let now = scheduler.now
        switch phase {
        case .handshaking where now - startedAt > Self.handshakeLimit:
            drop("the key exchange did not finish")
        case .awaitingPairing where now - (authenticatedAt ?? startedAt) > Self.pairingLimit:
            drop("no pairing decision")
        case .awaitingPairing, .open:
            if now - lastReceived > Self.silenceLimit {
                drop("the peer was silent")
            } else if now - lastSent >= Self.keepaliveInterval {
                sendSealed(.keepalive)
            }
        default:
            break
        }
    }

    private func finish(_ reason: CloseReason) {
        guard phase != .closed else { return }
        phase = .closed
        timer?.cancel()
        owner?.linkDidClose(self, reason: reason)
    }
}
