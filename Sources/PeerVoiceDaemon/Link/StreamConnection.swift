import GIO
import Glibc
import PeerVoiceCore

/// A byte stream over a non-blocking file descriptor (a TCP socket, or the RFCOMM socket BlueZ
/// hands over), driven by main-loop fd watches. Writes that the kernel cannot take at once wait
/// in order in `pendingOutput`.
final class StreamConnection {
    /// Beyond this much unsent output the peer is not reading: the connection is closed rather
    /// than growing without bound (unacknowledged messages stay in the outbox).
    static let maxPendingOutputBytes = 16 << 20

    var onBytes: (ArraySlice<UInt8>) -> Void = { _ in }
    /// Called once, when the stream ends or fails; `reason` is for the log.
    var onClose: (String) -> Void = { _ in }
    /// Called whenever output that had to wait has all been taken by the kernel.
    var onDrained: () -> Void = {}

    private let socket: Socket
    private var readWatch: EventSource?
    private var writeWatch: EventSource?
    private var pendingOutput: [UInt8] = []
    private var pendingOffset = 0
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    private(set) var isClosed = false
    /// True while earlier writes wait for the kernel to take them.
    var hasPendingOutput: Bool { pendingOffset < pendingOutput.count }
    /// This end's address, for a TCP connection.
    var localEndpoint: IPEndpoint? { isClosed ? nil : socket.localEndpoint }
    /// Bytes that wait for the kernel to take them.
    var pendingOutputBytes: Int { pendingOutput.count - pendingOffset }

    /// Bytes the kernel holds in the socket's send queue and has not sent: for TCP those not yet
    /// handed to the network (SIOCOUTQNSD); for Bluetooth RFCOMM, the send buffer's size less
    /// the room TIOCOUTQ reports. nil when the kernel does not say.
    func kernelQueuedBytes(bluetooth: Bool) -> Int? {
        guard !isClosed else { return nil }
        var value: Int32 = 0
        if bluetooth {
            var size: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(socket.fd, SOL_SOCKET, SO_SNDBUF, &size, &length) == 0,
                  ioctl(socket.fd, UInt(TIOCOUTQ), &value) == 0 else { return nil }
            return max(0, Int(size) - Int(value))
        }
        let unsentQueue: UInt = 0x894B  // SIOCOUTQNSD (linux/sockios.h)
        guard ioctl(socket.fd, unsentQueue, &value) == 0 else { return nil }
        return Int(value)
    }

    /// What the kernel's TCP knows of the path (TCP_INFO); nil for other sockets.
    func tcpReport() -> TransportReport? {
        guard !isClosed else { return nil }
        // struct tcp_info (linux/tcp.h), u32 fields at these bytes; tcpi_min_rtt came with
        // Linux 4.6, and Glibc's copy of the struct stops before it.
        let smoothedOffset = 68, minimumOffset = 148
        return withUnsafeTemporaryAllocation(byteCount: 232, alignment: 8) { info -> TransportReport? in
            var length = socklen_t(info.count)
            guard getsockopt(socket.fd, Int32(IPPROTO_TCP), TCP_INFO, info.baseAddress, &length) == 0,
                  Int(length) >= minimumOffset + 4 else { return nil }
            func field(_ offset: Int) -> UInt32 { info.load(fromByteOffset: offset, as: UInt32.self) }
            guard field(minimumOffset) > 0, field(minimumOffset) != UInt32.max else { return nil }
            return TransportReport(smoothedRoundTripUs: Int64(field(smoothedOffset)), minimumRoundTripUs: Int64(field(minimumOffset)))
        }
    }

    init(socket: Socket) {
        self.socket = socket
    }

    /// Begins delivering `onBytes`.
    func start() {
        readWatch = FDWatch.add(fd: socket.fd, events: .readable) { [weak self] _ in
            self?.readAvailable()
            return true
        }
    }

    func send(_ bytes: [UInt8]) {
        send(bytes[...])
    }

