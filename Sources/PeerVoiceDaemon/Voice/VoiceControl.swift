import GIO
import Glibc
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
///
/// A `LinkComponent`: it owns the voice frames (VOICE_START, VOICE_STOP, VOICE_REPORT, VOICE and
/// a call's RELAYED_VOICE, PARTICIPANTS, RELAY_REPORT) and starts voice when a link opens.
final class VoiceControl: LinkComponent {
    /// How often voice that is wanted but not running (no PipeWire yet, a stream failed) is retried.
    static let voiceRetry: Duration = .seconds(1)
    /// A VOICE frame for a link that waited longer than this for the main loop is dropped: it
    /// would reach the peer too late to be played.
    static let staleLinkVoiceNs: Int64 = 60_000_000

    /// The voice thread's handle, once its UDP socket is bound.
    private(set) var engine: VoiceEngine?
    /// Our voice for a Mumble room (its number, a voice packet for its TCP tunnel): `Rooms` sends it.
    var roomVoiceOut: (Int, [UInt8]) -> Void = { _, _ in }
    /// The UDP port HELLO announces for voice (0: the listen port).
    private(set) var voicePort: UInt16 = 0
    /// The capture processing of the latest voice session, each part with whether it runs and
    /// why (before one: what the options allow).
    private(set) var audioProcessing: [VoiceProcessingState]
    /// Our microphone holds speech, unmuted (`Speaking`, from the voice thread).
    private(set) var isMicrophoneSpeaking = false
    /// The others in the calls our voice peers host, as their PARTICIPANTS name them, each peer
    /// once (`Participants`): for display only.
    private(set) var relayedParticipants: [CallParticipant] = []

    private let options: Options
    private let crypto: LibSodium
    private let ip: IPTransport
    private let registry: PeerRegistry
    private let links: PeerLinks
    private let bluetooth: BluetoothPeers
    private let emit: (ServiceEvent) -> Void
    /// What a peer's object shows changed without an event of its own.
    private let peerChanged: (PeerRef) -> Void
    private var retryTimer: EventSource?
    /// Voice with each peer that has a link (or had one, until it ended).
    private var voices: [PeerID: PeerVoice] = [:]
    /// Tells voice-thread sessions apart, so a late event from an ended one is ignored.
    private var lastGeneration = 0

