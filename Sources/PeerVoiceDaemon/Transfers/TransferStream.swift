import GIO
import Glibc
import PeerVoiceCore
import Synchronization

/// What a transfer stream's thread reports to the main loop (`Transfers.streamEvent`).
enum TransferStreamEvent: Sendable {
    /// Incoming: the sender's OFFER.
    case offered(TransferID, TransferManifest)
    /// Outgoing: the receiver's ACCEPT.
    case accepted(TransferPosition)
    /// Incoming: a top-level item is in place under `savedAs`.
    case placed(name: String, savedAs: String)
    /// Incoming: every item is in place; outgoing: the receiver's COMPLETE.
    case completed
    /// The other side's ABORT.
    case aborted(TransferAbort, reason: String)
    /// It cannot go on, found here (the peer broke the protocol, a hash did not match, a file
    /// changed, the disk failed): words for a person.
    case failed(String)
    /// The stream is over and its thread ends; the last event of every stream. `clean`: the
    /// other side closed its direction (it read everything we sent), rather than a reset, a
    /// timeout or the service stopping.
    case ended(reason: String, clean: Bool)
}

/// What the main loop asks of a transfer stream's thread.
enum TransferStreamCommand: Sendable {
    /// Incoming: take the transfer (the person accepted), resuming from what is on disk.
    case accept(IncomingPlan)
    /// Send this message (after whatever is being sent).
    case send(TransferMessage)
    /// End the stream cleanly once everything queued is sent.
    case close
    /// End it now, without a word (the service stops).
    case abandon
}

/// Where and how an incoming transfer is saved, for its stream's thread.
struct IncomingPlan: Sendable {
    let folder: String
    let idHex: String
    let id: TransferID
    let store: TransferStore
}

/// The main loop's handle on one stream's thread: its mailbox and how far it has come.
final class TransferStreamHandle: Sendable {
    /// Tells streams apart, so that a late event from one that was replaced is recognised.
    let serial: Int
    let mailbox = StreamMailbox<TransferStreamCommand>()
    /// Bytes of the transfer before where the data stands now (sent, or written here).
    let transferred: Atomic<UInt64>

    /// `transferred` starts where the transfer stood (a resumed one is not shown at 0).
    init(serial: Int, transferred: UInt64) {
        self.serial = serial
        self.transferred = Atomic(transferred)
    }

    func post(_ command: TransferStreamCommand) { mailbox.post(command) }
}

/// One end of a transfer stream as its thread runs it: the sender or the receiver.
protocol TransferStreamSide: AnyObject {
    /// A final word was said or heard (complete, aborted, failed): the stream only closes now.
    var isDone: Bool { get }
    /// How long the thread may sleep with nothing to do (nil: until something happens).
    var idleTimeout: Duration? { get }
    /// The person accepted (incoming).
    func accept(_ plan: IncomingPlan)
    /// Hands each complete message the decoder holds to the session.
    func drainMessages()
    /// Queues what is due next, if anything (the sender's data); called while not closing.
    func produce()
    /// Why the stream must end now without a word (the receiver waited too long for an OFFER).
    func expired() -> String?
}

/// How a stream's thread ended: words for the log, and whether the other side closed its
/// direction cleanly (it read everything we sent).
struct TransferStreamEnd: Sendable {
    let reason: String
    let clean: Bool
}

/// A stream's end as its thread sees it: the in-memory pipe to the main loop (`StreamPipe`),
/// polled together with the mailbox, with the messages decoded as they come and what waits to be
/// sent.
final class TransferConnection {
    private let end: StreamPipe.End
    private let mailbox: StreamMailbox<TransferStreamCommand>
    var decoder = TransferMessageDecoder()
    /// Messages waiting to be sent, in order, and how much of the first went.
    private var output: [[UInt8]] = []
    private var outputOffset = 0
    /// Largest read at once.
    private static let readBytes = 256 * 1024
    /// How long a closing stream waits for the other side to close its direction too.
    private static let closeTimeout: Duration = .seconds(5)

    /// Closes `end` when it goes (a reset if bytes were left unread, as a socket would).
    init(end: StreamPipe.End, mailbox: StreamMailbox<TransferStreamCommand>) {
        self.end = end
        self.mailbox = mailbox
    }

    deinit { end.close() }

    var hasOutput: Bool { !output.isEmpty }

    func queue(_ bytes: [UInt8]) { output.append(bytes) }

    func queue(_ message: TransferMessage) { output.append(message.encoded()) }