    /// Writes what the kernel takes now and keeps (copies) only the rest, so a caller may send
    /// from a buffer it reuses.
    func send(_ bytes: ArraySlice<UInt8>) {
        guard !isClosed else { return }
        if pendingOutput.isEmpty {
            let written = write(bytes)
            guard !isClosed else { return }
            if written == bytes.count { return }
            pendingOutput = Array(bytes[(bytes.startIndex + written)...])
            pendingOffset = 0
            writeWatch = FDWatch.add(fd: socket.fd, events: .writable) { [weak self] _ in
                self?.flushPendingOutput() ?? false
            }
        } else {
            pendingOutput += bytes
            if pendingOutput.count - pendingOffset > Self.maxPendingOutputBytes {
                close(reason: "the peer is not reading (over \(Self.maxPendingOutputBytes >> 20) MiB unsent)")
            }
        }
    }

    /// Stops both directions and reports `reason` through `onClose`.
    func close(reason: String) {
        guard !isClosed else { return }
        isClosed = true
        readWatch?.cancel()
        writeWatch?.cancel()
        socket.close()
        onClose(reason)
    }

    /// How long a goodbye may take to leave and the peer to close its side.
    static let linger: Duration = .seconds(2)
    private var lingerTimer: EventSource?

    /// Ends the stream after a goodbye, without reporting: to its owner it is closed at once. A
    /// socket closed with unread input sends RST, and a peer that gets RST may lose what it had
    /// not yet read, the goodbye included; so this object keeps itself alive (through its watches)
    /// until the waiting output is written, sends FIN, and drops what the peer still sends until
    /// it closes too or `linger` passes.
    func closeAfterFlushing() {
        guard !isClosed else { return }
        isClosed = true
        onBytes = { _ in }
        onClose = { _ in }
        onDrained = {}
        readWatch = nil
        writeWatch = nil
        lingerTimer = Timer.after(Self.linger) { [self] in endLinger() }
        flushThenShutdown()
    }

    private func flushThenShutdown() {
        let (written, failure) = writeNow(pendingOutput[pendingOffset...])
        pendingOffset += written
        if failure != nil { return endLinger() }
        if hasPendingOutput {
            writeWatch = FDWatch.add(fd: socket.fd, events: .writable) { [self] _ in
                flushThenShutdown()
                return false
            }
            return
        }
        writeWatch = nil
        guard shutdown(socket.fd, Int32(SHUT_WR)) == 0 else { return endLinger() }
        readWatch = FDWatch.add(fd: socket.fd, events: .readable) { [self] _ in
            let count = readBuffer.withUnsafeMutableBytes { Glibc.read(socket.fd, $0.baseAddress, $0.count) }
            if count > 0 || (count == -1 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) { return true }
            endLinger()
            return false
        }
    }

    private func endLinger() {
        readWatch = nil
        writeWatch = nil
        lingerTimer = nil
        socket.close()
    }

    /// Writes as much of `bytes` as the kernel takes now: how many, and the errno that stopped
    /// it (nil when all was taken or the kernel is full for now).
    private func writeNow(_ bytes: ArraySlice<UInt8>) -> (count: Int, failure: Int32?) {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            let result = bytes[offset...].withUnsafeBytes { Glibc.send(socket.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if result > 0 {
                offset += result
            } else if result == -1 && errno == EINTR {
                continue
            } else if result == -1 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                break
            } else {
                return (offset - bytes.startIndex, errno)
            }
        }
        return (offset - bytes.startIndex, nil)
    }

    /// `writeNow`, closing the connection when the kernel refuses.
    private func write(_ bytes: ArraySlice<UInt8>) -> Int {
        let (written, failure) = writeNow(bytes)
        if let failure { close(reason: "write failed: \(String(cString: strerror(failure)))") }
        return written
    }

    private func flushPendingOutput() -> Bool {
        pendingOffset += write(pendingOutput[pendingOffset...])
        guard !isClosed else { return false }
        if pendingOffset < pendingOutput.count { return true }
        pendingOutput.removeAll(keepingCapacity: false)
        pendingOffset = 0
        writeWatch = nil
        onDrained()
        return false
    }

    private func readAvailable() {
        // Bounded per wake-up so one busy peer cannot starve the bus and other peers.
        for _ in 0..<16 {
            let count = readBuffer.withUnsafeMutableBytes { Glibc.read(socket.fd, $0.baseAddress, $0.count) }
            if count > 0 {
                onBytes(readBuffer[0..<count])
                if isClosed { return }
            } else if count == 0 {
                close(reason: "the peer closed the connection")
                return
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return
            } else {
                close(reason: "read failed: \(String(cString: strerror(errno)))")
                return
            }
        }
    }
}
