import Foundation
import Glibc

/// A TCP port on 127.0.0.1 that was free when asked (a listener on port 0, read back, closed): for
/// a peer that must keep its port, and so its id, across a restart.
public func freeTCPPort() throws -> UInt16 {
    try TCPListener().port
}

/// `accept` with the new socket close-on-exec (Glibc's Swift module has no `accept4`).
func acceptClosingOnExec(_ listener: Int32) -> Int32 {
    let fd = accept(listener, nil, nil)
    if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    return fd
}

/// One loopback port bound for both TCP and UDP (as a daemon's `--listen` port serves links and
/// voice alike).
public enum LoopbackPort {
    /// A listening TCP socket and a UDP socket on the same free loopback port.
    public static func bindTCPAndUDP() throws -> (tcp: Int32, udp: Int32, port: UInt16) {
        for _ in 0..<20 {
            let tcp = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
            var yes: Int32 = 1
            setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
            guard tcp >= 0, bindSocket(tcp, to: loopbackAddress(port: 0)), listen(tcp, 8) == 0, let port = boundPort(tcp) else {
                if tcp >= 0 { close(tcp) }
                throw HarnessError("cannot listen on loopback TCP: \(errnoText())")
            }
            let udp = socket(AF_INET, Int32(SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
            if udp >= 0, bindSocket(udp, to: loopbackAddress(port: port)) { return (tcp, udp, port) }
            close(tcp)
            if udp >= 0 { close(udp) }
        }
        throw HarnessError("no loopback port free for both TCP and UDP")
    }
}

/// The text of the last system error.
func errnoText() -> String { String(cString: strerror(errno)) }

/// Binds `fd` to `address`; false (errno set) if it cannot.
func bindSocket(_ fd: Int32, to address: sockaddr_in) -> Bool {
    var address = address
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    } == 0
}

/// The port `fd` is bound to, or nil (errno set) if it cannot be read.
func boundPort(_ fd: Int32) -> UInt16? {
    var address = sockaddr_in()
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return named == 0 ? UInt16(bigEndian: address.sin_port) : nil
}

/// 127.0.0.1:`port`, for the sockets the harness binds and connects.
func loopbackAddress(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}

/// A blocking TCP stream with timeouts: a `SecureLink`'s transport, or a raw connection that feeds
/// a peervoiced bytes a peer would not send. One thread may read while another writes.
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
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SecureLinkError.io("socket: \(errnoText())") }
        if let source {
            var local = loopbackAddress(port: 0)
            local.sin_addr.s_addr = inet_addr(source)
            guard bindSocket(fd, to: local) else {
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
        switch readChunk(maxBytes: maxBytes, until: Date().addingTimeInterval(timeout)) {
        case .bytes(let bytes): .bytes(bytes)
        case .closed, .reset: .end
        case .stillOpen: .timedOut
        }
    }

    /// How the other side ended the stream, if it did.
    public enum Ending: Equatable { case closed, reset, stillOpen }

    /// Reads until `enough` says what arrived so far (all of it, from the first read) is enough,
    /// the other side ends the stream, or `timeout` seconds pass.
    public func read(timeout: Double, until enough: ([UInt8]) -> Bool) -> (bytes: [UInt8], ending: Ending) {
        let deadline = Date().addingTimeInterval(timeout)
        var received: [UInt8] = []
        while !enough(received) {
            switch readChunk(maxBytes: 64 * 1024, until: deadline) {
            case .bytes(let bytes): received += bytes
            case .closed: return (received, .closed)
            case .reset: return (received, .reset)
            case .stillOpen: return (received, .stillOpen)
            }
        }
        return (received, .stillOpen)
    }

    /// Reads until the other side ends the stream or `timeout` seconds pass: what arrived, and how it ended.
    public func readUntilEnd(timeout: Double) -> (bytes: [UInt8], ending: Ending) {
        read(timeout: timeout) { _ in false }
    }

    private enum Chunk { case bytes([UInt8]), closed, reset, stillOpen }

    private func readChunk(maxBytes: Int, until deadline: Date) -> Chunk {
        let fd = self.fd
        guard fd >= 0 else { return .closed }
        while true {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(max(0, deadline.timeIntervalSinceNow) * 1000))
            if ready < 0 && errno == EINTR { continue }
            if ready < 0 { return .reset }
            if ready == 0 { return .stillOpen }
            var buffer = [UInt8](repeating: 0, count: maxBytes)
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 { return .bytes(Array(buffer[0..<count])) }
            if count < 0 && errno == EINTR { continue }
            return count == 0 ? .closed : .reset
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

/// A listening TCP socket on 127.0.0.1. Like every socket of the harness it is close-on-exec: a
/// daemon the chaos campaign restarted inherited a relay's listener and kept its port after the
/// relay closed it.
public final class TCPListener: @unchecked Sendable {
    public let port: UInt16
    private let lock = NSLock()
    private var descriptor: Int32

    /// Listens on `port` (0: any free port, read back into `port`).
    public init(port: UInt16 = 0) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SecureLinkError.io("socket: \(errnoText())") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard bindSocket(fd, to: loopbackAddress(port: port)), listen(fd, 16) == 0 else {
            let message = errnoText()
            Glibc.close(fd)
            throw SecureLinkError.io("listen on 127.0.0.1:\(port): \(message)")
        }
        guard let bound = boundPort(fd) else {
            let message = errnoText()
            Glibc.close(fd)
            throw SecureLinkError.io("getsockname: \(message)")
        }
        self.port = bound
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
        let accepted = acceptClosingOnExec(fd)
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
