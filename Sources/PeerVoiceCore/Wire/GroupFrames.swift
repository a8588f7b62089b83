// The frames of a hosted call (protocol version 6, docs/PROTOCOL.md §5.12–5.14, docs/GROUP.md):
// a participant's voice as the host relays it, the host's list of the call, and a listener's
// report on one relayed source.

/// The number a host gives one participant of its call for as long as that participant's voice
/// session with the host runs (1–255; 0 is never a source). Every relayed packet and list entry
/// names its participant by it.
public struct RelaySource: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: UInt8

    /// Nil for 0.
    public init?(rawValue: UInt8) {
        guard rawValue != 0 else { return nil }
        self.rawValue = rawValue
    }

    public static func < (a: RelaySource, b: RelaySource) -> Bool { a.rawValue < b.rawValue }

    public var description: String { "source \(rawValue)" }
}

/// RELAYED_VOICE: one participant's Opus packet as its host forwards it, with the participant's
/// own seq and timestamp (its session with the host), so that the listener plays each source
/// through its own jitter buffer and decoder.
public struct RelayedVoiceFrame: Equatable, Sendable, CustomStringConvertible {
    public let source: RelaySource
    /// The origin's VOICE seq and timestamp, as the host received them.
    public let seq: UInt64
    public let timestamp: UInt32
    /// The origin's Opus packet, 0 to ``Wire/maxOpusPayloadBytes`` bytes, as it came.
    public let payload: [UInt8]

    /// - Throws: ``WireError/voicePayloadTooLong(bytes:)`` when `payload` exceeds ``Wire/maxOpusPayloadBytes``.
    public init(source: RelaySource, seq: UInt64, timestamp: UInt32, payload: [UInt8]) throws(WireError) {
        guard payload.count <= Wire.maxOpusPayloadBytes else { throw .voicePayloadTooLong(bytes: payload.count) }
        self.source = source
        self.seq = seq
        self.timestamp = timestamp
        self.payload = payload
    }

    /// The origin's packet as a VOICE frame of its stream (what the listener's jitter buffer takes).
    public var voice: VoiceFrame { try! VoiceFrame(seq: seq, timestamp: timestamp, payload: payload) }  // same limit

    public var description: String {
        "RELAYED_VOICE \(source) seq \(seq) timestamp \(timestamp), \(payload.count) bytes of Opus"
    }
}

/// One other participant of the host's call, as PARTICIPANTS names it: for display only (nobody
/// is paired, trusted or reachable through it).
public struct CallParticipant: Equatable, Sendable, CustomStringConvertible {
    public let source: RelaySource
    /// The participant's peer id (the hash of its key: the same on every side).
    public let peer: PeerID
    /// The participant's Opus frame length, 10 or 20 ms: its relayed packets decode with it.
    public let frameMs: UInt8
    /// Whether the host hears the participant speak (its `Speaking` on the host).
    public let speaking: Bool
    /// The participant's display name as the host knows it, at most ``Wire/maxNameBytes`` bytes.
    public let name: String

    /// - Throws: ``WireError/unsupportedFrameDuration(_:)``, ``WireError/nameTooLong(bytes:)`` or
    ///   ``WireError/nameNotUTF8`` (a NUL) for an entry PARTICIPANTS cannot carry.
    public init(source: RelaySource, peer: PeerID, frameMs: UInt8, speaking: Bool, name: String) throws(WireError) {
        guard frameMs == 10 || frameMs == 20 else { throw .unsupportedFrameDuration(frameMs) }
        let nameBytes = name.utf8.count
        guard nameBytes <= Wire.maxNameBytes else { throw .nameTooLong(bytes: nameBytes) }
        // What the decoder refuses is never built: no D-Bus string can carry NUL.
        guard !name.utf8.contains(0) else { throw .nameNotUTF8 }
        self.source = source
        self.peer = peer
        self.frameMs = frameMs
        self.speaking = speaking
        self.name = name
    }

    public var description: String {
        "\(source) \(peer) (\(name.utf8.count)-byte name, \(frameMs) ms frames\(speaking ? ", speaking" : ""))"
    }
}

/// RELAY_REPORT: a listener tells the host about one relayed source: how much of it it loses,
/// and whether it hears that participant directly (then the host stops relaying it to the listener).
public struct RelayReport: Equatable, Sendable, CustomStringConvertible {
    public let source: RelaySource
    /// 0–100, like VOICE_REPORT's.
    public let lossPercent: UInt8
    /// The listener has its own voice session with this participant: do not relay it to the listener.
    public let direct: Bool

    public init(source: RelaySource, lossPercent: UInt8, direct: Bool) throws(WireError) {
        guard lossPercent <= 100 else { throw .invalidLossPercent(lossPercent) }
        self.source = source
        self.lossPercent = lossPercent
        self.direct = direct
    }

    public var description: String {
        "RELAY_REPORT \(source) \(lossPercent) % lost\(direct ? ", heard directly" : "")"
    }
}

