/// A stream on a link: a number its opener picks (odd when the link's initiator opens it, even
/// for its responder), never reused on that link.
public struct StreamID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    public static func < (lhs: StreamID, rhs: StreamID) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { "stream \(rawValue)" }
}

/// How a stream carries an app's bytes, and the socket type its app gets.
public enum StreamMode: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// A reliable, ordered byte stream (`SOCK_STREAM`).
    case stream = 1
    /// Reliable, ordered messages of 1–65536 bytes whose boundaries are kept (`SOCK_SEQPACKET`).
    case messages = 2
    /// Unreliable, unordered datagrams of 1–1200 bytes, dropped rather than queued (`SOCK_DGRAM`).
    case datagrams = 3

    /// The word the bus API uses (option `mode`).
    public var description: String {
        switch self {
        case .stream: "stream"
        case .messages: "messages"
        case .datagrams: "datagrams"
        }
    }

    public init?(name: String) {
        guard let mode = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = mode
    }

    /// Whether DATA, WINDOW and CLOSE apply (datagrams have neither order nor flow control).
    public var isReliable: Bool { self != .datagrams }
}

/// Why a stream was not accepted (CHANNEL_REFUSE). Codes this version does not name are kept.
public struct RefuseReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// 1: no app on the receiving side has registered the channel.
    public static let notRegistered = RefuseReason(rawValue: 1)
    /// 2: the app's handler answered NewStream with an error.
    public static let appRefused = RefuseReason(rawValue: 2)
    /// 3: the app's handler did not answer NewStream in time, or could not be reached.
    public static let appDidNotAnswer = RefuseReason(rawValue: 3)
    /// 4: the receiver has as many streams on this link as it takes.
    public static let tooManyStreams = RefuseReason(rawValue: 4)

    public var description: String {
        switch self {
        case .notRegistered: "no app has registered the channel"
        case .appRefused: "the app refused the stream"
        case .appDidNotAnswer: "the app did not answer"
        case .tooManyStreams: "too many streams on the link"
        default: "reason \(rawValue)"
        }
    }
}

/// Why a stream ended abruptly (CHANNEL_RESET). Codes this version does not name are kept.
public struct ResetReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// 0: no reason given.
    public static let unspecified = ResetReason(rawValue: 0)
    /// 1: the app's end failed: its socket gave an error, or it closed its descriptor while
    /// bytes for it were still arriving.
    public static let appAborted = ResetReason(rawValue: 1)
    /// 2: the app wrote a message over 65536 bytes.
    public static let messageTooLarge = ResetReason(rawValue: 2)
    /// 3: the sending service is stopping.
    public static let serviceStopping = ResetReason(rawValue: 3)

    public var description: String {
        switch self {
        case .unspecified: "no reason given"
        case .appAborted: "the app's end failed"
        case .messageTooLarge: "a message over 65536 bytes"
        case .serviceStopping: "the service stopped"
        default: "reason \(rawValue)"
        }
    }
}

/// The first byte of a channel frame's body (docs/PROTOCOL.md §13).
public enum ChannelFrameType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case open = 0x30
    case accept = 0x31
    case refuse = 0x32
    case data = 0x33
    case window = 0x34
    case close = 0x35
    case reset = 0x36
    case datagram = 0x37
    case feedback = 0x38

    public var description: String {
        switch self {
        case .open: "CHANNEL_OPEN"
        case .accept: "CHANNEL_ACCEPT"
        case .refuse: "CHANNEL_REFUSE"
        case .data: "CHANNEL_DATA"
        case .window: "CHANNEL_WINDOW"
        case .close: "CHANNEL_CLOSE"
        case .reset: "CHANNEL_RESET"
        case .datagram: "CHANNEL_DATAGRAM"
        case .feedback: "CHANNEL_FEEDBACK"
        }
    }
}

