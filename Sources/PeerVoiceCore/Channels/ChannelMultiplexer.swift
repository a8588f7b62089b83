/// How much a receiver buffers per stream and how many streams a link carries.
public struct ChannelLimits: Sendable, Equatable {
    /// The credit a receiver grants per stream: at most this many bytes of a stream wait in the
    /// receiving service for its app, however fast the sender writes.
    public var streamWindowBytes: Int
    /// Credit given back to the sender in steps of at least this many bytes (fewer WINDOW frames).
    public var windowUpdateBytes: Int
    /// How far a stream's window may grow, doubling, while the window and not the app is what
    /// holds the sender back (see ``ChannelMultiplexer/delivered(_:bytes:nowUs:roundTripUs:)``).
    /// Linux's TCP send buffer's default largest size, so the stream is not the smaller window
    /// on the link.
    public var maxStreamWindowBytes: Int
    /// Streams open at once on one link, counting both sides' (more are refused).
    public var maxStreams: Int

    public init(streamWindowBytes: Int = 256 * 1024, windowUpdateBytes: Int = 64 * 1024,
                maxStreamWindowBytes: Int = 4 << 20, maxStreams: Int = 256) {
        precondition(streamWindowBytes >= ChannelWire.maxMessageBytes && streamWindowBytes <= Int(ChannelWire.maxWindowBytes),
                     "a window holds at least one whole message")
        precondition(windowUpdateBytes > 0 && windowUpdateBytes <= streamWindowBytes)
        precondition(maxStreamWindowBytes >= streamWindowBytes && maxStreamWindowBytes <= Int(ChannelWire.maxWindowBytes))
        self.streamWindowBytes = streamWindowBytes
        self.windowUpdateBytes = windowUpdateBytes
        self.maxStreamWindowBytes = maxStreamWindowBytes
        self.maxStreams = maxStreams
    }
}

/// What a received channel frame means for the receiver's side of the stream.
public enum ChannelEvent: Equatable, Sendable {
    /// The peer opens a stream: ask the app that registered `channel`, then ``ChannelMultiplexer/accept(_:)``
    /// or ``ChannelMultiplexer/refuse(_:reason:)``.
    case openRequested(StreamID, ChannelName, StreamMode)
    /// Our OPEN was accepted: the stream runs.
    case accepted(StreamID)
    /// Our OPEN was refused: the stream is gone.
    case refused(StreamID, RefuseReason)
    /// Bytes for the app; call ``ChannelMultiplexer/delivered(_:bytes:)`` once it has taken them.
    /// `endOfMessage`: the last fragment of a message (messages mode).
    case data(StreamID, [UInt8], endOfMessage: Bool)
    /// One datagram for the app (delivered or dropped: no credit to give back).
    case datagram(StreamID, [UInt8])
    /// The peer gave credit: reading from the app may go on.
    case creditAvailable(StreamID)
    /// The peer sends nothing more (clean end of file, after every byte it sent).
    case endOfStream(StreamID)
    /// The stream ended abruptly; it is gone.
    case reset(StreamID, ResetReason)
    /// The peer's FEEDBACK about this link (for the sender's rate control).
    case feedback(receivedBytes: UInt64, delayUs: UInt32)
}

