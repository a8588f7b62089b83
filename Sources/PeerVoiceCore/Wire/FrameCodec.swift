// Frame bodies <-> bytes. Everything here is about the contents of one body; the length
// prefix and the stream belong to the framing layer (Wire.lengthPrefixed, FrameDecoder).

extension Frame {
    /// Fixed part of a HELLO body: type, instance id, capabilities, listen port, voice port, name length.
    static let helloFixedBytes = 1 + 16 + 4 + 2 + 2 + 2
    /// Fixed part of a TEXT body: type, seq, previous seq, message id, sent-at.
    static let textFixedBytes = 1 + 8 + 8 + 16 + 8
    static let ackBytes = 1 + 8
    static let keepaliveBytes = 1
    static let goodbyeBytes = 1 + 1
    static let pairingBytes = 1 + 1
    static let voiceStartBytes = 1 + VoiceStart.sessionIDBytes + 1
    static let voiceStopBytes = 1
    static let voiceReportBytes = 1 + 1
    static let presenceSecretBytes = 32
    static let presenceBytes = 1 + presenceSecretBytes
    /// Fixed part of a VOICE body: type, seq, timestamp.
    static let voiceFixedBytes = 1 + 8 + 4

    /// The frame's body: type byte and payload, without the length prefix.
    public func encodedBody() -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(bodyByteCount)
        appendBody(to: &body)
        return body
    }

    /// The complete frame as sent on a stream or in a datagram: `u32` body length, then the body.
    public func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Wire.lengthPrefixBytes + bodyByteCount)
        bytes.appendBigEndian(UInt32(truncatingIfNeeded: bodyByteCount))
        appendBody(to: &bytes)
        return bytes
    }

    /// The body's size; never above ``Wire/maxFrameBodyBytes`` because the payload types check their limits.
    var bodyByteCount: Int {
        switch self {
        case .hello(let hello): return Frame.helloFixedBytes + hello.name.utf8.count
        case .text(let text): return Frame.textFixedBytes + text.text.utf8.count
        case .ack: return Frame.ackBytes
        case .keepalive: return Frame.keepaliveBytes
        case .goodbye: return Frame.goodbyeBytes
        case .voice(let voice): return Frame.voiceFixedBytes + voice.payload.count
        case .pairing: return Frame.pairingBytes
        case .voiceStart: return Frame.voiceStartBytes
        case .voiceStop: return Frame.voiceStopBytes
        case .voiceReport: return Frame.voiceReportBytes
        case .presence: return Frame.presenceBytes
        case .relayedVoice(let relayed): return Frame.relayedVoiceFixedBytes + relayed.payload.count
        case .participants(let list): return Frame.participantsByteCount(list)
        case .relayReport: return Frame.relayReportBytes
        }
    }

    private func appendBody(to bytes: inout [UInt8]) {
        bytes.append(type.rawValue)
        switch self {
        case .hello(let hello):
            bytes.append(hello.instanceID.value)
            bytes.appendBigEndian(hello.capabilities.rawValue)
            bytes.appendBigEndian(hello.listenPort)
            bytes.appendBigEndian(hello.voicePort)
            bytes.appendBigEndian(UInt16(truncatingIfNeeded: hello.name.utf8.count))
            bytes.append(contentsOf: hello.name.utf8)
        case .text(let text):
            bytes.appendBigEndian(text.seq)
            bytes.appendBigEndian(text.previousSeq)
            bytes.append(text.messageID.value)
            bytes.appendBigEndian(text.sentAtMs)
            bytes.append(contentsOf: text.text.utf8)
        case .ack(let seq):
            bytes.appendBigEndian(seq)
        case .keepalive:
            break
        case .goodbye(let reason):
            bytes.append(reason.rawValue)
        case .voice(let voice):
            bytes.appendBigEndian(voice.seq)
            bytes.appendBigEndian(voice.timestamp)
            bytes.append(contentsOf: voice.payload)
        case .pairing(let decision):
            bytes.append(decision.rawValue)
        case .voiceStart(let start):
            bytes.append(contentsOf: start.sessionID)
            bytes.append(start.frameMs)
        case .voiceStop:
            break
        case .voiceReport(let lossPercent):
            bytes.append(lossPercent)
        case .presence(let secret):
            bytes.append(contentsOf: secret)
        case .relayedVoice(let relayed):
            bytes.append(relayed.source.rawValue)
            bytes.appendBigEndian(relayed.seq)
            bytes.appendBigEndian(relayed.timestamp)
            bytes.append(contentsOf: relayed.payload)
        case .participants(let list):
            Frame.appendParticipants(list, to: &bytes)
        case .relayReport(let report):
            bytes.append(report.source.rawValue)
            bytes.append(report.lossPercent)
            bytes.append(report.direct ? Frame.directFlag : 0)
        }
    }

    /// Decodes one frame body (type byte and payload, no length prefix).
    ///
    /// - Throws: a ``WireError`` naming the first thing wrong with the body.
    public init(body: [UInt8]) throws(WireError) {
        try self.init(body: body[...])
    }

    /// Decodes one frame body (type byte and payload, no length prefix).
    ///
    /// - Throws: a ``WireError`` naming the first thing wrong with the body.
    public init(body: ArraySlice<UInt8>) throws(WireError) {
        guard !body.isEmpty else { throw .emptyFrame }
        guard body.count <= Wire.maxFrameBodyBytes else {
            throw .frameTooLarge(bodyBytes: UInt32(clamping: body.count))
        }
        let typeByte = body[body.startIndex]
        guard let type = FrameType(rawValue: typeByte) else { throw .unknownFrameType(typeByte) }
        var reader = ByteReader(body.dropFirst())

        /// Throws unless the body holds at least `bytes` bytes in all.
        func require(_ bytes: Int) throws(WireError) {
            guard body.count >= bytes else {
                throw .frameTooShort(type, bodyBytes: body.count, requiredBytes: bytes)
            }
        }
        /// Throws unless the body holds exactly `bytes` bytes.
        func requireExactly(_ bytes: Int) throws(WireError) {
            try require(bytes)
            guard body.count == bytes else { throw .trailingBytes(type, count: body.count - bytes) }
        }

        switch type {
        case .hello:
            try require(Frame.helloFixedBytes)
            let instanceID = InstanceID(value: reader.readID())
            let capabilities = Capabilities(rawValue: reader.readUInt32())
            let listenPort = reader.readUInt16()
            let voicePort = reader.readUInt16()
            let nameLength = Int(reader.readUInt16())
            guard nameLength <= Wire.maxNameBytes else { throw .nameTooLong(bytes: nameLength) }
            try requireExactly(Frame.helloFixedBytes + nameLength)
            // NUL is valid UTF-8 but no D-Bus string can carry it.
            let nameBytes = reader.readRest()
            guard !nameBytes.contains(0), let name = String(validating: nameBytes, as: UTF8.self) else {
                throw .nameNotUTF8
            }
            self = .hello(try Hello(
                instanceID: instanceID, capabilities: capabilities,
                listenPort: listenPort, voicePort: voicePort, name: name))

        case .text:
            try require(Frame.textFixedBytes)
            let seq = reader.readUInt64()
            let previousSeq = reader.readUInt64()
            let messageID = MessageID(value: reader.readID())
            let sentAtMs = reader.readUInt64()
            guard seq != 0 else { throw .zeroSequence }
            guard previousSeq < seq else { throw .previousSequenceNotBefore(seq: seq, previous: previousSeq) }
            let textBytes = reader.readRest()
            guard !textBytes.isEmpty else { throw .emptyText }
            guard textBytes.count <= Wire.maxTextBytes else { throw .textTooLong(bytes: textBytes.count) }
            guard !textBytes.contains(0), let text = String(validating: textBytes, as: UTF8.self) else { throw .textNotUTF8 }
            self = .text(try TextFrame(seq: seq, previousSeq: previousSeq, messageID: messageID, sentAtMs: sentAtMs, text: text))

        case .ack:
            try requireExactly(Frame.ackBytes)
            self = .ack(seq: reader.readUInt64())

        case .keepalive:
            try requireExactly(Frame.keepaliveBytes)
            self = .keepalive

        case .goodbye:
            try requireExactly(Frame.goodbyeBytes)
            self = .goodbye(GoodbyeReason(rawValue: reader.readUInt8()))

        case .voice:
            try require(Frame.voiceFixedBytes)
            let seq = reader.readUInt64()
            let timestamp = reader.readUInt32()
            let payload = reader.readRest()
            guard payload.count <= Wire.maxOpusPayloadBytes else {
                throw .voicePayloadTooLong(bytes: payload.count)
            }
            self = .voice(try VoiceFrame(seq: seq, timestamp: timestamp, payload: Array(payload)))

        case .pairing:
            try requireExactly(Frame.pairingBytes)
            let byte = reader.readUInt8()
            guard let decision = PairingDecision(rawValue: byte) else { throw .invalidPairingDecision(byte) }
            self = .pairing(decision)

        case .voiceStart:
            try requireExactly(Frame.voiceStartBytes)
            let sessionID = Array(body.dropFirst().prefix(VoiceStart.sessionIDBytes))
            self = .voiceStart(try VoiceStart(sessionID: sessionID, frameMs: body[body.endIndex - 1]))

        case .voiceStop:
            try requireExactly(Frame.voiceStopBytes)
            self = .voiceStop

        case .voiceReport:
            try requireExactly(Frame.voiceReportBytes)
            let lossPercent = reader.readUInt8()
            guard lossPercent <= 100 else { throw .invalidLossPercent(lossPercent) }
            self = .voiceReport(lossPercent: lossPercent)

        case .presence:
            try requireExactly(Frame.presenceBytes)
            self = .presence(secret: Array(body.dropFirst()))

        case .relayedVoice:
            try require(Frame.relayedVoiceFixedBytes)
            guard let source = RelaySource(rawValue: reader.readUInt8()) else { throw .invalidRelaySource }
            let seq = reader.readUInt64()
            let timestamp = reader.readUInt32()
            self = .relayedVoice(try RelayedVoiceFrame(source: source, seq: seq, timestamp: timestamp, payload: Array(reader.readRest())))

        case .participants:
            self = .participants(try Frame.decodeParticipants(&reader, bodyBytes: body.count))

        case .relayReport:
            try requireExactly(Frame.relayReportBytes)
            guard let source = RelaySource(rawValue: reader.readUInt8()) else { throw .invalidRelaySource }
            let lossPercent = reader.readUInt8()
            guard lossPercent <= 100 else { throw .invalidLossPercent(lossPercent) }
            let flags = reader.readUInt8()
            guard flags & ~Frame.directFlag == 0 else { throw .reservedFlags(.relayReport, flags) }
            self = .relayReport(try RelayReport(source: source, lossPercent: lossPercent, direct: flags & Frame.directFlag != 0))
        }
    }

    /// Decodes a datagram that holds exactly one complete frame, length prefix included
    /// (how VOICE travels over UDP).
    ///
    /// - Throws: ``WireError/datagramTooShort(bytes:)`` or
    ///   ``WireError/datagramLengthMismatch(declaredBodyBytes:actualBodyBytes:)`` when the prefix
    ///   does not match the datagram, else whatever ``init(body:)`` throws.
    public init(datagram: [UInt8]) throws(WireError) {
        guard datagram.count >= Wire.lengthPrefixBytes else {
            throw .datagramTooShort(bytes: datagram.count)
        }
        var reader = ByteReader(datagram[...])
        let declared = reader.readUInt32()
        guard declared != 0 else { throw .emptyFrame }
        guard declared <= Wire.maxFrameBodyBytes else { throw .frameTooLarge(bodyBytes: declared) }
        let body = reader.readRest()
        guard body.count == Int(declared) else {
            throw .datagramLengthMismatch(declaredBodyBytes: declared, actualBodyBytes: body.count)
        }
        try self.init(body: body)
    }
}

