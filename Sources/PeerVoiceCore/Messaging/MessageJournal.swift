import Foundation

// The on-disk journal: an 8-byte magic, then records
//
//     u32 LE  body length (>= 1)
//     u32 LE  CRC-32 of the 4 length bytes followed by the body
//     body    u8 record type, then the type's fields
//
// Integers are little-endian u64; short strings (ids) are u8 length + UTF-8, long strings
// (text) u32 length + UTF-8, so text may hold any character, NUL and newlines included.
// Every append is one write(2), so a kill -9 leaves whole records plus at most one torn record
// at the end (a power loss: whatever was not synced, cut anywhere); replay stops at the first
// record that is short or fails its checksum and cuts the file there. A rewrite (compaction)
// builds `<journal>.compact`, syncs it, renames it over the journal (atomic) and syncs the
// directory, so the journal is always the old file or the whole new one. (Versions before
// issue 34 removed the journal before the rename: a `.compact` without a journal is still moved
// into place.)

/// Record kinds. The numbers are part of the file format: never renumber or reuse one.
enum MessageJournalRecordType: UInt8 {
    /// lastSeq u64, ackedUpTo u64. Written first by a rewrite.
    case state = 1
    /// instance str8, seq u64: a sender instance's duplicate-detection mark. Written by a rewrite.
    case watermark = 2
    /// status u8, seq u64, timeMs u64, id str8, text str32. `Send` writes it with status queued.
    case outgoing = 3
    /// upTo u64: cumulative acknowledgement of outgoing messages.
    case acknowledged = 4
    /// seq u64: that queued outgoing message failed.
    case failed = 5
    /// instance str8, seq u64, sentAtMs u64, receivedAtMs u64, id str8, text str32.
    /// An empty instance (written by a rewrite) carries history only, not a duplicate mark.
    case received = 6
    /// peer str8, lastSeq u64: a removed peer's last sequence number (tombstone file only).
    case forgotten = 7
    /// peer str8, instance str8, seq u64: a removed peer's duplicate mark for one of its sender
    /// instances (tombstone file only).
    case forgottenMark = 8
    /// No fields: every `received` record before it was announced (`MessageReceived`, the
    /// signal written to the bus); or id str8: those up to the one with that message id (later
    /// ones were still on their way to the bus). Those not covered are announced again when the
    /// store is opened.
    case announced = 9
    /// No fields: `RemovePeer` began; every queued message has failed. A store opened with it
    /// lists the peer in `interruptedRemovals`, for the service to finish the removal.
    case removing = 10
    /// seq u64: the outcome of every outgoing message up to that one (`MessageDelivered`,
    /// `MessageFailed`: outcomes come in sequence order) reached the user. Outcomes after it are
    /// announced again when the store is opened. Journals without one announced them all.
    case outcomesAnnounced = 11
}

/// Status byte of an `outgoing` record.
enum MessageJournalOutgoingStatus: UInt8 {
    case queued = 0, delivered = 1, failed = 2
}