/// A channel frame that a correct peer never sends: the link ends with a protocol error.
public enum ChannelProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// CHANNEL_OPEN with a stream id of the receiver's parity, or not above the peer's last one.
    case invalidOpen(StreamID)
    /// A frame for a stream that was never opened.
    case unknownStream(ChannelFrameType, StreamID)
    /// A frame the stream's state or mode does not allow (e.g. DATA before ACCEPT, DATA on a
    /// datagram stream, DATA after CLOSE).
    case unexpected(ChannelFrameType, StreamID)
    /// DATA beyond the credit the receiver gave.
    case windowExceeded(StreamID, bytes: Int, window: Int)
    /// WINDOW that takes the credit over 2^31 - 1.
    case windowOverflow(StreamID)
    /// A message longer than 65536 bytes, or a CLOSE inside a message.
    case brokenMessage(StreamID)
    /// An end-of-message flag on a byte stream.
    case endOfMessageOnByteStream(StreamID)

    public var description: String {
        switch self {
        case .invalidOpen(let id): "CHANNEL_OPEN for \(id), which the sender may not open now"
        case .unknownStream(let type, let id): "\(type) for \(id), which was never opened"
        case .unexpected(let type, let id): "\(type) for \(id) where its state or mode does not allow it"
        case .windowExceeded(let id, let bytes, let window): "\(bytes) bytes of CHANNEL_DATA on \(id) with a window of \(window)"
        case .windowOverflow(let id): "CHANNEL_WINDOW takes \(id)'s window over 2^31 - 1"
        case .brokenMessage(let id): "a message on \(id) over 65536 bytes, or cut by CHANNEL_CLOSE"
        case .endOfMessageOnByteStream(let id): "an end-of-message flag on byte \(id)"
        }
    }
}

/// The streams of one link (docs/PROTOCOL.md §13): stream numbers, each stream's phase and both
/// directions' credit. Pure bookkeeping: the caller moves the bytes, sends the frames this
/// returns, and reports what its app took (``delivered(_:bytes:)``), which gives credit back.
///
/// Flow control is per stream and per direction: a receiver grants ``ChannelLimits/streamWindowBytes``
/// when the stream opens and gives back what its app has taken, in steps of at least
/// ``ChannelLimits/windowUpdateBytes`` (doubling the window, up to
/// ``ChannelLimits/maxStreamWindowBytes``, while the window is what holds the sender back); a
/// sender never sends more than it was granted. So a receiver holds at most one window per
/// stream however fast the sender is, and a slow reader stops only its own stream.
public struct ChannelMultiplexer: Sendable {
    enum Phase: Equatable, Sendable {
        /// We sent OPEN; no answer yet.
        case opening
        /// The peer sent OPEN; our app has not answered.
        case offered
        case open
    }

    struct Stream: Sendable {
        let mode: StreamMode
        let channel: ChannelName
        var phase: Phase
        /// Bytes we may still send.
        var sendCredit: Int
        /// Bytes the peer may still send.
        var receiveWindow: Int
        /// The window granted in all (what the peer's credit returns to as the app reads).
        var grantedWindow: Int
        /// Since when the app has taken `takenSinceWindowStart` bytes (the window's growth rule).
        var windowStartUs: UInt64 = 0
        var takenSinceWindowStart = 0
        /// Received, not yet taken by the app.
        var buffered = 0
        /// Taken by the app, not yet granted back.
        var unadvertised = 0
        /// Bytes of the message being received (messages mode).
        var messageBytes = 0
        /// Bytes of the message being sent (messages mode).
        var outgoingMessageBytes = 0
        var sentClose = false
        var receivedClose = false
        /// Where the peer takes this stream's datagrams over UDP (0: only on the link).
        var peerDatagramPort: UInt16 = 0
    }

    public let limits: ChannelLimits
    /// A window taken in fewer round trips than this grows (a credit round trip is one, and a
    /// loss repair on the way adds about one more).
    public static let windowGrowthRoundTrips: Int64 = 4
    private let opensOddStreams: Bool
    private var streams: [StreamID: Stream] = [:]
    private var lastLocalOpen: UInt32
    private var lastRemoteOpen: UInt32
    /// DATA payload bytes received on the link, all streams (FEEDBACK's counter).
    public private(set) var receivedDataBytes: UInt64 = 0
    /// DATA payload bytes sent on the link, all streams.
    public private(set) var sentDataBytes: UInt64 = 0
    /// The smallest delay sample since the last FEEDBACK, if DATA arrived since.
    private var pendingDelayUs: UInt32?

    /// `isInitiator`: we dialled the link (our streams are odd, the peer's even).
    public init(isInitiator: Bool, limits: ChannelLimits = ChannelLimits()) {
        self.limits = limits
        opensOddStreams = isInitiator
        lastLocalOpen = 0
        lastRemoteOpen = 0
    }

