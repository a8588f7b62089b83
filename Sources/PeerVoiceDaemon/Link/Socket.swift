import Glibc

/// A failed system call: which one and errno, worded by strerror.
struct SystemError: Error, CustomStringConvertible {
    let call: String
    let code: Int32

    var description: String { "\(call): \(String(cString: strerror(code)))" }
}

/// Runs a system call that returns -1 and sets errno on failure, retrying on EINTR. Every socket
/// call goes through here so errors and retries live in one place.
@discardableResult
func systemCall<Result: BinaryInteger>(_ name: String, _ call: () -> Result) throws(SystemError) -> Result {
    while true {
        let result = call()
        if result != -1 { return result }
        if errno != EINTR { throw SystemError(call: name, code: errno) }
    }
}

/// A numeric IP address and port, as `sockaddr_in`/`sockaddr_in6` want it.
struct IPEndpoint: CustomStringConvertible {
    let host: String
    let port: UInt16

    var isIPv6: Bool { host.contains(":") }
    var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Fills a `sockaddr_storage`; nil if `host` is not a numeric address.
    func socketAddress() -> (sockaddr_storage, socklen_t)? {
        var storage = sockaddr_storage()
        if isIPv6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            let parts = host.split(separator: "%", maxSplits: 1)
            guard let literal = parts.first, inet_pton(AF_INET6, String(literal), &address.sin6_addr) == 1 else { return nil }
            if parts.count == 2 {
                // A link-local address is reached through the interface its zone names.
                address.sin6_scope_id = if_nametoindex(String(parts[1]))
                guard address.sin6_scope_id != 0 else { return nil }
            }
            withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: address, as: sockaddr_in6.self) }
            return (storage, socklen_t(MemoryLayout<sockaddr_in6>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { return nil }
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: address, as: sockaddr_in.self) }
        return (storage, socklen_t(MemoryLayout<sockaddr_in>.size))
    }

    /// Reads a `sockaddr_storage` filled by the kernel. IPv4-mapped IPv6 addresses (from a
    /// dual-stack listener) come back as plain IPv4, so one peer has one id.
    init?(_ storage: sockaddr_storage) {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        switch Int32(storage.ss_family) {
        case AF_INET:
            var address = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in.self) }
            inet_ntop(AF_INET, &address.sin_addr, &text, socklen_t(text.count))
            port = UInt16(bigEndian: address.sin_port)
        case AF_INET6:
            var address = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self) }
            inet_ntop(AF_INET6, &address.sin6_addr, &text, socklen_t(text.count))
            port = UInt16(bigEndian: address.sin6_port)
        default:
            return nil
        }
        var numeric = text.withUnsafeBufferPointer { String(decoding: $0.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        if storage.ss_family == sa_family_t(AF_INET6) {
            // Keep a link-local peer's zone, so its address can be dialled back.
            let scope = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self) }.sin6_scope_id
            var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
            if scope != 0, if_indextoname(scope, &name) != nil {
                numeric += "%" + name.withUnsafeBufferPointer { String(decoding: $0.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
            }
        }
        host = numeric.hasPrefix("::ffff:") && numeric.contains(".") ? String(numeric.dropFirst(7)) : numeric
    }

    init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }
}

/// An owned, non-blocking socket file descriptor; closed when released.
final class Socket {
    private(set) var fd: Int32

