/// The receiver's side of one transfer stream (docs/PROTOCOL.md §15.3), as a table of exchanges:
/// it checks every message the sender sends against the manifest and the position, hashes what
/// arrives, and says what to do with it. The driver owns the files and the socket.
///
/// An OFFER comes first; nothing of the data is taken before ``accept(from:hasher:)``; each file's
/// bytes must add up to exactly its announced size before its FILE_END, whose hash must be the
/// one of what arrived.
public struct IncomingTransferSession {
    public enum Step {
        /// The sender's OFFER: the driver decides (a new transfer waits for its person).
        case offered(TransferID, TransferManifest)
        /// `bytes` go to the file at `fileIndex`, at `offset`.
        case write(fileIndex: Int, offset: UInt64, bytes: ArraySlice<UInt8>)
        /// `length` zero bytes go to the file at `fileIndex` from `offset` (leave a hole).
        case skip(fileIndex: Int, offset: UInt64, length: UInt64)
        /// The file at `fileIndex` arrived whole and its hash is the sender's: make it durable.
        case fileVerified(fileIndex: Int)
        /// The sender ended the transfer.
        case aborted(TransferAbort, reason: String)
    }

    private enum Phase {
        case awaitingOffer
        case awaitingDecision
        case receiving
        case finished
    }

    private var phase = Phase.awaitingOffer
    public private(set) var manifest: TransferManifest?
    /// Where the next byte goes.
    public private(set) var position = TransferPosition.start
    private var hasher: (any ContentHasher)?
    private let hashing: any ContentHashing

    public init(hashing: any ContentHashing) {
        self.hashing = hashing
    }

    /// Every file has arrived and been verified.
    public var hasEverything: Bool {
        guard let manifest else { return false }
        return phase == .receiving && position.fileIndex == manifest.files.count
    }

    /// Takes the transfer from `position` (every file before it, and `position.offset` bytes of
    /// its file, are already held and durable); `hasher` has hashed those bytes of that file.
    /// Returns the ACCEPT to send.
    public mutating func accept(from position: TransferPosition, hasher: any ContentHasher) -> TransferMessage {
        precondition(phase == .awaitingDecision, "accept(from:) outside a decision")
        precondition(manifest!.contains(position), "accepting from \(position), outside the manifest")
        phase = .receiving
        self.position = position
        self.hasher = hasher
        return .accept(position)
    }

    /// No data is taken on this stream (declined, cancelled, finished before): only an ABORT
    /// from the sender may still come.
    public mutating func refuse() {
        phase = .finished
    }

    public mutating func received(_ message: TransferMessage) throws(TransferProtocolError) -> Step {
        switch (phase, message) {
        case (_, .abort(let code, let reason)):
            phase = .finished
            return .aborted(code, reason: reason)
        case (.awaitingOffer, .offer(let id, let offered)):
            manifest = offered
            phase = .awaitingDecision
            return .offered(id, offered)
        case (.awaitingOffer, _):
            throw .unexpected(message.type, "before OFFER")
        case (_, .offer):
            throw .unexpected(.offer, "a second time")
        case (_, .accept), (_, .complete):
            throw .unexpected(message.type, "from the sender")
        case (.awaitingDecision, _):
            throw .unexpected(message.type, "before ACCEPT")
        case (.finished, _):
            throw .unexpected(message.type, "after the transfer ended")
        case (.receiving, .data(let bytes)):
            let offset = try take(UInt64(bytes.count), as: .data)
            hasher!.update(bytes)
            return .write(fileIndex: position.fileIndex, offset: offset, bytes: bytes)
        case (.receiving, .hole(let length)):
            let offset = try take(length, as: .hole)
            hasher!.updateWithZeros(length)
            return .skip(fileIndex: position.fileIndex, offset: offset, length: length)
        case (.receiving, .fileEnd(let fileIndex, let hash)):
            let files = manifest!.files
            guard fileIndex == position.fileIndex, fileIndex < files.count else {
                throw .unexpected(.fileEnd, "for file \(fileIndex + 1) while file \(position.fileIndex + 1) was due")
            }
            guard position.offset == files[fileIndex].size else {
                throw .shortFile(fileIndex: fileIndex, announced: files[fileIndex].size, sent: position.offset)
            }
            let got = hasher!.finish()
            guard got == hash else { throw .hashMismatch(fileIndex: fileIndex, hashing.algorithm) }
            position = TransferPosition(fileIndex: fileIndex + 1, offset: 0)
            hasher = position.fileIndex < files.count ? hashing.makeHasher() : nil
            return .fileVerified(fileIndex: fileIndex)
        }
    }