    /// Streams in any phase.
    public var streamCount: Int { streams.count }
    public var streamIDs: [StreamID] { Array(streams.keys) }
    public func contains(_ id: StreamID) -> Bool { streams[id] != nil }
    public func mode(of id: StreamID) -> StreamMode? { streams[id]?.mode }
    public func channel(of id: StreamID) -> ChannelName? { streams[id]?.channel }
    /// Bytes received for the app and not yet taken (the service's buffer for it).
    public func bufferedBytes(of id: StreamID) -> Int { streams[id]?.buffered ?? 0 }
    /// Whether the peer has ended its direction (and every byte of it was received).
    public func peerClosed(_ id: StreamID) -> Bool { streams[id]?.receivedClose ?? false }

    /// How many bytes may be sent on `id` now: 0 unless it is an open reliable stream we have not
    /// closed.
    public func sendCredit(_ id: StreamID) -> Int {
        guard let stream = streams[id], stream.phase == .open, stream.mode.isReliable, !stream.sentClose else { return 0 }
        return stream.sendCredit
    }

    /// How many more bytes the message being sent on `id` may have (messages mode; for other
    /// modes, the largest DATA).
    public func messageRoom(_ id: StreamID) -> Int {
        guard let stream = streams[id], stream.mode == .messages else { return ChannelWire.maxDataBytes }
        return ChannelWire.maxMessageBytes - stream.outgoingMessageBytes
    }

    /// The UDP port the peer announced for `id`'s datagrams (0: the link only).
    public func peerDatagramPort(of id: StreamID) -> UInt16 { streams[id]?.peerDatagramPort ?? 0 }

    /// Whether `id` is an open datagram stream.
    public func carriesDatagrams(_ id: StreamID) -> Bool {
        guard let stream = streams[id] else { return false }
        return stream.phase == .open && stream.mode == .datagrams
    }

    // MARK: What this side does

    /// Opens a stream to the peer's `channel`; nil when the link has as many streams as it takes.
    /// `datagramPort`: for datagrams, the UDP port this side takes them on (0: the link only).
    public mutating func open(_ channel: ChannelName, mode: StreamMode, datagramPort: UInt16 = 0) -> (StreamID, ChannelFrame)? {
        guard streams.count < limits.maxStreams, lastLocalOpen <= UInt32.max - 2 else { return nil }
        let id = StreamID(rawValue: lastLocalOpen == 0 ? (opensOddStreams ? 1 : 2) : lastLocalOpen + 2)
        lastLocalOpen = id.rawValue
        let window = mode.isReliable ? limits.streamWindowBytes : 0
        streams[id] = Stream(mode: mode, channel: channel, phase: .opening, sendCredit: 0, receiveWindow: window, grantedWindow: window)
        return (id, .open(id, mode: mode, window: UInt32(window), datagramPort: mode == .datagrams ? datagramPort : 0, channel: channel))
    }

    /// Our app took the peer's stream; nil if it is gone (the peer reset it meanwhile).
    /// `datagramPort` as in ``open(_:mode:datagramPort:)``.
    public mutating func accept(_ id: StreamID, datagramPort: UInt16 = 0) -> ChannelFrame? {
        guard var stream = streams[id], stream.phase == .offered else { return nil }
        stream.phase = .open
        stream.receiveWindow = stream.mode.isReliable ? limits.streamWindowBytes : 0
        stream.grantedWindow = stream.receiveWindow
        streams[id] = stream
        return .accept(id, window: UInt32(stream.receiveWindow), datagramPort: stream.mode == .datagrams ? datagramPort : 0)
    }

    /// Our side will not take the peer's stream.
    public mutating func refuse(_ id: StreamID, reason: RefuseReason) -> ChannelFrame? {
        guard streams[id]?.phase == .offered else { return nil }
        streams[id] = nil
        return .refuse(id, reason)
    }

