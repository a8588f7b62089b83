/// Which way a record travels on a link. Part of every nonce and associated data, so the two
/// directions can never produce the same (key, nonce) pair even if their keys were equal.
public enum RecordDirection: UInt8, Sendable {
    case initiatorToResponder = 0x01
    case responderToInitiator = 0x02
}

/// What a record stream carries: the link's frames, a voice session's frames, or an app
/// channel's datagrams over UDP.
public enum RecordPurpose: UInt8, Sendable {
    case link = 0x01
    case voice = 0x02
    case channelDatagram = 0x03
}

/// A sealed record: `counter (u64, big-endian) || ciphertext || tag (16)`.
///
/// Nonce (24 bytes for XChaCha20-Poly1305, 12 for AES-256-GCM): `direction || purpose || zero
/// bytes || counter (u64 BE)`. Associated data (10 bytes): `direction || purpose || counter (u64 BE)`.
/// See docs/SECURITY.md §4.
public enum SealedRecord {
    /// The counter in front of the ciphertext.
    public static let headerBytes = 8
    /// Bytes a record adds to its plaintext: counter and tag.
    public static let overheadBytes = headerBytes + CryptoSize.tag
    /// The shortest valid record (empty plaintext).
    public static let minimumBytes = overheadBytes

    /// `bytes` long: the AEAD's nonce size (``RecordAEAD/nonceBytes``).
    static func nonce(direction: RecordDirection, purpose: RecordPurpose, counter: UInt64, bytes: Int = CryptoSize.nonce) -> [UInt8] {
        var nonce: [UInt8] = [direction.rawValue, purpose.rawValue]
        nonce += [UInt8](repeating: 0, count: bytes - 2 - 8)
        nonce.appendBigEndian(counter)
        return nonce
    }

    static func associatedData(direction: RecordDirection, purpose: RecordPurpose, counter: UInt64) -> [UInt8] {
        var data: [UInt8] = [direction.rawValue, purpose.rawValue]
        data.appendBigEndian(counter)
        return data
    }
}

/// Why a record could not be sealed or was rejected.
public enum RecordError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The sender reached its rekey limit: make a new handshake (or a new voice session).
    case needsRekey(counter: UInt64)
    /// Shorter than counter + tag.
    case truncated(bytes: Int)
    /// The tag does not verify: modified, forged, or sealed under another key or direction.
    case tampered(counter: UInt64)
    /// Authentic, but its counter was already accepted (stream mode: not above the last one,
    /// which also covers a reordered record).
    case replayed(counter: UInt64)
    /// Authentic, but older than the replay window (datagram mode).
    case tooOld(counter: UInt64, newest: UInt64)

    public var description: String {
        switch self {
        case .needsRekey(let counter):
            return "record counter \(counter) reached the rekey limit: a new key exchange is needed"
        case .truncated(let bytes):
            return "record of \(bytes) bytes is shorter than the \(SealedRecord.minimumBytes)-byte minimum"
        case .tampered(let counter):
            return "record \(counter) does not authenticate (tampered or forged)"
        case .replayed(let counter):
            return "record \(counter) was replayed or reordered"
        case .tooOld(let counter, let newest):
            return "record \(counter) is too old (newest accepted is \(newest))"
        }
    }
}

/// Seals one direction's records: counters 0, 1, 2, ... under one key, never reset.
public struct RecordSealer: Sendable {
    /// Hard limit: ``seal(_:)`` refuses from this counter on (2^48 records).
    public static let defaultRekeyLimit: UInt64 = 1 << 48

    public let direction: RecordDirection
    public let purpose: RecordPurpose
    /// Counter of the next record; also how many records were sealed.
    public private(set) var nextCounter: UInt64 = 0
    public let rekeyLimit: UInt64
    private let aead: any RecordAEAD

    /// XChaCha20-Poly1305 under `key`. `rekeyLimit` is for tests; keep the default.
    public init(key: [UInt8], direction: RecordDirection, purpose: RecordPurpose, crypto: any CryptoPrimitives,
                rekeyLimit: UInt64 = RecordSealer.defaultRekeyLimit) {
        precondition(key.count == CryptoSize.key, "record keys have \(CryptoSize.key) bytes")
        self.init(aead: XChaCha20Poly1305Key(key: key, crypto: crypto), direction: direction, purpose: purpose, rekeyLimit: rekeyLimit)
    }

    /// Seals with `aead` (keyed for this stream alone), at most `rekeyLimit` records.
    public init(aead: any RecordAEAD, direction: RecordDirection, purpose: RecordPurpose, rekeyLimit: UInt64) {
        self.aead = aead
        self.direction = direction
        self.purpose = purpose
        self.rekeyLimit = rekeyLimit
    }

    /// True from half the limit on: start a new handshake (or voice session) soon.
    public var shouldRekey: Bool { nextCounter >= rekeyLimit / 2 }
    /// True at the limit: ``seal(_:)`` refuses.
    public var needsRekey: Bool { nextCounter >= rekeyLimit }