/// One frame of the channel protocol, carried in a sealed link record (CHANNEL_DATAGRAM also in a
/// UDP datagram). Every value is valid by construction, so ``encodedBody()`` cannot fail.
public enum ChannelFrame: Equatable, Sendable {
    /// The sender opens `stream` to the app that registered `channel` on the receiving side,
    /// granting it `window` bytes of credit (0 for datagrams). `datagramPort`: for a datagrams
    /// stream, the UDP port the sender takes its datagrams on (0: on the link only).
    case open(StreamID, mode: StreamMode, window: UInt32, datagramPort: UInt16, channel: ChannelName)
    /// The receiver's app took the stream; the opener may send `window` bytes. `datagramPort` as
    /// in OPEN.
    case accept(StreamID, window: UInt32, datagramPort: UInt16)
    /// No stream: the opener's `OpenStream` fails with `Rejected`.
    case refuse(StreamID, RefuseReason)
    /// Bytes of a `stream` or `messages` stream. `endOfMessage` marks a message's last fragment
    /// (always false on a `stream` stream); `sentAtUs` is the sender's clock in microseconds
    /// (modulo 2^32) when it sealed the frame, for the receiver's delay reports.
    case data(StreamID, endOfMessage: Bool, sentAtUs: UInt32, payload: [UInt8])
    /// The receiver may send `increment` more bytes on the stream.
    case window(StreamID, increment: UInt32)
    /// The sender sends nothing more on the stream (end of file); the other direction goes on.
    case close(StreamID)
    /// The stream ends now in both directions, abruptly; bytes not yet delivered are lost.
    case reset(StreamID, ResetReason)
    /// One datagram of a `datagrams` stream.
    case datagram(StreamID, payload: [UInt8])
    /// Link-wide: the sender has received `receivedBytes` bytes of DATA payload on this link in
    /// all, and the smallest one-way delay sample since its last report was `delayUs` (its clock
    /// minus the DATA frames' `sentAtUs`, modulo 2^32: only changes in it mean anything).
    case feedback(receivedBytes: UInt64, delayUs: UInt32)

    public var type: ChannelFrameType {
        switch self {
        case .open: .open
        case .accept: .accept
        case .refuse: .refuse
        case .data: .data
        case .window: .window
        case .close: .close
        case .reset: .reset
        case .datagram: .datagram
        case .feedback: .feedback
        }
    }

    /// The stream the frame is about (nil for FEEDBACK, which is about the link).
    public var stream: StreamID? {
        switch self {
        case .open(let id, _, _, _, _), .accept(let id, _, _), .refuse(let id, _), .data(let id, _, _, _),
             .window(let id, _), .close(let id), .reset(let id, _), .datagram(let id, _):
            id
        case .feedback:
            nil
        }
    }
}

/// Sizes and limits of the channel frames (docs/PROTOCOL.md §13.9).
public enum ChannelWire {
    /// The protocol version that brings channels. A placeholder in this one place: the lead
    /// assigns the final number when the features of this wave are merged.
    public static let protocolVersion: UInt16 = 7
    /// The HELLO capability bit of a side that takes channel frames (docs/PROTOCOL.md §5.1); a
    /// placeholder like ``protocolVersion``. No channel frame is ever sent to a peer without it.
    public static let capability = Capabilities(rawValue: 1 << 8)

    /// Largest DATA payload: a whole message, or that much of a byte stream.
    public static let maxDataBytes = 65_536
    /// Largest message of a `messages` stream (sent in one or more DATA fragments).
    public static let maxMessageBytes = 65_536
    /// Largest datagram of a `datagrams` stream: sealed, with its length prefix, 1233 bytes of UDP
    /// payload, unfragmented on any path with the usual 1500-byte MTU.
    public static let maxDatagramBytes = 1_200
    /// Largest window a stream may have open at once (2^31 - 1, as in HTTP/2).
    public static let maxWindowBytes: UInt32 = 0x7FFF_FFFF

