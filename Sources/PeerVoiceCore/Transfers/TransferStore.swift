import Foundation

/// What the service keeps of one transfer across restarts (`transfers/<id>.json` in the state
/// directory): enough to resume it after a `kill -9` of either side, or to answer a re-offer of
/// one that ended.
public struct TransferRecord: Codable, Equatable, Sendable {
    /// What a file was when it was offered: a change to it (size, content, replacement) changes
    /// one of these, and the sender fails the transfer rather than send something half-true.
    public struct FileIdentity: Codable, Equatable, Sendable {
        public var device: UInt64
        public var inode: UInt64
        public var size: UInt64
        public var modifiedNs: Int64
        /// The inode's change time: `touch -d` cannot set it back.
        public var changedNs: Int64

        public init(device: UInt64, inode: UInt64, size: UInt64, modifiedNs: Int64, changedNs: Int64) {
            self.device = device
            self.inode = inode
            self.size = size
            self.modifiedNs = modifiedNs
            self.changedNs = changedNs
        }
    }

    /// One manifest entry as kept: kind, path and size.
    public struct Entry: Codable, Equatable, Sendable {
        public var folder: Bool
        public var path: String
        public var size: UInt64
    }

    public let idHex: String
    /// The peer's id (`pv:` and 26 characters).
    public let peer: String
    public let createdMs: UInt64
    public var lifecycle: TransferLifecycle
    public let entries: [Entry]
    /// Outgoing: the source of each entry (same order as `entries`), absolute.
    public var sources: [String] = []
    /// Outgoing: each file entry's identity when it was offered (same order as the manifest's files).
    public var identities: [FileIdentity] = []
    /// Outgoing: what a folder held that is not sent (symbolic links, devices, …), with why.
    public var skipped: [String] = []
    /// Incoming: the folder the items are saved in.
    public var folder = ""
    /// Outgoing: an OFFER went out on some stream, so the receiver may know of the transfer (and
    /// must hear how it ended).
    public var offered = false
    /// Ended: whether the end reached the person (its signal written to the bus). One that did
    /// not is shown again when the service starts. Absent in records written before it: shown.
    public var endShown: Bool?

    public init(id: TransferID, peer: String, createdMs: UInt64, direction: TransferDirection, manifest: TransferManifest) {
        idHex = id.hex
        self.peer = peer
        self.createdMs = createdMs
        lifecycle = TransferLifecycle(direction: direction)
        entries = manifest.entries.map { Entry(folder: $0.kind == .folder, path: $0.path.description, size: $0.size) }
    }

    public var id: TransferID? { TransferID(hex: idHex) }

    /// The manifest again, every path checked anew (the file might have been edited).
    public func manifest() throws -> TransferManifest {
        var decoded: [TransferManifest.Entry] = []
        decoded.reserveCapacity(entries.count)
        for entry in entries {
            decoded.append(TransferManifest.Entry(kind: entry.folder ? .folder : .file, path: try TransferPath(entry.path), size: entry.size))
        }
        return try TransferManifest(entries: decoded)
    }
}

/// How far an incoming transfer has come, durably (`<id>.progress`): where data resumes, and the
/// top-level items already in place. Written by the thread receiving it, after the data it
/// counts was flushed to disk.
public struct TransferProgress: Codable, Equatable, Sendable {
    /// Every file before it, and `offset` bytes of its file, are on disk.
    public var position: TransferPosition
    /// Top-level name → the name it was saved under.
    public var placed: [String: String] = [:]
    /// Top-level name → the free name it is being moved to (written before the move, so that a
    /// crash in between finds the item where it went).
    public var placing: [String: String] = [:]

    public init(position: TransferPosition = .start) {
        self.position = position
    }
}

/// The transfers folder of the state directory: one record per transfer (`<id>.json`), and for an
/// incoming one being received, its progress (`<id>.progress`). Every write goes to a
/// temporary file that is flushed to disk (`fsync`) and renamed over the old one, and the folder
/// is synced after every rename and removal, so a crash (or a power loss) leaves the old version
/// or the new, never a mix, and never brings back a record that was replaced or removed (an
/// incoming transfer that ended would come back `paused`, waiting for a sender that forgot it:
/// simulation seed 1). Any thread may use it, one transfer's files from one thread at a time:
/// `FileStorage` holds no state; the simulation gives its disk and runs on one thread.
public struct TransferStore: @unchecked Sendable {
    public let directory: String
    private let storage: any Storage
    /// Ended incoming transfers are remembered this long, to answer a sender that missed the end.
    public static let keepFinishedMs: UInt64 = 30 * 24 * 3600 * 1000

