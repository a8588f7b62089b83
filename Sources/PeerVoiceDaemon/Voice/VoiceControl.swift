import GIO
import PeerVoiceCore
import Sodium

/// Voice with each connected peer, on the control plane: who wants it, the session ids both sides
/// announce (VOICE_START, from which the voice keys come), and starting and stopping the voice
/// thread's sessions (Voice/VoiceEngine.swift).
///
/// Either side may start: it sends VOICE_START with a fresh session id, the other answers with its
/// own, and once both ids are known each side derives the keys and starts its session. A
/// VOICE_START with a new id while a session runs means the peer restarted it: we answer with a
/// new id too, so keys are never reused. VOICE_STOP ends voice on both sides.
final class VoiceControl {
    /// How often voice that is wanted but not running (no PipeWire yet, a stream failed) is retried.
    static let voiceRetry: Duration = .seconds(1)
    /// A VOICE frame for a link that waited longer than this for the main loop is dropped: it
    /// would reach the peer too late to be played.
    static let staleLinkVoiceNs: Int64 = 60_000_000

    /// The voice thread's handle, once its UDP socket is bound.
    private(set) var engine: VoiceEngine?
    /// The UDP port HELLO announces for voice when we do not listen (0: the listen port).
    private(set) var voicePort: UInt16 = 0
    /// The capture processing of the latest voice session (before one: what the options allow).
    private(set) var audioProcessing: [String]
    /// Our microphone holds speech, unmuted (`Speaking`, from the voice thread).
    private(set) var isMicrophoneSpeaking = false
    /// The others in the calls our voice peers host, as their PARTICIPANTS name them, each peer
    /// once (`Participants`): for display only.
    private(set) var relayedParticipants: [CallParticipant] = []

    private let options: Options
    private let crypto: LibSodium
    private let ip: IPTransport
    private let registry: PeerRegistry
    private let bluetooth: BluetoothPeers
    private let emit: (ServiceEvent) -> Void
    /// Something a peer object shows changed without an event of its own.
    private let peersChanged: () -> Void
    private var retryTimer: EventSource?

    init(options: Options, crypto: LibSodium, ip: IPTransport, registry: PeerRegistry, bluetooth: BluetoothPeers,
         emit: @escaping (ServiceEvent) -> Void, peersChanged: @escaping () -> Void) {
        self.options = options
        self.crypto = crypto
        self.ip = ip
        self.registry = registry
        self.bluetooth = bluetooth
        self.emit = emit
        self.peersChanged = peersChanged
        audioProcessing = CaptureProcessing.names(options.voice.processing)
    }

    /// Starts the voice thread (once the listener, if any, is open) and retries wanted voice.
    func start(muted: Bool) {
        startEngine()
        engine?.muted.store(muted, ordering: .relaxed)
        retryTimer = Timer.every(Self.voiceRetry) { [unowned self] in retryWantedVoice(); return true }
    }

    func shutdown() {
        retryTimer = nil
        engine?.shutdown()
    }

    /// The mute switch reaches the voice thread.
    func setMuted(_ muted: Bool) {
        engine?.muted.store(muted, ordering: .relaxed)
    }

    /// Binds the UDP socket voice arrives on and starts the voice thread: on the `--listen`
    /// port, or on a free port that HELLO announces.
    private func startEngine() {
        let endpoint: IPEndpoint
        if let address = options.listen, let listen = try? IPTransport.parseListenAddress(address) {
            endpoint = IPEndpoint(host: listen.host, port: ip.listenPort)
        } else {
            endpoint = IPEndpoint(host: "0.0.0.0", port: 0)
        }
        do {
            let socket = try Socket.datagram(boundTo: endpoint)
            voicePort = options.listen == nil ? socket.localEndpoint?.port ?? 0 : 0
            let control = MainContextReference(self)
            engine = VoiceEngine(socket: socket, options: options.voice) { event in
                runOnMainContext { control.object?.voiceEngineReported(event) }
            } sendOnLink: { peer, frame, queuedAt in
                runOnMainContext { control.object?.sendVoiceOnLink(frame, to: peer, queuedAt: queuedAt) }
            }
        } catch {
            Log.warning("voice is off: cannot receive voice on UDP \(endpoint): \(error)")
        }
    }