extension Array where Element == UInt8 {
    mutating func append(_ id: ID128) {
        appendBigEndian(id.high)
        appendBigEndian(id.low)
    }
}

/// Reads big-endian integers from the front of a byte slice.
///
/// Callers check the length first (`Frame.init(body:)` does, with `require`). Reading past the
/// end never traps; the missing bytes simply do not contribute to the value.
struct ByteReader {
    private var bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    mutating func readUInt8() -> UInt8 {
        UInt8(truncatingIfNeeded: read(1))
    }

    mutating func readUInt16() -> UInt16 {
        UInt16(truncatingIfNeeded: read(2))
    }

    mutating func readUInt32() -> UInt32 {
        UInt32(truncatingIfNeeded: read(4))
    }

    mutating func readUInt64() -> UInt64 {
        read(8)
    }

    mutating func readID() -> ID128 {
        ID128(high: read(8), low: read(8))
    }

    /// The next `count` bytes (fewer if the slice ends first).
    mutating func read(bytes count: Int) -> ArraySlice<UInt8> {
        defer { bytes = bytes.dropFirst(count) }
        return bytes.prefix(count)
    }

    /// How many bytes are not read yet.
    var remaining: Int { bytes.count }

    /// Everything not read yet.
    mutating func readRest() -> ArraySlice<UInt8> {
        defer { bytes = bytes[bytes.endIndex...] }
        return bytes
    }

    private mutating func read(_ count: Int) -> UInt64 {
        var value: UInt64 = 0
        for byte in bytes.prefix(count) {
            value = value << 8 | UInt64(byte)
        }
        bytes = bytes.dropFirst(count)
        return value
    }
}
