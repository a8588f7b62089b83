import Foundation
import Glibc
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

private func errnoText() -> String { String(cString: strerror(errno)) }

private func loopbackAddress(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}

/// A blocking TCP stream with timeouts. One thread may read while another writes.
public final class TCPStream: @unchecked Sendable {
    private let lock = NSLock()
    private var descriptor: Int32

    init(fd: Int32) {
        descriptor = fd
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { close() }

    /// The descriptor, or -1 once closed.
    public var fd: Int32 { lock.withLock { descriptor } }

    /// Connects to 127.0.0.1:`port`, from `source` if given (another loopback address such as
    /// "127.0.0.2", so the daemon sees another host).
    public static func connect(port: UInt16, from source: String? = nil) throws -> TCPStream {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SecureLinkError.io("socket: \(errnoText())") }
        if let source {
            var local = loopbackAddress(port: 0)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                let message = errnoText()
                Glibc.close(fd)
                throw SecureLinkError.io("bind \(source): \(message)")
            }
        }
        var address = loopbackAddress(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let message = errnoText()
            Glibc.close(fd)
            throw SecureLinkError.io("connect 127.0.0.1:\(port): \(message)")
        }
        return TCPStream(fd: fd)
    }

    /// Writes all of `bytes` (without SIGPIPE).
    public func send(_ bytes: [UInt8]) throws {
        let fd = self.fd
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                throw SecureLinkError.closed("send: \(errnoText())")
            }
            offset += written
        }
    }

    /// What one read returned: bytes, the end of the stream, or nothing within the timeout.
    public enum ReadResult: Equatable {
        case bytes([UInt8])
        case end
        case timedOut
    }

    /// One read of at most `maxBytes`, waiting up to `timeout` seconds for something to arrive.
    /// A reset counts as the end of the stream.
    public func read(maxBytes: Int = 64 * 1024, timeout: Double) -> ReadResult {
        let fd = self.fd
        guard fd >= 0 else { return .end }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let remaining = deadline.timeIntervalSinceNow
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(max(0, remaining) * 1000))
            if ready < 0 && errno == EINTR { continue }
            if ready < 0 { return .end }
            if ready == 0 { return .timedOut }
            var buffer = [UInt8](repeating: 0, count: maxBytes)
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 { return .bytes(Array(buffer[0..<count])) }
            if count < 0 && errno == EINTR { continue }
            return .end
        }
    }

    /// No more writes: the other side reads the end of the stream.
    public func shutdownWrite() {
        let fd = self.fd
        if fd >= 0 { shutdown(fd, Int32(SHUT_WR)) }
    }

    /// Both directions end now (the other side sees the end; a blocked reader here wakes up).
    public func shutdownBoth() {
        let fd = self.fd
        if fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    public func close() {
        lock.withLock {
            if descriptor >= 0 { Glibc.close(descriptor) }
            descriptor = -1
        }
    }
}

/// A listening TCP socket on 127.0.0.1.
public final class TCPListener: @unchecked Sendable {
    public let port: UInt16
    private let lock = NSLock()
    private var descriptor: Int32

    /// Listens on `port` (0: any free port, read back into `port`).
    public init(port: UInt16 = 0) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SecureLinkError.io("socket: \(errnoText())") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = loopbackAddress(port: port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let message = errnoText()
            Glibc.close(fd)
            throw SecureLinkError.io("listen on 127.0.0.1:\(port): \(message)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else {
            Glibc.close(fd)
            throw SecureLinkError.io("getsockname: \(errnoText())")
        }
        self.port = UInt16(bigEndian: address.sin_port)
        descriptor = fd
    }

    deinit { close() }