extension Wire {
    /// Most entries in a PARTICIPANTS list: a call has at most 8 members, and the list names the
    /// others of the receiver.
    public static let maxCallParticipants = 7
}

extension Frame {
    /// Fixed part of a RELAYED_VOICE body: type, source, seq, timestamp.
    static let relayedVoiceFixedBytes = 1 + 1 + 8 + 4
    /// Fixed part of a PARTICIPANTS body: type, count.
    static let participantsFixedBytes = 1 + 1
    /// Fixed part of one PARTICIPANTS entry: source, frameMs, flags, the id's 26 characters, name length.
    static let participantFixedBytes = 1 + 1 + 1 + PeerID.base32Characters + 2
    static let relayReportBytes = 1 + 1 + 1 + 1

    /// PARTICIPANTS flag bit 0 and RELAY_REPORT flag bit 0.
    static let speakingFlag: UInt8 = 1
    static let directFlag: UInt8 = 1

    /// - Throws: ``WireError/tooManyParticipants(_:)``, ``WireError/duplicateParticipant(source:)``
    ///   or ``WireError/duplicateParticipantPeer`` for a list PARTICIPANTS cannot carry.
    public static func participants(checking list: [CallParticipant]) throws(WireError) -> Frame {
        try checkParticipants(list)
        return .participants(list)
    }

    static func checkParticipants(_ list: [CallParticipant]) throws(WireError) {
        guard list.count <= Wire.maxCallParticipants else { throw .tooManyParticipants(list.count) }
        if let duplicate = duplicateElement(list.map(\.source)) { throw .duplicateParticipant(source: duplicate.rawValue) }
        if duplicateElement(list.map(\.peer)) != nil { throw .duplicateParticipantPeer }
    }

    static func appendParticipants(_ list: [CallParticipant], to bytes: inout [UInt8]) {
        bytes.append(UInt8(list.count))
        for entry in list {
            bytes.append(entry.source.rawValue)
            bytes.append(entry.frameMs)
            bytes.append(entry.speaking ? speakingFlag : 0)
            bytes.append(contentsOf: entry.peer.base32.utf8)
            bytes.appendBigEndian(UInt16(entry.name.utf8.count))
            bytes.append(contentsOf: entry.name.utf8)
        }
    }

    static func participantsByteCount(_ list: [CallParticipant]) -> Int {
        participantsFixedBytes + list.reduce(0) { $0 + participantFixedBytes + $1.name.utf8.count }
    }

    /// Decodes a PARTICIPANTS payload (after the type byte); `bodyBytes` is the whole body's length.
    static func decodeParticipants(_ reader: inout ByteReader, bodyBytes: Int) throws(WireError) -> [CallParticipant] {
        guard bodyBytes >= participantsFixedBytes else {
            throw .frameTooShort(.participants, bodyBytes: bodyBytes, requiredBytes: participantsFixedBytes)
        }
        let count = Int(reader.readUInt8())
        guard count <= Wire.maxCallParticipants else { throw .tooManyParticipants(count) }
        var list: [CallParticipant] = []
        var required = participantsFixedBytes
        for _ in 0..<count {
            required += participantFixedBytes
            guard bodyBytes >= required else { throw .frameTooShort(.participants, bodyBytes: bodyBytes, requiredBytes: required) }
            let sourceByte = reader.readUInt8()
            let frameMs = reader.readUInt8()
            let flags = reader.readUInt8()
            let idBytes = reader.read(bytes: PeerID.base32Characters)
            let nameLength = Int(reader.readUInt16())
            guard let source = RelaySource(rawValue: sourceByte) else { throw .invalidRelaySource }
            guard flags & ~speakingFlag == 0 else { throw .reservedFlags(.participants, flags) }
            // Only the canonical (lower-case) form: the encoding stays one to one.
            guard !idBytes.contains(where: { (0x41...0x5A).contains($0) }),
                  let peer = PeerID(PeerID.prefix + String(decoding: idBytes, as: UTF8.self)) else { throw .invalidPeerID }
            guard nameLength <= Wire.maxNameBytes else { throw .nameTooLong(bytes: nameLength) }
            required += nameLength
            guard bodyBytes >= required else { throw .frameTooShort(.participants, bodyBytes: bodyBytes, requiredBytes: required) }
            let nameBytes = reader.read(bytes: nameLength)
            guard !nameBytes.contains(0), let name = String(validating: nameBytes, as: UTF8.self) else { throw .nameNotUTF8 }
            list.append(try CallParticipant(source: source, peer: peer, frameMs: frameMs, speaking: flags & speakingFlag != 0, name: name))
        }
        guard bodyBytes == required else { throw .trailingBytes(.participants, count: bodyBytes - required) }
        try checkParticipants(list)
        return list
    }
}

private func duplicateElement<T: Hashable>(_ values: [T]) -> T? {
    var seen = Set<T>()
    return values.first { !seen.insert($0).inserted }
}
