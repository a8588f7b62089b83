import PeerVoiceCore

/// A part of the service that runs over peer links (text delivery, voice, presence, channels,
/// transfers): it hears when a peer's link opens and closes and gets the frames of the types it
/// registered with `PeerLinks`, and sends on the peer's current link (`PeerLinks.link(of:)`).
/// Adding one takes no change in `PeerConnections` (docs/ARCHITECTURE.md, "Plug-in points").
protocol LinkComponent: AnyObject {
    /// The features it offers peers: our HELLO announces the union of every component's. A link
    /// carries a feature only when both sides announced it, at a version that has it
    /// (`link.negotiated`); its frames are never sent on another.
    var offeredCapabilities: Capabilities { get }
    /// `peer`'s link opened (both sides accepted): it may send on it from now on.
    func linkOpened(_ link: PeerLink, to peer: Peer)
    /// `peer`'s link ended: it closed, or gave way to a better link (then `linkOpened` follows
    /// with the new one). Nothing more arrives from it.
    func linkClosed(_ link: PeerLink, of peer: Peer, reason: String)
    /// A frame of a type it registered with `register(_:frames:)`, decoded.
    func received(_ frame: Frame, on link: PeerLink, from peer: Peer)
    /// A frame body (type byte first) of a type it registered with `register(_:bodies:capability:)`, for a
    /// component with its own codec: the slice is valid only during the call. Throwing ends the
    /// link as a protocol error (GOODBYE reason 2), with the error in the log.
    func received(body: ArraySlice<UInt8>, on link: PeerLink, from peer: Peer) throws
    /// Every frame of one read from the link has been handed over: the moment to answer them
    /// together (one ACK per read).
    func inputDrained(on link: PeerLink, from peer: Peer)
    /// Whether it has work waiting for a link to `peer` (a file transfer): the service then
    /// dials the peer again until one opens, as it does for queued messages.
    func needsLink(to peer: PeerID) -> Bool
}

extension LinkComponent {
    var offeredCapabilities: Capabilities { [] }
    func linkClosed(_ link: PeerLink, of peer: Peer, reason: String) {}
    func received(_ frame: Frame, on link: PeerLink, from peer: Peer) {}
    func received(body: ArraySlice<UInt8>, on link: PeerLink, from peer: Peer) throws {}
    func inputDrained(on link: PeerLink, from peer: Peer) {}
    func needsLink(to peer: PeerID) -> Bool { false }
}

/// The one owner of "which link a peer has now", and the registry of the components that run
/// over links. `PeerConnections` decides which link a peer keeps and hands it over here
/// (`open`, `close`); every frame an open link receives after its pairing goes from the link
/// straight to the component that registered its type, if the link carries its feature (else
/// it is a protocol error). A frame type unknown here, from a peer that speaks a newer protocol
/// version than this side, is skipped. Main loop only.
final class PeerLinks {
    private struct OpenLink {
        let link: PeerLink
        let peer: Peer
    }

    private struct Registration {
        weak var component: LinkComponent?
        /// The component decodes the body itself (`received(body:on:from:)`).
        let takesBodies: Bool
        /// What a link must carry for the frames (decoded frames: their type's own).
        let capability: Capabilities
    }

    /// The open link of each connected peer.
    private var byPeer: [PeerID: OpenLink] = [:]
    /// The peer each open link belongs to.
    private var owners: [ObjectIdentifier: Peer] = [:]
    /// Every component, in registration order (link events go to each).
    private var components: [Registration] = []
    /// The component that registered each frame type, by type byte: one array index per frame,
    /// no allocation (voice frames on the link come through here 50-100 times a second).
    private var frameOwners = [Registration?](repeating: nil, count: 256)

    // MARK: Registering

    /// `component` hears of links opening and closing, and gets the frames of `frames`, decoded.
    func register(_ component: LinkComponent, frames: [FrameType] = []) {
        add(component)
        for type in frames {
            claim(type.rawValue, Registration(component: component, takesBodies: false, capability: type.capability))
        }
    }

    /// `component` hears of links opening and closing, and gets the frame bodies whose type byte
    /// is one of `bodies`, undecoded (a component with a codec of its own), from links that
    /// carry `capability`.
    func register(_ component: LinkComponent, bodies: [UInt8], capability: Capabilities) {
        add(component)
        for type in bodies { claim(type, Registration(component: component, takesBodies: true, capability: capability)) }
    }

    private func add(_ component: LinkComponent) {
        guard !components.contains(where: { $0.component === component }) else { return }
        components.append(Registration(component: component, takesBodies: false, capability: []))
    }

