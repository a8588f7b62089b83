import Foundation
import GIO
import Glibc
import PeerVoiceCore
import PipeWire
import Synchronization

/// What the control plane hands the voice thread to start one peer's voice session.
struct VoiceSessionSetup: Sendable {
    let peer: PeerID
    /// Which of the peer's sessions this is: events carry it back.
    let generation: Int
    /// The number the others of the call know the peer's relayed voice by, while we host it.
    let source: RelaySource
    /// How our voice travels.
    let route: VoiceRoute
    let sealer: RecordSealer
    let opener: RecordOpener
    /// Our Opus frame length, and the peer's (its decoder and jitter buffer follow it).
    let localFrameMs: Int
    let remoteFrameMs: Int
    /// The peer's volume and mute here, to start with (``VoiceEngine/setPlayback(peer:_:)`` changes them).
    let playback: VoiceMixer.Channel
    /// Its link carries hosted calls: the others' voices may be relayed to it (RELAYED_VOICE).
    let takesRelayedVoice: Bool
}

/// How one peer's voice travels (the peer accepts both ways, whichever we choose).
enum VoiceRoute: Sendable {
    /// Sealed with the voice keys, one VOICE record per UDP datagram to this address: loss never
    /// stalls voice behind retransmissions.
    case datagrams(IPEndpoint)
    /// VOICE frames on the peer's link (a Bluetooth channel, or TCP where UDP does not get
    /// through), sealed as link records; the link drops them rather than queue them behind a
    /// backlog (``PeerLink/sendVoice(_:)``).
    case link

    var host: String? {
        if case .datagrams(let endpoint) = self { endpoint.host } else { nil }
    }
}

/// What the voice thread reports back (delivered on the main context).
enum VoiceEvent: Sendable {
    /// Both streams run and the peer's frames arrive.
    case active(peer: PeerID, generation: Int)
    /// The session failed or could not start; `reason` is for the log.
    case stopped(peer: PeerID, generation: Int, reason: String)
    /// The share of the peer's voice we lose changed: tell the peer (VOICE_REPORT).
    case lossChanged(peer: PeerID, generation: Int, percent: Int)
    /// The capture processing's parts, whether each runs and why (once the call's microphone was
    /// checked for an echo canceller of its own, and whenever the speaker's output turns the
    /// canceller on or off).
    case processingChanged([VoiceProcessingState])
    /// The peer's voice started or stopped being speech (`Speaking` on its peer object).
    case peerSpeaking(peer: PeerID, generation: Int, speaking: Bool)
    /// The microphone started or stopped being speech, unmuted (the service's `Speaking`).
    case microphoneSpeaking(Bool)
    /// The share of a source the peer relays to us that we lose changed: tell the peer (RELAY_REPORT).
    case relayedLossChanged(peer: PeerID, generation: Int, source: RelaySource, percent: Int)
}

/// Settings of the audio side, from the command line.
struct VoiceAudioOptions: Sendable {
    var source: String?
    var sink: String?
    var frameMs = 20
    var cue = true
    /// Start voice as soon as a peer connects.
    var autoStart = true
    /// Send voice to IP peers on the link rather than over UDP (for networks that drop UDP).
    var overLink = false
    /// Capture processing (`--no-echo-cancel`, `--no-noise-suppression` take parts away,
    /// `--gain-control` adds one).
    var processing = VoiceProcessing.defaults
}