    /// `counter || ciphertext || tag`; the counter then advances.
    public mutating func seal(_ plaintext: [UInt8]) throws(RecordError) -> [UInt8] {
        var record = [UInt8](repeating: 0, count: SealedRecord.overheadBytes + plaintext.count)
        record.replaceSubrange(SealedRecord.headerBytes..<(SealedRecord.headerBytes + plaintext.count), with: plaintext)
        let sealed = record.withUnsafeMutableBytes { bytes in
            Result { () throws(RecordError) in try sealInPlace(bytes, plaintextBytes: plaintext.count) }
        }
        try sealed.get()
        return record
    }
}

extension RecordSealer {
    /// ``seal(_:)`` in place, for bulk data: the plaintext is at `record[headerBytes ..<
    /// headerBytes + plaintextBytes]`; afterwards `record[0 ..< overheadBytes + plaintextBytes]` is
    /// the record (counter, ciphertext, tag). `record` holds at least that many bytes.
    public mutating func sealInPlace(_ record: UnsafeMutableRawBufferPointer, plaintextBytes: Int) throws(RecordError) {
        precondition(record.count >= SealedRecord.overheadBytes + plaintextBytes, "no room for the record")
        guard nextCounter < rekeyLimit else { throw .needsRekey(counter: nextCounter) }
        let counter = nextCounter
        nextCounter += 1
        for index in 0..<SealedRecord.headerBytes {
            record[index] = UInt8(truncatingIfNeeded: counter >> (8 * UInt64(SealedRecord.headerBytes - 1 - index)))
        }
        let body = UnsafeMutableRawBufferPointer(rebasing: record[SealedRecord.headerBytes..<(SealedRecord.headerBytes + plaintextBytes + CryptoSize.tag)])
        aead.seal(nonce: SealedRecord.nonce(direction: direction, purpose: purpose, counter: counter, bytes: aead.nonceBytes),
                  plaintext: UnsafeRawBufferPointer(rebasing: body[0..<plaintextBytes]),
                  associatedData: SealedRecord.associatedData(direction: direction, purpose: purpose, counter: counter),
                  into: body)
    }
}

/// How many records an opener rejected, by reason (for statistics and for closing abusive links).
public struct RecordRejections: Equatable, Sendable {
    public var truncated: UInt64 = 0
    public var tampered: UInt64 = 0
    public var replayed: UInt64 = 0
    public var tooOld: UInt64 = 0
    public init() {}
    public var total: UInt64 { truncated + tampered + replayed + tooOld }
}

/// Opens the peer's records in one direction, refusing forgeries and replays.
public struct RecordOpener: Sendable {
    public enum Mode: Equatable, Sendable {
        /// Reliable, ordered transport (TCP, RFCOMM): each counter must be above the last accepted
        /// one. A replayed or reordered record is rejected; a gap is fine.
        case stream
        /// UDP voice: a sliding window of `windowSize` counters (rounded up to a multiple of 64,
        /// at least 64). Each counter is accepted once; counters below the window are too old.
        case datagram(windowSize: Int)
    }

    /// 256 counters: about 5 s of 20-ms voice packets.
    public static let defaultWindowSize = 256

    public let direction: RecordDirection
    public let purpose: RecordPurpose
    public let mode: Mode
    /// Rejected records by reason.
    public private(set) var rejections = RecordRejections()
    /// Records opened successfully.
    public private(set) var acceptedCount: UInt64 = 0
    private let aead: any RecordAEAD
    private var window: ReplayWindow

    /// XChaCha20-Poly1305 under `key`.
    public init(key: [UInt8], direction: RecordDirection, purpose: RecordPurpose, mode: Mode,
                crypto: any CryptoPrimitives) {
        precondition(key.count == CryptoSize.key, "record keys have \(CryptoSize.key) bytes")
        self.init(aead: XChaCha20Poly1305Key(key: key, crypto: crypto), direction: direction, purpose: purpose, mode: mode)
    }

    /// Opens with `aead` (keyed for this stream alone).
    public init(aead: any RecordAEAD, direction: RecordDirection, purpose: RecordPurpose, mode: Mode) {
        self.aead = aead
        self.direction = direction
        self.purpose = purpose
        self.mode = mode
        switch mode {
        case .stream: window = ReplayWindow(size: 0)
        case .datagram(let size): window = ReplayWindow(size: size)
        }
    }

    /// The highest counter accepted so far.
    public var newestCounter: UInt64? { window.newest }

    /// The plaintext of an authentic, fresh record. A rejected record changes nothing but
    /// ``rejections``: in particular a forgery cannot move the window.
    public mutating func open(_ record: some Collection<UInt8>) throws(RecordError) -> [UInt8] {
        var plaintext: [UInt8] = []
        let count = try open(record, into: &plaintext)
        plaintext.removeLast(plaintext.count - count)
        return plaintext
    }