    /// Advances over `count` bytes of the current file; the offset they start at.
    private mutating func take(_ count: UInt64, as type: TransferMessageType) throws(TransferProtocolError) -> UInt64 {
        let files = manifest!.files
        guard position.fileIndex < files.count else { throw .unexpected(type, "after the last file") }
        let size = files[position.fileIndex].size
        guard count <= size - position.offset else {
            throw .tooManyBytes(fileIndex: position.fileIndex, announced: size)
        }
        let offset = position.offset
        position.offset += count
        return offset
    }
}

/// The sender's side of one transfer stream: the OFFER, then, once the receiver has said where to
/// start, which bytes of which file go next and when each file ends.
public struct OutgoingTransferSession {
    public enum Step: Equatable {
        /// Send data from `position` (ACCEPT), or nothing more when the receiver has it all.
        case accepted(TransferPosition)
        /// The receiver has every file verified and in place.
        case completed
        case aborted(TransferAbort, reason: String)
    }

    /// What the sender does next.
    public enum Next: Equatable {
        /// Nothing before the receiver's answer (or after the end).
        case wait
        /// Up to `maxBytes` of the file at `fileIndex` from `offset`.
        case send(fileIndex: Int, offset: UInt64, maxBytes: UInt64)
        /// The file at `fileIndex` is all sent: FILE_END with its hash.
        case endFile(fileIndex: Int)
    }

    public let id: TransferID
    public let manifest: TransferManifest
    public private(set) var position = TransferPosition.start
    private var accepted = false
    private var allSent = false
    private var finished = false

    public init(id: TransferID, manifest: TransferManifest) {
        self.id = id
        self.manifest = manifest
    }

    /// The first message of every stream.
    public var offer: TransferMessage { .offer(id, manifest) }

    public var next: Next {
        guard accepted, !finished, !allSent else { return .wait }
        let files = manifest.files
        guard position.fileIndex < files.count else { return .wait }
        let left = files[position.fileIndex].size - position.offset
        return left > 0 ? .send(fileIndex: position.fileIndex, offset: position.offset, maxBytes: left) : .endFile(fileIndex: position.fileIndex)
    }

    /// `count` bytes (data or a hole) of the current file went out.
    public mutating func sent(_ count: UInt64) {
        guard case .send(_, _, let maxBytes) = next else { preconditionFailure("sent(_:) while nothing was due") }
        precondition(count > 0 && count <= maxBytes, "sent \(count) of at most \(maxBytes) bytes")
        position.offset += count
    }

    /// The current file's FILE_END went out.
    public mutating func endedFile() {
        guard case .endFile = next else { preconditionFailure("endedFile() while no file was over") }
        position = TransferPosition(fileIndex: position.fileIndex + 1, offset: 0)
        if position.fileIndex == manifest.files.count { allSent = true }
    }

    public mutating func received(_ message: TransferMessage) throws(TransferProtocolError) -> Step {
        guard !finished else { throw .unexpected(message.type, "after the transfer ended") }
        switch message {
        case .accept(let from):
            guard !accepted else { throw .unexpected(.accept, "a second time") }
            guard manifest.contains(from) else { throw .positionOutside(from) }
            accepted = true
            position = from
            if from.fileIndex == manifest.files.count { allSent = true }
            return .accepted(from)
        case .complete:
            // Either the answer to the OFFER (the receiver had it all before), or after the last FILE_END.
            guard !accepted || allSent else { throw .unexpected(.complete, "before the last file was sent") }
            finished = true
            return .completed
        case .abort(let code, let reason):
            finished = true
            return .aborted(code, reason: reason)
        case .offer, .data, .hole, .fileEnd:
            throw .unexpected(message.type, "from the receiver")
        }
    }
}

/// A peer broke the transfer protocol (or sent what does not match what it announced): the
/// stream ends with ABORT failed. Descriptions are for a person and quote no name or content.
public enum TransferProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    case unexpected(TransferMessageType, String)
    case tooManyBytes(fileIndex: Int, announced: UInt64)
    case shortFile(fileIndex: Int, announced: UInt64, sent: UInt64)
    /// The file's hash (made with the algorithm named) is not the sender's.
    case hashMismatch(fileIndex: Int, ContentHashAlgorithm)
    case positionOutside(TransferPosition)

    public var description: String {
        switch self {
        case .unexpected(let type, let when): "\(type) \(when)"
        case .tooManyBytes(let index, let announced): "more bytes for file \(index + 1) than the \(announced) it announced"
        case .shortFile(let index, let announced, let sent): "file \(index + 1) ended after \(sent) of the \(announced) bytes it announced"
        case .hashMismatch(let index, let algorithm): "file \(index + 1) arrived different from what was sent (its \(algorithm) hash does not match)"
        case .positionOutside(let position): "ACCEPT from \(position), outside the offer"
        }
    }
}
