import Foundation

/// What the service remembers about a paired peer across restarts: a peer is its key; its
/// addresses are only routes.
public struct KnownPeer: Codable, Equatable, Sendable {
    public var id: PeerID
    /// Its long-term public key, pinned when both people confirmed the pairing code.
    public var key: PublicKey
    public var name: String
    /// The peer's instance id (hex) from its last HELLO.
    public var instance: String?
    /// Where it was reached and can be dialled again.
    public var routes: [PeerRoute]
    /// Set by `Disconnect`: not redialled, even across restarts, until the next `Connect`.
    public var stayDisconnected: Bool
    /// The peer's presence secret (its PRESENCE frame): recognises its presence advertisements.
    public var presenceSecret: PresenceSecret?
    /// The volume its voice plays at here (`SetVolume`, 0.0–2.0); nil: 1.0, and not written.
    public var volume: Double?
    /// Its voice is not played here (`SetPeerMuted`); nil: played, and not written.
    public var muted: Bool?

    public init(id: PeerID, key: PublicKey, name: String, instance: String?, routes: [PeerRoute],
                stayDisconnected: Bool = false, presenceSecret: PresenceSecret? = nil, volume: Double? = nil,
                muted: Bool? = nil) {
        self.id = id
        self.key = key
        self.name = name
        self.instance = instance
        self.routes = routes
        self.stayDisconnected = stayDisconnected
        self.presenceSecret = presenceSecret
        self.volume = volume
        self.muted = muted
    }

    private enum CodingKeys: String, CodingKey { case id, key, name, instance, routes, stayDisconnected, presence, volume, muted }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let idText = try container.decode(String.self, forKey: .id)
        let keyText = try container.decode(String.self, forKey: .key)
        guard let id = PeerID(idText), let key = PublicKey(hex: keyText) else {
            throw DecodingError.dataCorruptedError(forKey: .id, in: container, debugDescription: "not a peer id and key")
        }
        self.init(id: id, key: key, name: try container.decode(String.self, forKey: .name),
                  instance: try container.decodeIfPresent(String.self, forKey: .instance),
                  routes: try container.decode([PeerRoute].self, forKey: .routes),
                  stayDisconnected: try container.decode(Bool.self, forKey: .stayDisconnected),
                  presenceSecret: try container.decodeIfPresent(String.self, forKey: .presence).flatMap { PresenceSecret(hex: $0) },
                  volume: try container.decodeIfPresent(Double.self, forKey: .volume),
                  muted: try container.decodeIfPresent(Bool.self, forKey: .muted))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id.description, forKey: .id)
        try container.encode(key.hex, forKey: .key)
        try container.encode(name, forKey: .name)
        try container.encodeIfPresent(instance, forKey: .instance)
        try container.encode(routes, forKey: .routes)
        try container.encode(stayDisconnected, forKey: .stayDisconnected)
        try container.encodeIfPresent(presenceSecret?.hex, forKey: .presence)
        try container.encodeIfPresent(volume, forKey: .volume)
        try container.encodeIfPresent(muted, forKey: .muted)
    }
}

/// The known peers, kept in one small file (`peers.json`) rewritten atomically on change: a
/// temporary file is written and synced, renamed over `peers.json`, and the directory synced, so
/// a crash at any point leaves the old file or the new one, whole. Changes are rare (a peer pairs,
/// is renamed, moves or is removed).
///
/// Format 4 is `{"format": 4, "peers": [KnownPeer…]}`; a peer's `volume` and `muted` are optional
/// (written only once `SetVolume` or `SetPeerMuted` set them), so files without them read as before. Protocol version 3 wrote a bare array of
/// peers named by address (`id` = `ip:HOST:PORT` or a Bluetooth address, `key` = hex or absent);
/// opening such a file yields a `PeerDirectoryMigration` the caller applies to the message
/// store before calling `finishMigration()`, which writes format 4. Until then the old file
/// stays, so a crash in between migrates again from the start.
public final class PeerDirectory {
    public static let format = 4
    private let path: String
    private let storage: any Storage
    private var peers: [PeerID: KnownPeer]
    public private(set) var migration: PeerDirectoryMigration?

