import Foundation

/// The installation's instance id (docs/PROTOCOL.md §5.1) in the state directory's `instance`
/// file: 32 hex digits and a newline. Written once, durably (a synced temporary file renamed into
/// place, then the directory synced), before anything else is stored: a crash that lost it while
/// keeping the message journals would start a new instance whose continued numbering the peers'
/// duplicate marks (kept per instance) would not cover.
public enum InstanceFile {
    /// The id in `path`, or a new one from `make` written there. An unreadable file is replaced.
    public static func loadOrCreate(at path: String, storage: any Storage = FileStorage(),
                                    make: () -> InstanceID = { .random() }) throws(StorageError) -> InstanceID {
        if let bytes = try storage.read(path),
           let id = InstanceID(hex: String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) {
            return id
        }
        let id = make()
        let temporary = path + ".tmp"
        try storage.remove(temporary)
        let file = try storage.create(temporary)
        defer { file.close() }
        try file.append(Array((id.hex + "\n").utf8))
        try file.sync()
        try storage.rename(temporary, to: path)
        try storage.syncDirectory((path as NSString).deletingLastPathComponent)
        return id
    }
}