    private func claim(_ type: UInt8, _ registration: Registration) {
        // One owner per frame type: two would be a wiring mistake, found at start-up.
        precondition(frameOwners[Int(type)] == nil, "frame type 0x\(String(type, radix: 16)) has an owner already")
        precondition(!PeerLink.isOwnFrame(type), "frame type 0x\(String(type, radix: 16)) belongs to the link itself")
        frameOwners[Int(type)] = registration
    }

    /// What our HELLO announces: every component's features.
    var offeredCapabilities: Capabilities {
        components.reduce(into: []) { $0.formUnion($1.component?.offeredCapabilities ?? []) }
    }

    /// Whether a component has work waiting for a link to `peer`.
    func isWanted(_ peer: PeerID) -> Bool {
        components.contains { $0.component?.needsLink(to: peer) == true }
    }

    // MARK: Which link a peer has

    /// `peer`'s open link, if it is connected.
    func link(of peer: PeerID) -> PeerLink? { byPeer[peer]?.link }

    func isConnected(_ peer: PeerID) -> Bool { byPeer[peer] != nil }

    /// The connected peers, by id.
    var connectedPeers: [Peer] { byPeer.values.map(\.peer).sorted { $0.id < $1.id } }

    /// Every open link with its peer.
    var openLinks: [(peer: Peer, link: PeerLink)] { byPeer.values.map { ($0.peer, $0.link) } }

    /// The peer whose open link `link` is, if it is one.
    func owner(of link: PeerLink) -> Peer? { owners[ObjectIdentifier(link)] }

    // MARK: Opening and closing

    /// `link` (open) is `peer`'s from now on; the frames it receives go to the components, and
    /// each hears `linkOpened`. The caller has closed any link the peer had (`close`).
    func open(_ link: PeerLink, for peer: Peer) {
        precondition(byPeer[peer.id] == nil, "\(peer.id) has a link already")
        byPeer[peer.id] = OpenLink(link: link, peer: peer)
        owners[ObjectIdentifier(link)] = peer
        link.frameReceiver = self
        for registration in components { registration.component?.linkOpened(link, to: peer) }
    }

    /// `link` is no longer its peer's (it closed, or another replaces it): each component hears
    /// `linkClosed`. Returns the peer whose link it was, nil if it was nobody's.
    @discardableResult
    func close(_ link: PeerLink, reason: String) -> Peer? {
        guard let peer = owners.removeValue(forKey: ObjectIdentifier(link)) else { return nil }
        byPeer[peer.id] = nil
        link.frameReceiver = nil
        for registration in components { registration.component?.linkClosed(link, of: peer, reason: reason) }
        return peer
    }
}

/// A frame of a feature the link does not carry (docs/PROTOCOL.md §3.1).
struct FeatureNotNegotiated: Error, CustomStringConvertible {
    let type: UInt8
    let negotiated: LinkProtocol

    var description: String {
        "frame type 0x\(String(type, radix: 16)) on a link at protocol \(negotiated.version) that does not carry it"
    }
}

extension PeerLinks: LinkFrameReceiver {
    func link(_ link: PeerLink, received body: ArraySlice<UInt8>) throws {
        guard let peer = owners[ObjectIdentifier(link)], let type = body.first, let negotiated = link.negotiated else { return }
        let registration = frameOwners[Int(type)]
        if let registration, registration.takesBodies {
            guard negotiated.capabilities.isSuperset(of: registration.capability) else {
                throw FeatureNotNegotiated(type: type, negotiated: negotiated)
            }
            try registration.component?.received(body: body, on: link, from: peer)
            return
        }
        if FrameType(rawValue: type) == nil && registration == nil && negotiated.peerVersions.highest > Wire.protocolVersion {
            // A newer peer's frame this side cannot know: it goes without it.
            Log.debug("\(peer.id): skipped a frame of type 0x\(String(type, radix: 16)) (the peer speaks protocol \(negotiated.peerVersions))")
            return
        }
        // Every other frame is checked by the core's codec, owned or not.
        let frame = try Frame(body: body)
        guard negotiated.capabilities.isSuperset(of: frame.type.capability) else {
            throw FeatureNotNegotiated(type: type, negotiated: negotiated)
        }
        if let component = registration?.component {
            component.received(frame, on: link, from: peer)
        } else {
            Log.debug("\(peer.id): \(frame.type) ignored: no part of this service takes it")
        }
    }

    func linkDidDrainInput(_ link: PeerLink) {
        guard let peer = owners[ObjectIdentifier(link)] else { return }
        for registration in components { registration.component?.inputDrained(on: link, from: peer) }
    }
}
