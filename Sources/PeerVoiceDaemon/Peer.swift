import GIO
import PeerVoiceCore

/// One row of `ListPeers`: a peer by its id, or a device not yet keyed by its address.
struct PeerSummary {
    let ref: PeerRef
    let name: String
    let transport: Transport
    let state: PeerState
}

/// A peer the service knows: a device, named by its key. Its addresses are routes; what it is
/// doing now belongs to the components (its link is `PeerLinks`', its dials `PeerConnections`',
/// its delivery `MessageDelivery`'s, its voice `VoiceControl`'s).
final class Peer {
    let id: PeerID
    let key: PublicKey
    var name: String
    var state: PeerState = .disconnected
    /// Why it is in `state`, when a person can act on it (the peer object's `StateReason`).
    var stateReason = ""
    var instance: InstanceID?
    /// Where it was reached and can be dialled, best first when dialling.
    var routes: [PeerRoute]
    /// Where a LAN advertisement says it is, not proven yet: dialled like a route (with the key
    /// pinned), kept only in memory, dropped when it fails or another key answers there.
    private(set) var candidateRoutes: [PeerRoute] = []
    /// Its key is pinned: both people confirmed the code once. A peer met on an incoming link
    /// is known (by key) but unpaired until then.
    var paired: Bool
    /// The transport of the current or last link.
    var lastTransport: Transport?
    /// What its presence advertisements are recognised by (its PRESENCE frame).
    var presenceSecret: PresenceSecret?
    /// Set by our `Disconnect` (kept across restarts), the peer's user-disconnect goodbye, or a
    /// refused pairing: do not redial until the next `Connect`.
    var stayDisconnected = false
    /// Its voice's volume and mute here (`SetVolume`, `SetPeerMuted`), kept across restarts for a
    /// paired peer.
    var playback = VoiceMixer.Channel.unity
    /// `Connect` calls waiting for the link.
    var connectWaiters: [ConnectWaiter] = []

    init(id: PeerID, key: PublicKey, name: String, routes: [PeerRoute], paired: Bool) {
        self.id = id
        self.key = key
        self.name = name
        self.routes = routes
        self.paired = paired
    }

    /// The transport ListPeers shows: the current or last link's, else the best route's.
    var transport: Transport { lastTransport ?? routes.sorted(by: PeerRoute.dialOrder).first?.transport ?? .ip }

    var summary: PeerSummary { PeerSummary(ref: .id(id), name: name, transport: transport, state: state) }

    func hasRoute(_ address: PeerAddress) -> Bool { routes.contains { $0.address == address } }

    /// Every route and candidate, in the order they are dialled.
    var dialOrder: [PeerAddress] { (routes + candidateRoutes).sorted(by: PeerRoute.dialOrder).map(\.address) }

    func isCandidate(_ address: PeerAddress) -> Bool { candidateRoutes.contains { $0.address == address } }

    /// An advertisement claims the peer is at `address` (nothing changes if it is a route already).
    func noteCandidate(_ address: PeerAddress, seenAtMs: UInt64) {
        guard !hasRoute(address) else { return }
        dropCandidate(address)
        candidateRoutes.append(PeerRoute(address: address, lastSeenMs: seenAtMs))
    }

    func dropCandidate(_ address: PeerAddress) {
        candidateRoutes.removeAll { $0.address == address }
    }

    /// Adds `address` as a route (a handshake proved the key there), or refreshes its last-seen time.
    func noteRoute(_ address: PeerAddress, seenAtMs: UInt64) {
        dropCandidate(address)
        if let index = routes.firstIndex(where: { $0.address == address }) {
            routes[index].lastSeenMs = max(routes[index].lastSeenMs, seenAtMs)
        } else {
            routes.append(PeerRoute(address: address, lastSeenMs: seenAtMs))
        }
    }

    var known: KnownPeer {
        KnownPeer(id: id, key: key, name: name, instance: instance?.hex, routes: routes, stayDisconnected: stayDisconnected,
                  presenceSecret: presenceSecret, volume: playback.volume == 1 ? nil : playback.volume,
                  muted: playback.muted ? true : nil)
    }
}

/// A device being dialled at an address whose key is not known yet (`Connect(address)` of a
/// first contact). Its signals carry the address until `PeerIdentified`.
final class Contact {
    let address: PeerAddress
    var name = ""
    var state: PeerState = .disconnected
    var dial: DialAttempt?
    var connectWaiters: [ConnectWaiter] = []

    init(address: PeerAddress) {
        self.address = address
    }

    var summary: PeerSummary { PeerSummary(ref: .address(address), name: name, transport: address.transport, state: state) }
}

/// A `Connect` waiting for its link: answered with the peer's id, or an error.
typealias ConnectWaiter = (Result<PeerID, ServiceError>) -> Void

/// A dial of a known peer: its routes, tried in turn.
final class PeerDial {
    /// The route being tried now.
    let address: PeerAddress
    /// Routes still to try if this one fails.
    let remaining: [PeerAddress]
    var attempt: DialAttempt?

    init(address: PeerAddress, remaining: [PeerAddress]) {
        self.address = address
        self.remaining = remaining
    }
}
