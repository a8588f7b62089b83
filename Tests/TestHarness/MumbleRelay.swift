import Foundation
import Glibc

/// A relay in front of a Mumble server, on one loopback port for TCP and UDP as a server has: the
/// TLS connection passes through byte for byte, and each client's UDP datagrams go to the server's
/// port from a socket of the relay's own for that client, the answers back the same way. murmurd
/// ties a client's UDP to its TLS connection by IP address and crypto, so it takes the relay's.
/// `udpBlocked` drops every datagram both ways: a network where UDP stopped working.
///
/// Threads: one accepting, two per TCP connection, one for all UDP. `stop()` ends and joins them.
public final class MumbleRelay: @unchecked Sendable {
    public let port: UInt16
    private let serverPort: UInt16
    private let listener: Int32
    private let udp: Int32
    private let lock = NSLock()
    private let threads = Threads()
    private var stopping = false
    private var blocked = false
    private var streams: [TCPStream] = []
    private var forwarded = 0
    private var dropped = 0

    public init(serverPort: UInt16) throws {
        (listener, udp, port) = try LoopbackPort.bindTCPAndUDP()
        self.serverPort = serverPort
        threads.spawn { [self] in acceptLoop() }
        threads.spawn { [self] in datagramLoop() }
    }

    deinit { stop() }

    /// Drops every datagram either way while true.
    public var udpBlocked: Bool {
        get { lock.withLock { blocked } }
        set { lock.withLock { blocked = newValue } }
    }

    /// Datagrams passed on and dropped so far (both ways).
    public var datagrams: (forwarded: Int, dropped: Int) { lock.withLock { (forwarded, dropped) } }

    private var isStopping: Bool { lock.withLock { stopping } }

    /// Ends every connection and thread and closes the sockets. Idempotent.
    public func stop() {
        let open: [TCPStream] = lock.withLock {
            defer { stopping = true }
            return stopping ? [] : streams
        }
        open.forEach { $0.shutdownBoth() }
        if !threads.wait(seconds: 10) { print("MumbleRelay: threads did not end within 10 s") }
        lock.withLock {
            if listener >= 0 { close(listener) }
            if udp >= 0 { close(udp) }
            streams.forEach { $0.close() }
            streams = []
        }
    }

    private func acceptLoop() {
        while !isStopping {
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { continue }
            let client = TCPStream(fd: fd)
            guard let server = try? TCPStream.connect(port: serverPort) else { client.close(); continue }
            let keep = lock.withLock {
                streams += [client, server]
                return !stopping
            }
            guard keep else { continue }
            threads.spawn { [self] in pump(from: client, to: server) }
            threads.spawn { [self] in pump(from: server, to: client) }
        }
    }

    private func pump(from source: TCPStream, to destination: TCPStream) {
        defer { destination.shutdownWrite() }
        while !isStopping {
            switch source.read(timeout: 0.1) {
            case .timedOut: continue
            case .end: return
            case .bytes(let bytes):
                do { try destination.send(bytes) } catch { source.shutdownBoth(); return }
            }
        }
    }

    /// Datagrams from clients to the server through a socket per client, and back.
    private func datagramLoop() {
        var upstream: [UInt16: Int32] = [:]  // client port → the relay's socket towards the server
        var clients: [Int32: UInt16] = [:]
        defer { upstream.values.forEach { _ = close($0) } }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !isStopping {
            var pollers = ([udp] + Array(clients.keys)).map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard poll(&pollers, nfds_t(pollers.count), 100) > 0 else { continue }
            for poller in pollers where poller.revents & Int16(POLLIN) != 0 {
                var from = sockaddr_in()
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let count = buffer.withUnsafeMutableBytes { bytes in
                    withUnsafeMutablePointer(to: &from) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(poller.fd, bytes.baseAddress, bytes.count, 0, $0, &length) }
                    }
                }
                guard count >= 0 else { continue }
                let pass = lock.withLock {
                    if blocked { dropped += 1 } else { forwarded += 1 }
                    return !blocked
                }
                if poller.fd == udp {
                    let clientPort = UInt16(bigEndian: from.sin_port)
                    if upstream[clientPort] == nil {
                        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
                        guard fd >= 0, bindSocket(fd, to: loopbackAddress(port: 0)) else { continue }
                        upstream[clientPort] = fd
                        clients[fd] = clientPort
                    }
                    if pass { sendDatagram(upstream[clientPort]!, buffer[0..<count], to: serverPort) }
                } else if pass, let clientPort = clients[poller.fd] {
                    sendDatagram(udp, buffer[0..<count], to: clientPort)
                }
            }
        }
    }

    private func sendDatagram(_ fd: Int32, _ bytes: ArraySlice<UInt8>, to port: UInt16) {
        var address = loopbackAddress(port: port)
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }
}