    /// ``open(_:)`` into `plaintext`, which is grown when it is too small and otherwise reused (the
    /// bulk path opens every record into one buffer); returns how many of its bytes are the
    /// plaintext. On a rejection `plaintext` holds no part of it.
    public mutating func open(_ record: some Collection<UInt8>, into plaintext: inout [UInt8]) throws(RecordError) -> Int {
        guard record.count >= SealedRecord.minimumBytes else {
            rejections.truncated += 1
            throw .truncated(bytes: record.count)
        }
        let counter = record.bigEndianUInt64()
        let plaintextBytes = record.count - SealedRecord.overheadBytes
        if plaintext.count < plaintextBytes { plaintext += [UInt8](repeating: 0, count: plaintextBytes - plaintext.count) }
        let aead = aead
        let nonce = SealedRecord.nonce(direction: direction, purpose: purpose, counter: counter, bytes: aead.nonceBytes)
        let associatedData = SealedRecord.associatedData(direction: direction, purpose: purpose, counter: counter)
        // Decrypted straight from the record's storage: no copy of the record.
        let opened = plaintext.withUnsafeMutableBytes { output in
            let output = UnsafeMutableRawBufferPointer(rebasing: output[0..<plaintextBytes])
            let decrypt = { (bytes: UnsafeRawBufferPointer) in
                aead.open(nonce: nonce, ciphertext: UnsafeRawBufferPointer(rebasing: bytes[SealedRecord.headerBytes...]),
                          associatedData: associatedData, into: output)
            }
            return record.withContiguousStorageIfAvailable { decrypt(UnsafeRawBufferPointer($0)) }
                ?? Array(record).withUnsafeBytes(decrypt)
        }
        guard opened else {
            rejections.tampered += 1
            throw .tampered(counter: counter)
        }
        switch window.check(counter) {
        case .fresh:
            window.accept(counter)
            acceptedCount += 1
            return plaintextBytes
        case .replayed:
            Self.erase(&plaintext, bytes: plaintextBytes)
            rejections.replayed += 1
            throw .replayed(counter: counter)
        case .tooOld(let newest):
            Self.erase(&plaintext, bytes: plaintextBytes)
            rejections.tooOld += 1
            throw .tooOld(counter: counter, newest: newest)
        }
    }
}

extension RecordOpener {
    /// Zeros the plaintext of a record that authenticated but is refused (a replay).
    private static func erase(_ plaintext: inout [UInt8], bytes: Int) {
        plaintext.withUnsafeMutableBytes { _ = UnsafeMutableRawBufferPointer(rebasing: $0[0..<bytes]).initializeMemory(as: UInt8.self, repeating: 0) }
    }
}

/// Anti-replay state. Size 0 is stream mode (only counters above the newest are fresh);
/// otherwise bit i of `bits` records whether counter `newest - i` was accepted.
struct ReplayWindow: Sendable {
    enum Verdict: Equatable { case fresh, replayed, tooOld(newest: UInt64) }

    /// In counters; 0 or a multiple of 64.
    let size: Int
    private(set) var newest: UInt64?
    private var bits: [UInt64]

    init(size: Int) {
        if size <= 0 {
            self.size = 0
        } else {
            self.size = max(64, (size + 63) / 64 * 64)
        }
        bits = [UInt64](repeating: 0, count: self.size / 64)
    }

    func check(_ counter: UInt64) -> Verdict {
        guard let newest else { return .fresh }
        if counter > newest { return .fresh }
        if size == 0 { return .replayed }
        let age = newest - counter
        if age >= UInt64(size) { return .tooOld(newest: newest) }
        let index = Int(age)
        return bits[index / 64] & (1 << UInt64(index % 64)) != 0 ? .replayed : .fresh
    }

    /// Records `counter`, which ``check(_:)`` found fresh.
    mutating func accept(_ counter: UInt64) {
        guard let current = newest else {
            newest = counter
            if size > 0 { bits[0] = 1 }
            return
        }
        if counter > current {
            if size > 0 { shift(by: counter - current) }
            newest = counter
            if size > 0 { bits[0] |= 1 }
        } else if size > 0 {
            let index = Int(current - counter)
            bits[index / 64] |= 1 << UInt64(index % 64)
        }
    }

    /// Ages every recorded counter by `distance` positions.
    private mutating func shift(by distance: UInt64) {
        guard distance < UInt64(size) else {
            for index in bits.indices { bits[index] = 0 }
            return
        }
        let wordShift = Int(distance / 64)
        let bitShift = UInt64(distance % 64)
        for index in stride(from: bits.count - 1, through: 0, by: -1) {
            let source = index - wordShift
            var word: UInt64 = source >= 0 ? bits[source] << bitShift : 0
            if bitShift > 0 && source - 1 >= 0 {
                word |= bits[source - 1] >> (64 - bitShift)
            }
            bits[index] = word
        }
    }
}
