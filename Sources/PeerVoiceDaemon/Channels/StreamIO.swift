import GIO
import Glibc
import PeerVoiceCore

/// What one read of a stream's end gave.
enum StreamReadResult: Equatable {
    /// `count` bytes (a whole message or datagram in those modes) are in the buffer.
    case bytes(Int)
    case wouldBlock
    /// The other end shut its direction down (or closed): a clean end.
    case endOfFile
    /// A message or datagram longer than the buffer: `count` bytes in all.
    case tooLarge(Int)
    /// An errno: ECONNRESET for an abrupt end.
    case failed(Int32)
}

/// What one write to a stream's end did.
enum StreamWriteResult: Equatable {
    case wrote(Int)
    case wouldBlock
    /// The other end closed, reset, or failed (an errno).
    case failed(Int32)
}

/// The service's end of one channel stream, as `LinkChannels` drives it from the main loop:
/// non-blocking reads and writes, readiness to wait for, and the two ways a stream ends. An app on
/// the bus holds the other end of a socket (`StreamSocket`); a component of the service itself
/// holds the other end of an in-memory pipe (`StreamPipe.End`), which spares the bulk path the
/// kernel's loopback TCP.
protocol StreamIO: AnyObject {
    var mode: StreamMode { get }
    /// One read: up to `buffer.count` bytes of the byte stream, or one message or datagram.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult
    /// Writes bytes (stream), or one message or datagram, without blocking.
    func write(_ bytes: UnsafeRawBufferPointer) -> StreamWriteResult
    /// Calls `action` on the main loop while a read may give something (bytes, an end), until it
    /// returns false or the source is cancelled.
    func watchReadable(_ action: @escaping () -> Bool) -> EventSource
    /// The same for a write taking bytes (or failing).
    func watchWritable(_ action: @escaping () -> Bool) -> EventSource
    /// How many of `count` bytes just written the peer gets credit for now: all (a socket: what
    /// the kernel took, the app takes it from there), or none (a pipe: credit follows what the
    /// owner took, `watchTaken`).
    func creditable(afterWriting count: Int) -> Int
    /// Calls `action` on the main loop with the bytes the owner took, each time it took some,
    /// until it closes its end (a pipe); nil where credit follows writes (a socket).
    func watchTaken(_ action: @escaping (Int) -> Void) -> EventSource?
    /// This direction is over: the other end reads end of file after everything written.
    func shutdownWrite()
    /// Ends the stream abruptly: the other end's next read or write fails (ECONNRESET) where the
    /// kind of end can say so (a Unix socket only closes).
    func abort()
    /// Closes cleanly.
    func close()
}

/// Which kind of end a stream's owner takes: a socket descriptor (an app on the bus gets it
/// through D-Bus) or an in-memory pipe (a component of the service, on a thread of its own).
enum StreamEndKind {
    case socket
    case pipe

    /// A new stream's two connected ends: the service keeps `service`, the owner gets `owner`.
    /// Pipes carry byte streams only (`mode` .stream); their ring towards the owner holds
    /// `windowBytes`, the most the peer may have sent that the owner has not taken.
    func makeEnds(mode: StreamMode, windowBytes: Int) throws(SystemError) -> (service: StreamIO, owner: StreamOwnerEnd) {
        switch self {
        case .socket:
            let (service, app) = try StreamSocket.pair(for: mode)
            return (service, .socket(app))
        case .pipe:
            precondition(mode == .stream, "in-memory pipes carry byte streams only")
            let (service, owner) = try StreamPipe.ends(toOwner: windowBytes)
            return (service, .pipe(owner))
        }
    }
}

/// The owner's end of a stream.
enum StreamOwnerEnd {
    /// A socket descriptor: the owner closes it.
    case socket(Int32)
    case pipe(StreamPipe.End)

    /// For an owner that took sockets (`StreamEndKind.socket`).
    var descriptor: Int32 {
        guard case .socket(let fd) = self else { preconditionFailure("a pipe where a socket was asked for") }
        return fd
    }

    /// For an owner that took pipes (`StreamEndKind.pipe`).
    var pipe: StreamPipe.End {
        guard case .pipe(let end) = self else { preconditionFailure("a socket where a pipe was asked for") }
        return end
    }

    /// Gives it up unused (a refused stream, an owner that went away).
    func close() {
        switch self {
        case .socket(let fd): _ = Glibc.close(fd)
        case .pipe(let end): end.close()
        }
    }
}
