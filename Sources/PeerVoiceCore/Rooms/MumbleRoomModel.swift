/// What a client knows of a Mumble server after ServerSync: the channel tree and who is where,
/// merged from ChannelState/UserState deltas (the server sends only the fields that changed).
public struct MumbleRoomModel: Sendable {
    public struct User: Sendable, Equatable {
        public var session: UInt32
        public var name: String
        /// Its registered user id: the server knows its certificate under its name.
        public var userID: UInt32?
        public var channel: UInt32
        /// Muted by itself or by an administrator, or suppressed: the server relays none of its voice.
        public var muted: Bool
        fileprivate var state: MumbleUserState
    }

    public private(set) var channels: [UInt32: MumbleChannelState] = [:]
    public private(set) var users: [UInt32: User] = [:]
    /// Our session, from ServerSync.
    public private(set) var ownSession: UInt32?

    public init() {}

    /// What changed, for the room to know which properties to announce.
    public enum Change: Sendable, Equatable {
        case none, channels, users, synced
    }

    public mutating func apply(_ message: MumbleServerMessage) -> Change {
        switch message {
        case .channelState(let delta):
            var channel = channels[delta.id] ?? MumbleChannelState(id: delta.id, parent: nil, name: nil)
            if let parent = delta.parent { channel.parent = parent }
            if let name = delta.name { channel.name = name }
            channels[delta.id] = channel
            return .channels
        case .channelRemove(let id):
            return channels.removeValue(forKey: id) == nil ? .none : .channels
        case .userState(let delta):
            var state = users[delta.session]?.state ?? MumbleUserState(session: delta.session)
            state.name = delta.name ?? state.name
            state.userID = delta.userID ?? state.userID
            state.channel = delta.channel ?? state.channel
            state.mute = delta.mute ?? state.mute
            state.deaf = delta.deaf ?? state.deaf
            state.suppress = delta.suppress ?? state.suppress
            state.selfMute = delta.selfMute ?? state.selfMute
            state.selfDeaf = delta.selfDeaf ?? state.selfDeaf
            let muted = state.mute == true || state.selfMute == true || state.suppress == true
            users[delta.session] = User(session: delta.session, name: state.name ?? "", userID: state.userID, channel: state.channel ?? 0,
                                        muted: muted, state: state)
            return .users
        case .userRemove(let session, _, _):
            return users.removeValue(forKey: session) == nil ? .none : .users
        case .serverSync(let session, _):
            ownSession = session
            return .synced
        default:
            return .none
        }
    }

    /// The channel a path of names leads to from the root (id 0), or nil if one is missing.
    public func channel(atPath path: [String]) -> UInt32? {
        var current: UInt32 = 0
        for name in path {
            guard let child = channels.values.filter({ $0.parent == current && $0.id != current && $0.name == name })
                .map(\.id).min() else { return nil }
            current = child
        }
        return current
    }

    /// The names from the root down to a channel ("/" for the root), as a room's `Channel`.
    public func path(of id: UInt32) -> String {
        var names: [String] = []
        var current = id
        // Bounded: a hostile server could send a parent cycle.
        for _ in 0..<channels.count {
            guard current != 0, let channel = channels[current], let parent = channel.parent else { break }
            names.append(channel.name ?? "")
            current = parent
        }
        return "/" + names.reversed().joined(separator: "/")
    }

    public var ownChannel: UInt32? { ownSession.flatMap { users[$0]?.channel } }

    /// The others in our channel, by session.
    public var usersInOwnChannel: [User] {
        guard let own = ownSession, let channel = ownChannel else { return [] }
        return users.values.filter { $0.session != own && $0.channel == channel }.sorted { $0.session < $1.session }
    }
}
