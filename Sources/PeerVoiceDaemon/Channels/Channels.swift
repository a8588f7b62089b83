import GIO
import PeerVoiceCore

/// App channels (issue 29; docs/PROTOCOL.md §13): which owner has registered which channel name
/// on this computer, and each open link's streams (`LinkChannels`). The bus face is
/// `BusChannels`; components of the service itself (file transfers) use the same two calls:
///
/// - `register(_:handler:)`: a `ChannelHandler` gets every stream a peer opens to the name, as
///   a socket descriptor (an app) or an in-memory pipe's end (a component: `StreamPipe`);
/// - `openStream(to:channel:mode:endedAbruptly:completion:)` (`openPipeStream` for a
///   component): a stream to a peer's channel, completed with this side's end once the peer's
///   owner has taken the other end.
///
/// Streams end with their link: they are not carried across a reconnection. A link component
/// (`PeerLinks`): the channel frames are its own, raw (its codec is `ChannelFrame`), and only
/// links that carry channels (both sides announced them, docs/PROTOCOL.md §3.1) get streams.
final class Channels: LinkComponent {
    /// How long a handler has to answer a stream before it is refused (`appDidNotAnswer`).
    static let answerTimeout: Duration = .seconds(10)

    private var handlers: [ChannelName: ChannelHandler] = [:]
    private var links: [PeerID: LinkChannels] = [:]
    private unowned let peerLinks: PeerLinks

    init(links peerLinks: PeerLinks) {
        self.peerLinks = peerLinks
        peerLinks.register(self, bodies: ChannelFrameType.allCases.map(\.rawValue), capability: .channels)
    }

    var offeredCapabilities: Capabilities { .channels }

    /// Registers `name` for `handler`. Registering a name again for the same handler changes
    /// nothing; another handler's name is `InUse`.
    func register(_ name: ChannelName, handler: ChannelHandler) throws(ServiceError) {
        if let owner = handlers[name], owner !== handler {
            throw .inUse("\(name) is registered by another client: pick another name, or wait until it unregisters")
        }
        handlers[name] = handler
    }

    /// Gives `name` up if `handler` owns it; false otherwise.
    @discardableResult
    func unregister(_ name: ChannelName, handler: ChannelHandler) -> Bool {
        guard handlers[name] === handler else { return false }
        handlers[name] = nil
        return true
    }

    /// Every name `handler` owns is given up (its owner left).
    func unregisterAll(of handler: ChannelHandler) {
        handlers = handlers.filter { $0.value !== handler }
    }

    /// Opens a stream to the app that registered `channel` on `peer`, which must have an open
    /// link that carries channels (`NotConnected`, or `NotAvailable` naming the version to update);
    /// completes with this side's socket (an app on the bus gets it).
    func openStream(to peer: PeerID, channel: ChannelName, mode: StreamMode, endedAbruptly: @escaping (String) -> Void,
                    completion: @escaping (Result<Int32, ServiceError>) -> Void) {
        open(to: peer, channel: channel, mode: mode, ends: .socket, endedAbruptly: endedAbruptly) { completion($0.map(\.descriptor)) }
    }

    /// The same for a component of the service that runs a byte stream on a thread of its own:
    /// completes with this side's end of an in-memory pipe (`StreamPipe`).
    func openPipeStream(to peer: PeerID, channel: ChannelName, endedAbruptly: @escaping (String) -> Void,
                        completion: @escaping (Result<StreamPipe.End, ServiceError>) -> Void) {
        open(to: peer, channel: channel, mode: .stream, ends: .pipe, endedAbruptly: endedAbruptly) { completion($0.map(\.pipe)) }
    }

    private func open(to peer: PeerID, channel: ChannelName, mode: StreamMode, ends: StreamEndKind, endedAbruptly: @escaping (String) -> Void,
                      completion: @escaping (Result<StreamOwnerEnd, ServiceError>) -> Void) {
        guard let link = links[peer] else {
            if let open = peerLinks.link(of: peer),
               let why = open.negotiated?.whyOff(.channels, who: open.peerHello?.name ?? peer.description) {
                return completion(.failure(.notAvailable(why)))
            }
            return completion(.failure(.notConnected("\(peer) is not connected: Connect to it first")))
        }
        link.open(channel, mode: mode, ends: ends, endedAbruptly: endedAbruptly, completion: completion)
    }

    // MARK: Links

    /// A link to `peer` opened: its streams start here if it carries channels (to a peer that
    /// did not announce them, no channel frame is ever sent).
    func linkOpened(_ link: PeerLink, to peer: Peer) {
        links.removeValue(forKey: peer.id)?.linkClosed(reason: "replaced by a new link")
        guard link.negotiated?.capabilities.contains(.channels) == true else { return }
        links[peer.id] = LinkChannels(link: link, peer: peer.id, peerName: link.peerHello?.name ?? peer.name) { [unowned self] in
            handlers[$0]
        }
    }

    /// `peer`'s link closed: every stream on it ends abruptly.
    func linkClosed(_ link: PeerLink, of peer: Peer, reason: String) {
        links.removeValue(forKey: peer.id)?.linkClosed(reason: reason)
    }

    /// A channel frame from `peer` (only links that carry channels bring them).
    func received(body: ArraySlice<UInt8>, on link: PeerLink, from peer: Peer) throws {
        try links[peer.id]?.received(body)
    }

    /// Every frame of one read was handed over: the moment for FEEDBACK.
    func inputDrained(on link: PeerLink, from peer: Peer) {
        links[peer.id]?.inputDrained()
    }

    /// The service stops: streams are reset so that the peers' apps learn it at once.
    func shutdown() {
        for link in links.values { link.resetAll(.serviceStopping) }
    }

}