    /// `idOf` derives a peer id from a key (it needs the crypto adapter; the core has none).
    public init(path: String, storage: any Storage = FileStorage(), idOf: (PublicKey) -> PeerID) throws {
        self.path = path
        self.storage = storage
        peers = [:]
        guard let bytes = try storage.read(path) else { return }
        let data = Data(bytes)
        if let current = try? JSONDecoder().decode(File.self, from: data), current.format == Self.format {
            for peer in current.peers { peers[peer.id] = peer }
        } else if let old = try? JSONDecoder().decode([Version3Peer].self, from: data) {
            let migrated = PeerDirectoryMigration(version3: old, idOf: idOf)
            for peer in migrated.peers { peers[peer.id] = peer }
            migration = migrated
        } else {
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSFilePathErrorKey: path])
        }
    }

    public var all: [KnownPeer] { peers.values.sorted { $0.id < $1.id } }

    public subscript(id: PeerID) -> KnownPeer? { peers[id] }

    /// Records `peer`, writing the file only if something changed.
    public func save(_ peer: KnownPeer) throws {
        guard peers[peer.id] != peer else { return }
        peers[peer.id] = peer
        try write()
    }

    public func remove(id: PeerID) throws {
        guard peers.removeValue(forKey: id) != nil else { return }
        try write()
    }

    /// Writes the migrated directory in format 4 (after the store applied the migration).
    public func finishMigration() throws {
        guard let pending = migration else { return }
        migration = nil
        do {
            try write()
        } catch {
            migration = pending
            throw error
        }
    }

    private struct File: Codable {
        var format: Int
        var peers: [KnownPeer]
    }

    private func write() throws {
        guard migration == nil else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(File(format: Self.format, peers: all))
        let temporary = path + ".tmp"
        do {
            try storage.remove(temporary)  // a leftover of an interrupted write
            let file = try storage.create(temporary)
            defer { file.close() }
            try file.append([UInt8](data))
            try file.sync()
        } catch {
            try? storage.remove(temporary)
            throw error
        }
        try storage.rename(temporary, to: path)
        try storage.syncDirectory((path as NSString).deletingLastPathComponent)
    }
}

/// A protocol-version-3 peer: named by the address it was reached at.
struct Version3Peer: Codable {
    var id: String
    var name: String
    var instance: String?
    var redialable: Bool
    var key: String?
    var stayDisconnected: Bool
}

/// How a version-3 directory becomes peers-as-keys: entries with the same pinned key are one
/// peer (their dialable addresses its routes, the name of the first by address that has one);
/// their message journals, named by address, merge into the
/// peer's (`MessageStore.merge`). Entries without a key never paired: nothing was ever delivered
/// to or received from them, and their queued messages cannot be, so they fail.
public struct PeerDirectoryMigration: Sendable {
    /// The merged peers.
    public let peers: [KnownPeer]
    /// For each peer, the old store names (addresses) whose journals become its journal.
    public let journals: [(from: [String], into: PeerID)]
    /// Old store names that belonged to no key.
    public let unpaired: [String]

    init(version3 old: [Version3Peer], idOf: (PublicKey) -> PeerID) {
        var byID: [PeerID: KnownPeer] = [:]
        var names: [PeerID: [String]] = [:]
        var unpaired: [String] = []
        for entry in old.sorted(by: { $0.id < $1.id }) {
            guard let key = entry.key.flatMap(PublicKey.init(hex:)) else {
                unpaired.append(entry.id)
                continue
            }
            let id = idOf(key)
            let address = try? PeerAddress(parsing: entry.id)
            let route = address.flatMap { entry.redialable || $0.transport == .bluetooth ? PeerRoute(address: $0, lastSeenMs: 0) : nil }
            names[id, default: []].append(entry.id)
            if var merged = byID[id] {
                if let route { merged.routes.append(route) }
                // Stay disconnected only if every former entry said so.
                merged.stayDisconnected = merged.stayDisconnected && entry.stayDisconnected
                if merged.name.isEmpty { merged.name = entry.name }
                if merged.instance == nil { merged.instance = entry.instance }
                byID[id] = merged
            } else {
                byID[id] = KnownPeer(id: id, key: key, name: entry.name, instance: entry.instance,
                                     routes: route.map { [$0] } ?? [], stayDisconnected: entry.stayDisconnected)
            }
        }
        peers = byID.values.sorted { $0.id < $1.id }
        journals = names.sorted { $0.key < $1.key }.map { (from: $0.value, into: $0.key) }
        self.unpaired = unpaired
    }
}