    /// The next connection, or nil if none arrives within `timeout` seconds (or it is closed).
    public func accept(timeout: Double) throws -> TCPStream? {
        let fd = lock.withLock { descriptor }
        guard fd >= 0 else { return nil }
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, Int32(max(0, timeout) * 1000))
        guard ready > 0 else { return nil }
        let accepted = Glibc.accept(fd, nil, nil)
        guard accepted >= 0 else {
            if errno == EINTR || errno == EAGAIN || errno == ECONNABORTED { return nil }
            throw SecureLinkError.io("accept: \(errnoText())")
        }
        return TCPStream(fd: accepted)
    }

    public func close() {
        lock.withLock {
            if descriptor >= 0 { Glibc.close(descriptor) }
            descriptor = -1
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

    public let stream: TCPStream
    public let role: HandshakeRole
    public let identity: StaticIdentity
    /// The HELLO this side sends inside the handshake.
    public let hello: Hello
    /// Send a KEEPALIVE while waiting in a receive call, once a second.
    public var sendsKeepalives = true

    private let sendLock = NSLock()
    private var handshake: Handshake?
    private var decoder = FrameDecoder()
    private var sealer: RecordSealer?
    private var opener: RecordOpener?
    private var lastSent = Date()
    private var sentBodies: [[UInt8]] = []
    private var receivedBodies: [[UInt8]] = []
    private var preambleSent = false
    private var completed: HandshakeResult?

    /// - Parameters:
    ///   - expectedRemoteStaticKey: the key the peer must present (as a pinned peer would).
    public init(stream: TCPStream, role: HandshakeRole, identity: StaticIdentity, hello: Hello,
                expectedRemoteStaticKey: [UInt8]? = nil) throws {
        self.stream = stream
        self.role = role
        self.identity = identity
        self.hello = hello
        do {
            handshake = try Handshake(role: role, identity: identity, payload: Frame.hello(hello).encodedBody(),
                                      expectedRemoteStaticKey: expectedRemoteStaticKey, crypto: Self.crypto)
        } catch {
            throw SecureLinkError.handshake(error)
        }
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

    /// A HELLO as a peervoiced would send it: text capability, the given name and listen port.
    public static func makeHello(name: String, listenPort: UInt16 = 0, instance: InstanceID = .random()) -> Hello {
        try! Hello(instanceID: instance, capabilities: [.text], listenPort: listenPort, voicePort: 0, name: name)
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

    /// Sends the 8-byte preamble (version 3), once.
    public func sendPreamble() throws {
        try sendLock.withLock {
            guard !preambleSent else { return }
            preambleSent = true
            try stream.send(Preamble.bytes)
        }
    }

    /// Runs the handshake until it is complete, or until `message` has been sent or received
    /// (e.g. `.initiatorEphemeral`: the code is known, nothing about our identity is revealed).
    /// Throws the handshake's error, `closed` when the peer hangs up, `timedOut` after `timeout`.
    public func runHandshake(through message: HandshakeMessage? = nil, timeout: Double = 10) throws {
        try sendPreamble()
        let deadline = Date().addingTimeInterval(timeout)
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

    private func complete() {
        guard let result = handshake?.result else { return }
        completed = result
        handshake = nil
        sendLock.withLock { sealer = result.makeLinkSealer() }
        opener = result.makeLinkOpener()
        decoder.maxBodyBytes = Wire.maxFrameBodyBytes
    }

    // MARK: Sending

    /// Seals and sends one frame.
    public func send(_ frame: Frame) throws {
        try sendLock.withLock {
            guard var sealer else { throw SecureLinkError.io("send(\(frame.type)) before the handshake completed") }
            let record: [UInt8]
            do throws(RecordError) { record = try sealer.seal(frame.encodedBody()) } catch { throw SecureLinkError.record(error) }
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
        while true {
            do {
                if let body = try decoder.nextBody() { return body }
            } catch {
                throw SecureLinkError.wire(error)
            }
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { return nil }
            switch stream.read(timeout: min(remaining, 0.25)) {
            case .bytes(let bytes):
                decoder.append(bytes)
            case .end:
                throw SecureLinkError.closed("while waiting for \(what)")
            case .timedOut:
                keepaliveIfIdle()
            }
        }
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
        guard var opener else { throw SecureLinkError.io("open before the handshake completed") }
        defer { self.opener = opener }
        let plaintext: [UInt8]
        do { plaintext = try opener.open(record) } catch { throw SecureLinkError.record(error) }
        do { return try Frame(body: plaintext) } catch { throw SecureLinkError.wire(error) }
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