/// The control plane's handle on the voice thread: a command queue with the thread's wake-up,
/// and the atomic mute flag. Everything else (the UDP socket, the PipeWire connection, the call's
/// streams, Opus codecs, jitter buffers and voice keys) belongs to ``VoiceThread``, which only the
/// voice thread sees. PipeWire's real-time thread meets the voice thread only through the call's
/// two lock-free rings, whose callbacks use the same wake-up when there is work: a frame captured,
/// the speaker's ring to refill.
final class VoiceEngine: Sendable {
    /// The microphone is silenced: the voice thread reads it for every captured frame.
    let muted = Atomic<Bool>(false)
    /// Someone meters levels (`StartMetering`): only then does the voice thread measure them.
    let metering = Atomic<Bool>(false)
    /// The levels over the voice thread's last metering period (``VoiceThread/levelsPeriodNs``),
    /// while ``metering``; read by the control plane's `Levels` timer.
    private let latestLevels = Mutex(VoiceLevels(inputDBFS: LevelMeter.silenceDBFS, peersDBFS: [:]))
    private let commands = Mutex<[VoiceCommand]>([])
    private let wakeup = VoiceWakeup()
    /// Signalled by the voice thread as it ends.
    private let finished = DispatchSemaphore(value: 0)

    /// `socket`: the bound UDP socket voice arrives on; the voice thread takes it over. `onEvent`
    /// and `sendOnLink` (a VOICE or RELAYED_VOICE frame for a peer whose route is
    /// ``VoiceRoute/link``, and when it was made) run on the voice thread; hop to the main
    /// context from them.
    /// `sendToRoom` (a voice packet for a Mumble room's TCP tunnel) runs on the voice thread too.
    init(socket: Socket, options: VoiceAudioOptions, onEvent: @escaping @Sendable (VoiceEvent) -> Void,
         sendOnLink: @escaping @Sendable (_ peer: PeerID, _ frame: Frame, _ queuedAt: Int64) -> Void,
         sendToRoom: @escaping @Sendable (_ room: Int, _ packet: [UInt8]) -> Void) {
        let fd = socket.release()
        // Not joined: `shutdown` waits for `finished` instead, so the handle keeps no thread object.
        _ = NamedThread(name: "peervoice-voice") { [unowned self] in
            VoiceThread(socket: Socket(adopting: fd), options: options, engine: self, onEvent: onEvent, sendOnLink: sendOnLink,
                        sendToRoom: sendToRoom).run()
            finished.signal()
        }
    }

    /// Why voice cannot start now (no PipeWire), or nil. Cheap: looks for the daemon's socket.
    static var unavailableReason: String? {
        let environment = ProcessInfo.processInfo.environment
        guard let directory = environment["PIPEWIRE_RUNTIME_DIR"] ?? environment["XDG_RUNTIME_DIR"] else {
            return "voice needs PipeWire, and there is no runtime directory (XDG_RUNTIME_DIR is not set)"
        }
        let name = environment["PIPEWIRE_REMOTE"] ?? "pipewire-0"
        let path = name.hasPrefix("/") ? name : directory + "/" + name
        return FileManager.default.fileExists(atPath: path)
            ? nil : "voice needs PipeWire, which is not running (no \(path)); voice starts by itself when it is"
    }

    /// Adds the peer to the call (or restarts its session).
    func start(_ setup: VoiceSessionSetup) { post(.start(setup)) }

    /// Takes the peer out of the call; the call's streams stop with its last peer.
    func stop(peer: PeerID, reason: String) { post(.stop(peer: peer, reason: reason)) }

    /// A VOICE or RELAYED_VOICE frame that came on `peer`'s link (already opened by it), stamped on arrival.
    func receivedOnLink(peer: PeerID, frame: Frame) {
        post(.receivedOnLink(peer: peer, frame: frame, arrival: Self.monotonicNs()))
    }

    /// `peer`'s PARTICIPANTS: the others of the call it hosts, whose voices it relays to us.
    func setRelayedParticipants(host peer: PeerID, _ participants: [CallParticipant]) {
        post(.setRelayedParticipants(host: peer, participants))
    }

    /// `peer`'s RELAY_REPORT on a source we relay to it.
    func listenerReported(peer: PeerID, _ report: RelayReport) {
        post(.listenerReported(peer: peer, report))
    }

    /// The peer's VOICE_REPORT: how much of our voice it loses.
    func peerReportedLoss(peer: PeerID, percent: Int) {
        post(.peerReportedLoss(peer: peer, percent: percent))
    }