    init(adopting fd: Int32) {
        self.fd = fd
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Hands the descriptor to a new owner; this object no longer closes it.
    func release() -> Int32 {
        defer { fd = -1 }
        return fd
    }

    /// bind(2); `call` names it in the error.
    private func bind(to address: sockaddr_storage, length: socklen_t, call: String) throws(SystemError) {
        _ = try withUnsafePointer(to: address) { pointer throws(SystemError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa throws(SystemError) in
                try systemCall(call) { Glibc.bind(fd, sa, length) }
            }
        }
    }

    /// A TCP socket listening on `endpoint` (port 0 picks a free port).
    static func listening(on endpoint: IPEndpoint) throws(SystemError) -> Socket {
        guard let (address, length) = endpoint.socketAddress() else { throw SystemError(call: "inet_pton \(endpoint.host)", code: EINVAL) }
        let socket = Socket(adopting: try systemCall("socket") { Glibc.socket(Int32(address.ss_family), Int32(SOCK_STREAM.rawValue), 0) })
        var on: Int32 = 1
        setsockopt(socket.fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        try socket.bind(to: address, length: length, call: "bind \(endpoint)")
        try systemCall("listen \(endpoint)") { listen(socket.fd, 64) }
        return socket
    }

    /// Starts a TCP connection to `endpoint`, from `source` (a local address, any port) if given;
    /// it completes when the socket becomes writable (then `pendingError` says whether it worked).
    static func connecting(to endpoint: IPEndpoint, from source: IPEndpoint? = nil) throws(SystemError) -> Socket {
        guard let (address, length) = endpoint.socketAddress() else { throw SystemError(call: "inet_pton \(endpoint.host)", code: EINVAL) }
        let socket = Socket(adopting: try systemCall("socket") { Glibc.socket(Int32(address.ss_family), Int32(SOCK_STREAM.rawValue), 0) })
        socket.setNoDelay()
        if let source, let (local, localLength) = source.socketAddress(), local.ss_family == address.ss_family {
            try socket.bind(to: local, length: localLength, call: "bind \(source)")
        }
        let result = withUnsafePointer(to: address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket.fd, $0, length) }
        }
        if result == -1 && errno != EINPROGRESS && errno != EINTR { throw SystemError(call: "connect \(endpoint)", code: errno) }
        return socket
    }

    /// A UDP socket bound to `endpoint` (port 0 picks a free one): how voice travels over IP.
    static func datagram(boundTo endpoint: IPEndpoint) throws(SystemError) -> Socket {
        guard let (address, length) = endpoint.socketAddress() else { throw SystemError(call: "inet_pton \(endpoint.host)", code: EINVAL) }
        let socket = Socket(adopting: try systemCall("socket") { Glibc.socket(Int32(address.ss_family), Int32(SOCK_DGRAM.rawValue), 0) })
        try socket.bind(to: address, length: length, call: "bind udp \(endpoint)")
        return socket
    }

    /// Sends one datagram; false if the kernel refused it now (full buffer, no route): voice
    /// simply loses that packet.
    @discardableResult
    func send(datagram bytes: [UInt8], to endpoint: IPEndpoint) -> Bool {
        guard let (address, length) = endpoint.socketAddress() else { return false }
        let sent = withUnsafePointer(to: address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bytes.withUnsafeBytes { Glibc.sendto(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT), sa, length) }
            }
        }
        return sent == bytes.count
    }

    /// Reads one waiting datagram into `buffer`; nil when none is waiting.
    func receive(datagramInto buffer: UnsafeMutableRawBufferPointer) -> (count: Int, from: IPEndpoint)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let count = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.recvfrom(fd, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT), $0, &length)
            }
        }
        guard count >= 0, let from = IPEndpoint(storage) else { return nil }
        return (count, from)
    }

    /// Accepts one waiting connection, or nil when none is waiting.
    func accept() throws(SystemError) -> (Socket, IPEndpoint)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let client = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(fd, $0, &length) }
        }
        if client == -1 {
            if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED { return nil }
            throw SystemError(call: "accept", code: errno)
        }
        let socket = Socket(adopting: client)
        socket.setNoDelay()
        guard let endpoint = IPEndpoint(storage) else { return nil }
        return (socket, endpoint)
    }

    /// The address this socket is bound to.
    var localEndpoint: IPEndpoint? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return result == 0 ? IPEndpoint(storage) : nil
    }

    /// SO_ERROR: 0 once a non-blocking connect has succeeded.
    var pendingError: Int32 {
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length)
        return code
    }

    /// Small text frames must not wait for Nagle's algorithm.
    private func setNoDelay() {
        var on: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }
}