/// CRC-32 (IEEE 802.3, the zlib one), table driven.
enum MessageJournalCRC32 {
    static let table: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    /// Continues `crc` (0 to start) over `bytes`.
    static func update(_ crc: UInt32, _ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        var c = ~crc
        table.withUnsafeBufferPointer { t in
            for b in bytes { c = t[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        }
        return ~c
    }

    static func checksum(_ bytes: [UInt8], lengthField: Range<Int>, body: Range<Int>) -> UInt32 {
        bytes.withUnsafeBufferPointer { p in
            let crc = update(0, UnsafeBufferPointer(rebasing: p[lengthField]))
            return update(crc, UnsafeBufferPointer(rebasing: p[body]))
        }
    }
}

/// Builds one record; the static constructors below are the only producers.
struct MessageJournalRecord {
    static let prefixSize = 8
    private var bytes: [UInt8]

    private init(_ type: MessageJournalRecordType, capacity: Int = 32) {
        bytes = []
        bytes.reserveCapacity(Self.prefixSize + 1 + capacity)
        bytes.append(contentsOf: repeatElement(0, count: Self.prefixSize))
        bytes.append(type.rawValue)
    }

    private mutating func u8(_ v: UInt8) { bytes.append(v) }

    private mutating func u64(_ v: UInt64) {
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// Callers check the length (at most 255 bytes) before building records.
    private mutating func str8(_ s: String) {
        let count = s.utf8.count
        precondition(count <= Int(UInt8.max), "short journal string too long")
        bytes.append(UInt8(count))
        bytes.append(contentsOf: s.utf8)
    }

    private mutating func str32(_ s: String) {
        withUnsafeBytes(of: UInt32(s.utf8.count).littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: s.utf8)
    }

    /// Fills in length and checksum; the result is ready to append.
    private mutating func seal() -> [UInt8] {
        let length = UInt32(bytes.count - Self.prefixSize)
        withUnsafeBytes(of: length.littleEndian) { bytes.replaceSubrange(0..<4, with: $0) }
        let crc = MessageJournalCRC32.checksum(bytes, lengthField: 0..<4, body: Self.prefixSize..<bytes.count)
        withUnsafeBytes(of: crc.littleEndian) { bytes.replaceSubrange(4..<8, with: $0) }
        return bytes
    }

    static func state(lastSeq: UInt64, ackedUpTo: UInt64) -> [UInt8] {
        var r = MessageJournalRecord(.state)
        r.u64(lastSeq)
        r.u64(ackedUpTo)
        return r.seal()
    }

    static func watermark(instance: String, seq: UInt64) -> [UInt8] {
        var r = MessageJournalRecord(.watermark, capacity: 9 + instance.utf8.count)
        r.str8(instance)
        r.u64(seq)
        return r.seal()
    }

    static func outgoing(status: MessageJournalOutgoingStatus, seq: UInt64, timeMs: UInt64, id: String, text: String) -> [UInt8] {
        var r = MessageJournalRecord(.outgoing, capacity: 22 + id.utf8.count + text.utf8.count)
        r.u8(status.rawValue)
        r.u64(seq)
        r.u64(timeMs)
        r.str8(id)
        r.str32(text)
        return r.seal()
    }

    static func acknowledged(upTo: UInt64) -> [UInt8] {
        var r = MessageJournalRecord(.acknowledged)
        r.u64(upTo)
        return r.seal()
    }

    static func failed(seq: UInt64) -> [UInt8] {
        var r = MessageJournalRecord(.failed)
        r.u64(seq)
        return r.seal()
    }

    static func received(
        instance: String, seq: UInt64, sentAtMs: UInt64, receivedAtMs: UInt64, id: String, text: String
    ) -> [UInt8] {
        var r = MessageJournalRecord(.received, capacity: 30 + instance.utf8.count + id.utf8.count + text.utf8.count)
        r.str8(instance)
        r.u64(seq)
        r.u64(sentAtMs)
        r.u64(receivedAtMs)
        r.str8(id)
        r.str32(text)
        return r.seal()
    }

    static func forgotten(peer: String, lastSeq: UInt64) -> [UInt8] {
        var r = MessageJournalRecord(.forgotten, capacity: 9 + peer.utf8.count)
        r.str8(peer)
        r.u64(lastSeq)
        return r.seal()
    }

    static func announced() -> [UInt8] {
        var r = MessageJournalRecord(.announced, capacity: 0)
        return r.seal()
    }

    static func announced(through messageID: String) -> [UInt8] {
        var r = MessageJournalRecord(.announced, capacity: 1 + messageID.utf8.count)
        r.str8(messageID)
        return r.seal()
    }

    static func outcomesAnnounced(through seq: UInt64) -> [UInt8] {
        var r = MessageJournalRecord(.outcomesAnnounced)
        r.u64(seq)
        return r.seal()
    }

    static func removing() -> [UInt8] {
        var r = MessageJournalRecord(.removing, capacity: 0)
        return r.seal()
    }

    static func forgottenMark(peer: String, instance: String, seq: UInt64) -> [UInt8] {
        var r = MessageJournalRecord(.forgottenMark, capacity: 10 + peer.utf8.count + instance.utf8.count)
        r.str8(peer)
        r.str8(instance)
        r.u64(seq)
        return r.seal()
    }
}

/// A record body's fields, read in order. Throws `Malformed` past the end.
struct MessageJournalReader {
    struct Malformed: Error {}

    private let bytes: [UInt8]
    private var pos: Int
    private let end: Int
    let type: UInt8

    init(_ bytes: [UInt8], body: Range<Int>) throws {
        guard !body.isEmpty else { throw Malformed() }
        self.bytes = bytes
        type = bytes[body.lowerBound]
        pos = body.lowerBound + 1
        end = body.upperBound
    }

    private mutating func take(_ n: Int) throws -> Range<Int> {
        guard n >= 0, end - pos >= n else { throw Malformed() }
        defer { pos += n }
        return pos..<(pos + n)
    }

    var isAtEnd: Bool { pos == end }

    mutating func u8() throws -> UInt8 { bytes[try take(1).lowerBound] }

    mutating func u32() throws -> UInt32 {
        let r = try take(4)
        var v: UInt32 = 0
        for i in r.reversed() { v = v << 8 | UInt32(bytes[i]) }
        return v
    }

    mutating func u64() throws -> UInt64 {
        let r = try take(8)
        var v: UInt64 = 0
        for i in r.reversed() { v = v << 8 | UInt64(bytes[i]) }
        return v
    }

    mutating func str8() throws -> String {
        let n = Int(try u8())
        return String(decoding: bytes[try take(n)], as: UTF8.self)
    }

    mutating func str32() throws -> String {
        let n = Int(try u32())
        return String(decoding: bytes[try take(n)], as: UTF8.self)
    }
}

/// One journal file, open for appending. Owns the crash-safety rules: single-write appends,
/// torn-tail truncation, and rewrite by synced file + atomic rename + synced directory. Syncing
/// appends is the store's business (`syncHandle`, `sync`).
final class MessageJournalFile {
    static let magic: [UInt8] = Array("PVJRNL01".utf8)

    let storage: any Storage
    let path: String
    var compactPath: String { path + ".compact" }
    private var directory: String { (path as NSString).deletingLastPathComponent }
    /// Bytes known to be whole records (the write position).
    private(set) var length: UInt64 = 0
    /// Size of the live contents at the last rewrite (or load); compaction compares against it.
    private(set) var baseline: UInt64 = 0
    private var file: (any StorageFile)?

    /// A journal not yet on disk: the first `rewrite` creates it whole.
    init(storage: any Storage, path: String) {
        self.storage = storage
        self.path = path
    }

    deinit { file?.close() }

    // MARK: Opening

    /// What `load` found: the file, its bytes, and the body range of each whole record.
    struct Loaded {
        var file: MessageJournalFile
        var bytes: [UInt8]
        var bodies: [Range<Int>]
    }

    /// Opens an existing journal and cuts off a torn or corrupt tail. Nil when there is none.
    /// A file that is not a journal at all is moved aside to `<path>.unreadable`, so the peer
    /// starts afresh instead of the service refusing to start.
    static func load(storage: any Storage, path: String, warn: (String) -> Void) throws -> Loaded? {
        try finishInterruptedRewrite(storage: storage, path: path)
        let read: [UInt8]?
        do { read = try storage.read(path) } catch { throw MessageStoreError.io(error) }
        guard let bytes = read else { return nil }
        let file = MessageJournalFile(storage: storage, path: path)

        guard bytes.starts(with: magic) else {
            if magic.starts(with: bytes) {
                // Shorter than the magic it begins with: an interrupted creation. Start empty.
                try file.rewrite(records: [])
                return Loaded(file: file, bytes: [], bodies: [])
            }
            let aside = path + ".unreadable"
            warn("\(fileName(path)) is not a message journal; moved it to \(fileName(aside)) and started afresh")
            do { try storage.rename(path, to: aside) } catch { throw MessageStoreError.io(error) }
            return nil
        }

        var bodies: [Range<Int>] = []
        var pos = magic.count
        while bytes.count - pos >= MessageJournalRecord.prefixSize {
            let lengthField = pos..<(pos + 4)
            var length = 0
            for i in lengthField.reversed() { length = length << 8 | Int(bytes[i]) }
            let bodyStart = pos + MessageJournalRecord.prefixSize
            guard length > 0, bytes.count - bodyStart >= length else { break }
            var stored: UInt32 = 0
            for i in (pos + 4..<pos + 8).reversed() { stored = stored << 8 | UInt32(bytes[i]) }
            let body = bodyStart..<(bodyStart + length)
            guard MessageJournalCRC32.checksum(bytes, lengthField: lengthField, body: body) == stored else { break }
            bodies.append(body)
            pos = body.upperBound
        }

        if pos < bytes.count {
            warn("\(fileName(path)): dropped \(bytes.count - pos) bytes of incomplete or corrupt data at offset \(pos) (an interrupted write)")
        }
        do {
            let handle = try storage.openForAppending(path)
            file.file = handle
            if pos < bytes.count {
                try handle.truncate(to: UInt64(pos))
                // Records appended from here on must never follow the torn bytes on the disk.
                try handle.sync()
            }
        } catch {
            // A read-only or full disk: reading is all a start needs; the first append reopens
            // the file and cuts it to the last whole record (or fails, and says so).
            warn("cannot open \(fileName(path)) for writing yet: \(error)")
            file.close()
        }
        file.length = UInt64(pos)
        file.baseline = UInt64(pos)
        return Loaded(file: file, bytes: bytes, bodies: bodies)
    }

    /// Creates a new journal holding `records` (sealed records, concatenated), synced.
    static func create(storage: any Storage, path: String, records: [UInt8]) throws -> MessageJournalFile {
        let file = MessageJournalFile(storage: storage, path: path)
        try file.rewrite(records: records)
        return file
    }

    /// Left by versions before issue 34, which removed the journal before renaming `.compact`:
    /// journal present means any `.compact` is a partial leftover; journal absent means
    /// `.compact` is the journal. (A rewrite today replaces the journal by an atomic rename.)
    private static func finishInterruptedRewrite(storage: any Storage, path: String) throws {
        let compact = path + ".compact"
        guard storage.exists(compact) else { return }
        if storage.exists(path) {
            // A partial leftover: ignored while the journal exists, removed when the disk allows.
            try? storage.remove(compact)
            return
        }
        do {
            try storage.rename(compact, to: path)
        } catch {
            throw MessageStoreError.io(error)
        }
    }

    // MARK: Writing

    /// Appends sealed records with one write(2), not synced (see `syncHandle`). On failure
    /// nothing is left behind: a partial write is cut off, so a later record can never hide
    /// behind a torn one.
    func append(_ records: [UInt8]) throws {
        if file == nil {
            // A previous failure closed the file; reopen it at the last good length.
            try Self.finishInterruptedRewrite(storage: storage, path: path)
            do {
                let handle = try storage.openForAppending(path)
                try handle.truncate(to: length)
                file = handle
            } catch {
                throw MessageStoreError.io(error)
            }
        }
        do {
            try file!.append(records)
            length += UInt64(records.count)
        } catch {
            do {
                try file!.truncate(to: length)
            } catch {
                close()  // reopening truncates
            }
            throw MessageStoreError.io(error)
        }
    }

    /// Takes back the appends after `length` bytes (a change that could not be synced).
    func cutBack(to length: UInt64) throws {
        guard let file, length <= self.length else { return }
        do { try file.truncate(to: length) } catch { throw MessageStoreError.io(error) }
        self.length = length
    }

    /// Blocks until every append so far is on the disk.
    func sync() throws {
        guard let file else { return }
        do { try file.sync() } catch { throw MessageStoreError.io(error) }
    }

    /// For a sync on another thread; nil when the file is closed (after a failure: the next write
    /// reopens it, or rewrites the journal, which syncs).
    func syncHandle() throws -> (any StorageSyncHandle)? {
        guard let file else { return nil }
        do { return try file.syncHandle() } catch { throw MessageStoreError.io(error) }
    }

    /// Replaces the whole journal with `records` (sealed, concatenated) without ever leaving the
    /// journal missing or half written on the disk; the new contents are synced when it returns.
    func rewrite(records: [UInt8]) throws {
        try Self.finishInterruptedRewrite(storage: storage, path: path)
        let contents = Self.magic + records
        do {
            let compact = try storage.create(compactPath)
            defer { compact.close() }
            try compact.append(contents)
            try compact.sync()
        } catch {
            try? storage.remove(compactPath)
            throw MessageStoreError.io(error)
        }
        close()
        do {
            try storage.rename(compactPath, to: path)
        } catch {
            try? storage.remove(compactPath)
            throw MessageStoreError.io(error)
        }
        length = UInt64(contents.count)
        baseline = length
        do {
            // The new name is durable only once the directory is.
            try storage.syncDirectory(directory)
        } catch {
            throw MessageStoreError.io(error)
        }
        file = try? storage.openForAppending(path)  // if this fails, the next append reopens
    }

    /// Whether appends have grown the file past twice its live size plus `slack`.
    func wantsCompaction(slack: Int) -> Bool {
        length > 2 * baseline + UInt64(max(slack, 0))
    }

    /// After a failed compaction: wait until the file doubles again before retrying.
    func postponeCompaction() { baseline = length }

    /// Sets the live size a load measured, so an oversized journal is compacted soon.
    func setBaseline(_ bytes: UInt64) { baseline = min(bytes, length) }

    func close() {
        file?.close()
        file = nil
    }

    /// Deletes the journal and any leftovers of it, durably.
    func remove() throws {
        close()
        // The journal goes last: while it exists a leftover `.compact` is ignored, but alone a
        // `.compact` would be moved into place and bring the peer back.
        do {
            for p in [compactPath, path + ".unreadable", path] { try storage.remove(p) }
            try storage.syncDirectory(directory)
        } catch {
            throw MessageStoreError.io(error)
        }
    }

    static func fileName(_ path: String) -> String {
        (path as NSString).lastPathComponent
    }
}
