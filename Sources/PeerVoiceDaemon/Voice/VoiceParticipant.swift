import PeerVoiceCore

/// One peer in the call, on the voice thread: the voice keys of its link, our voice to it (the
/// call's packets, each sealed for this link with its own sequence numbers) and its voice to us
/// (``RemoteVoice``, mixed at this peer's volume); as a host, the others' voices we relay to it
/// (the same sealing, RELAYED_VOICE); as a listener, the voices it relays to us (``relayed``).
/// Used only by the voice thread.
final class VoiceParticipant: MixedVoice {
    let peer: PeerID
    let route: VoiceRoute
    /// Which of the peer's sessions this is: events carry it back.
    let generation: Int
    /// The number our relayed copies of this peer's voice carry (docs/GROUP.md).
    let source: RelaySource
    let remote: RemoteVoice
    /// The others of the call this peer hosts, by the source numbers its list gives them.
    private(set) var relayed: [RelaySource: RelayedVoice] = [:]
    /// Sources this peer asked us not to relay to it (it hears them directly: RELAY_REPORT).
    private var notRelayed: Set<RelaySource> = []
    /// Its link carries hosted calls: nothing is relayed to a peer whose does not.
    private let takesRelayedVoice: Bool
    /// What the other listeners of this peer's relayed voice lose of it, by listener (RELAY_REPORT):
    /// the peer's VOICE_REPORT is the worst of these and our own loss, so its encoder sizes its
    /// FEC for its worst listener.
    private var listenerLossPercent: [PeerID: Int] = [:]
    /// The peer's volume and mute here (`SetVolume`, `SetPeerMuted`).
    var channel: VoiceMixer.Channel
    private var sealer: RecordSealer
    private var opener: RecordOpener
    private let sendOnLink: (Frame) -> Void
    private var nextSeq: UInt64 = 1
    private var sent = 0
    private var received = 0
    /// Others' packets relayed to this peer.
    private var relayedOut = 0
    private var reportedActive = false
    /// The loss we last told the peer about (VOICE_REPORT).
    private var reportedLossPercent = 0
    /// The loss the peer last reported about our voice.
    private(set) var peerLossPercent = 0

    /// `sendOnLink` takes our VOICE and RELAYED_VOICE frames when the route is ``VoiceRoute/link``.
    init(setup: VoiceSessionSetup, sendOnLink: @escaping (Frame) -> Void) throws(VoiceCodecError) {
        peer = setup.peer
        route = setup.route
        generation = setup.generation
        source = setup.source
        sealer = setup.sealer
        opener = setup.opener
        self.sendOnLink = sendOnLink
        remote = try RemoteVoice(frameMs: setup.remoteFrameMs)
        channel = setup.playback
        takesRelayedVoice = setup.takesRelayedVoice
    }

    /// Sends one of the call's Opus packets to this peer: a VOICE frame with this link's next
    /// sequence number and the call's `timestamp`, sealed as a datagram or handed to the link.
    func send(_ payload: [UInt8], timestamp: UInt32, socket: Socket) {
        guard let voice = try? VoiceFrame(seq: nextSeq, timestamp: timestamp, payload: payload) else { return }
        if send(.voice(voice), socket: socket) { sent += 1 }
        nextSeq += 1
    }

    /// Relays another participant's packet to this peer, unless it hears that one directly: the
    /// same Opus payload, sealed for this link the way our own voice is.
    func relay(_ relayed: RelayedVoiceFrame, socket: Socket) {
        guard takesRelayedVoice, !notRelayed.contains(relayed.source) else { return }
        if send(.relayedVoice(relayed), socket: socket) { relayedOut += 1 }
    }

    /// Seals `frame` as a voice datagram to this peer, or hands it to the link.
    private func send(_ frame: Frame, socket: Socket) -> Bool {
        switch route {
        case .datagrams(let destination):
            guard let record = try? sealer.seal(frame.encodedBody()) else { return false }
            return socket.send(datagram: Wire.lengthPrefixed(record), to: destination)
        case .link:
            sendOnLink(frame)
            return true
        }
    }