    /// The peer's volume and mute here (``VoiceMixer/Channel``: it ramps to them over one frame).
    func setPlayback(peer: PeerID, _ playback: VoiceMixer.Channel) {
        post(.setPlayback(peer: peer, playback))
    }

    /// A Mumble room is in its channel: its talkers join the mix, and our voice goes to it.
    func roomStarted(_ room: Int) { post(.roomStarted(room)) }

    /// The room left, failed or is reconnecting: its talkers and our voice to it stop.
    func roomEnded(_ room: Int) { post(.roomEnded(room)) }

    /// A voice packet from the room's server (a UDPTunnel body), stamped on arrival.
    func roomVoice(_ room: Int, _ packet: MumbleVoicePacket) { post(.roomVoice(room: room, packet, arrival: Self.monotonicNs())) }

    /// A talker left the room.
    func roomTalkerLeft(_ room: Int, session: UInt32) { post(.roomTalkerLeft(room: room, session: session)) }

    /// A room talker's volume and mute here.
    func setRoomPlayback(_ room: Int, session: UInt32, _ playback: VoiceMixer.Channel) {
        post(.setRoomPlayback(room: room, session: session, playback))
    }

    /// The latest levels the voice thread measured (silence when nothing was measured).
    var levels: VoiceLevels { latestLevels.withLock { $0 } }

    /// Ends every session and the thread; returns once it has ended. Once.
    func shutdown() {
        post(.shutdown)
        finished.wait()
    }

    private func post(_ command: VoiceCommand) {
        commands.withLock { $0.append(command) }
        wakeup.signal()
    }

    // For the voice thread.

    /// The fd the voice thread polls for ``post(_:)``'s and the audio callbacks' signals.
    fileprivate var wakeupFD: Int32 { wakeup.fd }
    fileprivate var wakeupForCallbacks: VoiceWakeup { wakeup }

    fileprivate func publish(_ levels: VoiceLevels) { latestLevels.withLock { $0 = levels } }

    /// Empties the wake-up, then takes every command posted so far.
    fileprivate func takeCommands() -> [VoiceCommand] {
        wakeup.consume()
        return commands.withLock { queue in
            defer { queue.removeAll() }
            return queue
        }
    }

    static func monotonicNs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}

private enum VoiceCommand: Sendable {
    case start(VoiceSessionSetup)
    case stop(peer: PeerID, reason: String)
    case receivedOnLink(peer: PeerID, frame: Frame, arrival: Int64)
    case setRelayedParticipants(host: PeerID, [CallParticipant])
    case listenerReported(peer: PeerID, RelayReport)
    case peerReportedLoss(peer: PeerID, percent: Int)
    case setPlayback(peer: PeerID, VoiceMixer.Channel)
    case roomStarted(Int)
    case roomEnded(Int)
    case roomVoice(room: Int, MumbleVoicePacket, arrival: Int64)
    case roomTalkerLeft(room: Int, session: UInt32)
    case setRoomPlayback(room: Int, session: UInt32, VoiceMixer.Channel)
    case shutdown
}

/// The voice thread's own state, created on it and never seen by another thread: the UDP socket,
/// the PipeWire connection, the call's audio and the peers in the call.
private final class VoiceThread {
    /// The longest the thread sleeps while peers are in the call. The audio callbacks and datagrams
    /// wake it when there is work; this only makes sure a stream that stalled is still looked at
    /// (and a silent peer's `Speaking` hangover runs out).
    static let stateCheckMs: Int32 = 50
    /// How long each published level is measured over while someone meters.
    static let levelsPeriodNs: Int64 = 50_000_000
    /// The voice thread's real-time priority: below PipeWire's data threads (88, or RealtimeKit's
    /// cap of 20), which must never wait for it, and above everything a busy desktop runs at
    /// normal priority, which then cannot delay a refill of the speaker into an underrun.
    static let realtimePriority: Int32 = 10

