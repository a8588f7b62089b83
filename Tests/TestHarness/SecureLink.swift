import Foundation
import Glibc
import OpenSSLCrypto
import PeerVoiceCore
import Sodium

// A minimal, real protocol-version-3 peer for tests (docs/SECURITY.md §10, docs/PROTOCOL.md):
// blocking sockets on 127.0.0.1, the core's Handshake / RecordSealer / RecordOpener / Frame, and
// access to the raw bytes so a test can replay or tamper with them. Not a second implementation:
// every byte comes from PeerVoiceCore, so these tests check the daemon's use of the core.

/// Why a `SecureLink` (or a `TCPStream`) operation did not complete.
public enum SecureLinkError: Error, CustomStringConvertible, Equatable {
    /// Nothing (or not enough) arrived within the time given.
    case timedOut(String)
    /// The other side ended the stream.
    case closed(String)
    case handshake(HandshakeError)
    case wire(WireError)
    case record(RecordError)
    case io(String)

    public var description: String {
        switch self {
        case .timedOut(let what): "timed out: \(what)"
        case .closed(let what): "stream closed: \(what)"
        case .handshake(let error): "handshake: \(error)"
        case .wire(let error): "wire: \(error)"
        case .record(let error): "record: \(error)"
        case .io(let what): what
        }
    }
}

/// One end of a version-3 link: preamble, the five-message handshake (as initiator or responder,
/// all at once or message by message), PAIRING, then sealed frames.
///
/// Reading (`receive…`) and sending may happen on two threads at once; sending is serialised.
/// While a receive call waits on an authenticated link it sends a KEEPALIVE every second, as a
/// peervoiced does, so the daemon does not drop a link the test keeps quiet for a while.
public final class SecureLink: @unchecked Sendable {
    public static let crypto = LibSodium()
    /// What a link at protocol 11 or later seals its records with.
    public static let aesGCM = OpenSSLAESGCM()

    public let stream: TCPStream
    public let role: HandshakeRole
    public let identity: StaticIdentity
    /// The HELLO this side sends inside the handshake.
    public let hello: Hello
    /// Send a KEEPALIVE while waiting in a receive call, once a second.
    public var sendsKeepalives = true
    /// The preamble this side sends: the versions it announces (``Preamble/bytes``: this build's).
    public var preamble = Preamble.bytes

    private let sendLock = NSLock()
    private var handshake: Handshake?
    private var decoder = FrameDecoder()
    /// The records' cipher, from the agreed version (before the key exchange starts).
    private var cipher: LinkCipher?
    /// What this side seals and opens records with, once the peer's preamble has come.
    public var recordCipher: LinkCipher.Algorithm? { cipher?.algorithm }
    private var sealer: RecordSealer?
    private var opener: RecordOpener?
    private var lastSent = Date()
    private var sentBodies: [[UInt8]] = []
    private var receivedBodies: [[UInt8]] = []
    private var preambleSent = false
    private var completed: HandshakeResult?
    /// What the handshake is made from once the peer's preamble has fixed message 1's layout.
    private var handshakeInputs: (expectedRemoteStaticKey: [UInt8]?, proofKey: DialProofKey?)?
    /// Bodies that came with the peer's preamble, before the handshake was made.
    private var earlyBodies: [[UInt8]] = []

    /// - Parameters:
    ///   - expectedRemoteStaticKey: the key the peer must present (as a pinned peer would).
    ///   - proofKey: what message 1's dial proof proves (an initiator without it sends random bytes).
    public init(stream: TCPStream, role: HandshakeRole, identity: StaticIdentity, hello: Hello,
                expectedRemoteStaticKey: [UInt8]? = nil, proofKey: DialProofKey? = nil) throws {
        self.stream = stream
        self.role = role
        self.identity = identity
        self.hello = hello
        handshakeInputs = (expectedRemoteStaticKey, proofKey)
        decoder.maxBodyBytes = Handshake.maxMessageBytes
    }

