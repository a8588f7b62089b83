import Foundation
import PeerVoiceCore
import SeededRandom

/// A disk in memory that keeps only what was synced when the machine crashes, as the core's
/// `Storage` sees a disk. Each file's contents since its last `sync` are a list of pending writes,
/// and each directory's entries (creations, renames, removals) since its last `syncDirectory` a
/// list of pending changes; a crash keeps, per file and per directory, a random prefix of its
/// pending list (the last write of a file maybe torn: cut short, or its length extended over
/// zeros), so a crash loses a random part of everything not synced, in order, and nothing synced.
/// A file whose name was never synced may be gone whatever its contents; one renamed over another
/// may be found with only its synced bytes.
///
/// Faults: `capacityBytes` (writes past it fail with "No space left on device" after writing
/// what fits, as write(2) does), `isReadOnly` (every change fails), and `stop(afterOperations:)`:
/// the machine stops at a given change inside a call (a crash between any two writes), after
/// which every operation fails until `restart()`.
public final class SimulatedDisk: Storage {
    private final class Inode {
        var durable: [UInt8] = []
        var pending: [DataChange] = []
        var contents: [UInt8] = []
    }

    private enum DataChange {
        case append([UInt8])
        case truncate(Int)
    }

    private enum NameChange {
        case link(String, Inode)
        case unlink(String)
        case rename(String, String)
        case makeDirectory(String)
    }

    private var files: [String: Inode] = [:]
    /// Every file's contents since the last crash, in the order they were made (what a crash visits).
    private var inodes: [Inode] = []
    private var directories: Set<String> = ["/"]
    private var durableFiles: [String: Inode] = [:]
    private var durableDirectories: Set<String> = ["/"]
    /// Per directory, its entries' changes since it was last synced, oldest first.
    private var pendingNames: [String: [NameChange]] = [:]
    private var random: SplitMix64
    /// Bumped by every crash: files opened before it are closed.
    private var generation = 0

    /// Writes that would make the files hold more bytes than this fail (nil: no limit).
    public var capacityBytes: Int?
    /// Every change fails with "Read-only file system".
    public var isReadOnly = false
    /// Changes made so far (creations, writes, truncations, syncs, renames, removals).
    public private(set) var changes = 0
    /// The machine stopped inside a call (`stop(afterOperations:)`): nothing more happens until `restart()`.
    public private(set) var isStopped = false
    private var stopCountdown: Int?

    /// Told of every change (a replay's log).
    public var trace: ((String) -> Void)?

    public init(seed: UInt64) { random = SplitMix64(seed: seed) }

    /// Bytes in the files that have a name (what `capacityBytes` limits).
    public var usedBytes: Int { files.values.reduce(0) { $0 + $1.contents.count } }

    /// Bytes under `directory` (its files, not sub-directories).
    public func bytes(under directory: String) -> Int {
        files.filter { Self.parent($0.key) == directory }.values.reduce(0) { $0 + $1.contents.count }
    }

    // MARK: Crashing

    /// The machine loses power now: every file and directory keeps a random prefix of what was
    /// not synced; files open before are closed.
    public func crash() {
        for inode in inodes { keepPrefixOfPendingWrites(inode) }
        for directory in pendingNames.keys.sorted() {
            let changes = pendingNames[directory]!
            let kept = Int(random.next() % UInt64(changes.count + 1))
            for change in changes.prefix(kept) { apply(change, to: &durableFiles, &durableDirectories) }
        }
        pendingNames = [:]
        // What is inside a directory whose own name was lost is lost with it (fsck would put it
        // in lost+found).
        while let orphan = durableDirectories.sorted().first(where: { $0 != "/" && !durableDirectories.contains(Self.parent($0)) }) {
            durableDirectories.remove(orphan)
        }
        durableFiles = durableFiles.filter { durableDirectories.contains(Self.parent($0.key)) }
        files = durableFiles
        directories = durableDirectories
        inodes = files.keys.sorted().map { files[$0]! }
        for inode in inodes { inode.contents = inode.durable }
        generation += 1
    }

    /// The machine stops at the `count`-th change from now (0: the next), before making it: a
    /// crash inside a call. The disk crashes then; everything after fails until `restart()`.
    public func stop(afterOperations count: Int) {
        stopCountdown = count
    }