    /// DATA with `payload` (at most ``sendCredit(_:)`` and ``messageRoom(_:)`` bytes), taking its
    /// credit. `endOfMessage` on a messages stream's last fragment.
    public mutating func data(_ id: StreamID, payload: [UInt8], endOfMessage: Bool, sentAtUs: UInt32) -> ChannelFrame {
        let header = dataHeader(id, payloadBytes: payload.count, endOfMessage: endOfMessage, sentAtUs: sentAtUs)
        return .data(id, endOfMessage: header[5] & ChannelWire.endOfMessageFlag != 0, sentAtUs: sentAtUs, payload: payload)
    }

    /// ``data(_:payload:endOfMessage:sentAtUs:)`` for a payload the caller already holds where the
    /// body goes (the bulk path, which reads an app's bytes straight behind the header): the
    /// DATA body's first ``ChannelWire/dataHeaderBytes`` bytes, the credit taken.
    public mutating func dataHeader(_ id: StreamID, payloadBytes: Int, endOfMessage: Bool, sentAtUs: UInt32) -> [UInt8] {
        precondition(payloadBytes > 0 && payloadBytes <= sendCredit(id) && payloadBytes <= messageRoom(id),
                     "DATA beyond the stream's credit or its message")
        var stream = streams[id]!
        let isMessages = stream.mode == .messages
        stream.sendCredit -= payloadBytes
        if isMessages { stream.outgoingMessageBytes = endOfMessage ? 0 : stream.outgoingMessageBytes + payloadBytes }
        streams[id] = stream
        sentDataBytes &+= UInt64(payloadBytes)
        var header = [ChannelFrameType.data.rawValue]
        header.appendBigEndian(id.rawValue)
        header.append(isMessages && endOfMessage ? ChannelWire.endOfMessageFlag : 0)
        header.appendBigEndian(sentAtUs)
        return header
    }

    /// One datagram on an open datagram stream; nil if the stream is not one.
    public func datagram(_ id: StreamID, payload: [UInt8]) -> ChannelFrame? {
        guard carriesDatagrams(id), !payload.isEmpty, payload.count <= ChannelWire.maxDatagramBytes else { return nil }
        return .datagram(id, payload: payload)
    }

    /// Our app sends nothing more (end of file) on a reliable stream; nil (nothing to send) if
    /// the stream cannot close now, which includes a message half sent: finish it first.
    public mutating func close(_ id: StreamID) -> ChannelFrame? {
        guard var stream = streams[id], stream.phase == .open, stream.mode.isReliable, !stream.sentClose,
              stream.outgoingMessageBytes == 0 else { return nil }
        stream.sentClose = true
        streams[id] = stream
        finishIfDone(id)
        return .close(id)
    }

    /// Ends a stream abruptly in both directions (any phase); nil if it is gone already.
    public mutating func reset(_ id: StreamID, reason: ResetReason) -> ChannelFrame? {
        guard let stream = streams.removeValue(forKey: id) else { return nil }
        // An offered stream our app never answered is refused, not reset: the opener waits for one of the two.
        return stream.phase == .offered ? .refuse(id, .appDidNotAnswer) : .reset(id, reason)
    }