    private let socket: Socket
    private let options: VoiceAudioOptions
    private unowned let engine: VoiceEngine
    private let onEvent: @Sendable (VoiceEvent) -> Void
    private let sendOnLink: @Sendable (_ peer: PeerID, _ frame: Frame, _ queuedAt: Int64) -> Void
    private var context: PipeWireContext?
    /// Whether this thread asked for real-time priority yet (once, with its first context).
    private var realtimeAsked = false
    private var call: CallAudio?
    private var participants: [PeerID: VoiceParticipant] = [:]
    /// The Mumble rooms in their channel (docs/ARCHITECTURE.md, Rooms): the call runs for them too.
    private var rooms: [Int: RoomVoice] = [:]
    private let sendToRoom: @Sendable (_ room: Int, _ packet: [UInt8]) -> Void
    /// Every voice the call mixes: each participant's own and the ones relayed to us (rebuilt by
    /// ``voicesChanged()`` whenever either changes).
    private var voices: [any MixedVoice] = []
    private var receiveBuffer = [UInt8](repeating: 0, count: 2048)
    /// When the levels were last published (while metering).
    private var levelsPublishedAt: Int64 = 0

    init(socket: Socket, options: VoiceAudioOptions, engine: VoiceEngine, onEvent: @escaping @Sendable (VoiceEvent) -> Void,
         sendOnLink: @escaping @Sendable (_ peer: PeerID, _ frame: Frame, _ queuedAt: Int64) -> Void,
         sendToRoom: @escaping @Sendable (_ room: Int, _ packet: [UInt8]) -> Void) {
        (self.socket, self.options, self.engine, self.onEvent, self.sendOnLink) = (socket, options, engine, onEvent, sendOnLink)
        self.sendToRoom = sendToRoom
    }

    /// Peers or rooms are in the call.
    private var hasCallers: Bool { !participants.isEmpty || !rooms.isEmpty }

