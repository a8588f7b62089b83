import Foundation
import Glibc
import PeerVoiceCore

/// A TCP relay on 127.0.0.1 between whoever connects to `port` (the client, the handshake's
/// initiator) and a daemon listening on `targetPort` (the server, the responder).
///
/// Two kinds:
/// - **Byte relay** (`init(targetPort:rules:)`): passes bytes through, knowing the framing
///   (8-byte preamble, then `u32` length + body; the client's first 3 bodies are handshake
///   messages 1, 3, 5 and the server's first 2 are messages 2, 4; every later body is a sealed
///   record), and applies `Rule`s to chosen sealed records: flip one bit, replay, drop.
/// - **Man in the middle** (`init(targetPort:manInTheMiddle:)`): runs its own handshake with each
///   side (its own keys: it substitutes them), records the two verification codes, and
///   optionally forwards frames, opened on one link and sealed again on the other.
///
/// Threads: one accepting, two per relayed connection (or one per MITM session plus two
/// forwarding). `stop()` ends and joins them all and closes every socket; call it in tearDown.
public final class Relay: @unchecked Sendable {
    /// Which way a record travels.
    public enum Direction: String, Sendable {
        /// From the side that connected to the relay (the initiator).
        case fromClient
        /// From the daemon at `targetPort` (the responder).
        case fromServer
    }

    public enum Action: String, Sendable {
        /// Flip one bit in the middle of the record's ciphertext (the tag no longer verifies).
        case flipBit
        /// Forward the record, then the same bytes again.
        case replay
        /// Do not forward it.
        case drop
    }

    /// What to do to which sealed records.
    public struct Rule: Sendable {
        public let direction: Direction
        public let action: Action
        /// How many matching records it applies to.
        public let times: Int
        /// (index of the record among that direction's sealed records from 0, its body) → apply?
        public let matches: @Sendable (Int, [UInt8]) -> Bool

        public init(from direction: Direction, _ action: Action, times: Int = 1,
                    where matches: @escaping @Sendable (Int, [UInt8]) -> Bool) {
            self.direction = direction
            self.action = action
            self.times = times
            self.matches = matches
        }

        /// The `n`th sealed record (from 0) of `direction`.
        public static func nth(_ n: Int, from direction: Direction, _ action: Action) -> Rule {
            Rule(from: direction, action) { index, _ in index == n }
        }

        /// The first sealed record of `direction` whose body has `bytes` bytes: a TEXT with t bytes
        /// of text is 24 + 41 + t bytes sealed (`Relay.sealedTextBytes`), and nothing else on a
        /// link has that size when t is chosen well.
        public static func bodyBytes(_ bytes: Int, from direction: Direction, _ action: Action, times: Int = 1) -> Rule {
            Rule(from: direction, action, times: times) { _, body in body.count == bytes }
        }
    }

    /// The size of a sealed TEXT record with `textBytes` bytes of text.
    public static func sealedTextBytes(_ textBytes: Int) -> Int { SealedRecord.overheadBytes + 41 + textBytes }

    /// Options of the man in the middle.
    public struct ManInTheMiddle: Sendable {
        /// The key the relay shows the client (instead of the server's).
        public var identityTowardClient = SecureLink.newIdentity()
        /// The key the relay shows the server (instead of the client's).
        public var identityTowardServer = SecureLink.newIdentity()
        /// The HELLO the client gets, e.g. the server's name.
        public var helloToClient: Hello
        /// The HELLO the server gets, e.g. the client's name and listen port.
        public var helloToServer: Hello
        /// After both handshakes, open each side's frames and seal them to the other side.
        public var forwardFrames = true

        public init(helloToClient: Hello, helloToServer: Hello, forwardFrames: Bool = true) {
            self.helloToClient = helloToClient
            self.helloToServer = helloToServer
            self.forwardFrames = forwardFrames
        }
    }

    public let port: UInt16
    public let targetPort: UInt16

    private let listener: TCPListener
    private let rules: [Rule]
    private let mitm: ManInTheMiddle?
    private let preambles: [Direction: [UInt8]]
    private let lock = NSLock()
    private let threads = Threads()
    private var stopping = false
    private var fired: [Int]
    private var eventList: [String] = []
    private var streams: [TCPStream] = []
    private var sealedCounts: [Direction: Int] = [:]
    private var clientCode: String?
    private var serverCode: String?
    private var forwardedFrames: [(direction: Direction, frame: Frame)] = []
    private var connectionCount = 0
    private var delaySeconds = 0.0

