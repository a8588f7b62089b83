import GIO
import OpenSSLCrypto
import PeerVoiceCore

/// A room's voice over UDP (docs/PROTOCOL.md §14.7): one socket towards the server's address and
/// port, every datagram sealed with Mumble's OCB2-AES128 under the key of the server's
/// `CryptSetup`, a ping each second, and ``MumbleVoiceRoute`` deciding whether our voice goes here
/// or through the TLS tunnel. Main loop only: the socket is non-blocking and watched by the main
/// context (as `ChannelDatagramPath` does); a datagram from anyone but the server, or that does not
/// open, is dropped.
final class RoomUDP {
    /// Mumble's clients ignore anything shorter (4 header bytes and at least one of plaintext).
    static let minimumDatagramBytes = 5
    /// A server that sends undecryptable datagrams for this long after the last good one is asked
    /// to resync (an empty `CryptSetup`), at most once per this long: Mumble's 5 s both ways.
    static let resyncAfterNs: Int64 = 5_000_000_000

    let server: IPEndpoint
    private(set) var route: MumbleVoiceRoute
    private var crypt: MumbleCryptState
    private let socket: Socket
    private var watch: EventSource?
    private var pingTimer: EventSource?
    private var buffer = [UInt8](repeating: 0, count: 2048)
    private var lastGoodNs: Int64
    private var lastResyncRequestNs: Int64?

    /// Voice the server sent over UDP.
    var voiceReceived: (MumbleVoicePacket) -> Void = { _ in }
    /// Voice switched path (``route``'s `path` is the new one).
    var pathChanged: () -> Void = {}
    /// A control message for the TLS connection: the resync request, and a tunnelled ping when
    /// voice falls back (murmurd then sends our listeners' voice through the tunnel too).
    var sendControl: (MumbleClientMessage) -> Void = { _ in }

    /// Nil when the key or a nonce is not 16 bytes; throws when no socket can be made.
    init?(server: IPEndpoint, key: [UInt8], clientNonce: [UInt8], serverNonce: [UInt8]) throws(SystemError) {
        guard let cipher = OpenSSLAES128(key: key),
              let crypt = MumbleCryptState(cipher: cipher, encryptNonce: clientNonce, decryptNonce: serverNonce) else { return nil }
        self.crypt = crypt
        self.server = server
        socket = try Socket.datagram(boundTo: IPEndpoint(host: server.isIPv6 ? "::" : "0.0.0.0", port: 0))
        let now = VoiceEngine.monotonicNs()
        route = MumbleVoiceRoute(nowNs: now)
        lastGoodNs = now
        watch = FDWatch.add(fd: socket.fd, events: .readable) { [unowned self] _ in
            for _ in 0..<64 {
                guard let (count, from) = buffer.withUnsafeMutableBytes({ socket.receive(datagramInto: $0) }) else { break }
                if from.host == server.host, from.port == server.port { received(Array(buffer[0..<count])) }
            }
            return true
        }
        ping()
        pingTimer = Timer.every(.nanoseconds(MumbleVoiceRoute.pingIntervalNs)) { [weak self] in
            self?.ping()
            return self != nil
        }
    }

    deinit { stop() }

    func stop() {
        watch?.cancel()
        watch = nil
        pingTimer = nil
        socket.close()
    }

    /// Our encrypt nonce, which the server asks for (an empty `CryptSetup`) when it resyncs.
    var encryptNonce: [UInt8] { crypt.currentEncryptNonce }

    /// The server's resync: its new encrypt nonce, our decrypt nonce.
    func resync(serverNonce: [UInt8]) {
        guard crypt.setDecryptNonce(serverNonce) else { return }
        lastGoodNs = VoiceEngine.monotonicNs()
        Log.info("room UDP to \(server): the server resynchronised our decryption")
    }

    /// Sends our voice packet over UDP when that is the path; false: it goes through the tunnel.
    func send(voice packet: [UInt8]) -> Bool {
        guard route.path == .udp else { return false }
        socket.send(datagram: crypt.encrypt(packet), to: server)
        return true
    }

    private func ping() {
        let now = VoiceEngine.monotonicNs()
        socket.send(datagram: crypt.encrypt(route.nextPing(nowNs: now)), to: server)
        if route.check(nowNs: now) {
            sendControl(.voice(route.nextPing(nowNs: now)))
            pathChanged()
        }
    }

    private func received(_ datagram: [UInt8]) {
        let now = VoiceEngine.monotonicNs()
        guard datagram.count >= Self.minimumDatagramBytes, let plain = crypt.decrypt(datagram) else {
            if now - lastGoodNs > Self.resyncAfterNs, lastResyncRequestNs.map({ now - $0 > Self.resyncAfterNs }) ?? true {
                lastResyncRequestNs = now
                Log.info("room UDP to \(server): nothing from the server opened for \((now - lastGoodNs) / 1_000_000) ms; asking for a resync")
                sendControl(.cryptSetup(clientNonce: nil))
            }
            return
        }
        lastGoodNs = now
        switch try? MumbleUDPMessage(fromServer: plain[...]) {
        case .ping(let timestamp)?:
            if route.echoed(timestamp: timestamp, nowNs: now) { pathChanged() }
        case .voice(let packet)?:
            voiceReceived(packet)
        case .ignored?, nil:
            break
        }
    }
}
