/// One message on a transfer stream (docs/PROTOCOL.md §15.1), between a `u32` length prefix and
/// the next. The sender sends OFFER, DATA, HOLE and FILE_END; the receiver ACCEPT and COMPLETE;
/// either side ABORT.
public enum TransferMessage: Equatable, Sendable {
    /// The transfer's id and what it holds; always the first message the sender sends.
    case offer(TransferID, TransferManifest)
    /// The next bytes of the current file.
    case data(ArraySlice<UInt8>)
    /// The next `length` bytes of the current file are zeros (a hole in a sparse file).
    case hole(length: UInt64)
    /// The file at `fileIndex` is over; `hash` is its whole content's (the stream's ``ContentHashAlgorithm``).
    case fileEnd(fileIndex: Int, hash: [UInt8])
    /// The receiver takes the transfer, and wants its data from `position` on.
    case accept(TransferPosition)
    /// Every file arrived whole, was verified and is in place.
    case complete
    /// The transfer ends without completing; `reason` says why in words for a person.
    case abort(TransferAbort, reason: String)

    public var type: TransferMessageType {
        switch self {
        case .offer: .offer
        case .data: .data
        case .hole: .hole
        case .fileEnd: .fileEnd
        case .accept: .accept
        case .complete: .complete
        case .abort: .abort
        }
    }
}

public enum TransferMessageType: UInt8, Sendable, CustomStringConvertible {
    case offer = 0x01
    case data = 0x02
    case hole = 0x03
    case fileEnd = 0x04
    case accept = 0x10
    case complete = 0x11
    case abort = 0x20

    public var description: String {
        switch self {
        case .offer: "OFFER"
        case .data: "DATA"
        case .hole: "HOLE"
        case .fileEnd: "FILE_END"
        case .accept: "ACCEPT"
        case .complete: "COMPLETE"
        case .abort: "ABORT"
        }
    }
}

/// How a transfer ended without completing (ABORT's code).
public enum TransferAbort: UInt8, Sendable, Codable {
    /// A person cancelled it, at either end.
    case cancelled = 1
    /// The receiver's person declined the offer.
    case declined = 2
    /// It cannot go on: the reason says why (a file changed, a hash mismatch, no space, …).
    case failed = 3
}

/// Why bytes are not a valid transfer message. For the log and for ABORT's reason: they quote
/// no name and no content.
public enum TransferMessageError: Error, Equatable, Sendable, CustomStringConvertible {
    case emptyMessage
    case messageTooLarge(bytes: Int)
    case unknownType(UInt8)
    case tooShort(TransferMessageType, bytes: Int)
    case trailingBytes(TransferMessageType, count: Int)
    case manifest(TransferManifestError)
    case emptyData
    case dataTooLarge(bytes: Int)
    case zeroHole
    case unknownAbortCode(UInt8)
    case reasonTooLong(bytes: Int)
    case reasonNotUTF8

    public var description: String {
        switch self {
        case .emptyMessage: "an empty message"
        case .messageTooLarge(let bytes): "a message of \(bytes) bytes (at most \(TransferWire.maxMessageBytes))"
        case .unknownType(let type): "a message of unknown type 0x\(String(type, radix: 16))"
        case .tooShort(let type, let bytes): "\(type) of \(bytes) bytes, too short"
        case .trailingBytes(let type, let count): "\(count) bytes after the end of \(type)"
        case .manifest(let error): "an offer with \(error)"
        case .emptyData: "DATA without bytes"
        case .dataTooLarge(let bytes): "DATA of \(bytes) bytes (at most \(TransferWire.maxDataBytes))"
        case .zeroHole: "HOLE of 0 bytes"
        case .unknownAbortCode(let code): "ABORT with unknown code \(code)"
        case .reasonTooLong(let bytes): "ABORT with a reason of \(bytes) bytes (at most \(TransferWire.maxReasonBytes))"
        case .reasonNotUTF8: "ABORT with a reason that is not UTF-8 text"
        }
    }
}

// MARK: Encoding

extension TransferMessage {
    static let holeBytes = 1 + 8
    static let fileEndBytes = 1 + 4 + TransferWire.hashBytes
    static let acceptBytes = 1 + 4 + 8
    static let completeBytes = 1
    static let abortFixedBytes = 1 + 1
    static let offerFixedBytes = 1 + 16 + 4
    static let entryFixedBytes = 1 + 2 + 8
    /// The length prefix and type byte in front of a DATA payload.
    public static let dataHeaderBytes = 4 + 1

