import GIO
import Glibc
import PeerVoiceCore

/// The service's end of one stream's socket: non-blocking reads of what the app writes, writes of
/// what the peer sent, and the two ways a stream ends (a clean end of file, or an abort). Every
/// call goes through `systemCall`-style error handling here, so `LinkChannels` deals only in results.
final class StreamSocket: StreamIO {
    let fd: Int32
    let mode: StreamMode
    /// A TCP connection over loopback (stream mode), which an abort resets.
    let isTCP: Bool
    private var closed = false

    init(fd: Int32, mode: StreamMode, isTCP: Bool) {
        self.fd = fd
        self.mode = mode
        self.isTCP = isTCP
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    deinit { close() }

    /// One read: up to `buffer.count` bytes of the byte stream, or one message or datagram.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        while true {
            // MSG_TRUNC: a message or datagram reports its whole length, so an oversized one is noticed.
            let flags = mode == .stream ? 0 : Int32(MSG_TRUNC)
            let count = recv(fd, buffer.baseAddress, buffer.count, flags | Int32(MSG_DONTWAIT))
            if count > buffer.count { return .tooLarge(count) }
            if count > 0 { return .bytes(count) }
            // A zero-length message or datagram is nothing to forward (and on SEQPACKET, 0 is also end of file).
            if count == 0 { return mode == .datagrams ? .wouldBlock : .endOfFile }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed(errno)
            }
        }
    }

    /// Writes bytes (stream), or one message or datagram, without blocking.
    func write(_ bytes: UnsafeRawBufferPointer) -> StreamWriteResult {
        while true {
            let count = send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            if count >= 0 { return .wrote(count) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK, ENOBUFS: return .wouldBlock
            default: return .failed(errno)
            }
        }
    }

    func watchReadable(_ action: @escaping () -> Bool) -> EventSource {
        FDWatch.add(fd: fd, events: .readable) { _ in action() }
    }

    func watchWritable(_ action: @escaping () -> Bool) -> EventSource {
        FDWatch.add(fd: fd, events: .writable) { _ in action() }
    }

    func creditable(afterWriting count: Int) -> Int { count }

    func watchTaken(_ action: @escaping (Int) -> Void) -> EventSource? { nil }

    /// The peer's direction is over: the app reads end of file after everything written.
    func shutdownWrite() {
        guard !closed else { return }
        _ = shutdown(fd, Int32(SHUT_WR))
    }

    /// Ends the stream abruptly: a TCP connection is reset (the app's next read fails with
    /// ECONNRESET); a Unix socket only closes (the owner hears of it through StreamClosed).
    func abort() {
        guard !closed else { return }
        if isTCP {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        }
        close()
    }

    func close() {
        guard !closed else { return }
        closed = true
        _ = Glibc.close(fd)
    }

    // MARK: Making pairs

    /// A new stream's two connected ends: the service keeps `service`, the app gets `app` (which
    /// the caller closes once it is handed over).
    static func pair(for mode: StreamMode) throws(SystemError) -> (service: StreamSocket, app: Int32) {
        switch mode {
        case .stream:
            do throws(SystemError) {
                let (service, app) = try loopbackTCPPair()
                return (StreamSocket(fd: service, mode: mode, isTCP: true), app)
            } catch {
                // No usable loopback (a network namespace without `lo` up): a Unix socket still
                // carries the bytes, only an abort then looks like an end of file.
                Log.info("channels: no TCP over loopback (\(error)): this stream uses a Unix socket")
            }
            return try unixPair(mode: mode, type: SOCK_STREAM)
        case .messages:
            return try unixPair(mode: mode, type: SOCK_SEQPACKET)
        case .datagrams:
            return try unixPair(mode: mode, type: SOCK_DGRAM)
        }
    }

    private static func unixPair(mode: StreamMode, type: __socket_type) throws(SystemError) -> (service: StreamSocket, app: Int32) {
        var fds: [Int32] = [-1, -1]
        try systemCall("socketpair") { socketpair(AF_UNIX, Int32(type.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) }
        return (StreamSocket(fd: fds[0], mode: mode, isTCP: false), fds[1])
    }

    /// Two connected TCP sockets on 127.0.0.1, through a listener that lives for the moment of the
    /// connect: a connection from anyone else in that moment is refused by comparing addresses.
    private static func loopbackTCPPair() throws(SystemError) -> (service: Int32, app: Int32) {
        let cloexec = Int32(SOCK_CLOEXEC.rawValue)
        let listener = try systemCall("socket") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | cloexec, 0) }
        defer { _ = Glibc.close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer throws(SystemError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa throws(SystemError) in
                try systemCall("bind 127.0.0.1") { bind(listener, sa, length) }
                try systemCall("listen") { listen(listener, 1) }
                try systemCall("getsockname") { getsockname(listener, sa, &length) }
            }
        }
        let app = try systemCall("socket") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | cloexec, 0) }
        do throws(SystemError) {
            _ = try withUnsafePointer(to: &address) { pointer throws(SystemError) in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa throws(SystemError) in
                    // A connect to a local listener completes at once: the kernel queues the connection.
                    try systemCall("connect 127.0.0.1") { connect(app, sa, length) }
                }
            }
            let appAddress = try localAddress(of: app)
            _ = fcntl(listener, F_SETFL, fcntl(listener, F_GETFL) | O_NONBLOCK)
            for _ in 0..<4 {
                var peer = sockaddr_in()
                var peerLength = socklen_t(MemoryLayout<sockaddr_in>.size)
                let service = try withUnsafeMutablePointer(to: &peer) { pointer throws(SystemError) in
                    try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa throws(SystemError) in
                        try systemCall("accept") { accept(listener, sa, &peerLength) }
                    }
                }
                _ = fcntl(service, F_SETFD, FD_CLOEXEC)
                if peer.sin_port == appAddress.sin_port && peer.sin_addr.s_addr == appAddress.sin_addr.s_addr {
                    for fd in [service, app] { setNoDelay(fd) }
                    return (service, app)
                }
                _ = Glibc.close(service)
            }
            throw SystemError(call: "accept (someone else connected to the stream's listener)", code: EACCES)
        } catch {
            _ = Glibc.close(app)
            throw error
        }
    }

    private static func localAddress(of fd: Int32) throws(SystemError) -> sockaddr_in {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = try withUnsafeMutablePointer(to: &address) { pointer throws(SystemError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa throws(SystemError) in
                try systemCall("getsockname") { getsockname(fd, sa, &length) }
            }
        }
        return address
    }

    /// Small writes (a game's moves) must not wait for Nagle's algorithm and delayed ACKs.
    private static func setNoDelay(_ fd: Int32) {
        var on: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }
}
