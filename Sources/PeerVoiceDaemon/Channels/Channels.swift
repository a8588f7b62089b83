import GIO
import PeerVoiceCore

/// App channels (issue 29; docs/PROTOCOL.md §13): which owner has registered which channel name
/// on this computer, and each open link's streams (`LinkChannels`). The bus face is
/// `BusChannels`; components of the service itself (file transfers) use the same two calls:
///
/// - `register(_:handler:)`: a `ChannelHandler` gets every stream a peer opens to the name, as
///   a socket descriptor;
/// - `openStream(to:channel:mode:endedAbruptly:completion:)`: a stream to a peer's channel,
///   completed with this side's descriptor once the peer's owner has taken the other end.
///
/// Streams end with their link: they are not carried across a reconnection.
final class Channels {
    /// How long a handler has to answer a stream before it is refused (`appDidNotAnswer`).
    static let answerTimeout: Duration = .seconds(10)

    private var handlers: [ChannelName: ChannelHandler] = [:]
    private var links: [PeerID: LinkChannels] = [:]
    private var linkObservers: [(PeerID, Hello?) -> Void] = []

    /// Components of the service that open streams themselves (file transfers) hear of every
    /// peer's link: its HELLO when it opens (whether or not it carries channels), nil when it closes.
    func observeLinks(_ observer: @escaping (_ peer: PeerID, _ opened: Hello?) -> Void) {
        linkObservers.append(observer)
    }

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
    /// link that carries channels (`NotConnected`, `NotAvailable` otherwise).
    func openStream(to peer: PeerID, channel: ChannelName, mode: StreamMode, endedAbruptly: @escaping (String) -> Void,
                    completion: @escaping (Result<Int32, ServiceError>) -> Void) {
        guard let link = links[peer] else {
            return completion(.failure(.notConnected("\(peer) is not connected: Connect to it first")))
        }
        link.open(channel, mode: mode, endedAbruptly: endedAbruptly, completion: completion)
    }

    // MARK: Links

    /// A link to `peer` opened: its streams start here if the peer announced channels in its
    /// HELLO (to a peer that did not, no channel frame is ever sent).
    func linkOpened(_ link: ChannelLink, peer: PeerID, hello: Hello) {
        links.removeValue(forKey: peer)?.linkClosed(reason: "replaced by a new link")
        if hello.capabilities.contains(ChannelWire.capability) {
            let streams = LinkChannels(link: link, peer: peer, peerName: hello.name) { [unowned self] in handlers[$0] }
            link.channelFrameReceived = { [weak streams] body in try streams?.received(body) }
            link.channelInputDrained = { [weak streams] in streams?.inputDrained() }
            links[peer] = streams
        }
        linkObservers.forEach { $0(peer, hello) }
    }

    /// `peer`'s link closed: every stream on it ends abruptly.
    func linkClosed(peer: PeerID, reason: String) {
        links.removeValue(forKey: peer)?.linkClosed(reason: reason)
        linkObservers.forEach { $0(peer, nil) }
    }

    /// The service stops: streams are reset so that the peers' apps learn it at once.
    func shutdown() {
        for link in links.values { link.resetAll(.serviceStopping) }
    }

    /// Whether `peer` has a link that carries channels.
    func carriesChannels(_ peer: PeerID) -> Bool { links[peer] != nil }
}