    /// Why voice with `peer` cannot run now, or nil.
    private func voiceUnavailableReason(for peer: Peer) -> String? {
        guard engine != nil else { return "voice is off: no UDP socket could be bound (see the log)" }
        if let hello = peer.link?.peerHello, !hello.capabilities.contains(.voice) {
            return "\(peer.id) does not offer voice (its service runs without it)"
        }
        if voiceRoute(for: peer) == nil {
            return "\(peer.id) announced no UDP port for voice: run both sides with --voice-over-link"
        }
        return VoiceEngine.unavailableReason
    }

    /// How our voice reaches `peer`: on the link for Bluetooth (and with --voice-over-link), else
    /// in datagrams to where the peer receives them; nil when it announced nowhere.
    private func voiceRoute(for peer: Peer) -> VoiceRoute? {
        if peer.link?.transport == .bluetooth || options.voice.overLink { return .link }
        return peer.voice.destination.map { .datagrams($0) }
    }

    func startVoice(_ ref: PeerRef) throws(ServiceError) {
        let peer = try registry.resolve(ref)
        if !peer.isConnected, let unavailable = bluetooth.unavailable(for: peer.transport) { throw unavailable }
        guard peer.isConnected else { throw .notConnected("\(peer.id) is not connected: Connect to it first") }
        peer.voice.wanted = true
        if let reason = voiceUnavailableReason(for: peer) { throw .notAvailable(reason) }
        beginVoice(peer)
    }

    func stopVoice(_ ref: PeerRef) throws(ServiceError) {
        let peer = try registry.resolve(ref)
        guard peer.isConnected else { throw .notConnected("\(peer.id) is not connected") }
        if peer.voice.localSession != nil { peer.link?.send(.voiceStop) }
        endVoice(peer, reason: "StopVoice was called")
    }

    /// Announces our session to the peer (if not done yet) and starts once both are known.
    private func beginVoice(_ peer: Peer) {
        guard peer.voice.wanted, let link = peer.link, voiceUnavailableReason(for: peer) == nil else { return }
        if peer.voice.localSession == nil {
            let session = VoiceKeys.makeSessionID(crypto: crypto)
            peer.voice.localSession = session
            // 10 and 20 are the only values Options accepts.
            link.send(.voiceStart(try! VoiceStart(sessionID: session, frameMs: UInt8(options.voice.frameMs))))
        }
        startVoiceSessionIfReady(peer)
    }

    private func startVoiceSessionIfReady(_ peer: Peer) {
        guard !peer.voice.running, let engine, let local = peer.voice.localSession, let remote = peer.voice.remote,
              let result = peer.link?.result, let route = voiceRoute(for: peer) else { return }
        let keys: VoiceKeys
        do {
            keys = try result.voiceKeys(localSessionID: local, remoteSessionID: remote.sessionID)
        } catch {
            Log.warning("voice with \(peer.id): \(error)")
            return
        }
        let taken = Set(registry.all.compactMap { $0.voice.running ? $0.voice.source : nil })
        guard let source = (1...255).lazy.compactMap({ RelaySource(rawValue: UInt8($0)) }).first(where: { !taken.contains($0) }) else {
            Log.warning("voice with \(peer.id): the call is full")
            return
        }
        peer.voice.running = true
        peer.voice.generation += 1
        peer.voice.source = source
        engine.start(VoiceSessionSetup(peer: peer.id.description, generation: peer.voice.generation, source: source,
                                      route: route, sealer: keys.makeSealer(), opener: keys.makeOpener(),
                                      localFrameMs: options.voice.frameMs, remoteFrameMs: Int(remote.frameMs),
                                      playback: peer.voice.playback))
        if !peer.voice.call.isEmpty { engine.setRelayedParticipants(host: peer.id.description, peer.voice.call) }
        callChanged()
    }

