import Foundation

/// The real file system behind `Storage`: POSIX calls, each in one place with its error turned
/// into a `StorageError` (after swift-system's habit of one wrapper per system call).
/// Files are written with `O_APPEND`; `sync` is fdatasync(2) (the data and the size, which is all
/// an append-only file needs); a directory is synced with fsync(2).
public final class FileStorage: Storage {
    public init() {}

    public func read(_ path: String) throws(StorageError) -> [UInt8]? {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw Self.error("open", path)
        }
        defer { Glibc.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Self.error("read", path)
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    public func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    public func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    public func list(_ directory: String) throws(StorageError) -> [String] {
        guard let dir = opendir(directory) else { throw Self.error("list", directory) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    public func makeDirectory(_ path: String) throws(StorageError) {
        if isDirectory(path) { return }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty && parent != path && !isDirectory(parent) { try makeDirectory(parent) }
        if mkdir(path, 0o700) != 0 {
            if errno == EEXIST { return }
            throw Self.error("create the directory", path)
        }
        // Its name in the parent is on the disk too: the files synced inside it must not vanish
        // with it at a power loss.
        try syncDirectory(parent.isEmpty ? "." : parent)
    }

    public func restrictToOwner(_ path: String) throws(StorageError) {
        if chmod(path, 0o700) != 0 { throw Self.error("restrict to its owner", path) }
    }

    public func create(_ path: String) throws(StorageError) -> any StorageFile {
        // Owner-only from the start: text never becomes readable by others, even for a moment.
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0o600)
        if fd < 0 { throw Self.error("create", path) }
        return File(fd: fd, path: path)
    }

    public func openForAppending(_ path: String) throws(StorageError) -> any StorageFile {
        let fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        if fd < 0 { throw Self.error("open", path) }
        return File(fd: fd, path: path)
    }

    public func rename(_ from: String, to: String) throws(StorageError) {
        if Glibc.rename(from, to) != 0 { throw Self.error("rename \((from as NSString).lastPathComponent) to", to) }
    }

    public func remove(_ path: String) throws(StorageError) {
        if unlink(path) != 0 && errno != ENOENT { throw Self.error("delete", path) }
    }

    public func syncDirectory(_ path: String) throws(StorageError) {
        let fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd < 0 { throw Self.error("open", path) }
        defer { Glibc.close(fd) }
        if fsync(fd) != 0 { throw Self.error("sync", path) }
    }

    /// `errno` as a `StorageError`.
    static func error(_ operation: String, _ path: String) -> StorageError {
        let code = errno
        let kind: StorageError.Kind = switch code {
        case ENOSPC, EDQUOT: .noSpace
        case EROFS, EACCES, EPERM: .readOnly
        case ENOENT: .notFound
        default: .other
        }
        return StorageError(kind, operation: operation, path: path, reason: String(cString: strerror(code)))
    }

    private final class File: StorageFile {
        private var fd: Int32
        private let path: String

        init(fd: Int32, path: String) {
            self.fd = fd
            self.path = path
        }

        deinit { close() }

        func append(_ bytes: [UInt8]) throws(StorageError) {
            guard fd >= 0 else { throw StorageError(.other, operation: "write", path: path, reason: "the file is closed") }
            var written = 0
            while written < bytes.count {
                let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
                if count < 0 {
                    if errno == EINTR { continue }
                    throw FileStorage.error("write", path)
                }
                written += count
            }
        }

        func truncate(to length: UInt64) throws(StorageError) {
            if ftruncate(fd, off_t(length)) != 0 { throw FileStorage.error("truncate", path) }
        }

        func sync() throws(StorageError) {
            if fdatasync(fd) != 0 { throw FileStorage.error("sync", path) }
        }

        func syncHandle() throws(StorageError) -> any StorageSyncHandle {
            let copy = dup(fd)
            if copy < 0 { throw FileStorage.error("duplicate the descriptor of", path) }
            return SyncHandle(fd: copy, path: path)
        }

        func close() {
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
        }
    }

    /// Owns a duplicate of a file's descriptor: syncing it flushes the same file, and closing the
    /// original (a compaction replaces the journal) does not pull it from under the sync thread.
    /// `@unchecked Sendable`: the descriptor is only synced and, at deinit, closed.
    private final class SyncHandle: StorageSyncHandle, @unchecked Sendable {
        private let fd: Int32
        private let path: String

        init(fd: Int32, path: String) {
            self.fd = fd
            self.path = path
        }

        deinit { Glibc.close(fd) }

        func sync() throws(StorageError) {
            if fdatasync(fd) != 0 { throw FileStorage.error("sync", path) }
        }
    }
}
