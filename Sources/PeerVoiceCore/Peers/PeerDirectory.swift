import Foundation

/// What the service remembers about a peer across restarts.
public struct KnownPeer: Codable, Equatable, Sendable {
    /// Normalised peer id (`PeerID.description`).
    public var id: String
    public var name: String
    /// The peer's instance id (hex) from its last HELLO.
    public var instance: String?
    /// Whether we can dial it: we dialled it, or it announced a listen port.
    public var redialable: Bool
    /// Its long-term public key (hex), pinned when a person confirmed the pairing code; a link
    /// presenting another key is refused.
    public var key: String?
    /// Set by `Disconnect`: not redialled, even across restarts, until the next `Connect`.
    public var stayDisconnected: Bool

    public init(id: String, name: String, instance: String?, redialable: Bool, key: String? = nil,
                stayDisconnected: Bool = false) {
        self.id = id
        self.name = name
        self.instance = instance
        self.redialable = redialable
        self.key = key
        self.stayDisconnected = stayDisconnected
    }
}

/// The known peers, kept in one small file rewritten atomically (temp file + rename) on change.
/// Changes are rare (a peer connects for the first time, is renamed or removed), so a rewrite is cheap.
public final class PeerDirectory {
    private let path: String
    private var peers: [String: KnownPeer]

    public init(path: String) throws {
        self.path = path
        if let data = FileManager.default.contents(atPath: path) {
            let list = (try? JSONDecoder().decode([KnownPeer].self, from: data)) ?? []
            peers = Dictionary(list.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
        } else {
            peers = [:]
        }
    }

    public var all: [KnownPeer] { peers.values.sorted { $0.id < $1.id } }

    public subscript(id: String) -> KnownPeer? { peers[id] }

    /// Records `peer`, writing the file only if something changed.
    public func save(_ peer: KnownPeer) throws {
        guard peers[peer.id] != peer else { return }
        peers[peer.id] = peer
        try write()
    }

    public func remove(id: String) throws {
        guard peers.removeValue(forKey: id) != nil else { return }
        try write()
    }

    private func write() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(all)
        let temporary = path + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary])
        }
        if rename(temporary, path) != 0 { throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path]) }
    }
}
