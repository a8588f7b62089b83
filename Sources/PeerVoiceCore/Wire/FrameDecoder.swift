/// Turns the bytes a peer sends on a stream (TCP or RFCOMM) into frames.
///
/// Feed whatever each read returned to ``append(_:)``, then call ``next()`` until it returns nil.
/// The decoder first expects the peer's ``Preamble``, then length-prefixed frames. A bad length is
/// reported as soon as its 4 bytes are in, before the body arrives, so a hostile peer cannot make
/// us hold more than one read plus one frame (at most ``Wire/maxFrameBodyBytes``), provided
/// ``next()`` is drained after each ``append(_:)``.
///
/// Once it has thrown, the decoder keeps throwing the same error: the stream cannot be trusted
/// any more, and the link should end (with GOODBYE ``GoodbyeReason/protocolError``).
public struct FrameDecoder: Sendable {
    private enum State: Sendable {
        case awaitingPreamble
        case awaitingFrames
        case failed(WireError)
    }

    private var state: State
    /// Received bytes; those before `readIndex` are consumed and dropped now and then.
    private var buffer: [UInt8] = []
    private var readIndex = 0

    /// Consumed bytes are dropped only once there are this many, so that many small frames in
    /// one read are not each paid for with a copy of what follows them.
    private static let compactionThreshold = 64 * 1024

    /// Largest body accepted; a link lowers it while handshake messages (at most 1 KiB) are due.
    public var maxBodyBytes = Wire.maxFrameBodyBytes

    /// A decoder for the start of a stream: it expects the peer's preamble before any frame.
    /// Pass false to decode a stream whose preamble was already checked.
    public init(expectingPreamble: Bool = true) {
        state = expectingPreamble ? .awaitingPreamble : .awaitingFrames
    }

    /// Bytes received and not yet decoded.
    public var bufferedByteCount: Int { buffer.count - readIndex }

    /// Adds bytes received from the peer.
    public mutating func append(_ bytes: some Sequence<UInt8>) {
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            readIndex = 0
        } else if readIndex >= FrameDecoder.compactionThreshold && readIndex * 2 >= buffer.count {
            // Moves at most as many bytes as were consumed since the last compaction: linear overall.
            buffer.removeSubrange(0..<readIndex)
            readIndex = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next frame, or nil when more bytes are needed.
    ///
    /// - Throws: a ``WireError`` if the preamble, the framing or a frame body is invalid.
    public mutating func next() throws(WireError) -> Frame? {
        guard let range = try nextBodyRange() else { return nil }
        do throws(WireError) {
            return try Frame(body: buffer[range])
        } catch {
            state = .failed(error)
            throw error
        }
    }

    /// The next frame body (type byte and payload, still undecoded), or nil when more bytes are needed.
    ///
    /// This is the framing layer alone: use it instead of ``next()`` when bodies need work before
    /// `Frame(body:)`: handshake messages, and sealed records that open to a frame body.
    ///
    /// - Throws: a ``WireError`` if the preamble or a length prefix is invalid.
    public mutating func nextBody() throws(WireError) -> [UInt8]? {
        guard let range = try nextBodyRange() else { return nil }
        return Array(buffer[range])
    }

    /// ``nextBody()`` without the copy: a slice of the decoder's own buffer, valid until the next
    /// ``append(_:)`` (the bulk path opens a sealed record straight from it).
    public mutating func nextBodySlice() throws(WireError) -> ArraySlice<UInt8>? {
        guard let range = try nextBodyRange() else { return nil }
        return buffer[range]
    }

    /// Finds the next complete body, consumes it and returns where it lies in `buffer`.
    private mutating func nextBodyRange() throws(WireError) -> Range<Int>? {
        do throws(WireError) {
            switch state {
            case .failed(let error):
                throw error
            case .awaitingPreamble:
                let available = buffer[readIndex...].prefix(Preamble.byteCount)
                guard try Preamble.checkPrefix(available) else { return nil }
                readIndex += Preamble.byteCount
                state = .awaitingFrames
            case .awaitingFrames:
                break
            }

            guard bufferedByteCount >= Wire.lengthPrefixBytes else { return nil }
            var length = 0
            for byte in buffer[readIndex..<readIndex + Wire.lengthPrefixBytes] {
                length = length << 8 | Int(byte)
            }
            guard length != 0 else { throw WireError.emptyFrame }
            guard length <= maxBodyBytes else {
                throw WireError.frameTooLarge(bodyBytes: UInt32(truncatingIfNeeded: length))
            }
            guard bufferedByteCount - Wire.lengthPrefixBytes >= length else { return nil }
            let bodyStart = readIndex + Wire.lengthPrefixBytes
            readIndex = bodyStart + length
            return bodyStart..<readIndex
        } catch {
            state = .failed(error)
            throw error
        }
    }
}