    static let openFixedBytes = 1 + 4 + 1 + 4 + 2 + 1
    static let acceptBytes = 1 + 4 + 4 + 2
    static let refuseBytes = 1 + 4 + 1
    static let dataFixedBytes = 1 + 4 + 1 + 4
    /// The bytes of a DATA body before its payload (type, stream, flags, sentAtUs).
    public static let dataHeaderBytes = dataFixedBytes
    static let windowBytes = 1 + 4 + 4
    static let closeBytes = 1 + 4
    static let resetBytes = 1 + 4 + 1
    static let datagramFixedBytes = 1 + 4
    static let feedbackBytes = 1 + 8 + 4
    /// DATA flags: bit 0 ends a message; the others are reserved.
    static let endOfMessageFlag: UInt8 = 0x01
}

/// Why bytes are not a valid channel frame. Descriptions are for log lines and never quote data.
public enum ChannelFrameError: Error, Equatable, Sendable, CustomStringConvertible {
    case emptyBody
    case unknownType(UInt8)
    case tooShort(ChannelFrameType, bodyBytes: Int, requiredBytes: Int)
    case trailingBytes(ChannelFrameType, count: Int)
    case zeroStream(ChannelFrameType)
    case unknownMode(UInt8)
    case invalidChannelName(ChannelNameError)
    case emptyPayload(ChannelFrameType)
    case payloadTooLong(ChannelFrameType, bytes: Int)
    case reservedFlags(UInt8)
    case windowTooLarge(UInt32)
    case zeroWindowIncrement

    public var description: String {
        switch self {
        case .emptyBody: "an empty channel frame"
        case .unknownType(let type): "unknown channel frame type 0x\(String(type, radix: 16))"
        case .tooShort(let type, let bodyBytes, let required): "\(type) of \(bodyBytes) bytes, shorter than \(required)"
        case .trailingBytes(let type, let count): "\(count) bytes after the end of \(type)"
        case .zeroStream(let type): "\(type) for stream 0"
        case .unknownMode(let mode): "CHANNEL_OPEN with unknown mode \(mode)"
        case .invalidChannelName(let error): "CHANNEL_OPEN with an invalid channel name (\(error))"
        case .emptyPayload(let type): "\(type) without payload"
        case .payloadTooLong(let type, let bytes): "\(type) with \(bytes) bytes of payload, over its limit"
        case .reservedFlags(let flags): "CHANNEL_DATA with reserved flags 0x\(String(flags, radix: 16))"
        case .windowTooLarge(let window): "a window of \(window) bytes, over 2^31 - 1"
        case .zeroWindowIncrement: "CHANNEL_WINDOW with increment 0"
        }
    }
}

extension ChannelFrame {
    public var bodyByteCount: Int {
        switch self {
        case .open(_, _, _, _, let channel): ChannelWire.openFixedBytes + channel.value.utf8.count
        case .accept: ChannelWire.acceptBytes
        case .refuse: ChannelWire.refuseBytes
        case .data(_, _, _, let payload): ChannelWire.dataFixedBytes + payload.count
        case .window: ChannelWire.windowBytes
        case .close: ChannelWire.closeBytes
        case .reset: ChannelWire.resetBytes
        case .datagram(_, let payload): ChannelWire.datagramFixedBytes + payload.count
        case .feedback: ChannelWire.feedbackBytes
        }
    }

