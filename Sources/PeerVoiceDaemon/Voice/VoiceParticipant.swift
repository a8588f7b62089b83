import PeerVoiceCore

/// One peer in the call, on the voice thread: the voice keys of its link, our voice to it (the
/// call's packets, each sealed for this link with its own sequence numbers) and its voice to us
/// (``RemoteVoice``, mixed at this peer's volume). Used only by the voice thread.
final class VoiceParticipant {
    let peer: String
    let route: VoiceRoute
    /// Which of the peer's sessions this is: events carry it back.
    let generation: Int
    let remote: RemoteVoice
    /// The peer's volume and mute here (`SetVolume`, `SetPeerMuted`).
    var channel: VoiceMixer.Channel
    private var sealer: RecordSealer
    private var opener: RecordOpener
    private let sendOnLink: (VoiceFrame) -> Void
    private var nextSeq: UInt64 = 1
    private var sent = 0
    private var received = 0
    private var reportedActive = false
    /// The loss we last told the peer about (VOICE_REPORT).
    private var reportedLossPercent = 0
    /// The loss the peer last reported about our voice.
    private(set) var peerLossPercent = 0

    /// `sendOnLink` takes our VOICE frames when the route is ``VoiceRoute/link``.
    init(setup: VoiceSessionSetup, sendOnLink: @escaping (VoiceFrame) -> Void) throws(VoiceCodecError) {
        peer = setup.peer
        route = setup.route
        generation = setup.generation
        sealer = setup.sealer
        opener = setup.opener
        self.sendOnLink = sendOnLink
        remote = try RemoteVoice(frameMs: setup.remoteFrameMs)
        channel = setup.playback
    }

    /// Sends one of the call's Opus packets to this peer: a VOICE frame with this link's next
    /// sequence number and the call's `timestamp`, sealed as a datagram or handed to the link.
    func send(_ payload: [UInt8], timestamp: UInt32, socket: Socket) {
        guard let voice = try? VoiceFrame(seq: nextSeq, timestamp: timestamp, payload: payload) else { return }
        switch route {
        case .datagrams(let destination):
            guard let record = try? sealer.seal(Frame.voice(voice).encodedBody()) else { return }
            if socket.send(datagram: Wire.lengthPrefixed(record), to: destination) { sent += 1 }
        case .link:
            sendOnLink(voice)
            sent += 1
        }
        nextSeq += 1
    }

    /// Takes one datagram if this peer's keys open it.
    func receive(datagram: [UInt8], arrival: Int64) -> Bool {
        guard datagram.count > Wire.lengthPrefixBytes,
              Int(datagram[0]) << 24 | Int(datagram[1]) << 16 | Int(datagram[2]) << 8 | Int(datagram[3])
                == datagram.count - Wire.lengthPrefixBytes,
              let plaintext = try? opener.open(datagram[Wire.lengthPrefixBytes...]),
              case .voice(let voice)? = try? Frame(body: plaintext) else { return false }
        receive(voice, arrival: arrival)
        return true
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

    /// The loss we measure on the peer's voice when it changed since we last reported it (the
    /// control plane sends it as VOICE_REPORT), or nil. The jitter buffer updates it about once
    /// a second, from the first 50 packets on.
    func lossToReport() -> Int? {
        let loss = remote.lossPercent
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

    /// For the log line that ends the peer's session (tests read its numbers).
    func statisticsSummary(fecHintPercent: Int, call: String) -> String {
        let stats = remote.statistics
        return "sent \(sent) packets, received \(received), late \(stats.late), merged \(stats.merged), lost \(stats.lost), concealed \(stats.concealed), FEC-recovered \(stats.fecRecovered), rejected \(opener.rejections.total), peer-reported loss \(peerLossPercent) %, FEC hint \(fecHintPercent) %, delay \(Int(stats.currentDelayMs)) ms, \(call)"
    }
}