    init(options: Options, crypto: LibSodium, ip: IPTransport, registry: PeerRegistry, links: PeerLinks,
         bluetooth: BluetoothPeers, emit: @escaping (ServiceEvent) -> Void, peerChanged: @escaping (PeerRef) -> Void) {
        self.options = options
        self.crypto = crypto
        self.ip = ip
        self.registry = registry
        self.links = links
        self.bluetooth = bluetooth
        self.emit = emit
        self.peerChanged = peerChanged
        audioProcessing = VoiceProcessingState.all(options: options.voice.processing, echoCanceller: .decide(
            wanted: options.voice.processing.contains(.echoCancel), microphoneCanceller: nil, sinks: []))
        links.register(self, frames: [.voiceStart, .voiceStop, .voiceReport, .voice, .relayedVoice, .participants, .relayReport])
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

    /// Binds the UDP socket voice arrives on and starts the voice thread.
    private func startEngine() {
        do {
            let (socket, announcedPort) = try bindVoiceSocket()
            voicePort = announcedPort
            let control = MainContextReference(self)
            engine = VoiceEngine(socket: socket, options: options.voice) { event in
                runOnMainContext { control.object?.voiceEngineReported(event) }
            } sendOnLink: { id, frame, queuedAt in
                runOnMainContext { control.object?.sendVoiceOnLink(frame, to: id, queuedAt: queuedAt) }
            } sendToRoom: { room, packet in
                runOnMainContext { control.object?.roomVoiceOut(room, packet) }
            }
        } catch {
            Log.warning("voice is off: cannot receive voice on UDP: \(error)")
        }
    }

    /// The UDP socket voice arrives on, and the port HELLO announces for it (0: the listen port).
    /// With `--listen`, the listen port, so one forwarded port (or a relay) carries links and
    /// voice alike; if another program holds that UDP port, a free one on the same host, announced
    /// (voice must not be off for a port the links do not need). Without, a free port.
    private func bindVoiceSocket() throws(SystemError) -> (Socket, announcedPort: UInt16) {
        guard let address = options.listen, let listen = try? IPTransport.parseListenAddress(address) else {
            let socket = try Socket.datagram(boundTo: IPEndpoint(host: "0.0.0.0", port: 0))
            return (socket, socket.localEndpoint?.port ?? 0)
        }
        do {
            return (try Socket.datagram(boundTo: IPEndpoint(host: listen.host, port: ip.listenPort)), 0)
        } catch where error.code == EADDRINUSE {
            let socket = try Socket.datagram(boundTo: IPEndpoint(host: listen.host, port: 0))
            let port = socket.localEndpoint?.port ?? 0
            Log.warning("UDP port \(ip.listenPort) is taken by another program: voice arrives on UDP port \(port) instead, "
                        + "which peers are told (a port forward or relay of \(ip.listenPort) alone does not carry it)")
            return (socket, port)
        }
    }

    /// The peer's voice state, made on first use.
    private func voice(of peer: Peer) -> PeerVoice {
        if let voice = voices[peer.id] { return voice }
        let voice = PeerVoice()
        voices[peer.id] = voice
        return voice
    }

    /// The peers whose voice-thread session runs, with their voice state.
    private var inCall: [(peer: Peer, voice: PeerVoice)] {
        registry.all.compactMap { peer in voices[peer.id].flatMap { $0.running ? (peer, $0) : nil } }
    }

    /// The peer object's `Voice`: its session is active.
    func isActive(_ id: PeerID) -> Bool { voices[id]?.active == true }

    /// The peer object's `Speaking`.
    func isSpeaking(_ id: PeerID) -> Bool { voices[id]?.speaking == true }

    /// Why voice with `peer` cannot run now, or nil.
    private func voiceUnavailableReason(for peer: Peer) -> String? {
        guard engine != nil else { return "voice is off: no UDP socket could be bound (see the log)" }
        if let why = links.link(of: peer.id)?.negotiated?.whyOff(.voice, who: peer.id.description) { return why }
        if voiceRoute(for: peer) == nil {
            return "\(peer.id) announced no UDP port for voice: run both sides with --voice-over-link"
        }
        return VoiceEngine.unavailableReason
    }

    /// How our voice reaches `peer`: on the link for Bluetooth (and with --voice-over-link), else
    /// in datagrams to where the peer receives them; nil when it announced nowhere.
    private func voiceRoute(for peer: Peer) -> VoiceRoute? {
        if links.link(of: peer.id)?.transport == .bluetooth || options.voice.overLink { return .link }
        return voices[peer.id]?.destination.map { .datagrams($0) }
    }

    func startVoice(_ ref: PeerRef) throws(ServiceError) {
        let peer = try registry.resolve(ref)
        let isConnected = links.isConnected(peer.id)
        if !isConnected, let unavailable = bluetooth.unavailable(for: peer.transport) { throw unavailable }
        guard isConnected else { throw .notConnected("\(peer.id) is not connected: Connect to it first") }
        voice(of: peer).wanted = true
        if let reason = voiceUnavailableReason(for: peer) { throw .notAvailable(reason) }
        beginVoice(peer)
    }

    func stopVoice(_ ref: PeerRef) throws(ServiceError) {
        let peer = try registry.resolve(ref)
        guard let link = links.link(of: peer.id) else { throw .notConnected("\(peer.id) is not connected") }
        if voices[peer.id]?.localSession != nil { link.send(.voiceStop) }
        endVoice(peer, reason: "StopVoice was called")
    }

    /// Announces our session to the peer (if not done yet) and starts once both are known.
    private func beginVoice(_ peer: Peer) {
        let voice = voice(of: peer)
        guard voice.wanted, let link = links.link(of: peer.id), voiceUnavailableReason(for: peer) == nil else { return }
        if voice.localSession == nil {
            let session = VoiceKeys.makeSessionID(crypto: crypto)
            voice.localSession = session
            // 10 and 20 are the only values Options accepts.
            link.send(.voiceStart(try! VoiceStart(sessionID: session, frameMs: UInt8(options.voice.frameMs))))
        }
        startVoiceSessionIfReady(peer, voice)
    }

    private func startVoiceSessionIfReady(_ peer: Peer, _ voice: PeerVoice) {
        guard !voice.running, let engine, let local = voice.localSession, let remote = voice.remote,
              let link = links.link(of: peer.id), let result = link.result, let route = voiceRoute(for: peer) else { return }
        let keys: VoiceKeys
        do {
            keys = try result.voiceKeys(localSessionID: local, remoteSessionID: remote.sessionID)
        } catch {
            Log.warning("voice with \(peer.id): \(error)")
            return
        }
        let taken = Set(inCall.compactMap(\.voice.source))
        guard let source = (1...255).lazy.compactMap({ RelaySource(rawValue: UInt8($0)) }).first(where: { !taken.contains($0) }) else {
            Log.warning("voice with \(peer.id): the call is full")
            return
        }
        lastGeneration += 1
        voice.running = true
        voice.generation = lastGeneration
        voice.source = source
        engine.start(VoiceSessionSetup(peer: peer.id, generation: voice.generation, source: source,
                                      route: route, sealer: keys.makeSealer(), opener: keys.makeOpener(),
                                      localFrameMs: options.voice.frameMs, remoteFrameMs: Int(remote.frameMs),
                                      playback: peer.playback,
                                      takesRelayedVoice: link.negotiated?.capabilities.contains(.hostedCalls) ?? false))
        if !voice.call.isEmpty { engine.setRelayedParticipants(host: peer.id, voice.call) }
        callChanged()
    }

    /// Tells each peer in the call who else is in it (PARTICIPANTS) when that changed, tells
    /// hosts whom we now hear directly (RELAY_REPORT), and updates `Participants`.
    private func callChanged() {
        let inCall = inCall
        for (peer, voice) in inCall {
            let others = inCall.filter { $0.peer !== peer }.compactMap { other, otherVoice -> CallParticipant? in
                guard let source = otherVoice.source, let frameMs = otherVoice.remote?.frameMs else { return nil }
                return try? CallParticipant(source: source, peer: other.id, frameMs: frameMs, speaking: otherVoice.speaking,
                                            name: Hello.truncatedName(other.name))
            }.sorted { $0.source < $1.source }.prefix(Wire.maxCallParticipants)
            guard Array(others) != voice.announced, let frame = try? Frame.participants(checking: Array(others)) else { continue }
            voice.announced = Array(others)
            links.link(of: peer.id)?.send(frame)
        }
        for (host, voice) in inCall where !voice.call.isEmpty { reportRelayed(by: host, voice) }
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
    private func reportRelayed(by host: Peer, _ voice: PeerVoice, lossChanged: (source: RelaySource, percent: Int)? = nil) {
        guard voice.running, let link = links.link(of: host.id) else { return }
        voice.relayReports = voice.relayReports.filter { source, _ in voice.call.contains { $0.source == source } }
        for entry in voice.call {
            // What the host assumes until told otherwise: relayed, nothing lost (0 is in range).
            let last = voice.relayReports[entry.source] ?? (try! RelayReport(source: entry.source, lossPercent: 0, direct: false))
            var loss = last.lossPercent
            if let lossChanged, lossChanged.source == entry.source { loss = UInt8(min(100, lossChanged.percent)) }
            let direct = voices[entry.peer]?.running == true
            guard let report = try? RelayReport(source: entry.source, lossPercent: loss, direct: direct), report != last else { continue }
            voice.relayReports[entry.source] = report
            if direct != last.direct {
                Log.info("voice: asking \(host.id) \(direct ? "not to relay \(entry.peer): heard directly" : "to relay \(entry.peer) again")")
            }
            link.send(.relayReport(report))
        }
    }

    /// Stops voice with `peer` here (the peer is told by the caller if it should be); where its
    /// datagrams go is kept while the link lasts.
    private func endVoice(_ peer: Peer, reason: String) {
        guard let voice = voices[peer.id] else { return }
        if voice.running { engine?.stop(peer: peer.id, reason: reason) }
        if voice.droppedOnLink > 0 {
            Log.info("voice with \(peer.id): \(voice.droppedOnLink) frames dropped rather than sent late on the link")
        }
        let ended = PeerVoice()
        ended.destination = voice.destination
        voices[peer.id] = ended
        if voice.active { emit(.voiceStateChanged(peer.id, .stopped)) }
        if voice.running { callChanged() }
    }

    /// Our VOICE (or a RELAYED_VOICE) frame for a peer whose voice goes on its link (drop-stale:
    /// see ``PeerLink/sendVoice(_:)``).
    private func sendVoiceOnLink(_ frame: Frame, to id: PeerID, queuedAt: Int64) {
        guard let link = links.link(of: id), let voice = voices[id] else { return }
        if VoiceEngine.monotonicNs() - queuedAt > Self.staleLinkVoiceNs || !link.sendVoice(frame) {
            voice.droppedOnLink += 1
        }
    }

    /// The peer and voice state of the voice-thread session `generation` with `id`, while it runs.
    private func session(_ id: PeerID, _ generation: Int) -> (peer: Peer, voice: PeerVoice)? {
        guard let peer = registry[id], let voice = voices[id], voice.running, voice.generation == generation else { return nil }
        return (peer, voice)
    }

    /// VOICE_START, VOICE_STOP, VOICE_REPORT, (on the link) VOICE and RELAYED_VOICE, and the
    /// call's PARTICIPANTS and RELAY_REPORT from the peer.
    func received(_ frame: Frame, on link: PeerLink, from peer: Peer) {
        let running = voices[peer.id]?.running == true
        switch frame {
        case .voiceStart(let start):
            if let remote = voices[peer.id]?.remote, remote.sessionID != start.sessionID {
                // The peer restarted its session: restart ours too, with fresh keys both ways.
                endVoice(peer, reason: "the peer restarted voice")
            }
            let voice = voice(of: peer)
            voice.remote = start
            voice.wanted = true
            beginVoice(peer)
        case .voiceStop:
            endVoice(peer, reason: "the peer stopped voice")
        case .voice, .relayedVoice:
            // Voice the peer sends on the link; our session (if any) takes it.
            if running { engine?.receivedOnLink(peer: peer.id, frame: frame) }
        case .participants(let list):
            // The call the peer hosts; kept for its session (ours may start just after).
            voice(of: peer).call = list
            if running { engine?.setRelayedParticipants(host: peer.id, list) }
            callChanged()
        case .relayReport(let report):
            if running { engine?.listenerReported(peer: peer.id, report) }
        case .voiceReport(let lossPercent):
            if running { engine?.peerReportedLoss(peer: peer.id, percent: Int(lossPercent)) }
        default:
            break
        }
    }

    private func voiceEngineReported(_ event: VoiceEvent) {
        switch event {
        case .active(let id, let generation):
            guard let (peer, voice) = session(id, generation), !voice.active else { return }
            voice.active = true
            emit(.voiceStateChanged(peer.id, .active))
        case .stopped(let id, let generation, let reason):
            guard let (peer, voice) = session(id, generation) else { return }
            // The streams failed (PipeWire went away): keep wanting voice, renegotiate fresh keys
            // when it can run again.
            Log.info("voice with \(peer.id) stopped: \(reason)")
            if voice.localSession != nil { links.link(of: peer.id)?.send(.voiceStop) }
            endVoice(peer, reason: reason)
            self.voice(of: peer).wanted = voice.wanted
        case .lossChanged(let id, let generation, let percent):
            guard let (peer, _) = session(id, generation) else { return }
            links.link(of: peer.id)?.send(.voiceReport(lossPercent: UInt8(min(100, percent))))
        case .processingChanged(let processing):
            guard processing != audioProcessing else { return }
            audioProcessing = processing
            emit(.propertiesChanged([.audioProcessing]))
        case .peerSpeaking(let id, let generation, let speaking):
            guard let (_, voice) = session(id, generation) else { return }
            voice.speaking = speaking
            peerChanged(.id(id))
            callChanged()
        case .microphoneSpeaking(let speaking):
            guard speaking != isMicrophoneSpeaking else { return }
            isMicrophoneSpeaking = speaking
            emit(.propertiesChanged([.speaking]))
        case .relayedLossChanged(let id, let generation, let source, let percent):
            guard let (peer, voice) = session(id, generation) else { return }
            reportRelayed(by: peer, voice, lossChanged: (source, percent))
        }
    }

    /// `SetVolume`: the peer's voice plays at `volume` here (kept in peers.json for a paired peer).
    func setVolume(_ ref: PeerRef, volume: Double) throws(ServiceError) {
        _ = try VoiceMixer.Channel(volume: volume)  // the argument first: InvalidArgument before UnknownPeer
        let peer = try registry.resolve(ref)
        try peer.playback.setVolume(volume)
        playbackChanged(peer)
        if peer.paired { registry.remember(peer) }
    }

    /// `SetPeerMuted`: the peer's voice is not played here (nobody is told; kept in peers.json for
    /// a paired peer).
    func setPeerMuted(_ ref: PeerRef, muted: Bool) throws(ServiceError) {
        let peer = try registry.resolve(ref)
        peer.playback.muted = muted
        playbackChanged(peer)
        if peer.paired { registry.remember(peer) }
    }

    private func playbackChanged(_ peer: Peer) {
        Log.info("voice of \(peer.id) plays at volume \(peer.playback.volume)\(peer.playback.muted ? ", muted" : "") here")
        if voices[peer.id]?.running == true { engine?.setPlayback(peer: peer.id, peer.playback) }
        peerChanged(.id(peer.id))
    }

    /// Brings up voice that is wanted but not running, e.g. once PipeWire has appeared.
    private func retryWantedVoice() {
        for peer in links.connectedPeers {
            guard let voice = voices[peer.id], voice.wanted, !voice.running else { continue }
            beginVoice(peer)
        }
    }
}

// MARK: Links

extension VoiceControl {
    /// Voice, and hosting calls with it, while the voice thread runs.
    var offeredCapabilities: Capabilities { engine == nil ? [] : [.voice, .hostedCalls] }

    func linkOpened(_ link: PeerLink, to peer: Peer) {
        guard let hello = link.peerHello else { return }
        let voice = voice(of: peer)
        voice.destination = Self.voiceDestination(link: link, hello: hello)
        if options.voice.autoStart { voice.wanted = true }
        beginVoice(peer)
    }

    func linkClosed(_ link: PeerLink, of peer: Peer, reason: String) {
        endVoice(peer, reason: reason)
        voices[peer.id] = nil
    }

    /// Voice goes to the voice port the peer announced, else to the address we dialled (a relay
    /// in between carries voice too), else to the peer's listen port.
    private static func voiceDestination(link: PeerLink, hello: Hello) -> IPEndpoint? {
        guard case .ip(let remote) = link.remote else { return nil }
        if link.isOutgoing && hello.voicePort == 0 { return remote }
        return hello.voiceDestinationPort.map { IPEndpoint(host: remote.host, port: $0) }
    }
}

/// Voice with one peer on the control plane (``VoiceControl``'s alone).
private final class PeerVoice {
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
    /// The running voice-thread session's number (``VoiceControl/lastGeneration``).
    var generation = 0
    /// Where our voice datagrams go: the peer's voice port, the address we dialled, or its listen
    /// port (`voiceDestination(of:link:hello:)`).
    var destination: IPEndpoint?
    /// Our VOICE frames for the link that were dropped rather than sent late.
    var droppedOnLink = 0
    /// The peer's voice holds speech (its peer object's `Speaking`).
    var speaking = false
    /// The number we relay its voice under while its session runs (its PARTICIPANTS entry).
    var source: RelaySource?
    /// The list of the call we last sent it (PARTICIPANTS: the others in our call).
    var announced: [CallParticipant] = []
    /// The call it hosts, as its latest PARTICIPANTS names it.
    var call: [CallParticipant] = []
    /// The RELAY_REPORT we last sent it per source of its list.
    var relayReports: [RelaySource: RelayReport] = [:]
}