    /// The frame's body: type byte and fields, without length prefix or seal.
    public func encodedBody() -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(bodyByteCount)
        body.append(type.rawValue)
        switch self {
        case .open(let id, let mode, let window, let datagramPort, let channel):
            body.appendBigEndian(id.rawValue)
            body.append(mode.rawValue)
            body.appendBigEndian(window)
            body.appendBigEndian(datagramPort)
            body.append(UInt8(channel.value.utf8.count))
            body.append(contentsOf: channel.value.utf8)
        case .accept(let id, let window, let datagramPort):
            body.appendBigEndian(id.rawValue)
            body.appendBigEndian(window)
            body.appendBigEndian(datagramPort)
        case .refuse(let id, let reason):
            body.appendBigEndian(id.rawValue)
            body.append(reason.rawValue)
        case .data(let id, let endOfMessage, let sentAtUs, let payload):
            body.appendBigEndian(id.rawValue)
            body.append(endOfMessage ? ChannelWire.endOfMessageFlag : 0)
            body.appendBigEndian(sentAtUs)
            body.append(contentsOf: payload)
        case .window(let id, let increment):
            body.appendBigEndian(id.rawValue)
            body.appendBigEndian(increment)
        case .close(let id):
            body.appendBigEndian(id.rawValue)
        case .reset(let id, let reason):
            body.appendBigEndian(id.rawValue)
            body.append(reason.rawValue)
        case .datagram(let id, let payload):
            body.appendBigEndian(id.rawValue)
            body.append(contentsOf: payload)
        case .feedback(let receivedBytes, let delayUs):
            body.appendBigEndian(receivedBytes)
            body.appendBigEndian(delayUs)
        }
        return body
    }

    /// Whether `body` starts with a channel frame's type byte (what the link hands to channels).
    public static func isChannelFrame(_ body: some Collection<UInt8>) -> Bool {
        body.first.map { ChannelFrameType(rawValue: $0) != nil } ?? false
    }

    /// Decodes one body; checks are made in the order docs/PROTOCOL.md §13.2 lists them.
    public init(body: ArraySlice<UInt8>) throws(ChannelFrameError) {
        guard let typeByte = body.first else { throw .emptyBody }
        guard let type = ChannelFrameType(rawValue: typeByte) else { throw .unknownType(typeByte) }
        var reader = ByteReader(body.dropFirst())

        func require(_ bytes: Int) throws(ChannelFrameError) {
            guard body.count >= bytes else { throw .tooShort(type, bodyBytes: body.count, requiredBytes: bytes) }
        }
        func requireExactly(_ bytes: Int) throws(ChannelFrameError) {
            try require(bytes)
            guard body.count == bytes else { throw .trailingBytes(type, count: body.count - bytes) }
        }
        func readStream() throws(ChannelFrameError) -> StreamID {
            let id = reader.readUInt32()
            guard id != 0 else { throw .zeroStream(type) }
            return StreamID(rawValue: id)
        }
        func readWindow() throws(ChannelFrameError) -> UInt32 {
            let window = reader.readUInt32()
            guard window <= ChannelWire.maxWindowBytes else { throw .windowTooLarge(window) }
            return window
        }
        func readPayload(max: Int) throws(ChannelFrameError) -> [UInt8] {
            let payload = reader.readRest()
            guard !payload.isEmpty else { throw .emptyPayload(type) }
            guard payload.count <= max else { throw .payloadTooLong(type, bytes: payload.count) }
            return Array(payload)
        }

        switch type {
        case .open:
            try require(ChannelWire.openFixedBytes)
            let id = try readStream()
            let modeByte = reader.readUInt8()
            guard let mode = StreamMode(rawValue: modeByte) else { throw .unknownMode(modeByte) }
            let window = try readWindow()
            let datagramPort = reader.readUInt16()
            let nameLength = Int(reader.readUInt8())
            try requireExactly(ChannelWire.openFixedBytes + nameLength)
            do throws(ChannelNameError) {
                self = .open(id, mode: mode, window: window, datagramPort: datagramPort, channel: try ChannelName(bytes: reader.readRest()))
            } catch {
                throw .invalidChannelName(error)
            }
        case .accept:
            try requireExactly(ChannelWire.acceptBytes)
            self = .accept(try readStream(), window: try readWindow(), datagramPort: reader.readUInt16())
        case .refuse:
            try requireExactly(ChannelWire.refuseBytes)
            self = .refuse(try readStream(), RefuseReason(rawValue: reader.readUInt8()))
        case .data:
            let data = try ChannelDataFrame(body: body)
            self = .data(data.stream, endOfMessage: data.endOfMessage, sentAtUs: data.sentAtUs, payload: Array(data.payload))
        case .window:
            try requireExactly(ChannelWire.windowBytes)
            let id = try readStream()
            let increment = try readWindow()
            guard increment != 0 else { throw .zeroWindowIncrement }
            self = .window(id, increment: increment)
        case .close:
            try requireExactly(ChannelWire.closeBytes)
            self = .close(try readStream())
        case .reset:
            try requireExactly(ChannelWire.resetBytes)
            self = .reset(try readStream(), ResetReason(rawValue: reader.readUInt8()))
        case .datagram:
            try require(ChannelWire.datagramFixedBytes)
            self = .datagram(try readStream(), payload: try readPayload(max: ChannelWire.maxDatagramBytes))
        case .feedback:
            try requireExactly(ChannelWire.feedbackBytes)
            self = .feedback(receivedBytes: reader.readUInt64(), delayUs: reader.readUInt32())
        }
    }

    public init(body: [UInt8]) throws(ChannelFrameError) {
        try self.init(body: body[...])
    }
}