    /// A byte relay applying `rules` (none: a plain pass-through), and putting `preambles` in
    /// place of the preamble each direction sends (the versions it announces are in the clear).
    /// `listenPort` 0 picks a free port; a fixed one lets a test bring the "same" path back.
    public convenience init(targetPort: UInt16, rules: [Rule] = [], listenPort: UInt16 = 0,
                            preambles: [Direction: [UInt8]] = [:]) throws {
        try self.init(targetPort: targetPort, rules: rules, mitm: nil, listenPort: listenPort, preambles: preambles)
    }

    /// A man in the middle.
    public convenience init(targetPort: UInt16, manInTheMiddle: ManInTheMiddle) throws {
        try self.init(targetPort: targetPort, rules: [], mitm: manInTheMiddle, listenPort: 0, preambles: [:])
    }

    private init(targetPort: UInt16, rules: [Rule], mitm: ManInTheMiddle?, listenPort: UInt16,
                 preambles: [Direction: [UInt8]]) throws {
        listener = try TCPListener(port: listenPort)
        port = listener.port
        self.targetPort = targetPort
        self.rules = rules
        self.mitm = mitm
        self.preambles = preambles
        fired = Array(repeating: 0, count: rules.count)
        threads.spawn { [self] in acceptLoop() }
    }

    deinit { stop() }

    /// The address a daemon dials to reach the relay (a route to whatever key answers behind it).
    public var address: String { "ip:127.0.0.1:\(port)" }

    // MARK: What happened

    /// One line per rule applied, connection relayed, handshake done or failure, in order.
    public var events: [String] { lock.withLock { eventList } }
    /// How many records the rules changed, replayed or dropped.
    public var applied: Int { lock.withLock { fired.reduce(0, +) } }
    /// Sealed records seen so far from `direction` (byte relay).
    public func sealedRecords(from direction: Direction) -> Int { lock.withLock { sealedCounts[direction] ?? 0 } }
    /// Connections accepted.
    public var connections: Int { lock.withLock { connectionCount } }
    /// The man in the middle's codes: the one its link with the client shows, and the one its link
    /// with the server shows (nil until that handshake passed message 3).
    public var codes: (client: String?, server: String?) { lock.withLock { (clientCode, serverCode) } }
    /// Frames the man in the middle forwarded (KEEPALIVEs are not forwarded: each link has its own).
    public var forwarded: [(direction: Direction, frame: Frame)] { lock.withLock { forwardedFrames } }

    /// Holds every chunk read for `seconds` before forwarding it, each direction in turn (0: none):
    /// a slow path, its latency added per read (a bulk flow slows down too). Netem does not exist here.
    public func delay(_ seconds: Double) { lock.withLock { delaySeconds = seconds } }

    private func note(_ event: String) { lock.withLock { eventList.append(event) } }
    private var isStopping: Bool { lock.withLock { stopping } }

    /// Ends every connection and thread, and closes the listener. Idempotent.
    public func stop() {
        let open: [TCPStream] = lock.withLock {
            stopping = true
            return streams
        }
        // Wake blocked readers; the threads close their own sockets as they leave.
        open.forEach { $0.shutdownBoth() }
        if !threads.wait(seconds: 10) {
            print("Relay: threads did not end within 10 s")
        }
        listener.close()
        lock.withLock { streams }.forEach { $0.close() }
    }

    private func track(_ stream: TCPStream) -> Bool {
        lock.withLock {
            streams.append(stream)
            return !stopping
        }
    }

    private func acceptLoop() {
        while !isStopping {
            guard let client = try? listener.accept(timeout: 0.1) else { continue }
            lock.withLock { connectionCount += 1 }
            guard track(client) else { client.close(); return }
            if mitm != nil {
                threads.spawn { [self] in manInTheMiddle(client: client) }
                continue
            }
            guard let server = connectToServer(for: client) else { continue }
            note("relaying connection \(connections)")
            threads.spawn { [self] in pump(from: client, to: server, .fromClient) }
            threads.spawn { [self] in pump(from: server, to: client, .fromServer) }
        }
    }

