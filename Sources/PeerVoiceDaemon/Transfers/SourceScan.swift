import Glibc
import PeerVoiceCore

/// What `SendFiles` will send, read from the disk (on the transfers' disk thread): each path a
/// person named, a file or a folder taken whole, as manifest entries with their sources and
/// what each file was at this moment (`FileIdentity`). Inside a folder only regular files and
/// folders are taken; symbolic links (never followed out of it, nor in it), devices, sockets,
/// unreadable entries and names no peer would accept are listed as skipped, with why.
struct SourceScan {
    var entries: [TransferManifest.Entry] = []
    /// The source of each entry, same order.
    var sources: [String] = []
    /// Each file entry's identity, in the order of the manifest's files.
    var identities: [TransferRecord.FileIdentity] = []
    var skipped: [String] = []

    /// Scans `paths` (absolute). Throws `InvalidArgument` for a path that is not there or not a
    /// file or folder, a name no peer would accept, two items of one name; `TooLarge` past
    /// `TransferWire.maxEntries` entries.
    static func scan(_ paths: [String]) throws(ServiceError) -> SourceScan {
        var scan = SourceScan()
        var topLevel: Set<String> = []
        for path in paths {
            let trimmed = path.count > 1 && path.hasSuffix("/") ? String(path.reversed().drop { $0 == "/" }.reversed()) : path
            let name = String(trimmed.split(separator: "/").last ?? "")
            var info = stat()
            // A link the person named is what they meant: it is followed.
            guard stat(trimmed, &info) == 0 else {
                throw .invalidArgument("cannot send \(path): \(String(cString: strerror(errno)))")
            }
            let entry: TransferPath
            do {
                entry = try TransferPath(name)
            } catch {
                throw .invalidArgument("cannot send \(path): its name has \(error)")
            }
            guard topLevel.insert(name).inserted else {
                throw .invalidArgument("two of the paths are named \(name): the receiver would save both under one name (send them one at a time)")
            }
            switch info.st_mode & S_IFMT {
            case S_IFREG:
                guard access(trimmed, R_OK) == 0 else { throw .invalidArgument("cannot read \(path): \(String(cString: strerror(errno)))") }
                try scan.add(.file(entry, size: UInt64(info.st_size)), source: trimmed, info: info)
            case S_IFDIR:
                guard access(trimmed, R_OK | X_OK) == 0 else { throw .invalidArgument("cannot read \(path): \(String(cString: strerror(errno)))") }
                try scan.add(.folder(entry), source: trimmed, info: info)
                try scan.walk(trimmed, as: entry)
            default:
                throw .invalidArgument("cannot send \(path): it is neither a file nor a folder")
            }
        }
        return scan
    }

    private mutating func add(_ entry: TransferManifest.Entry, source: String, info: stat) throws(ServiceError) {
        guard entries.count < TransferWire.maxEntries else {
            throw .tooLarge("more than \(TransferWire.maxEntries) files and folders in one transfer: send fewer at once (or an archive of them)")
        }
        entries.append(entry)
        sources.append(source)
        if entry.kind == .file { identities.append(OpenFile.identity(info)) }
    }

    /// Adds what the folder at `source` holds, below `path`, depth first in name order.
    private mutating func walk(_ source: String, as path: TransferPath) throws(ServiceError) {
        guard let directory = opendir(source) else {
            skipped.append("\(path) (cannot read: \(String(cString: strerror(errno))))")
            return
        }
        var names: [[UInt8]] = []
        while let item = readdir(directory) {
            let name = withUnsafeBytes(of: item.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name != [0x2E] && name != [0x2E, 0x2E] { names.append(name) }
        }
        closedir(directory)
        for raw in names.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            let shown = String(decoding: raw, as: UTF8.self)
            let childSource = source + "/" + shown
            guard let name = String(validating: raw, as: UTF8.self) else {
                skipped.append("\(path)/\(shown) (its name is not UTF-8)")
                continue
            }
            let child: TransferPath
            do {
                child = try TransferPath(path.description + "/" + name)
            } catch {
                skipped.append("\(path)/\(shown) (\(error))")
                continue
            }
            var info = stat()
            guard lstat(childSource, &info) == 0 else {
                skipped.append("\(child) (\(String(cString: strerror(errno))))")
                continue
            }
            switch info.st_mode & S_IFMT {
            case S_IFREG:
                guard access(childSource, R_OK) == 0 else {
                    skipped.append("\(child) (cannot read: \(String(cString: strerror(errno))))")
                    continue
                }
                try add(.file(child, size: UInt64(info.st_size)), source: childSource, info: info)
            case S_IFDIR:
                guard access(childSource, R_OK | X_OK) == 0 else {
                    skipped.append("\(child) (cannot read: \(String(cString: strerror(errno))))")
                    continue
                }
                try add(.folder(child), source: childSource, info: info)
                try walk(childSource, as: child)
            case S_IFLNK:
                skipped.append("\(child) (a symbolic link)")
            default:
                skipped.append("\(child) (neither a file nor a folder)")
            }
        }
    }
}