/// A CHANNEL_DATA body read in place: its fields and its payload as a slice of the body, so the
/// bulk path hands an app's bytes on without copying them (``ChannelFrame/init(body:)`` decodes
/// DATA through this too).
public struct ChannelDataFrame {
    public let stream: StreamID
    public let endOfMessage: Bool
    public let sentAtUs: UInt32
    public let payload: ArraySlice<UInt8>

    /// `body` starts with the DATA type byte; checks as ``ChannelFrame/init(body:)`` does.
    public init(body: ArraySlice<UInt8>) throws(ChannelFrameError) {
        guard body.count >= ChannelWire.dataFixedBytes else {
            throw .tooShort(.data, bodyBytes: body.count, requiredBytes: ChannelWire.dataFixedBytes)
        }
        var reader = ByteReader(body.dropFirst())
        let id = reader.readUInt32()
        guard id != 0 else { throw .zeroStream(.data) }
        let flags = reader.readUInt8()
        guard flags & ~ChannelWire.endOfMessageFlag == 0 else { throw .reservedFlags(flags) }
        sentAtUs = reader.readUInt32()
        payload = reader.readRest()
        guard !payload.isEmpty else { throw .emptyPayload(.data) }
        guard payload.count <= ChannelWire.maxDataBytes else { throw .payloadTooLong(.data, bytes: payload.count) }
        stream = StreamID(rawValue: id)
        endOfMessage = flags & ChannelWire.endOfMessageFlag != 0
    }
}

extension ChannelFrame: CustomStringConvertible {
    /// For log lines: sizes, never the bytes an app sent.
    public var description: String {
        switch self {
        case .open(let id, let mode, let window, let port, let channel):
            "\(type) \(id) \(mode) to \(channel), window \(window)\(port == 0 ? "" : ", datagrams on UDP port \(port)")"
        case .accept(let id, let window, let port): "\(type) \(id), window \(window)\(port == 0 ? "" : ", datagrams on UDP port \(port)")"
        case .refuse(let id, let reason): "\(type) \(id): \(reason)"
        case .data(let id, let end, _, let payload): "\(type) \(id), \(payload.count) bytes\(end ? ", end of message" : "")"
        case .window(let id, let increment): "\(type) \(id) +\(increment)"
        case .close(let id): "\(type) \(id)"
        case .reset(let id, let reason): "\(type) \(id): \(reason)"
        case .datagram(let id, let payload): "\(type) \(id), \(payload.count) bytes"
        case .feedback(let received, let delay): "\(type) \(received) bytes received, delay sample \(delay) us"
        }
    }
}