    /// The VOICE or RELAYED_VOICE in `datagram` if this peer's keys open it, else nil.
    func open(datagram: [UInt8]) -> Frame? {
        guard datagram.count > Wire.lengthPrefixBytes,
              Int(datagram[0]) << 24 | Int(datagram[1]) << 16 | Int(datagram[2]) << 8 | Int(datagram[3])
                == datagram.count - Wire.lengthPrefixBytes,
              let plaintext = try? opener.open(datagram[Wire.lengthPrefixBytes...]),
              let frame = try? Frame(body: plaintext) else { return nil }
        switch frame {
        case .voice, .relayedVoice: return frame
        default: return nil
        }
    }

    /// Takes a relayed participant's packet (from a datagram this peer's keys opened, or from
    /// its link); dropped for a source its list does not name (yet).
    func receive(_ relayed: RelayedVoiceFrame, arrival: Int64) {
        self.relayed[relayed.source]?.remote.insert(relayed.voice, arrival: arrival)
    }

    /// The peer's list of its call: a voice per source it names (a source whose peer or frame
    /// length changed starts afresh); sources it no longer names go.
    func setRelayed(_ participants: [CallParticipant]) throws(VoiceCodecError) {
        var next: [RelaySource: RelayedVoice] = [:]
        for entry in participants {
            if let kept = relayed[entry.source], kept.peer == entry.peer, kept.frameMs == Int(entry.frameMs) {
                next[entry.source] = kept
            } else {
                next[entry.source] = try RelayedVoice(peer: entry.peer, frameMs: Int(entry.frameMs))
            }
        }
        relayed = next
    }

    /// A listener's RELAY_REPORT on this peer's relayed voice (nil: the listener left the call).
    func listener(_ listener: PeerID, reportedLossPercent percent: Int?) {
        listenerLossPercent[listener] = percent
    }

    /// This peer's RELAY_REPORT on `source`: relay it to the peer again, or no more. Returns
    /// whether that changed.
    func setRelayed(_ source: RelaySource, wanted: Bool) -> Bool {
        wanted ? notRelayed.remove(source) != nil : notRelayed.insert(source).inserted
    }

    /// Takes one VOICE frame (from a datagram this peer's keys opened, or from its link).
    func receive(_ voice: VoiceFrame, arrival: Int64) {
        received += 1
        remote.insert(voice, arrival: arrival)
    }

    /// The peer's VOICE_REPORT.
    func peerReported(lossPercent: Int) {
        peerLossPercent = lossPercent
    }

    /// The loss of the peer's voice when it changed since we last reported it (the control plane
    /// sends it as VOICE_REPORT), or nil: the worst of what we measure (the jitter buffer updates
    /// it about once a second, from the first 50 packets on) and what its relayed voice's
    /// listeners report.
    func lossToReport() -> Int? {
        let loss = max(remote.lossPercent, listenerLossPercent.values.max() ?? 0)
        guard loss != reportedLossPercent else { return nil }
        reportedLossPercent = loss
        return loss
    }

    /// True once, when the call's streams run and the peer's audio arrives.
    func becameActive(streaming: Bool) -> Bool {
        guard !reportedActive, received > 0, streaming else { return false }
        reportedActive = true
        return true
    }

    /// For the log: what each source this peer relayed to us went through.
    var relayedSummary: [String] {
        relayed.values.map { voice in
            let stats = voice.remote.statistics
            return "relayed voice of \(voice.peer) through \(peer): late \(stats.late), lost \(stats.lost), concealed \(stats.concealed), delay \(Int(stats.currentDelayMs)) ms"
        }
    }

    /// For the log line that ends the peer's session (tests read its numbers).
    func statisticsSummary(fecHintPercent: Int, call: String) -> String {
        let stats = remote.statistics
        return "sent \(sent) packets, received \(received), late \(stats.late), merged \(stats.merged), lost \(stats.lost), concealed \(stats.concealed), FEC-recovered \(stats.fecRecovered), rejected \(opener.rejections.total), peer-reported loss \(peerLossPercent) %, FEC hint \(fecHintPercent) %, delay \(Int(stats.currentDelayMs)) ms, relayed to it \(relayedOut), \(call)"
    }
}