    /// Tells each peer in the call who else is in it (PARTICIPANTS) when that changed, tells
    /// hosts whom we now hear directly (RELAY_REPORT), and updates `Participants`.
    private func callChanged() {
        let inCall = registry.all.filter { $0.voice.running }
        for peer in inCall {
            let others = inCall.filter { $0 !== peer }.compactMap { other -> CallParticipant? in
                guard let source = other.voice.source, let frameMs = other.voice.remote?.frameMs else { return nil }
                return try? CallParticipant(source: source, peer: other.id, frameMs: frameMs, speaking: other.voice.speaking,
                                            name: Hello.truncatedName(other.name))
            }.sorted { $0.source < $1.source }.prefix(Wire.maxCallParticipants)
            guard Array(others) != peer.voice.announced, let frame = try? Frame.participants(checking: Array(others)) else { continue }
            peer.voice.announced = Array(others)
            peer.link?.send(frame)
        }
        for host in inCall where !host.voice.call.isEmpty { reportRelayed(by: host) }
        let relayed = inCall.flatMap(\.voice.call)
        var seen = Set<PeerID>()
        let participants = relayed.filter { seen.insert($0.peer).inserted }
        if participants != relayedParticipants {
            relayedParticipants = participants
            emit(.propertiesChanged([.participants]))
        }
    }

    /// RELAY_REPORT to `host` for each source of its list whose report changed: our loss of it
    /// (`lossChanged`), and whether we hear that peer in a voice session of our own (then the
    /// host stops relaying it to us: the direct one wins). Nothing while a source is as the host
    /// assumes at first (relayed, 0 %).
    private func reportRelayed(by host: Peer, lossChanged: (source: RelaySource, percent: Int)? = nil) {
        guard host.voice.running, let link = host.link else { return }
        host.voice.relayReports = host.voice.relayReports.filter { source, _ in host.voice.call.contains { $0.source == source } }
        for entry in host.voice.call {
            // What the host assumes until told otherwise: relayed, nothing lost (0 is in range).
            let last = host.voice.relayReports[entry.source] ?? (try! RelayReport(source: entry.source, lossPercent: 0, direct: false))
            var loss = last.lossPercent
            if let lossChanged, lossChanged.source == entry.source { loss = UInt8(min(100, lossChanged.percent)) }
            let direct = registry[entry.peer]?.voice.running == true
            guard let report = try? RelayReport(source: entry.source, lossPercent: loss, direct: direct), report != last else { continue }
            host.voice.relayReports[entry.source] = report
            if direct != last.direct {
                Log.info("voice: asking \(host.id) \(direct ? "not to relay \(entry.peer): heard directly" : "to relay \(entry.peer) again")")
            }
            link.send(.relayReport(report))
        }
    }

    /// Stops voice with `peer` here (the peer is told by the caller if it should be).
    private func endVoice(_ peer: Peer, reason: String) {
        let wasActive = peer.voice.active, wasRunning = peer.voice.running
        if peer.voice.running { engine?.stop(peer: peer.id.description, reason: reason) }
        if peer.voice.droppedOnLink > 0 {
            Log.info("voice with \(peer.id): \(peer.voice.droppedOnLink) frames dropped rather than sent late on the link")
        }
        peer.voice = PeerVoice(generation: peer.voice.generation, destination: peer.voice.destination, playback: peer.voice.playback)
        if wasActive { emit(.voiceStateChanged(peer.id, .stopped)) }
        if wasRunning { callChanged() }
    }

