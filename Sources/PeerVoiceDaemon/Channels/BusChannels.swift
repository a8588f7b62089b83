import GIO
import Glibc
import PeerVoiceBus
import PeerVoiceCore

/// The bus face of `Channels`: `RegisterChannel`, `UnregisterChannel`, `OpenStream`, the
/// `ChannelHandler.NewStream` calls to each registered app, and `StreamClosed`. Each client that
/// registers is a `BusChannelOwner`, watched so that its names are given up when it leaves.
final class BusChannels {
    static let handlerInterface = PeerVoiceBus.channelHandlerInterface

    private let connection: DBusConnection
    private let channels: Channels
    private var owners: [String: BusChannelOwner] = [:]

    init(connection: DBusConnection, channels: Channels) {
        self.connection = connection
        self.channels = channels
    }

    /// `RegisterChannel(name, handler, options)` from `client` (its unique name).
    func register(_ name: String, handler path: String, options: Variant, client: String) throws(ServiceError) {
        let channel = try Self.channelName(name)
        if let unknown = Self.unknownOptions(options, known: []).first {
            throw .invalidArgument("RegisterChannel takes no option \"\(unknown)\" (there are none yet)")
        }
        let owner = owners[client] ?? BusChannelOwner(client: client, connection: connection) { [unowned self] in vanished(client) }
        try channels.register(channel, handler: owner)
        owners[client] = owner
        owner.paths[channel] = path
        Log.info("channels: \(client) registered \(channel) (handler \(path))")
    }

    func unregister(_ name: String, client: String) throws(ServiceError) {
        let channel = try Self.channelName(name)
        guard let owner = owners[client], channels.unregister(channel, handler: owner) else {
            throw .invalidArgument("\(channel) is not registered by this connection")
        }
        owner.paths[channel] = nil
        if owner.paths.isEmpty { owners[client] = nil }
        Log.info("channels: \(client) unregistered \(channel)")
    }

    /// `OpenStream`'s arguments, checked before any state is looked at.
    static func streamRequest(channel name: String, options: Variant) throws(ServiceError) -> (ChannelName, StreamMode) {
        let channel = try channelName(name)
        if let unknown = unknownOptions(options, known: ["mode"]).first {
            throw .invalidArgument("OpenStream takes no option \"\(unknown)\": only \"mode\"")
        }
        guard let value = options.lookup("mode") else { return (channel, .stream) }
        guard let text = value.string, let mode = StreamMode(name: text) else {
            throw .invalidArgument("mode must be \"stream\", \"messages\" or \"datagrams\", not \(value)")
        }
        return (channel, mode)
    }

    /// Tells `client` that a stream ended abruptly (StreamClosed, to it alone).
    func streamClosed(client: String, peer: PeerID, channel: ChannelName, reason: String) {
        Self.emitStreamClosed(connection, client: client, peer: peer, channel: channel, reason: reason)
    }

    private func vanished(_ client: String) {
        guard let owner = owners.removeValue(forKey: client) else { return }
        channels.unregisterAll(of: owner)
        Log.info("channels: \(client) left the bus: \(owner.paths.keys.map(\.description).sorted().joined(separator: ", ")) unregistered")
    }

    fileprivate static func emitStreamClosed(_ connection: DBusConnection, client: String, peer: PeerID, channel: ChannelName, reason: String) {
        do {
            try connection.emitSignal(path: PeerVoiceBus.path, interface: PeerVoiceBus.interface, name: "StreamClosed",
                                      arguments: Variant(tuple: [Variant(peer.description), Variant(channel.value), Variant(reason)]),
                                      destination: client)
        } catch {
            Log.debug("could not send StreamClosed to \(client): \(error)")
        }
    }

    private static func channelName(_ name: String) throws(ServiceError) -> ChannelName {
        do {
            return try ChannelName(name)
        } catch {
            throw .invalidArgument("\"\(name)\" is not a channel name: \(error)")
        }
    }

    private static func unknownOptions(_ options: Variant, known: Set<String>) -> [String] {
        options.children.compactMap { $0[0].string }.filter { !known.contains($0) }
    }
}

/// One client that registered channels: the objects its `NewStream` calls go to, per channel.
final class BusChannelOwner: ChannelHandler {
    let client: String
    var paths: [ChannelName: String] = [:]
    private let connection: DBusConnection
    private var watch: NameWatch?

    init(client: String, connection: DBusConnection, vanished: @escaping () -> Void) {
        self.client = client
        self.connection = connection
        watch = connection.watchName(client, appeared: { _ in }, vanished: vanished)
    }

    var streamEnds: StreamEndKind { .socket }

    func newStream(_ stream: IncomingStream, answer: @escaping (RefuseReason?) -> Void) {
        defer { stream.end.close() }
        guard let path = paths[stream.channel] else { return answer(.notRegistered) }
        let properties = Variant(dictionary: [("mode", Variant(stream.mode.description)), ("name", Variant(stream.peerName)),
                                              ("stream", Variant(stream.id.rawValue))])
        let arguments = Variant(tuple: [Variant(stream.peer.description), Variant(stream.channel.value), Variant(handle: 0), properties])
        connection.callAsyncReceivingFDs(destination: client, path: path, interface: BusChannels.handlerInterface, method: "NewStream",
                                         arguments: arguments, fds: [stream.end.descriptor], timeout: Channels.answerTimeout) { [client] result in
            switch result {
            case .success(let reply):
                reply.fds.forEach { close($0) }
                answer(nil)
            case .failure(let error):
                Log.info("channels: \(client) did not take a stream to \(stream.channel): \(error)")
                answer(error.isNoReply ? .appDidNotAnswer : .appRefused)
            }
        }
    }

    func streamEnded(_ stream: IncomingStream, reason: String) {
        BusChannels.emitStreamClosed(connection, client: client, peer: stream.peer, channel: stream.channel, reason: reason)
    }
}