    /// Dials 127.0.0.1:`port` (from `source`, see `TCPStream.connect`) as the handshake's
    /// initiator; nothing is sent yet.
    public static func connect(port: UInt16, from source: String? = nil, identity: StaticIdentity = newIdentity(),
                               hello: Hello, expectedRemoteStaticKey: [UInt8]? = nil) throws -> SecureLink {
        try SecureLink(stream: TCPStream.connect(port: port, from: source), role: .initiator, identity: identity, hello: hello,
                       expectedRemoteStaticKey: expectedRemoteStaticKey)
    }

    deinit { stream.close() }

    // MARK: Identities and HELLOs

    public static func newIdentity() -> StaticIdentity { StaticIdentity.generate(using: crypto) }

    /// The peer id a peervoiced names `identity` by.
    public static func peerID(of identity: StaticIdentity) -> String {
        PeerID(key: PublicKey(bytes: identity.publicKey)!, using: crypto).description
    }

    /// A HELLO as a peervoiced would send it: text capability (and, like every side from version
    /// 7 on, the highest version its preamble announces), the given name and listen port.
    public static func makeHello(name: String, listenPort: UInt16 = 0, instance: InstanceID = .random(),
                                 capabilities: Capabilities = Capabilities.text.union(.highestVersion(Wire.protocolVersion))) -> Hello {
        try! Hello(instanceID: instance, capabilities: capabilities, listenPort: listenPort, voicePort: 0, name: name)
    }

    // MARK: State

    /// The code both people compare: known from message 3 on.
    public var verificationCode: String? { completed?.verificationCode ?? handshake?.verificationCode }
    /// Keys and the peer's identity, once the handshake is complete.
    public var result: HandshakeResult? { completed }
    public var isAuthenticated: Bool { completed != nil }
    /// The peer's long-term key: the initiator knows it after message 4, the responder after message 5.
    public var remoteStaticKey: [UInt8]? { completed?.remoteStaticKey ?? handshake?.remoteStaticKey }
    /// The peer's HELLO (carried in message 4 or 5).
    public var peerHello: Hello? {
        guard let payload = completed?.remotePayload ?? handshake?.remotePayload,
              case .hello(let hello)? = try? Frame(body: payload) else { return nil }
        return hello
    }
    /// What the handshake wants next (`.complete` once done).
    public var nextAction: Handshake.Action { handshake?.nextAction ?? .complete }
    /// Every sealed record body this side sent (counter || ciphertext || tag), in order.
    public var sentRecords: [[UInt8]] { sendLock.withLock { sentBodies } }
    /// Every record body received after the handshake, opened or not, in order.
    public var receivedRecords: [[UInt8]] { receivedBodies }
    /// Records received that failed to open, by reason.
    public var rejections: RecordRejections { opener?.rejections ?? RecordRejections() }

    // MARK: Handshake

    /// Sends the 8-byte preamble (`preamble`), once.
    public func sendPreamble() throws {
        try sendLock.withLock {
            guard !preambleSent else { return }
            preambleSent = true
            try stream.send(preamble)
        }
    }

    /// Runs the handshake until it is complete, or until `message` has been sent or received
    /// (e.g. `.initiatorEphemeral`: the code is known, nothing about our identity is revealed).
    /// Throws the handshake's error, `closed` when the peer hangs up, `timedOut` after `timeout`.
    public func runHandshake(through message: HandshakeMessage? = nil, timeout: Double = 10) throws {
        try sendPreamble()
        let deadline = Date().addingTimeInterval(timeout)
        try beginHandshake(deadline: deadline)
        while let handshake {
            switch handshake.nextAction {
            case .send(let next):
                do {
                    try sendRaw(Wire.lengthPrefixed(try handshake.writeMessage()))
                } catch let error as HandshakeError {
                    throw SecureLinkError.handshake(error)
                }
                if handshake.isComplete { complete() }
                if next == message { return }
            case .receive(let next):
                guard let body = try nextBody(deadline: deadline, what: "handshake \(next)") else {
                    throw SecureLinkError.timedOut("handshake \(next) within \(timeout) s")
                }
                do {
                    try handshake.readMessage(body)
                } catch {
                    throw SecureLinkError.handshake(error)
                }
                if handshake.isComplete { complete() }
                if next == message { return }
            case .complete:
                complete()
            case .failed(let error):
                throw SecureLinkError.handshake(error)
            }
        }
    }

