import Foundation

/// Loads and creates the identity key file (the 72-byte ``StaticIdentity/serialized()`` form).
///
/// The file must be readable and writable by its owner only (mode 0600 or stricter): a file that
/// group or other users can access in any way is refused with ``IdentityError/insecurePermissions(path:mode:)``,
/// whose description says to run `chmod 600 FILE`. A symbolic link is followed, and the file it
/// points to is checked. New files are created with mode 0600 before the secret is written, and
/// appear under their final name only when complete (never half-written).
public enum IdentityFile {
    /// Loads the identity at `path`, creating a new one (and missing parent directories, mode 0700)
    /// if there is no file. `created` tells which happened.
    public static func loadOrCreate(at path: String, using crypto: any CryptoPrimitives)
        throws(IdentityError) -> (identity: StaticIdentity, created: Bool) {
        if FileManager.default.fileExists(atPath: path) {
            return (try load(at: path, using: crypto), false)
        }
        do {
            return (try create(at: path, using: crypto), true)
        } catch let error {
            // Someone else created it meanwhile: use theirs.
            if case .io = error, FileManager.default.fileExists(atPath: path) {
                return (try load(at: path, using: crypto), false)
            }
            throw error
        }
    }

    /// Loads the identity at `path` after checking that only its owner can access it.
    public static func load(at path: String, using crypto: any CryptoPrimitives) throws(IdentityError) -> StaticIdentity {
        let realPath = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        let attributes: [FileAttributeKey: Any]
        do {
            attributes = try FileManager.default.attributesOfItem(atPath: realPath)
        } catch {
            throw .io(path: path, reason: "cannot read its attributes (\(error.localizedDescription))")
        }
        try checkAttributes(attributes, path: realPath)
        guard let data = FileManager.default.contents(atPath: realPath) else {
            throw .io(path: realPath, reason: "cannot be read")
        }
        return try StaticIdentity(serialized: [UInt8](data), path: realPath, using: crypto)
    }

    /// Creates a new identity at `path`; fails if a file is already there.
    public static func create(at path: String, using crypto: any CryptoPrimitives) throws(IdentityError) -> StaticIdentity {
        let fileManager = FileManager.default
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty && !fileManager.fileExists(atPath: directory) {
            do {
                try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
            } catch {
                throw .io(path: path, reason: "cannot create its directory (\(error.localizedDescription))")
            }
        }
        let identity = StaticIdentity.generate(using: crypto)
        var contents = identity.serialized()
        defer { crypto.wipe(&contents) }
        let temporary = path + ".new-" + hexString(crypto.randomBytes(8))
        defer { try? fileManager.removeItem(atPath: temporary) }

        // An empty file first, restricted before any secret goes in.
        guard fileManager.createFile(atPath: temporary, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw .io(path: path, reason: "cannot create \(temporary)")
        }
        do {
            try fileManager.setAttributes([.posixPermissions: 0o600], ofItemAtPath: temporary)
            try checkAttributes(try fileManager.attributesOfItem(atPath: temporary), path: temporary)
            guard let handle = FileHandle(forWritingAtPath: temporary) else {
                throw IdentityError.io(path: temporary, reason: "cannot be opened for writing")
            }
            try handle.write(contentsOf: Data(contents))
            try handle.synchronize()
            try handle.close()
        } catch let error as IdentityError {
            throw error
        } catch {
            throw .io(path: temporary, reason: "cannot be written (\(error.localizedDescription))")
        }
        // A hard link fails if `path` exists, so an existing identity is never replaced.
        do {
            try fileManager.linkItem(atPath: temporary, toPath: path)
        } catch {
            throw .io(path: path, reason: "cannot be created (\(error.localizedDescription))")
        }
        return identity
    }

    /// Throws unless the attributes describe a regular file that only its owner can access.
    public static func checkAttributes(_ attributes: [FileAttributeKey: Any], path: String) throws(IdentityError) {
        if let type = attributes[.type] as? FileAttributeType, type != .typeRegular {
            throw .notARegularFile(path: path)
        }
        guard let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue else {
            throw .io(path: path, reason: "its permissions cannot be read")
        }
        if mode & 0o077 != 0 {
            throw .insecurePermissions(path: path, mode: mode)
        }
    }
}