    func run() {
        var fds = [pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: engine.wakeupFD, events: Int16(POLLIN), revents: 0)]
        /// When a refill that waits for a packet must go ahead without it (nil: nothing waits).
        var wakeAt: Int64?
        while true {
            _ = poll(&fds, nfds_t(fds.count), pollTimeoutMs(wakeAt: wakeAt))
            for command in engine.takeCommands() {
                switch command {
                case .start(let setup): join(setup)
                case .stop(let peer, let reason): leave(peer, reason: reason, report: false)
                case .receivedOnLink(let peer, let frame, let arrival):
                    if let participant = participants[peer] { received(frame, from: participant, arrival: arrival) }
                case .setRelayedParticipants(let host, let list): setRelayedParticipants(host: host, list)
                case .listenerReported(let peer, let report): listenerReported(peer, report)
                case .peerReportedLoss(let peer, let percent): peerReportedLoss(peer, percent: percent)
                case .setPlayback(let peer, let playback):
                    guard let participant = participants[peer] else { break }
                    try? participant.channel.setVolume(playback.volume)  // in range: it is a channel's
                    participant.channel.muted = playback.muted
                case .roomStarted(let room): startRoom(room)
                case .roomEnded(let room): endRoom(room)
                case .roomVoice(let room, let packet, let arrival):
                    if rooms[room]?.receive(packet, arrival: arrival) == true { voicesChanged() }
                case .roomTalkerLeft(let room, let session):
                    if rooms[room]?.removeTalker(session) == true { voicesChanged() }
                case .setRoomPlayback(let room, let session, let playback):
                    rooms[room]?.setPlayback(session, playback)
                case .shutdown:
                    for room in Array(rooms.keys) { endRoom(room) }
                    for peer in Array(participants.keys) { leave(peer, reason: "shutting down", report: false) }
                    context = nil
                    return
                }
            }
            receiveDatagrams()
            wakeAt = pumpCall()
        }
    }

    /// poll(2)'s timeout: none while no peer is in the call; else ``stateCheckMs``, or less when a
    /// refill waits, rounded up to whole milliseconds (``RefillSchedule``'s margin allows for that).
    private func pollTimeoutMs(wakeAt: Int64?) -> Int32 {
        guard hasCallers else { return -1 }
        guard let wakeAt else { return Self.stateCheckMs }
        let remainingNs = max(0, wakeAt - VoiceEngine.monotonicNs())
        return Int32(min(Int64(Self.stateCheckMs), (remainingNs + 999_999) / 1_000_000))
    }

    /// Pumps the call's audio; returns when to look again at the latest (a refill waits), or nil.
    private func pumpCall() -> Int64? {
        guard let call else { return nil }
        if let failure = call.failure {
            for room in Array(rooms.keys) {
                Log.warning("voice: room \(room): \(failure)")
                endRoom(room)
            }
            for peer in Array(participants.keys) { leave(peer, reason: failure, report: true) }
            return nil
        }
        let now = VoiceEngine.monotonicNs()
        let metering = engine.metering.load(ordering: .relaxed)
        let wakeAt = call.pump(now: now, muted: engine.muted.load(ordering: .relaxed), metering: metering,
                               participants: participants, voices: voices, socket: socket)
        if metering && now - levelsPublishedAt >= Self.levelsPeriodNs {
            levelsPublishedAt = now
            engine.publish(VoiceLevels(inputDBFS: call.takeInputLevel(),
                                       peersDBFS: participants.mapValues { $0.remote.takeLevel() }))
        }
        let streaming = call.isStreaming
        for (peer, participant) in participants {
            if participant.becameActive(streaming: streaming) { onEvent(.active(peer: peer, generation: participant.generation)) }
            if let loss = participant.lossToReport() {
                onEvent(.lossChanged(peer: peer, generation: participant.generation, percent: loss))
            }
            if let speaking = participant.remote.speakingFlip() {
                onEvent(.peerSpeaking(peer: peer, generation: participant.generation, speaking: speaking))
            }
            for (source, relayed) in participant.relayed {
                if let loss = relayed.lossToReport() {
                    onEvent(.relayedLossChanged(peer: peer, generation: participant.generation, source: source, percent: loss))
                }
            }
        }
        if let processing = call.processingChanged() { onEvent(.processingChanged(processing)) }
        if let speaking = call.microphoneSpeakingFlip() { onEvent(.microphoneSpeaking(speaking)) }
        return wakeAt
    }

    /// Adds the peer to the call, starting the call's streams with its first peer.
    private func join(_ setup: VoiceSessionSetup) {
        leave(setup.peer, reason: "replaced by a new session", report: false)
        let peer = setup.peer, sendOnLink = sendOnLink
        do {
            let call = try startCall()
            let participant = try VoiceParticipant(setup: setup) { frame in sendOnLink(peer, frame, VoiceEngine.monotonicNs()) }
            try call.encoders.add(receiver: peer)
            participants[peer] = participant
            voicesChanged()
            if options.cue { call.playCue(rising: true) }
            Log.info("voice with \(peer): session started (\(setup.localFrameMs) ms frames out, \(setup.remoteFrameMs) ms in), \(participants.count) in the call")
        } catch {
            call?.encoders.remove(receiver: peer)
            if !hasCallers { endCall(cue: false) }
            if call == nil { context = nil }
            onEvent(.stopped(peer: peer, generation: setup.generation, reason: "\(error)"))
        }
    }

    /// The call's audio, started with its first peer or room.
    private func startCall() throws -> CallAudio {
        if let call { return call }
        if context == nil || context?.isConnected == false {
            context = try PipeWireContext(applicationName: "PeerVoice")
        }
        guard let context else { throw VoiceThreadError("no PipeWire context") }
        if !realtimeAsked {
            realtimeAsked = true
            if let refused = context.makeCurrentThreadRealtime(priority: Self.realtimePriority) {
                Log.info("voice: the voice thread runs at normal priority (real-time priority refused: \(refused))")
            } else {
                Log.info("voice: the voice thread runs at real-time priority \(Self.realtimePriority)")
            }
        }
        let call = try CallAudio(context: context, options: options, wakeup: engine.wakeupForCallbacks)
        self.call = call
        return call
    }

    /// A Mumble room joins the call: its talkers are mixed, our microphone goes to it (20 ms
    /// frames only: with --frame-ms 10 the room hears nothing from us).
    private func startRoom(_ room: Int) {
        guard rooms[room] == nil else { return }
        do {
            let call = try startCall()
            rooms[room] = RoomVoice(room: room)
            if options.frameMs == RoomVoice.frameMs {
                let sendToRoom = sendToRoom
                try call.sendToRooms { [unowned self] opus, timestamp in
                    for voice in rooms.values { sendToRoom(voice.room, voice.packet(for: opus, timestamp: timestamp)) }
                }
            } else {
                Log.warning("voice: room \(room): our voice is not sent (rooms take \(RoomVoice.frameMs) ms frames, the call runs \(options.frameMs) ms)")
            }
            Log.info("voice: room \(room) joined the call (\(participants.count) peers, \(rooms.count) rooms)")
        } catch {
            if !hasCallers { endCall(cue: false) }
            Log.warning("voice: room \(room): no voice: \(error)")
        }
    }

    private func endRoom(_ room: Int) {
        guard let ended = rooms.removeValue(forKey: room) else { return }
        // What each talker's jitter buffer saw, as a peer's voice statistics are logged.
        for (session, talker) in ended.talkers.sorted(by: { $0.key < $1.key }) {
            let stats = talker.remote.statistics
            Log.info("voice: room \(room): session \(session): received \(stats.received), duplicates \(stats.duplicates), late \(stats.late), lost \(stats.lost), concealed \(stats.concealed), inserted \(stats.inserted), dropped \(stats.dropped), played \(stats.played)")
        }
        if rooms.isEmpty { try? call?.sendToRooms(nil) }
        voicesChanged()
        Log.info("voice: room \(room) left the call")
        if !hasCallers { endCall(cue: false) }
    }

    /// Takes `peer` out of the call; `report` tells the control plane, which did not ask for it.
    private func leave(_ peer: PeerID, reason: String, report: Bool) {
        guard let participant = participants.removeValue(forKey: peer), let call else { return }
        Log.info("voice with \(peer) stopped (\(reason)): \(participant.statisticsSummary(fecHintPercent: call.encoders.packetLossPercent(for: peer), call: call.summary))")
        for line in participant.relayedSummary { Log.info("voice: \(line)") }
        call.encoders.remove(receiver: peer)
        // Its source number may go to someone else next: no report or request about it stays.
        for other in participants.values {
            other.listener(peer, reportedLossPercent: nil)
            _ = other.setRelayed(participant.source, wanted: true)
        }
        voicesChanged()
        if !hasCallers {
            endCall(cue: options.cue)
        } else if options.cue {
            call.playCue(rising: false)
        }
        if report { onEvent(.stopped(peer: peer, generation: participant.generation, reason: reason)) }
    }

    private func endCall(cue: Bool) {
        guard let call else { return }
        engine.publish(VoiceLevels(inputDBFS: LevelMeter.silenceDBFS, peersDBFS: [:]))
        call.close(cue: cue)
        if call.isMicrophoneSpeaking { onEvent(.microphoneSpeaking(false)) }
        self.call = nil
    }

    /// The peer's VOICE_REPORT: the microphone's encoders regroup by it (FECGroupPlan).
    private func peerReportedLoss(_ peer: PeerID, percent: Int) {
        guard let participant = participants[peer], let call else { return }
        participant.peerReported(lossPercent: percent)
        let before = call.encoders.packetLossPercent(for: peer)
        do {
            try call.encoders.report(receiver: peer, lossPercent: percent)
        } catch {
            Log.warning("voice with \(peer): cannot make an encoder with in-band FEC: \(error)")
        }
        let after = call.encoders.packetLossPercent(for: peer)
        if (before == 0) != (after == 0) {
            Log.info("voice with \(peer): it loses \(percent) % of our packets: in-band FEC \(after == 0 ? "off" : "on, planned for \(after) %")")
        }
    }

    /// Hands each datagram to the peer whose keys open it (sealed records authenticate their
    /// sender, whatever address a relay or NAT shows).
    private func receiveDatagrams() {
        let arrival = VoiceEngine.monotonicNs()
        while let (count, from) = receiveBuffer.withUnsafeMutableBytes({ socket.receive(datagramInto: $0) }) {
            let datagram = Array(receiveBuffer[0..<count])
            // The peers the datagram comes from first, then any other (a relay).
            func opened(fromPeerHost: Bool) -> Bool {
                for participant in participants.values where (participant.route.host == from.host) == fromPeerHost {
                    guard let frame = participant.open(datagram: datagram) else { continue }
                    received(frame, from: participant, arrival: arrival)
                    return true
                }
                return false
            }
            if !opened(fromPeerHost: true) && !opened(fromPeerHost: false) {
                Log.debug("voice: dropped a datagram from \(from) that no session opens")
            }
        }
    }

    /// A VOICE or RELAYED_VOICE from `participant` (opened from a datagram, or from its link).
    /// Its own voice we play and, hosting a call, relay at once to everyone else in it: one hop,
    /// never buffered or re-encoded. Relayed voice is never relayed on.
    private func received(_ frame: Frame, from participant: VoiceParticipant, arrival: Int64) {
        switch frame {
        case .voice(let voice):
            participant.receive(voice, arrival: arrival)
            guard participants.count > 1,
                  let relayed = try? RelayedVoiceFrame(source: participant.source, seq: voice.seq, timestamp: voice.timestamp,
                                                       payload: voice.payload) else { return }
            for listener in participants.values where listener !== participant { listener.relay(relayed, socket: socket) }
        case .relayedVoice(let relayed):
            participant.receive(relayed, arrival: arrival)
        default:
            break
        }
    }

    /// The host's list of its call: the voices it relays to us.
    private func setRelayedParticipants(host: PeerID, _ list: [CallParticipant]) {
        guard let participant = participants[host] else { return }
        do {
            try participant.setRelayed(list)
        } catch {
            Log.warning("voice: cannot make a decoder for a voice \(host) relays: \(error)")
        }
        voicesChanged()
    }

    /// A listener's RELAY_REPORT: the loss of the source's relayed voice counts toward that
    /// participant's VOICE_REPORT, and a listener that hears it directly no longer gets it from us.
    private func listenerReported(_ listener: PeerID, _ report: RelayReport) {
        guard let participant = participants[listener],
              let origin = participants.values.first(where: { $0.source == report.source && $0 !== participant }) else { return }
        if participant.setRelayed(report.source, wanted: !report.direct) {
            Log.info("voice: \(listener) \(report.direct ? "hears \(origin.peer) directly: not relaying it there" : "asks for \(origin.peer) again: relaying it there")")
        }
        if !report.direct { Log.debug("voice: \(listener) loses \(report.lossPercent) % of the voice of \(origin.peer) we relay") }
        origin.listener(listener, reportedLossPercent: report.direct ? nil : Int(report.lossPercent))
    }

    /// Rebuilds the list of voices to mix. A relayed voice of a peer we have a session with
    /// ourselves is muted: the direct one wins (until the host, told by RELAY_REPORT, stops it).
    private func voicesChanged() {
        voices = []
        for participant in participants.values {
            voices.append(participant)
            for relayed in participant.relayed.values {
                relayed.channel.muted = participants[relayed.peer] != nil
                voices.append(relayed)
            }
        }
        for room in rooms.values { voices += room.talkers.values.map { $0 as any MixedVoice } }
    }
}

struct VoiceThreadError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