    /// Our VOICE (or a RELAYED_VOICE) frame for a peer whose voice goes on its link (drop-stale:
    /// see ``PeerLink/sendVoice(_:)``).
    private func sendVoiceOnLink(_ frame: Frame, to id: String, queuedAt: Int64) {
        guard let peer = peer(describedAs: id), let link = peer.link else { return }
        if VoiceEngine.monotonicNs() - queuedAt > Self.staleLinkVoiceNs || !link.sendVoice(frame) {
            peer.voice.droppedOnLink += 1
        }
    }

    /// The peer the voice thread names `id` (it knows peers by their ids' text).
    private func peer(describedAs id: String) -> Peer? {
        PeerID(id).flatMap { registry[$0] }
    }

    /// VOICE_START, VOICE_STOP, VOICE_REPORT, (on the link) VOICE and RELAYED_VOICE, and the
    /// call's PARTICIPANTS and RELAY_REPORT from the peer.
    func received(_ frame: Frame, from peer: Peer) {
        switch frame {
        case .voiceStart(let start):
            if peer.voice.remote != nil && peer.voice.remote?.sessionID != start.sessionID {
                // The peer restarted its session: restart ours too, with fresh keys both ways.
                endVoice(peer, reason: "the peer restarted voice")
            }
            peer.voice.remote = start
            peer.voice.wanted = true
            beginVoice(peer)
        case .voiceStop:
            endVoice(peer, reason: "the peer stopped voice")
        case .voice, .relayedVoice:
            // Voice the peer sends on the link; our session (if any) takes it.
            if peer.voice.running { engine?.receivedOnLink(peer: peer.id.description, frame: frame) }
        case .participants(let list):
            // The call the peer hosts; kept for its session (ours may start just after).
            peer.voice.call = list
            if peer.voice.running { engine?.setRelayedParticipants(host: peer.id.description, list) }
            callChanged()
        case .relayReport(let report):
            if peer.voice.running { engine?.listenerReported(peer: peer.id.description, report) }
        case .voiceReport(let lossPercent):
            if peer.voice.running { engine?.peerReportedLoss(peer: peer.id.description, percent: Int(lossPercent)) }
        default:
            break
        }
    }

    private func voiceEngineReported(_ event: VoiceEvent) {
        switch event {
        case .active(let id, let generation):
            guard let peer = peer(describedAs: id),
                  peer.voice.running, peer.voice.generation == generation, !peer.voice.active else { return }
            peer.voice.active = true
            emit(.voiceStateChanged(peer.id, .active))
        case .stopped(let id, let generation, let reason):
            guard let peer = peer(describedAs: id),
                  peer.voice.running, peer.voice.generation == generation else { return }
            // The streams failed (PipeWire went away): keep wanting voice, renegotiate fresh keys
            // when it can run again.
            Log.info("voice with \(peer.id) stopped: \(reason)")
            let wanted = peer.voice.wanted
            if peer.voice.localSession != nil { peer.link?.send(.voiceStop) }
            endVoice(peer, reason: reason)
            peer.voice.wanted = wanted
        case .lossChanged(let id, let generation, let percent):
            guard let peer = peer(describedAs: id), peer.voice.running, peer.voice.generation == generation else { return }
            peer.link?.send(.voiceReport(lossPercent: UInt8(min(100, percent))))
        case .processingChanged(let processing):
            let names = CaptureProcessing.names(processing)
            guard names != audioProcessing else { return }
            audioProcessing = names
            emit(.propertiesChanged([.audioProcessing]))
        case .peerSpeaking(let id, let generation, let speaking):
            guard let peer = peer(describedAs: id), peer.voice.running, peer.voice.generation == generation else { return }
            peer.voice.speaking = speaking
            peersChanged()
            callChanged()
        case .microphoneSpeaking(let speaking):
            guard speaking != isMicrophoneSpeaking else { return }
            isMicrophoneSpeaking = speaking
            emit(.propertiesChanged([.speaking]))
        case .relayedLossChanged(let id, let generation, let source, let percent):
            guard let peer = peer(describedAs: id), peer.voice.running, peer.voice.generation == generation else { return }
            reportRelayed(by: peer, lossChanged: (source, percent))
        }
    }

