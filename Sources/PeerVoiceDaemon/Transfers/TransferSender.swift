import GIO
import Glibc
import PeerVoiceCore

/// The sender's thread for one stream (`peervoice-send`): sends the OFFER, then from where the
/// receiver's ACCEPT says, each file's bytes (holes of a sparse file as HOLE), hashing them, and
/// after each file its FILE_END; reads the receiver's answers throughout. Before a file's first
/// byte and after its last it compares the file with what it was when offered: a file that
/// changed fails the transfer rather than arrive half old, half new.
final class TransferSender: TransferStreamSide {
    /// What to send, for the thread.
    struct Plan: Sendable {
        let id: TransferID
        let manifest: TransferManifest
        /// Each file's source, in the order of `manifest.files`.
        let sources: [String]
        /// Each file's identity when offered, same order.
        let identities: [TransferRecord.FileIdentity]
        /// Whether each file's source may be a symbolic link (a file the person named).
        let followLinks: [Bool]
        let hashing: any ContentHashing
    }

    /// Bytes of one DATA message.
    static let chunkBytes = 256 * 1024

    private let plan: Plan
    private let connection: TransferConnection
    private let handle: TransferStreamHandle
    private let report: @Sendable (TransferStreamEvent) -> Void
    private var session: OutgoingTransferSession
    private var file: OpenFile?
    private var fileIndex = -1
    private var hasher: (any ContentHasher)?
    /// Nothing more to send but answers (an ABORT, COMPLETE, or an error here).
    private(set) var isDone = false
    let idleTimeout: Duration? = nil

    init(end: StreamPipe.End, plan: Plan, handle: TransferStreamHandle, report: @escaping @Sendable (TransferStreamEvent) -> Void) {
        self.plan = plan
        connection = TransferConnection(end: end, mailbox: handle.mailbox)
        self.handle = handle
        self.report = report
        session = OutgoingTransferSession(id: plan.id, manifest: plan.manifest)
    }

    func run() {
        connection.queue(session.offer)
        let end = connection.run(self)
        report(.ended(reason: end.reason, clean: end.clean))
    }

    func accept(_ plan: IncomingPlan) {}

    func expired() -> String? { nil }

    /// Hands each complete message from the receiver to the session.
    func drainMessages() {
        while true {
            let step: OutgoingTransferSession.Step
            do {
                guard let message = try connection.decoder.next() else { return }
                step = try session.received(message)
            } catch {
                return fail("the receiver broke the transfer protocol: \(error)")
            }
            switch step {
            case .accepted(let position):
                handle.transferred.store(plan.manifest.bytes(before: position), ordering: .relaxed)
                report(.accepted(position))
            case .completed:
                isDone = true
                report(.completed)
            case .aborted(let code, let reason):
                isDone = true
                report(.aborted(code, reason: reason))
            }
        }
    }

    private func fail(_ reason: String) {
        guard !isDone else { return }
        isDone = true
        report(.failed(reason))
    }

    /// Queues the next message of data (a chunk, a hole, or a file's end) once the last went.
    func produce() {
        guard !isDone, !connection.hasOutput else { return }
        do throws(SystemError) {
            switch session.next {
            case .wait:
                return
            case .send(let index, let offset, let maxBytes):
                guard try open(index, at: offset) else { return }
                try sendChunk(index: index, offset: offset, maxBytes: maxBytes)
            case .endFile(let index):
                guard try open(index, at: plan.manifest.files[index].size) else { return }
                guard try unchanged(index, when: "while it was sent") else { return }
                connection.queue(.fileEnd(fileIndex: index, hash: hasher!.finish()))
                session.endedFile()
                file = nil
                hasher = nil
            }
        } catch {
            fail("cannot read \(plan.sources[fileIndex]): \(error)")
        }
    }

    /// Opens the file at `index` for sending from `offset` (hashing what lies before it, for a
    /// resumed file); false when it changed since it was offered (the transfer failed).
    private func open(_ index: Int, at offset: UInt64) throws(SystemError) -> Bool {
        guard index != fileIndex else { return true }
        fileIndex = index
        file = try OpenFile.source(plan.sources[index], followLinks: plan.followLinks[index])
        guard try unchanged(index, when: "since it was offered") else { return false }
        var hasher = plan.hashing.makeHasher()
        guard try file!.hash(upTo: offset, into: &hasher) else { return unchangedFailure(index, when: "since it was offered") }
        self.hasher = hasher
        return true
    }

    /// Whether the open file at `index` is still what was offered; if not, the transfer fails.
    private func unchanged(_ index: Int, when: String) throws(SystemError) -> Bool {
        try file!.identity == plan.identities[index] ? true : unchangedFailure(index, when: when)
    }

    private func unchangedFailure(_ index: Int, when: String) -> Bool {
        fail("\(plan.sources[index]) changed \(when): send it again once it is as it should be")
        return false
    }

    private func sendChunk(index: Int, offset: UInt64, maxBytes: UInt64) throws(SystemError) {
        let data = file!.nextData(from: offset)
        let holeEnd = min(data ?? .max, offset + maxBytes)
        if holeEnd > offset {
            // A hole: nothing to read, zeros for the hash, a few bytes on the wire.
            let length = holeEnd - offset
            hasher!.updateWithZeros(length)
            connection.queue(.hole(length: length))
            advance(by: length)
            return
        }
        let payload = Int(min(maxBytes, UInt64(Self.chunkBytes)))
        var failure: SystemError?
        var read = 0
        let message = [UInt8](unsafeUninitializedCapacity: TransferMessage.dataHeaderBytes + payload) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            do throws(SystemError) {
                read = try file!.read(into: UnsafeMutableRawBufferPointer(rebasing: raw[TransferMessage.dataHeaderBytes...]), at: offset)
            } catch {
                failure = error
            }
            TransferMessage.writeDataHeader(payloadBytes: read, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<TransferMessage.dataHeaderBytes]))
            initialized = TransferMessage.dataHeaderBytes + read
        }
        if let failure { throw failure }
        // Shorter than announced: it shrank since it was offered.
        guard read > 0 else {
            _ = unchangedFailure(index, when: "while it was sent")
            return
        }
        message.withUnsafeBytes { hasher!.update(UnsafeRawBufferPointer(rebasing: $0[TransferMessage.dataHeaderBytes...])) }
        connection.queue(message)
        advance(by: UInt64(read))
    }

    private func advance(by count: UInt64) {
        session.sent(count)
        handle.transferred.store(plan.manifest.bytes(before: session.position), ordering: .relaxed)
    }
}