    /// The machine starts again after a stop (the crash already happened).
    public func restart() {
        isStopped = false
        stopCountdown = nil
    }

    private func keepPrefixOfPendingWrites(_ inode: Inode) {
        var contents = inode.durable
        let kept = Int(random.next() % UInt64(inode.pending.count + 1))
        for (index, change) in inode.pending.prefix(kept + 1).enumerated() {
            switch change {
            case .truncate(let length):
                guard index < kept else { break }
                contents = Array(contents.prefix(length)) + [UInt8](repeating: 0, count: max(0, length - contents.count))
            case .append(let bytes):
                if index < kept {
                    contents += bytes
                } else if random.next() % 2 == 0, !bytes.isEmpty {
                    // The last write torn: part of it, or its length over zeros (data not written yet).
                    let cut = Int(random.next() % UInt64(bytes.count))
                    contents += random.next() % 3 == 0 ? [UInt8](repeating: 0, count: bytes.count) : Array(bytes.prefix(cut))
                }
            }
        }
        inode.durable = contents
        inode.pending = []
    }

    private func apply(_ change: NameChange, to files: inout [String: Inode], _ directories: inout Set<String>) {
        switch change {
        case .link(let path, let inode): files[path] = inode
        case .unlink(let path): files[path] = nil
        case .rename(let from, let to):
            if let inode = files.removeValue(forKey: from) { files[to] = inode }
        case .makeDirectory(let path): directories.insert(path)
        }
    }

    private func record(_ change: NameChange, in directory: String) {
        pendingNames[directory, default: []].append(change)
    }

    /// Counts a change about to be made; throws if the machine is stopped or stops now.
    private func change(_ operation: String, _ path: String) throws(StorageError) {
        if isStopped { throw StorageError(.other, operation: operation, path: path, reason: "the machine stopped") }
        if let countdown = stopCountdown {
            if countdown == 0 {
                stopCountdown = nil
                isStopped = true
                trace?("the machine stops before: \(operation) \((path as NSString).lastPathComponent)")
                crash()
                throw StorageError(.other, operation: operation, path: path, reason: "the machine stopped")
            }
            stopCountdown = countdown - 1
        }
        if isReadOnly { throw StorageError(.readOnly, operation: operation, path: path, reason: "Read-only file system") }
        changes += 1
        trace?("disk change \(changes): \(operation) \((path as NSString).lastPathComponent)")
    }

    // MARK: Storage

    public func read(_ path: String) throws(StorageError) -> [UInt8]? {
        if isStopped { throw StorageError(.other, operation: "read", path: path, reason: "the machine stopped") }
        return files[path]?.contents
    }

    public func exists(_ path: String) -> Bool { files[path] != nil || directories.contains(path) }

    public func isDirectory(_ path: String) -> Bool { directories.contains(path) }

    public func list(_ directory: String) throws(StorageError) -> [String] {
        guard directories.contains(directory) else {
            throw StorageError(.notFound, operation: "list", path: directory, reason: "No such file or directory")
        }
        let entries = files.keys.filter { Self.parent($0) == directory } + directories.filter { $0 != "/" && Self.parent($0) == directory }
        return entries.map { ($0 as NSString).lastPathComponent }.sorted()
    }

    public func makeDirectory(_ path: String) throws(StorageError) {
        if directories.contains(path) { return }
        let parent = Self.parent(path)
        if !directories.contains(parent) { try makeDirectory(parent) }
        try change("create the directory", path)
        directories.insert(path)
        record(.makeDirectory(path), in: parent)
        try syncDirectory(parent)
    }

    public func restrictToOwner(_ path: String) throws(StorageError) {}

    public func create(_ path: String) throws(StorageError) -> any StorageFile {
        try change("create", path)
        guard directories.contains(Self.parent(path)) else {
            throw StorageError(.notFound, operation: "create", path: path, reason: "No such file or directory")
        }
        guard files[path] == nil else { throw StorageError(.other, operation: "create", path: path, reason: "File exists") }
        let inode = Inode()
        inodes.append(inode)
        files[path] = inode
        record(.link(path, inode), in: Self.parent(path))
        return File(disk: self, inode: inode, path: path, generation: generation)
    }