    /// The message with its `u32` length prefix, as it goes on the stream.
    public func encoded() -> [UInt8] {
        var body: [UInt8] = [type.rawValue]
        switch self {
        case .offer(let id, let manifest):
            body.append(contentsOf: id.bytes)
            body.appendBigEndian(UInt32(manifest.entries.count))
            for entry in manifest.entries {
                let path = entry.path.utf8
                body.append(entry.kind.rawValue)
                body.appendBigEndian(UInt16(path.count))
                body.append(contentsOf: path)
                body.appendBigEndian(entry.size)
            }
        case .data(let payload):
            body.append(contentsOf: payload)
        case .hole(let length):
            body.appendBigEndian(length)
        case .fileEnd(let fileIndex, let hash):
            body.appendBigEndian(UInt32(fileIndex))
            body.append(contentsOf: hash)
        case .accept(let position):
            body.appendBigEndian(UInt32(position.fileIndex))
            body.appendBigEndian(position.offset)
        case .complete:
            break
        case .abort(let code, let reason):
            body.append(code.rawValue)
            body.append(contentsOf: Self.truncatedReason(reason).utf8)
        }
        return Wire.lengthPrefixed(body)
    }

    /// Writes the header of a DATA message of `payloadBytes` in front of its payload:
    /// `header` has ``dataHeaderBytes`` bytes (the bulk path builds DATA in place).
    public static func writeDataHeader(payloadBytes: Int, into header: UnsafeMutableRawBufferPointer) {
        let length = UInt32(1 + payloadBytes)
        header[0] = UInt8(truncatingIfNeeded: length >> 24)
        header[1] = UInt8(truncatingIfNeeded: length >> 16)
        header[2] = UInt8(truncatingIfNeeded: length >> 8)
        header[3] = UInt8(truncatingIfNeeded: length)
        header[4] = TransferMessageType.data.rawValue
    }

    /// `reason` cut to ``TransferWire/maxReasonBytes`` at a character boundary, NULs dropped.
    public static func truncatedReason(_ reason: String) -> String {
        var result = ""
        var bytes = 0
        for character in reason where character != "\0" {
            bytes += character.utf8.count
            guard bytes <= TransferWire.maxReasonBytes else { break }
            result.append(character)
        }
        return result
    }
}

// MARK: Decoding

extension TransferMessage {
    /// Decodes one message (type byte first, no length prefix). Checks run in the order
    /// docs/PROTOCOL.md §15.1 lists them. A DATA payload is a slice of `body`.
    public init(body: ArraySlice<UInt8>) throws(TransferMessageError) {
        guard let typeByte = body.first else { throw .emptyMessage }
        guard let type = TransferMessageType(rawValue: typeByte) else { throw .unknownType(typeByte) }
        var reader = ByteReader(body.dropFirst())
        func requireExactly(_ bytes: Int) throws(TransferMessageError) {
            guard body.count >= bytes else { throw .tooShort(type, bytes: body.count) }
            guard body.count == bytes else { throw .trailingBytes(type, count: body.count - bytes) }
        }
        switch type {
        case .offer:
            guard body.count >= Self.offerFixedBytes else { throw .tooShort(type, bytes: body.count) }
            let id = TransferID(value: reader.readID())
            self = .offer(id, try Self.decodeManifest(&reader, bodyBytes: body.count))
        case .data:
            let payload = body.dropFirst()
            guard !payload.isEmpty else { throw .emptyData }
            guard payload.count <= TransferWire.maxDataBytes else { throw .dataTooLarge(bytes: payload.count) }
            self = .data(payload)
        case .hole:
            try requireExactly(Self.holeBytes)
            let length = reader.readUInt64()
            guard length > 0 else { throw .zeroHole }
            self = .hole(length: length)
        case .fileEnd:
            try requireExactly(Self.fileEndBytes)
            let index = Int(reader.readUInt32())
            self = .fileEnd(fileIndex: index, hash: Array(reader.read(bytes: TransferWire.hashBytes)))
        case .accept:
            try requireExactly(Self.acceptBytes)
            let index = Int(reader.readUInt32())
            self = .accept(TransferPosition(fileIndex: index, offset: reader.readUInt64()))
        case .complete:
            try requireExactly(Self.completeBytes)
            self = .complete
        case .abort:
            guard body.count >= Self.abortFixedBytes else { throw .tooShort(type, bytes: body.count) }
            let codeByte = reader.readUInt8()
            guard let code = TransferAbort(rawValue: codeByte) else { throw .unknownAbortCode(codeByte) }
            let text = reader.readRest()
            guard text.count <= TransferWire.maxReasonBytes else { throw .reasonTooLong(bytes: text.count) }
            guard let reason = String(validating: text, as: UTF8.self), !reason.unicodeScalars.contains("\0") else {
                throw .reasonNotUTF8
            }
            self = .abort(code, reason: reason)
        }
    }