    /// `SetVolume`: the peer's voice plays at `volume` here (kept in peers.json for a paired peer).
    func setVolume(_ ref: PeerRef, volume: Double) throws(ServiceError) {
        _ = try VoiceMixer.Channel(volume: volume)  // the argument first: InvalidArgument before UnknownPeer
        let peer = try registry.resolve(ref)
        try peer.voice.playback.setVolume(volume)
        playbackChanged(peer)
        if peer.paired { registry.remember(peer) }
    }

    /// `SetPeerMuted`: the peer's voice is not played here (nobody is told; kept in peers.json for
    /// a paired peer).
    func setPeerMuted(_ ref: PeerRef, muted: Bool) throws(ServiceError) {
        let peer = try registry.resolve(ref)
        peer.voice.playback.muted = muted
        playbackChanged(peer)
        if peer.paired { registry.remember(peer) }
    }

    private func playbackChanged(_ peer: Peer) {
        Log.info("voice of \(peer.id) plays at volume \(peer.voice.playback.volume)\(peer.voice.playback.muted ? ", muted" : "") here")
        if peer.voice.running { engine?.setPlayback(peer: peer.id.description, peer.voice.playback) }
        peersChanged()
    }

    /// Brings up voice that is wanted but not running, e.g. once PipeWire has appeared.
    private func retryWantedVoice() {
        for peer in registry.all where peer.isConnected && peer.voice.wanted && !peer.voice.running {
            beginVoice(peer)
        }
    }
}

extension VoiceControl: LinkVoice {
    func linkOpened(_ link: PeerLink, to peer: Peer) {
        guard let hello = link.peerHello else { return }
        peer.voice.destination = Self.voiceDestination(link: link, hello: hello)
        if options.voice.autoStart { peer.voice.wanted = true }
        beginVoice(peer)
    }

    func linkEnded(for peer: Peer, reason: String) {
        endVoice(peer, reason: reason)
    }

    /// Voice goes to the voice port the peer announced, else to the address we dialled (a relay
    /// in between carries voice too), else to the peer's listen port.
    private static func voiceDestination(link: PeerLink, hello: Hello) -> IPEndpoint? {
        guard case .ip(let remote) = link.remote else { return nil }
        if link.isOutgoing && hello.voicePort == 0 { return remote }
        return hello.voiceDestinationPort.map { IPEndpoint(host: remote.host, port: $0) }
    }
}

/// A peer's voice state on the control plane.
struct PeerVoice {
    /// Voice should run with this peer (auto voice on connect, StartVoice, or the peer started it).
    var wanted = false
    /// Our session id, once announced in VOICE_START.
    var localSession: [UInt8]?
    /// The peer's VOICE_START.
    var remote: VoiceStart?
    /// The voice thread has a session for this peer.
    var running = false
    /// VoiceStateChanged(active) was emitted.
    var active = false
    /// Tells this peer's voice-thread sessions apart, so a late event from an old one is ignored.
    var generation = 0
    /// Where our voice datagrams go: the peer's voice port, the address we dialled, or its listen
    /// port (`voiceDestination(of:link:hello:)`).
    var destination: IPEndpoint?
    /// Our VOICE frames for the link that were dropped rather than sent late.
    var droppedOnLink = 0
    /// The peer's voice holds speech (its peer object's `Speaking`).
    var speaking = false
    /// Its volume and mute here; kept when voice stops, and across restarts for a paired peer.
    var playback = VoiceMixer.Channel.unity
    /// The number we relay its voice under while its session runs (its PARTICIPANTS entry).
    var source: RelaySource?
    /// The list of the call we last sent it (PARTICIPANTS: the others in our call).
    var announced: [CallParticipant] = []
    /// The call it hosts, as its latest PARTICIPANTS names it.
    var call: [CallParticipant] = []
    /// The RELAY_REPORT we last sent it per source of its list.
    var relayReports: [RelaySource: RelayReport] = [:]
}