    /// Makes the handshake once the peer's preamble has come: the version both speak decides
    /// whether message 1 carries the dial proof (PROTOCOL.md §7.1).
    private func beginHandshake(deadline: Date) throws {
        guard let inputs = handshakeInputs else { return }
        while true {
            do {
                if let body = try decoder.nextBody() { earlyBodies.append(body) }
            } catch {
                throw SecureLinkError.wire(error)
            }
            if decoder.hasCheckedPreamble { break }
            guard try readMore(deadline: deadline, what: "the peer's preamble") else {
                throw SecureLinkError.timedOut("the peer's preamble")
            }
        }
        handshakeInputs = nil
        let ours = (try? Preamble.check(preamble, supporting: VersionRange(lowest: 1, highest: .max)!)) ?? .supported
        let agreed = decoder.peerVersions.flatMap { ours.agreed(with: $0) } ?? ours.highest
        cipher = LinkCipher(version: agreed, aesGCM: Self.aesGCM)
        do {
            handshake = try Handshake(role: role, identity: identity, payload: Frame.hello(hello).encodedBody(),
                                      expectedRemoteStaticKey: inputs.expectedRemoteStaticKey,
                                      dialProof: DialProof.isCarried(atVersion: agreed) ? .present(inputs.proofKey) : .absent,
                                      crypto: Self.crypto)
        } catch {
            throw SecureLinkError.handshake(error)
        }
    }

    private func complete() {
        guard let result = handshake?.result, let cipher else { return }
        completed = result
        handshake = nil
        sendLock.withLock { sealer = result.makeLinkSealer(cipher) }
        opener = result.makeLinkOpener(cipher)
        decoder.maxBodyBytes = Wire.maxFrameBodyBytes
    }

    // MARK: Sending

    /// Seals and sends one frame.
    public func send(_ frame: Frame) throws { try send(body: frame.encodedBody()) }

    /// Seals and sends any frame body (the channel frames, which `Frame` does not know).
    public func send(body: [UInt8]) throws {
        try sendLock.withLock {
            guard var sealer else { throw SecureLinkError.io("send(body type \(body.first ?? 0)) before the handshake completed") }
            let record: [UInt8]
            do throws(RecordError) { record = try sealer.seal(body) } catch { throw SecureLinkError.record(error) }
            self.sealer = sealer
            sentBodies.append(record)
            try stream.send(Wire.lengthPrefixed(record))
            lastSent = Date()
        }
    }

    /// Sends a PAIRING frame: our status (`asking`, `known`) or decision (`accept`, `refuse`).
    public func sendPairing(_ decision: PairingDecision) throws { try send(.pairing(decision)) }

    /// Sends one TEXT frame.
    public func sendText(seq: UInt64, previousSeq: UInt64, messageID: MessageID = .random(), sentAtMs: UInt64? = nil,
                         text: String) throws {
        let sentAt = sentAtMs ?? UInt64(Date().timeIntervalSince1970 * 1000)
        try send(.text(try TextFrame(seq: seq, previousSeq: previousSeq, messageID: messageID, sentAtMs: sentAt, text: text)))
    }

    /// Bytes as they are, e.g. a replayed or tampered record (`Wire.lengthPrefixed(body)`).
    public func sendRaw(_ bytes: [UInt8]) throws {
        try sendLock.withLock {
            try stream.send(bytes)
            lastSent = Date()
        }
    }

    /// One record body sent as a frame, as it is (replayed, tampered, forged).
    public func sendRecord(_ body: [UInt8]) throws { try sendRaw(Wire.lengthPrefixed(body)) }

    private func keepaliveIfIdle() {
        guard sendsKeepalives, completed != nil else { return }
        let idle = sendLock.withLock { Date().timeIntervalSince(lastSent) }
        if idle >= 1 { try? send(.keepalive) }
    }

    // MARK: Receiving

    /// The next frame body (a handshake message, or a sealed record still sealed), or nil if none
    /// arrives by `deadline`. Throws `closed` at the end of the stream, `wire` on bad framing.
    private func nextBody(deadline: Date, what: String) throws -> [UInt8]? {
        if !earlyBodies.isEmpty { return earlyBodies.removeFirst() }
        while true {
            do {
                if let body = try decoder.nextBody() { return body }
            } catch {
                throw SecureLinkError.wire(error)
            }
            guard try readMore(deadline: deadline, what: what) else { return nil }
        }
    }