    /// The relay's side toward the server for `client`, or nil (and `client` closed) when the
    /// server cannot be reached or the relay is stopping.
    private func connectToServer(for client: TCPStream) -> TCPStream? {
        let server: TCPStream
        do {
            server = try TCPStream.connect(port: targetPort)
        } catch {
            note("cannot reach the server: \(error)")
            client.close()
            return nil
        }
        guard track(server) else { server.close(); client.close(); return nil }
        return server
    }

    // MARK: Byte relay

    /// Splits one direction's bytes into the preamble, handshake messages and sealed records.
    private struct Splitter {
        var buffer: [UInt8] = []
        var preambleDone = false
        var bodies = 0
        let handshakeBodies: Int
        /// Set when the bytes are not PeerVoice framing: pass everything as it is.
        var raw = false

        enum Unit { case preamble([UInt8]), asIs([UInt8]), record([UInt8]) }

        mutating func next() -> Unit? {
            if raw {
                guard !buffer.isEmpty else { return nil }
                defer { buffer = [] }
                return .asIs(buffer)
            }
            if !preambleDone {
                guard buffer.count >= Preamble.byteCount else { return nil }
                preambleDone = true
                let preamble = Array(buffer[0..<Preamble.byteCount])
                buffer.removeFirst(Preamble.byteCount)
                return .preamble(preamble)
            }
            guard buffer.count >= 4 else { return nil }
            let length = buffer[0..<4].reduce(0) { $0 << 8 | Int($1) }
            if length == 0 || length > Wire.maxFrameBodyBytes {
                raw = true
                return next()
            }
            guard buffer.count >= 4 + length else { return nil }
            let body = Array(buffer[4..<4 + length])
            buffer.removeFirst(4 + length)
            bodies += 1
            return bodies <= handshakeBodies ? .asIs(Wire.lengthPrefixed(body)) : .record(body)
        }
    }

    private func pump(from source: TCPStream, to destination: TCPStream, _ direction: Direction) {
        var splitter = Splitter(handshakeBodies: direction == .fromClient ? 3 : 2)
        // Sockets are closed by stop(), once no thread uses them.
        defer { destination.shutdownWrite() }
        while !isStopping {
            switch source.read(timeout: 0.1) {
            case .timedOut:
                continue
            case .end:
                note("\(direction): end of stream")
                return
            case .bytes(let bytes):
                splitter.buffer += bytes
                var out: [UInt8] = []
                while let unit = splitter.next() {
                    switch unit {
                    case .preamble(let bytes):
                        if let replacement = preambles[direction] { note("\(direction): preamble \(bytes) replaced by \(replacement)") }
                        out += preambles[direction] ?? bytes
                    case .asIs(let bytes): out += bytes
                    case .record(let body): out += apply(to: body, direction)
                    }
                }
                let delay = lock.withLock { delaySeconds }
                if delay > 0 { usleep(UInt32(delay * 1_000_000)) }
                do {
                    try destination.send(out)
                } catch {
                    note("\(direction): cannot forward: \(error)")
                    source.shutdownBoth()
                    return
                }
            }
        }
    }

    /// The bytes to forward for one sealed record.
    private func apply(to body: [UInt8], _ direction: Direction) -> [UInt8] {
        let action: Action? = lock.withLock {
            let index = sealedCounts[direction, default: 0]
            sealedCounts[direction] = index + 1
            for (number, rule) in rules.enumerated()
            where rule.direction == direction && fired[number] < rule.times && rule.matches(index, body) {
                fired[number] += 1
                eventList.append("\(rule.action) record \(index) from \(direction) (\(body.count) bytes)")
                return rule.action
            }
            return nil
        }
        switch action {
        case nil:
            return Wire.lengthPrefixed(body)
        case .flipBit?:
            var changed = body
            changed[SealedRecord.headerBytes + (body.count - SealedRecord.headerBytes) / 2] ^= 0x01
            return Wire.lengthPrefixed(changed)
        case .replay?:
            return Wire.lengthPrefixed(body) + Wire.lengthPrefixed(body)
        case .drop?:
            return []
        }
    }

    // MARK: Man in the middle