    private static func decodeManifest(_ reader: inout ByteReader, bodyBytes: Int) throws(TransferMessageError) -> TransferManifest {
        let count = Int(reader.readUInt32())
        guard count > 0 else { throw .manifest(.empty) }
        guard count <= TransferWire.maxEntries else { throw .manifest(.tooManyEntries(count)) }
        var entries: [TransferManifest.Entry] = []
        entries.reserveCapacity(count)
        for index in 0..<count {
            guard reader.remaining >= entryFixedBytes else { throw .tooShort(.offer, bytes: bodyBytes) }
            let kindByte = reader.readUInt8()
            guard let kind = TransferManifest.Kind(rawValue: kindByte) else { throw .manifest(.unknownKind(index: index, kindByte)) }
            let pathBytes = Int(reader.readUInt16())
            guard reader.remaining >= pathBytes + 8 else { throw .tooShort(.offer, bytes: bodyBytes) }
            let path: TransferPath
            do {
                path = try TransferPath(utf8: reader.read(bytes: pathBytes))
            } catch {
                throw .manifest(.invalidPath(index: index, error))
            }
            entries.append(TransferManifest.Entry(kind: kind, path: path, size: reader.readUInt64()))
        }
        guard reader.remaining == 0 else { throw .trailingBytes(.offer, count: reader.remaining) }
        do {
            return try TransferManifest(entries: entries)
        } catch {
            throw .manifest(error)
        }
    }
}

/// Turns the bytes of a transfer stream into messages, as ``FrameDecoder`` does for the link:
/// feed each read to ``append(_:)`` (or read straight into it with ``append(readingAtMost:_:)``),
/// then call ``next()`` until it returns nil. A length over ``TransferWire/maxMessageBytes`` is
/// refused as soon as its four bytes are in. Errors are final.
public struct TransferMessageDecoder: Sendable {
    private var buffer: [UInt8] = []
    private var readIndex = 0
    private var writeIndex = 0
    private var failure: TransferMessageError?

    public init() {}

    /// Bytes received and not yet decoded.
    public var bufferedByteCount: Int { writeIndex - readIndex }

    public mutating func append(_ bytes: some Collection<UInt8>) {
        append(readingAtMost: bytes.count) { destination in
            _ = destination.initialize(from: bytes)
            return bytes.count
        }
    }

    /// Lets `read` put up to `count` bytes straight into the buffer; it returns how many it put
    /// there (0 or less: none). Returns what `read` returned.
    @discardableResult
    public mutating func append(readingAtMost count: Int, _ read: (UnsafeMutableBufferPointer<UInt8>) -> Int) -> Int {
        makeRoom(for: count)
        let start = writeIndex
        let result = buffer.withUnsafeMutableBufferPointer { read(UnsafeMutableBufferPointer(rebasing: $0[start..<(start + count)])) }
        if result > 0 { writeIndex += min(result, count) }
        return result
    }

    private mutating func makeRoom(for count: Int) {
        if readIndex == writeIndex {
            readIndex = 0
            writeIndex = 0
        } else if readIndex > 0 && buffer.count - writeIndex < count {
            // Moves only what is still undecoded (at most one message and one read).
            buffer.withUnsafeMutableBufferPointer { pointer in
                let base = pointer.baseAddress!
                (base).update(from: base + readIndex, count: writeIndex - readIndex)
            }
            writeIndex -= readIndex
            readIndex = 0
        }
        if buffer.count - writeIndex < count {
            buffer.append(contentsOf: repeatElement(0, count: writeIndex + count - buffer.count))
        }
    }

    /// The next message, or nil when more bytes are needed. A DATA payload is a slice of the
    /// decoder's buffer, valid until the next append.
    public mutating func next() throws(TransferMessageError) -> TransferMessage? {
        if let failure { throw failure }
        do throws(TransferMessageError) {
            guard bufferedByteCount >= Wire.lengthPrefixBytes else { return nil }
            var length = 0
            for byte in buffer[readIndex..<(readIndex + Wire.lengthPrefixBytes)] { length = length << 8 | Int(byte) }
            guard length > 0 else { throw .emptyMessage }
            guard length <= TransferWire.maxMessageBytes else { throw .messageTooLarge(bytes: length) }
            guard bufferedByteCount - Wire.lengthPrefixBytes >= length else { return nil }
            let start = readIndex + Wire.lengthPrefixBytes
            readIndex = start + length
            return try TransferMessage(body: buffer[start..<readIndex])
        } catch {
            failure = error
            throw error
        }
    }
}