    /// Reads what comes within a quarter of a second into the decoder; false once `deadline` has passed.
    private func readMore(deadline: Date, what: String) throws -> Bool {
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0 else { return false }
        switch stream.read(timeout: min(remaining, 0.25)) {
        case .bytes(let bytes):
            decoder.append(bytes)
        case .end:
            throw SecureLinkError.closed("while waiting for \(what)")
        case .timedOut:
            keepaliveIfIdle()
        }
        return true
    }

    /// The next sealed record's body, unopened (recorded in `receivedRecords`); nil on timeout.
    public func receiveRecord(timeout: Double) throws -> [UInt8]? {
        guard completed != nil else { throw SecureLinkError.io("receiveRecord before the handshake completed") }
        guard let body = try nextBody(deadline: Date().addingTimeInterval(timeout), what: "a record") else { return nil }
        receivedBodies.append(body)
        return body
    }

    /// Opens one record received from the peer (throws `record` if it does not open).
    public func open(_ record: [UInt8]) throws -> Frame {
        do { return try Frame(body: try openBody(record)) } catch let error as WireError { throw SecureLinkError.wire(error) }
    }

    /// The body a record opens to, whatever frame it is (throws `record` if it does not open).
    public func openBody(_ record: [UInt8]) throws -> [UInt8] {
        guard var opener else { throw SecureLinkError.io("open before the handshake completed") }
        defer { self.opener = opener }
        do { return try opener.open(record) } catch { throw SecureLinkError.record(error) }
    }

    /// The next frame (KEEPALIVEs included), or nil if none arrives within `timeout`.
    public func receiveFrame(timeout: Double) throws -> Frame? {
        guard let record = try receiveRecord(timeout: timeout) else { return nil }
        return try open(record)
    }

    /// Frames until `done` says the last one is enough (returns them all, KEEPALIVEs left out),
    /// or `timeout` passes (throws `timedOut`, unless `orTimeout` is true: then returns what came).
    @discardableResult
    public func receive(timeout: Double, orTimeout: Bool = false, until done: (Frame) -> Bool) throws -> [Frame] {
        let deadline = Date().addingTimeInterval(timeout)
        var frames: [Frame] = []
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0, let frame = try receiveFrame(timeout: remaining) else {
                if orTimeout { return frames }
                throw SecureLinkError.timedOut("frames so far: \(frames.map(\.description))")
            }
            if frame != .keepalive { frames.append(frame) }
            if done(frame) { return frames }
        }
    }

    /// Waits for the peer's PAIRING decision: `accept` or `refuse` from its person, or `known`
    /// from its pin (an `asking` status on the way is returned among the frames).
    public func awaitPairing(timeout: Double) throws -> (decision: PairingDecision, frames: [Frame]) {
        let frames = try receive(timeout: timeout) {
            if case .pairing(let decision) = $0 { decision != .asking } else { false }
        }
        guard case .pairing(let decision)? = frames.last else { preconditionFailure() }
        return (decision, frames)
    }

    /// Reads until the peer ends the stream (true) or `timeout` passes (false); frames that open
    /// are collected, records that do not are skipped.
    public func waitForEnd(timeout: Double) -> (ended: Bool, frames: [Frame]) {
        let deadline = Date().addingTimeInterval(timeout)
        var frames: [Frame] = []
        while deadline.timeIntervalSinceNow > 0 {
            do {
                if completed == nil {
                    guard try nextBody(deadline: deadline, what: "the end") != nil else { break }
                    continue
                }
                guard let record = try receiveRecord(timeout: deadline.timeIntervalSinceNow) else { break }
                if let frame = try? open(record), frame != .keepalive { frames.append(frame) }
            } catch SecureLinkError.closed {
                return (true, frames)
            } catch {
                return (true, frames)
            }
        }
        return (false, frames)
    }

    /// Closes the stream (no GOODBYE: the peer may redial).
    public func close() { stream.close() }
}