    /// The app took `bytes` of what ``ChannelEvent/data(_:_:endOfMessage:)`` handed over; returns
    /// the WINDOW to send when enough credit has come free.
    ///
    /// With `nowUs` and the link's `roundTripUs`: when the app took a whole window in less than
    /// ``windowGrowthRoundTrips`` round trips, the window (a round trip's credit, plus the stalls
    /// of TCP's loss repairs) is what limits the stream, not the app: the WINDOW doubles it, up
    /// to ``ChannelLimits/maxStreamWindowBytes`` (QUIC implementations tune theirs this way).
    /// `roundTripUs` is asked only then, once a window (the daemon's costs a system call).
    public mutating func delivered(_ id: StreamID, bytes: Int, nowUs: UInt64 = 0,
                                   roundTripUs: @autoclosure () -> Int64? = nil) -> ChannelFrame? {
        guard var stream = streams[id] else { return nil }
        precondition(bytes >= 0 && bytes <= stream.buffered, "delivered more than was received")
        stream.buffered -= bytes
        stream.unadvertised += bytes
        var update: ChannelFrame?
        if stream.unadvertised >= limits.windowUpdateBytes && !stream.receivedClose {
            var increment = stream.unadvertised
            stream.takenSinceWindowStart += stream.unadvertised
            if stream.takenSinceWindowStart >= stream.grantedWindow, let roundTripUs = roundTripUs() {
                if nowUs &- stream.windowStartUs < UInt64(Self.windowGrowthRoundTrips * max(0, roundTripUs)),
                   stream.grantedWindow < limits.maxStreamWindowBytes {
                    let growth = min(stream.grantedWindow, limits.maxStreamWindowBytes - stream.grantedWindow)
                    stream.grantedWindow += growth
                    increment += growth
                }
                stream.windowStartUs = nowUs
                stream.takenSinceWindowStart = 0
            }
            update = .window(id, increment: UInt32(increment))
            stream.receiveWindow += increment
            stream.unadvertised = 0
        }
        streams[id] = stream
        finishIfDone(id)
        return update
    }

    /// FEEDBACK for the DATA received since the last one, or nil if none came.
    public mutating func takeFeedback() -> ChannelFrame? {
        guard let delay = pendingDelayUs else { return nil }
        pendingDelayUs = nil
        return .feedback(receivedBytes: receivedDataBytes, delayUs: delay)
    }

    // MARK: What the peer sends

    /// Applies a frame from the peer. Returns what it means for this side (nil: nothing, e.g. a
    /// late frame for a stream this side has already reset) and, when the link must answer on
    /// its own (a stream over the limit), the frame to send.
    ///
    /// - Parameter nowUs: this side's clock in microseconds (modulo 2^32), for delay samples.
    /// - Throws: ``ChannelProtocolError`` when a correct peer could not have sent the frame.
    public mutating func receive(_ frame: ChannelFrame, nowUs: UInt32) throws(ChannelProtocolError)
        -> (event: ChannelEvent?, reply: ChannelFrame?) {
        switch frame {
        case .open(let id, let mode, let window, let datagramPort, let channel):
            guard isRemoteParity(id), id.rawValue > lastRemoteOpen else { throw .invalidOpen(id) }
            lastRemoteOpen = id.rawValue
            guard streams.count < limits.maxStreams else { return (nil, .refuse(id, .tooManyStreams)) }
            var stream = Stream(mode: mode, channel: channel, phase: .offered,
                                sendCredit: mode.isReliable ? Int(window) : 0, receiveWindow: 0, grantedWindow: 0)
            stream.peerDatagramPort = mode == .datagrams ? datagramPort : 0
            streams[id] = stream
            return (.openRequested(id, channel, mode), nil)

        case .accept(let id, let window, let datagramPort):
            guard var stream = try existing(id, frame) else { return (nil, nil) }
            guard stream.phase == .opening else { throw .unexpected(.accept, id) }
            stream.phase = .open
            stream.sendCredit = stream.mode.isReliable ? Int(window) : 0
            stream.peerDatagramPort = stream.mode == .datagrams ? datagramPort : 0
            streams[id] = stream
            return (.accepted(id), nil)

        case .refuse(let id, let reason):
            guard let stream = try existing(id, frame) else { return (nil, nil) }
            guard stream.phase == .opening else { throw .unexpected(.refuse, id) }
            streams[id] = nil
            return (.refused(id, reason), nil)

        case .data(let id, let endOfMessage, let sentAtUs, let payload):
            guard try receiveData(id, endOfMessage: endOfMessage, sentAtUs: sentAtUs, payloadBytes: payload.count, nowUs: nowUs) else {
                return (nil, nil)
            }
            return (.data(id, payload, endOfMessage: endOfMessage), nil)

        case .window(let id, let increment):
            guard var stream = try existing(id, frame) else { return (nil, nil) }
            guard stream.phase == .open, stream.mode.isReliable else { throw .unexpected(.window, id) }
            guard stream.sendCredit + Int(increment) <= Int(ChannelWire.maxWindowBytes) else { throw .windowOverflow(id) }
            guard !stream.sentClose else { return (nil, nil) }
            stream.sendCredit += Int(increment)
            streams[id] = stream
            return (.creditAvailable(id), nil)

        case .close(let id):
            guard var stream = try existing(id, frame) else { return (nil, nil) }
            guard stream.phase == .open, stream.mode.isReliable, !stream.receivedClose else { throw .unexpected(.close, id) }
            guard stream.messageBytes == 0 else { throw .brokenMessage(id) }
            stream.receivedClose = true
            streams[id] = stream
            finishIfDone(id)
            return (.endOfStream(id), nil)

        case .reset(let id, let reason):
            guard try existing(id, frame) != nil else { return (nil, nil) }
            streams[id] = nil
            return (.reset(id, reason), nil)

        case .datagram(let id, let payload):
            guard let stream = try existing(id, frame) else { return (nil, nil) }
            guard stream.phase == .open, stream.mode == .datagrams else { throw .unexpected(.datagram, id) }
            return (.datagram(id, payload), nil)

        case .feedback(let receivedBytes, let delayUs):
            return (.feedback(receivedBytes: receivedBytes, delayUs: delayUs), nil)
        }
    }