    public func openForAppending(_ path: String) throws(StorageError) -> any StorageFile {
        if isStopped { throw StorageError(.other, operation: "open", path: path, reason: "the machine stopped") }
        guard let inode = files[path] else {
            throw StorageError(.notFound, operation: "open", path: path, reason: "No such file or directory")
        }
        return File(disk: self, inode: inode, path: path, generation: generation)
    }

    public func rename(_ from: String, to: String) throws(StorageError) {
        try change("rename \((from as NSString).lastPathComponent) to", to)
        guard let inode = files.removeValue(forKey: from) else {
            throw StorageError(.notFound, operation: "rename", path: from, reason: "No such file or directory")
        }
        files[to] = inode
        record(.rename(from, to), in: Self.parent(to))
    }

    public func remove(_ path: String) throws(StorageError) {
        guard files[path] != nil else {
            if isStopped { throw StorageError(.other, operation: "delete", path: path, reason: "the machine stopped") }
            return
        }
        try change("delete", path)
        files[path] = nil
        record(.unlink(path), in: Self.parent(path))
    }

    public func syncDirectory(_ path: String) throws(StorageError) {
        try change("sync", path)
        for change in pendingNames.removeValue(forKey: path) ?? [] {
            apply(change, to: &durableFiles, &durableDirectories)
        }
    }

    static func parent(_ path: String) -> String {
        let parent = (path as NSString).deletingLastPathComponent
        return parent.isEmpty ? "/" : parent
    }

    private func write(_ inode: Inode, _ bytes: [UInt8], path: String) throws(StorageError) {
        try change("write", path)
        var bytes = bytes
        var full = false
        if let capacity = capacityBytes, usedBytes + bytes.count > capacity {
            bytes = Array(bytes.prefix(max(0, capacity - usedBytes)))
            full = true
        }
        if !bytes.isEmpty {
            inode.contents += bytes
            inode.pending.append(.append(bytes))
        }
        if full { throw StorageError(.noSpace, operation: "write", path: path, reason: "No space left on device") }
    }

    private func truncate(_ inode: Inode, to length: Int, path: String) throws(StorageError) {
        try change("truncate", path)
        inode.contents = Array(inode.contents.prefix(length)) + [UInt8](repeating: 0, count: max(0, length - inode.contents.count))
        inode.pending.append(.truncate(length))
    }

    private func sync(_ inode: Inode, path: String) throws(StorageError) {
        try change("sync", path)
        inode.durable = inode.contents
        inode.pending = []
    }

    private final class File: StorageFile {
        unowned let disk: SimulatedDisk
        let inode: Inode
        let path: String
        let generation: Int
        var isClosed = false

        init(disk: SimulatedDisk, inode: Inode, path: String, generation: Int) {
            self.disk = disk
            self.inode = inode
            self.path = path
            self.generation = generation
        }

        private func checkOpen(_ operation: String) throws(StorageError) {
            guard !isClosed, generation == disk.generation else {
                throw StorageError(.other, operation: operation, path: path, reason: "Bad file descriptor")
            }
        }

        func append(_ bytes: [UInt8]) throws(StorageError) {
            try checkOpen("write")
            try disk.write(inode, bytes, path: path)
        }

        func truncate(to length: UInt64) throws(StorageError) {
            try checkOpen("truncate")
            try disk.truncate(inode, to: Int(length), path: path)
        }

        func sync() throws(StorageError) {
            try checkOpen("sync")
            try disk.sync(inode, path: path)
        }

        func syncHandle() throws(StorageError) -> any StorageSyncHandle {
            try checkOpen("duplicate the descriptor of")
            return SyncHandle(file: self)
        }

        func close() { isClosed = true }
    }

    /// Syncs the file it was made from, even once that is closed (as a duplicated descriptor
    /// does), until the machine crashes. `@unchecked Sendable`: the simulation runs on one thread.
    private final class SyncHandle: StorageSyncHandle, @unchecked Sendable {
        let file: File

        init(file: File) { self.file = file }

        func sync() throws(StorageError) {
            guard file.generation == file.disk.generation else {
                throw StorageError(.other, operation: "sync", path: file.path, reason: "Bad file descriptor")
            }
            try file.disk.sync(file.inode, path: file.path)
        }
    }
}
