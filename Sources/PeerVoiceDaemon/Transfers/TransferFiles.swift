import Foundation
import Glibc
import PeerVoiceCore

/// One open file of a transfer, closed when released: a source the sender reads, or a part file
/// the receiver writes. Used on one transfer thread at a time (the position saver takes its
/// turn); every call goes through `systemCall`, so errors carry the call that failed.
final class OpenFile: @unchecked Sendable {
    // @unchecked Sendable: the descriptor is immutable; the threads that share an open part
    // file (receiving, and its position saver) take turns by the saver's lock.
    let fd: Int32
    let path: String

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }

    /// A source to send: read-only; a symbolic link is followed only when `followLinks` (a file
    /// the person named, not one found inside a folder).
    static func source(_ path: String, followLinks: Bool) throws(SystemError) -> OpenFile {
        let flags = O_RDONLY | O_CLOEXEC | (followLinks ? 0 : O_NOFOLLOW)
        return OpenFile(fd: try systemCall("open") { open(path, flags) }, path: path)
    }

    /// A part file to write, made if it is not there; never through a symbolic link.
    static func part(_ path: String) throws(SystemError) -> OpenFile {
        OpenFile(fd: try systemCall("open") { open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }, path: path)
    }

    var identity: TransferRecord.FileIdentity {
        get throws(SystemError) {
            var info = stat()
            try systemCall("fstat") { fstat(fd, &info) }
            return Self.identity(info)
        }
    }

    static func identity(_ info: stat) -> TransferRecord.FileIdentity {
        TransferRecord.FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: UInt64(info.st_size),
                                    modifiedNs: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
                                    changedNs: Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec))
    }

    var size: UInt64 {
        get throws(SystemError) { try identity.size }
    }

    /// Reads `buffer.count` bytes at `offset`; fewer only at the end of the file.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws(SystemError) -> Int {
        var done = 0
        while done < buffer.count {
            let count = try systemCall("pread") {
                pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            }
            if count == 0 { break }
            done += count
        }
        return done
    }

    /// Hashes the first `count` bytes (a resumed file's, at either end); false when the file
    /// holds fewer.
    func hash(upTo count: UInt64, into hasher: inout any ContentHasher) throws(SystemError) -> Bool {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var position: UInt64 = 0
        while position < count {
            let read = try self.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(UInt64(buffer.count), count - position))]),
                                     at: position)
            guard read > 0 else { return false }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<read]))
            position += UInt64(read)
        }
        return true
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws(SystemError) {
        var done = 0
        while done < bytes.count {
            done += try systemCall("pwrite") { pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done)) }
        }
    }

    /// Where the next data lies at or after `offset` (`SEEK_DATA`): `offset` itself when the file
    /// system cannot tell; nil when only a hole is left.
    func nextData(from offset: UInt64) -> UInt64? {
        let found = lseek(fd, off_t(offset), Self.seekData)
        if found >= 0 { return UInt64(found) }
        return errno == ENXIO ? nil : offset
    }

    /// Linux's `SEEK_DATA` (a GNU extension Swift's Glibc module leaves out).
    private static let seekData: Int32 = 3

    func truncate(to size: UInt64) throws(SystemError) {
        try systemCall("ftruncate") { ftruncate(fd, off_t(size)) }
    }

    /// Flushes the data to the disk (`fdatasync`).
    func syncData() throws(SystemError) {
        try systemCall("fdatasync") { fdatasync(fd) }
    }
}

/// The receiver's folder operations: making part folders, flushing a folder's entries, moving
/// a finished item under a free name, clearing partial data, and the free space.
enum TransferFolder {
    /// Makes `path` (and missing parents) as folders; one that exists is fine.
    static func make(_ path: String) throws(SystemError) {
        var made = ""
        for component in path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            made += "/" + String(Substring(component))
            if mkdir(made, 0o755) != 0 && errno != EEXIST { throw SystemError(call: "mkdir", code: errno) }
        }
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { throw SystemError(call: "mkdir", code: ENOTDIR) }
    }

    /// Flushes a folder's entries (a rename or new name in it) to the disk.
    static func sync(_ path: String) throws(SystemError) {
        let fd = try systemCall("open") { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { close(fd) }
        try systemCall("fsync") { fsync(fd) }
    }

    /// Moves the finished item at `part` into `folder` under `name`, or the first free name like
    /// it (`DestinationNames.freeName`), never over anything: the free name is taken first with an
    /// empty file (or folder) made exclusively, which the item then replaces in one rename.
    /// (`renameat2`'s RENAME_NOREPLACE would say it in one call; Swift's Glibc module does not
    /// offer it.) Returns the name used; the folder is flushed.
    static func place(_ part: String, isFolder: Bool, in folder: String, as name: String) throws(SystemError) -> String {
        var lastError = SystemError(call: "rename", code: EEXIST)
        for _ in 0..<16 {
            let free = DestinationNames.freeName(for: name) { access(folder + "/" + $0, F_OK) == 0 || errno != ENOENT }
            let target = folder + "/" + free
            if isFolder {
                guard mkdir(target, 0o755) == 0 else { lastError = SystemError(call: "mkdir", code: errno); continue }
            } else {
                let placeholder = open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
                guard placeholder >= 0 else { lastError = SystemError(call: "open", code: errno); continue }
                close(placeholder)
            }
            if rename(part, target) == 0 {
                try sync(folder)
                return free
            }
            lastError = SystemError(call: "rename", code: errno)
            // Something appeared in the placeholder folder meanwhile: leave it, try the next name.
            if isFolder { rmdir(target) } else { unlink(target) }
            if lastError.code != ENOTEMPTY && lastError.code != EEXIST { break }
        }
        throw lastError
    }

    /// Removes `path` and everything below it, never following a symbolic link; nothing if absent.
    static func remove(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] { remove(path + "/" + name) }
            rmdir(path)
        } else {
            unlink(path)
        }
    }

    /// The bytes free to this user on the file system holding `path`, and that file system's
    /// mount point (for a message a person can act on).
    static func freeSpace(at path: String) throws(SystemError) -> (bytes: UInt64, mountPoint: String) {
        var info = statvfs()
        try systemCall("statvfs") { statvfs(path, &info) }
        return (UInt64(info.f_bavail) * UInt64(info.f_frsize), mountPoint(of: path))
    }

    /// The highest folder above `path` on the same device.
    static func mountPoint(of path: String) -> String {
        var current = path
        var info = stat()
        guard stat(current, &info) == 0 else { return path }
        let device = info.st_dev
        while current != "/" {
            let parent = (current as NSString).deletingLastPathComponent
            let next = parent.isEmpty ? "/" : parent
            guard stat(next, &info) == 0, info.st_dev == device else { break }
            current = next
        }
        return current
    }
}
