/// The few file-system operations the core's durable state needs (message journals, the
/// tombstone file, `peers.json`): whole-file reads, appends, atomic renames, and syncs that say
/// when bytes are on the disk. `FileStorage` is the real file system; the simulation's disk
/// keeps what was synced and loses the rest when it "crashes" (Tests/Simulation).
///
/// Paths are absolute. Used from one thread, except `StorageSyncHandle`.
public protocol Storage: AnyObject {
    /// The whole file, or nil if there is none.
    func read(_ path: String) throws(StorageError) -> [UInt8]?
    func exists(_ path: String) -> Bool
    func isDirectory(_ path: String) -> Bool
    /// The names in a directory (not paths), in no particular order.
    func list(_ directory: String) throws(StorageError) -> [String]
    /// Creates the directory and any missing parents, owner-only (mode 0700), durably (each
    /// parent synced after the entry was made in it).
    func makeDirectory(_ path: String) throws(StorageError)
    /// Restricts an existing directory to its owner (mode 0700).
    func restrictToOwner(_ path: String) throws(StorageError)
    /// Creates a new, empty file, owner-only (mode 0600), open for appending; fails if it exists.
    func create(_ path: String) throws(StorageError) -> any StorageFile
    /// Opens an existing file for appending.
    func openForAppending(_ path: String) throws(StorageError) -> any StorageFile
    /// Renames `from` to `to` atomically, replacing `to` if it exists. Durable only once the
    /// directory is synced.
    func rename(_ from: String, to: String) throws(StorageError)
    /// Removes a file; nothing happens if there is none. Durable only once the directory is synced.
    func remove(_ path: String) throws(StorageError)
    /// Blocks until the directory's entries (creations, renames, removals) are on the disk.
    func syncDirectory(_ path: String) throws(StorageError)
}

/// A file open for appending.
public protocol StorageFile: AnyObject {
    /// Writes all of `bytes` at the end. On failure part of them may have been written: the
    /// caller cuts the file back (`truncate`).
    func append(_ bytes: [UInt8]) throws(StorageError)
    /// Cuts the file to `length` bytes; later appends go after them.
    func truncate(to length: UInt64) throws(StorageError)
    /// Blocks until what was written so far is on the disk.
    func sync() throws(StorageError)
    /// A handle another thread may use to sync what was written before its `sync()` is called,
    /// while this file goes on being written (and even once it is closed).
    func syncHandle() throws(StorageError) -> any StorageSyncHandle
    func close()
}

/// Syncs one file from another thread (the daemon's sync thread: group commit off the main loop).
public protocol StorageSyncHandle: Sendable {
    func sync() throws(StorageError)
}

/// Why a storage operation failed: a kind the caller can act on (a full disk is not a bug) and
/// the words for a person.
public struct StorageError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// No space left on the device, or the quota is used up.
        case noSpace
        /// A read-only file system, or no permission to write.
        case readOnly
        case notFound
        case other
    }

    public let kind: Kind
    /// What was attempted, e.g. "write".
    public let operation: String
    public let path: String
    /// Why, e.g. the system's "No space left on device".
    public let reason: String

    public init(_ kind: Kind, operation: String, path: String, reason: String) {
        self.kind = kind
        self.operation = operation
        self.path = path
        self.reason = reason
    }

    public var description: String { "cannot \(operation) \(path): \(reason)" }
}