    public init(directory: String, storage: any Storage = FileStorage()) throws(TransferStoreError) {
        self.directory = directory
        self.storage = storage
        do {
            try storage.makeDirectory(directory)
        } catch {
            throw TransferStoreError(directory: directory, reason: error.reason)
        }
    }

    private func recordPath(_ idHex: String) -> String { directory + "/" + idHex + ".json" }
    private func progressPath(_ idHex: String) -> String { directory + "/" + idHex + ".progress" }

    /// Every record that reads back, and a line for each one that does not (set aside as
    /// `<name>.unreadable`, never deleted); ended ones older than ``keepFinishedMs`` go. An ended
    /// one written before `endShown` existed says it was shown.
    public func loadAll(nowMs: UInt64) -> (records: [TransferRecord], warnings: [String]) {
        let names = (try? storage.list(directory)) ?? []
        var records: [TransferRecord] = []
        var warnings: [String] = []
        for name in names.sorted() where name.hasSuffix(".json") {
            let path = directory + "/" + name
            do {
                guard let bytes = try storage.read(path) else { continue }
                var record = try JSONDecoder().decode(TransferRecord.self, from: Data(bytes))
                guard record.id != nil, record.recordPathName == name else { throw CocoaError(.fileReadCorruptFile) }
                if record.lifecycle.state.isFinished && nowMs > record.createdMs + Self.keepFinishedMs {
                    remove(record.idHex)
                    continue
                }
                if record.lifecycle.state.isFinished && record.endShown == nil { record.endShown = true }
                records.append(record)
            } catch {
                warnings.append("\(name) does not read back (\(error.localizedDescription)): set aside as \(name).unreadable")
                try? storage.rename(path, to: path + ".unreadable")
            }
        }
        return (records, warnings)
    }

    public func save(_ record: TransferRecord) throws(TransferStoreError) {
        try writeDurably(record, to: recordPath(record.idHex))
    }

    /// Forgets a transfer: its record and progress. False when the disk refused (read-only):
    /// the record is still there, and would bring the transfer back at the next start.
    @discardableResult
    public func remove(_ idHex: String) -> Bool {
        do throws(StorageError) {
            try storage.remove(recordPath(idHex))
            try storage.remove(progressPath(idHex))
            try storage.syncDirectory(directory)
            return true
        } catch {
            return false
        }
    }

    /// Forgets how far an incoming transfer came (it ended: nothing resumes).
    public func removeProgress(_ idHex: String) {
        try? storage.remove(progressPath(idHex))
        try? storage.syncDirectory(directory)
    }

    /// Records how far an incoming transfer has come (the data it counts was flushed before).
    public func saveProgress(_ progress: TransferProgress, of idHex: String) throws(TransferStoreError) {
        try writeDurably(progress, to: progressPath(idHex))
    }

    /// The progress last saved; nil when none was (or it does not read back).
    public func progress(of idHex: String) -> TransferProgress? {
        guard let bytes = try? storage.read(progressPath(idHex)),
              let progress = try? JSONDecoder().decode(TransferProgress.self, from: Data(bytes)),
              progress.position.fileIndex >= 0 else { return nil }
        return progress
    }

    private func writeDurably(_ value: some Encodable, to path: String) throws(TransferStoreError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data: Data
        do { data = try encoder.encode(value) } catch { throw TransferStoreError(directory: directory, reason: "\(error)") }
        let temporary = path + ".tmp"
        do throws(StorageError) {
            // What a crash left of an earlier attempt goes first (create refuses an existing file).
            try storage.remove(temporary)
            let file = try storage.create(temporary)
            do throws(StorageError) {
                try file.append(Array(data))
                try file.sync()
                file.close()
            } catch {
                // A full disk: what was written of the temporary file gives its space back.
                file.close()
                try? storage.remove(temporary)
                throw error
            }
            try storage.rename(temporary, to: path)
            try storage.syncDirectory(directory)
        } catch {
            throw TransferStoreError(directory: directory, reason: error.reason)
        }
    }
}

/// The state directory refused a transfer's record or progress (full, read-only): says so, so
/// that a failure names that disk rather than the download folder the data goes to.
public struct TransferStoreError: Error, CustomStringConvertible {
    public let directory: String
    public let reason: String

    public var description: String { "cannot record the transfer in the state directory \(directory): \(reason)" }
}

extension TransferRecord {
    fileprivate var recordPathName: String { idHex + ".json" }
}