    private func manInTheMiddle(client: TCPStream) {
        guard let options = mitm, let server = connectToServer(for: client) else { return }
        let towardServer: SecureLink, towardClient: SecureLink
        do {
            towardServer = try SecureLink(stream: server, role: .initiator, identity: options.identityTowardServer,
                                          hello: options.helloToServer)
            towardClient = try SecureLink(stream: client, role: .responder, identity: options.identityTowardClient,
                                          hello: options.helloToClient)
            // The server first: its code is fixed before the client's handshake reaches message 3.
            try towardServer.runHandshake(timeout: 8)
            lock.withLock { serverCode = towardServer.verificationCode }
            try towardClient.runHandshake(timeout: 8)
            lock.withLock { clientCode = towardClient.verificationCode }
            note("handshakes done: code \(towardClient.verificationCode ?? "?") with the client, \(towardServer.verificationCode ?? "?") with the server")
        } catch {
            note("man in the middle: \(error)")
            client.shutdownBoth()
            server.shutdownBoth()
            return
        }
        guard options.forwardFrames else {
            // Keep both links alive (keepalives) until stopped or one side hangs up.
            while !isStopping {
                for link in [towardClient, towardServer] {
                    do {
                        _ = try link.receiveFrame(timeout: 0.05)
                    } catch {
                        note("man in the middle: \(error)")
                        return
                    }
                }
            }
            return
        }
        threads.spawn { [self] in forward(from: towardClient, to: towardServer, .fromClient) }
        forward(from: towardServer, to: towardClient, .fromServer)
    }

    private func forward(from source: SecureLink, to destination: SecureLink, _ direction: Direction) {
        defer {
            destination.stream.shutdownBoth()
            source.stream.shutdownBoth()
        }
        while !isStopping {
            do {
                guard let frame = try source.receiveFrame(timeout: 0.1) else { continue }
                if frame == .keepalive { continue }
                lock.withLock { forwardedFrames.append((direction: direction, frame: frame)) }
                try destination.send(frame)
            } catch {
                note("\(direction): \(error)")
                return
            }
        }
    }
}


/// A man in the middle searching for a verification code: each attempt dials the daemon at `port`
/// with a fresh key and ephemeral, learns the code the daemon will show, and gives up when it is
/// not the one wanted (docs/SECURITY.md §6.1: the commitment makes each attempt one fresh guess).
public enum CodeSearch {
    public enum Outcome: Equatable, Sendable {
        /// Stopped right after message 3: the code was known, the handshake not finished.
        case abortedAfterCode
        /// Handshake complete and no refusal within the observation time: the daemon is asking its person.
        case prompted
        /// Handshake complete, then the daemon sent PAIRING refuse (e.g. its rate limit).
        case refused
        /// The daemon hung up or failed the handshake.
        case closed(String)
    }

    public struct Attempt: Sendable {
        public let code: String?
        public let outcome: Outcome
    }

    /// One attempt, from the loopback address `source` (default 127.0.0.1). `through`: `.initiatorEphemeral` stops as soon as the code is known (before
    /// the daemon can prompt; it sends nothing more, but waits for the daemon's answer to message 3
    /// before hanging up); `.initiatorIdentity` completes the handshake so the daemon decides
    /// (prompt or refuse), watched for `observe` seconds.
    public static func attempt(port: UInt16, from source: String? = nil, identity: StaticIdentity = SecureLink.newIdentity(),
                               hello: Hello, through: HandshakeMessage = .initiatorIdentity, observe: Double = 0.25) -> Attempt {
        let link: SecureLink
        do {
            link = try SecureLink.connect(port: port, from: source, identity: identity, hello: hello)
        } catch {
            return Attempt(code: nil, outcome: .closed("\(error)"))
        }
        defer { link.close() }
        do {
            try link.runHandshake(through: through, timeout: 5)
        } catch {
            return Attempt(code: link.verificationCode, outcome: .closed("\(error)"))
        }
        guard link.isAuthenticated else {
            if through == .initiatorEphemeral {
                // Give up only once the daemon has taken message 3 (it answers with message 4, or
                // hangs up past its limit): the next attempt then meets the daemon's count of this
                // one instead of racing it.
                _ = try? link.runHandshake(through: .responderIdentity, timeout: 2)
            }
            return Attempt(code: link.verificationCode, outcome: .abortedAfterCode)
        }
        do {
            let frames = try link.receive(timeout: observe, orTimeout: true) { if case .pairing = $0 { true } else { false } }
            if case .pairing(.refuse)? = frames.last { return Attempt(code: link.verificationCode, outcome: .refused) }
            return Attempt(code: link.verificationCode, outcome: .prompted)
        } catch {
            return Attempt(code: link.verificationCode, outcome: .closed("\(error)"))
        }
    }
}