    /// Runs the stream until it ends. Each turn: the main loop's commands, what waits is
    /// written, one read is decoded and handed to `side`, `side` queues what is due, then the
    /// thread sleeps in `poll` on the pipe and the mailbox. `.close` ends our direction once
    /// everything queued went and waits (at most 5 s) for the other side to end its own.
    func run(_ side: TransferStreamSide) -> TransferStreamEnd {
        var closing = false
        var closeDeadline: ContinuousClock.Instant?
        while true {
            for command in mailbox.take() {
                switch command {
                case .close: closing = true
                case .abandon: return TransferStreamEnd(reason: "the service stopped", clean: false)
                case .send(let message): queue(message)
                case .accept(let plan): side.accept(plan)
                }
            }
            if case .failed(let reason) = flush() { return TransferStreamEnd(reason: reason, clean: false) }
            let read = fill()
            side.drainMessages()
            switch read {
            case .progress, .more: break
            case .endOfStream:
                return TransferStreamEnd(reason: side.isDone ? "the other side closed the stream" : "the other side closed the stream early",
                                         clean: true)
            case .failed(let reason): return TransferStreamEnd(reason: reason, clean: false)
            }
            if let reason = side.expired() { return TransferStreamEnd(reason: reason, clean: false) }
            if closing {
                if !hasOutput {
                    if let closeDeadline {
                        if ContinuousClock.now >= closeDeadline { return TransferStreamEnd(reason: "closed", clean: false) }
                    } else {
                        shutdownWrite()
                        closeDeadline = .now + Self.closeTimeout
                    }
                }
                wait(timeout: .milliseconds(200))
                continue
            }
            side.produce()
            let produced = hasOutput
            // What was just queued goes now: the pipe wakes a writer only once it found it full.
            if case .failed(let reason) = flush() { return TransferStreamEnd(reason: reason, clean: false) }
            // A full read may have left more in the pipe, and a pipe that took everything may
            // take more: go on before sleeping.
            if read != .more && !(produced && !hasOutput) { wait(timeout: side.idleTimeout) }
        }
    }

    enum Outcome: Equatable {
        case progress
        /// A read filled the buffer: more may be waiting.
        case more
        /// The peer's end closed cleanly (end of file).
        case endOfStream
        /// Reset, or failed: words for the log and the transfer.
        case failed(String)
    }

    /// Writes what waits, as far as the pipe takes it now.
    private func flush() -> Outcome {
        while let first = output.first {
            let result = first.withUnsafeBytes { end.write(UnsafeRawBufferPointer(rebasing: $0[outputOffset...])) }
            switch result {
            case .wrote(let count):
                outputOffset += count
                if outputOffset == first.count {
                    output.removeFirst()
                    outputOffset = 0
                }
            case .wouldBlock:
                return .progress
            case .failed(let code):
                return .failed(Self.describe(code))
            }
        }
        return .progress
    }

    /// One read of what the pipe holds into the decoder (one at a time, so the decoder's buffer
    /// stays at about one read and one message).
    private func fill() -> Outcome {
        var result = StreamReadResult.wouldBlock
        decoder.append(readingAtMost: Self.readBytes) { buffer in
            result = end.read(into: UnsafeMutableRawBufferPointer(buffer))
            if case .bytes(let count) = result { return count }
            return 0
        }
        switch result {
        case .bytes(let count): return count == Self.readBytes ? .more : .progress
        case .wouldBlock: return .progress
        case .endOfFile: return .endOfStream
        case .failed(let code): return .failed(Self.describe(code))
        case .tooLarge: return .failed("a message where bytes were expected")  // only message and datagram ends say so
        }
    }

    /// Sleeps until the pipe can be read (or written, while output waits: only after a write
    /// found it full) or a command comes, at most `timeout` (nil: no limit).
    private func wait(timeout: Duration?) {
        var fds = [pollfd(fd: end.inbound.readable.fd, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: mailbox.wakeFD, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: end.outbound.writable.fd, events: Int16(POLLIN), revents: 0)]
        let milliseconds = timeout.map { Int32(clamping: $0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000) } ?? -1
        while poll(&fds, hasOutput ? 3 : 2, milliseconds) < 0 && errno == EINTR {}
    }

    /// Ends our direction (the other side reads end of file after what was sent).
    private func shutdownWrite() { end.shutdownWrite() }

    static func describe(_ code: Int32) -> String {
        code == ECONNRESET || code == EPIPE ? "the stream ended abruptly (the link dropped)" : String(cString: strerror(code))
    }
}