    /// What ``receive(_:nowUs:)`` does with a DATA, for a caller that holds the payload where it
    /// arrived (the bulk path): true when the payload is for the app (then ``delivered(_:bytes:)``
    /// once it took it), false for a late DATA of a stream this side has ended (drop it).
    public mutating func receiveData(_ id: StreamID, endOfMessage: Bool, sentAtUs: UInt32, payloadBytes: Int,
                                     nowUs: UInt32) throws(ChannelProtocolError) -> Bool {
        receivedDataBytes &+= UInt64(payloadBytes)
        let sample = nowUs &- sentAtUs
        // Samples compare as distances from the first one, so a wrap of the clocks does not matter much.
        pendingDelayUs = pendingDelayUs.map { Int32(bitPattern: sample &- $0) < 0 ? sample : $0 } ?? sample
        guard var stream = try existing(id, .data) else { return false }
        guard stream.phase == .open, stream.mode.isReliable, !stream.receivedClose else { throw .unexpected(.data, id) }
        guard payloadBytes <= stream.receiveWindow else {
            throw .windowExceeded(id, bytes: payloadBytes, window: stream.receiveWindow)
        }
        switch stream.mode {
        case .messages:
            stream.messageBytes += payloadBytes
            guard stream.messageBytes <= ChannelWire.maxMessageBytes else { throw .brokenMessage(id) }
            if endOfMessage { stream.messageBytes = 0 }
        default:
            guard !endOfMessage else { throw .endOfMessageOnByteStream(id) }
        }
        stream.receiveWindow -= payloadBytes
        stream.buffered += payloadBytes
        streams[id] = stream
        return true
    }

    // MARK: Helpers

    private func isRemoteParity(_ id: StreamID) -> Bool { (id.rawValue & 1 == 1) != opensOddStreams }

    /// The stream a frame names; nil for a stream that existed and is gone (a late frame, to be
    /// ignored); throws for one that was never opened.
    private func existing(_ id: StreamID, _ frame: ChannelFrame) throws(ChannelProtocolError) -> Stream? {
        try existing(id, frame.type)
    }

    private func existing(_ id: StreamID, _ type: ChannelFrameType) throws(ChannelProtocolError) -> Stream? {
        if let stream = streams[id] { return stream }
        let opened = isRemoteParity(id) ? id.rawValue <= lastRemoteOpen : id.rawValue <= lastLocalOpen
        guard opened else { throw .unknownStream(type, id) }
        return nil
    }

    /// A reliable stream both sides closed, whose bytes the app has all taken, is forgotten.
    private mutating func finishIfDone(_ id: StreamID) {
        guard let stream = streams[id], stream.sentClose, stream.receivedClose, stream.buffered == 0 else { return }
        streams[id] = nil
    }
}
