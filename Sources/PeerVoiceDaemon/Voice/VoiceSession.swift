import AudioProcessing
import Foundation
import Opus
import PeerVoiceCore
import PipeWire

/// One peer's voice on the voice thread: microphone → Opus → sealed UDP, and sealed UDP →
/// jitter buffer → Opus (FEC, concealment) → speaker. Used only by the voice thread, except the
/// rings, which PipeWire's real-time thread fills and drains.
final class VoiceSession {
    /// Kept in the playback ring beyond one device quantum, so the device does not run dry if the
    /// voice thread is slow to answer the playback callback's wake-up; small, since every sample
    /// here is latency.
    static let playbackMarginSamples = 128
    static let quantumSamples = VoiceAudio.defaultLatencyFrames
    /// The playback ring is refilled (by decoding) whenever it holds less than this.
    static let playbackFillSamples = quantumSamples + playbackMarginSamples
    /// An Opus packet this small is DTX silence: not worth sending.
    static let dtxPacketBytes = 2
    /// Digital silence (muted, or a source giving exact zeros) is still encoded this long after
    /// sound: as long as Opus itself sends before its DTX starts, so the far decoder ends on
    /// decoded silence and conceals from that, not from speech. Then the encoder rests.
    static let silenceHangoverMs = 200
    /// While resting, one frame of silence is encoded and sent this often, as Opus's DTX sends a
    /// comfort-noise update: the peer still hears from us (its session turns active on that).
    static let restKeepaliveMs = 400

    let peer: String
    let route: VoiceRoute
    let generation: Int
    private let captureRing = AudioRing(minimumCapacity: 48_000)
    private let playbackRing = AudioRing(minimumCapacity: 24_000)
    private let capture: CaptureStream
    private let playback: PlaybackStream
    private let playbackSource: PlaybackRingSource
    private let context: PipeWireContext
    private let processing: CaptureProcessing
    /// When to look (again) at what the microphone stream is linked to; nil once done.
    private var nextSourceCheck: Int64? = 0
    /// The processing that runs, once the source was checked and it was not reported yet.
    private var processingToReport: Set<VoiceProcessing>?
    private let encoder: OpusVoiceEncoder
    private let decoder: OpusVoiceDecoder
    private var jitter: JitterBuffer
    private var sealer: RecordSealer
    private var opener: RecordOpener
    private let sendOnLink: (VoiceFrame) -> Void
    private var frame: [Int16]
    private let silenceHangoverFrames: Int
    private let restKeepaliveFrames: Int
    /// Captured frames in a row that were all zeros.
    private var silentFrames = 0
    private var packet = [UInt8](repeating: 0, count: 1500)
    private var decoded = [Int16](repeating: 0, count: voiceMaxPacketSamples)
    private var nextSeq: UInt64 = 1
    private var timestamp = UInt32.random(in: 0...UInt32.max)
    private var sent = 0
    private var received = 0
    private var reportedActive = false
    /// The loss we last told the peer about (VOICE_REPORT); both encoders start planning for none.
    private var reportedLossPercent = 0
    /// The loss the peer last reported about our voice.
    private var peerLossPercent = 0

    /// `sendOnLink` takes our VOICE frames when the route is ``VoiceRoute/link``.
    init(setup: VoiceSessionSetup, context: PipeWireContext, options: VoiceAudioOptions, wakeup: VoiceWakeup,
         sendOnLink: @escaping (VoiceFrame) -> Void) throws {
        peer = setup.peer
        route = setup.route
        self.sendOnLink = sendOnLink
        generation = setup.generation
        sealer = setup.sealer
        opener = setup.opener
        let localDuration: OpusFrameDuration = setup.localFrameMs == 10 ? .ms10 : .ms20
        let remoteDuration: OpusFrameDuration = setup.remoteFrameMs == 10 ? .ms10 : .ms20
        // No FEC until the peer reports loss (FECPolicy): on a clean path it only costs quality.
        encoder = try OpusVoiceEncoder(configuration: .init(frameDuration: localDuration, packetLossPercent: 0))
        decoder = try OpusVoiceDecoder(frameDuration: remoteDuration)
        jitter = JitterBuffer(configuration: .init(frameSamples: remoteDuration.samples))
        frame = [Int16](repeating: 0, count: localDuration.samples)
        silenceHangoverFrames = Self.silenceHangoverMs / setup.localFrameMs
        restKeepaliveFrames = Self.restKeepaliveMs / setup.localFrameMs
        self.context = context
        processing = CaptureProcessing(processor: try WebRTCVoiceProcessor(processing: options.processing))
        // The streams reach the rings through these, which wake the voice thread when there is work.
        let captureSink = CaptureRingSink(ring: captureRing, frameSamples: frame.count, wakeup: wakeup)
        playbackSource = PlaybackRingSource(ring: playbackRing, refillBelowSamples: Self.playbackFillSamples, wakeup: wakeup,
                                            played: processing.playedRing)
        capture = try CaptureStream(context: context, sink: captureSink, target: options.source)
        playback = try PlaybackStream(context: context, source: playbackSource, target: options.sink)
        if options.cue { Self.writeCue(into: playbackRing, rising: true) }
        try capture.start()
        try playback.start()
    }

    /// Encodes and sends what the microphone gave, and keeps the speaker fed. Returns why the
    /// session cannot go on, or nil.
    func pump(now: Int64, muted: Bool, socket: Socket) -> String? {
        if case .error(let message) = capture.state { return "microphone stream failed: \(message)" }
        if case .error(let message) = playback.state { return "speaker stream failed: \(message)" }
        if let due = nextSourceCheck, now >= due, capture.state == .streaming { checkSourceForEchoCanceller(now: now) }
        // The speaker first: its ring holds only a few ms beyond a quantum, the microphone's a second.
        feedPlayback(now: now)
        sendCaptured(muted: muted, socket: socket)
        return nil
    }

    private func sendCaptured(muted: Bool, socket: Socket) {
        while captureRing.availableToRead >= frame.count {
            frame.withUnsafeMutableBufferPointer { buffer in
                _ = captureRing.read(into: buffer)
                let digitalSilence = !buffer.contains { $0 != 0 }
                // Processed even when muted or silent, so the canceller keeps pace with the far end.
                processing.process(buffer, pendingCaptureSamples: captureRing.availableToRead,
                                   deviceDelayFrames: capture.deviceDelayFrames + playback.deviceDelayFrames)
                // Muting happens here, within one frame: the encoder hears silence, then rests
                // (WirePlumber would remember a muted node). Digital silence stays digital
                // silence (no comfort noise), so the encoder can rest on it.
                if muted || digitalSilence { buffer.update(repeating: 0) }
            }
            // Every frame moves the timestamp, sent or not: the receiver tells silence from loss.
            defer { timestamp &+= UInt32(frame.count) }
            silentFrames = muted || frame.allSatisfy({ $0 == 0 }) ? silentFrames + 1 : 0
            let resting = silentFrames - silenceHangoverFrames
            if resting > 0 {
                // Encoding digital silence costs a full encode for a DTX byte nobody sends. A fresh
                // encoder starts out of DTX, so the keepalive frame is a real (small) packet; its
                // delay line holds zeros, which is what came in. The first sound after the rest
                // is encoded with whatever state the silence left: nothing to reset then.
                guard resting % restKeepaliveFrames == 0 else { continue }
                encoder.reset()
            }
            let bytes: Int
            do {
                bytes = try frame.withUnsafeBufferPointer { pcm in
                    try packet.withUnsafeMutableBufferPointer { try encoder.encode(pcm, into: $0) }
                }
            } catch {
                Log.warning("voice: Opus could not encode a frame: \(error)")
                continue
            }
            guard bytes > Self.dtxPacketBytes,
                  let voice = try? VoiceFrame(seq: nextSeq, timestamp: timestamp, payload: Array(packet[0..<bytes])) else { continue }
            switch route {
            case .datagrams(let destination):
                guard let record = try? sealer.seal(Frame.voice(voice).encodedBody()) else { continue }
                if socket.send(datagram: Wire.lengthPrefixed(record), to: destination) { sent += 1 }
            case .link:
                sendOnLink(voice)
                sent += 1
            }
            nextSeq += 1
        }
    }

    private func feedPlayback(now: Int64) {
        // While the far side is silent (the jitter buffer idle, holding nothing to start) it only
        // has silence to give, in 2.5 ms steps, for a wake-up every device quantum: let the speaker
        // run dry instead. The next packet wakes this thread, which then feeds the ring again; the
        // buffer times the talkspurt's start from `now` as ever.
        let dormant = !jitter.isPlaying && jitter.isEmpty
        while !dormant && playbackRing.availableToRead < Self.playbackFillSamples {
            // The jitter buffer compares arrival times with this clock, so it gets the time of
            // decoding, not of playing: the ring's lead after decoding is the same for every frame.
            let output = jitter.next(now: now)
            let count = produce(output)
            guard count > 0 else { break }
            _ = decoded.withUnsafeBufferPointer { playbackRing.write(UnsafeBufferPointer(rebasing: $0[0..<count])) }
        }
        playbackSource.isDormant.store(dormant, ordering: .releasing)
    }

    /// The loss we measure on the peer's voice when it changed since we last reported it (the
    /// control plane sends it as VOICE_REPORT), or nil. The jitter buffer updates it about once
    /// a second, from the first 50 packets on.
    func lossToReport() -> Int? {
        let loss = jitter.lossPercent
        guard loss != reportedLossPercent else { return nil }
        reportedLossPercent = loss
        return loss
    }

    /// The capture processing that runs, once, after the microphone was checked for an echo
    /// canceller of its own (the control plane shows it as `AudioProcessing`), or nil.
    func processingChanged() -> Set<VoiceProcessing>? {
        defer { processingToReport = nil }
        return processingToReport
    }

    /// Never two cancellers in series: when the microphone stream records from PipeWire's own
    /// echo canceller (module-echo-cancel's source), ours turns off. Looked at once the stream
    /// runs (then it is linked), again every 500 ms until its link shows; one registry
    /// roundtrip each time, on this thread.
    private func checkSourceForEchoCanceller(now: Int64) {
        nextSourceCheck = now + 500_000_000
        guard let node = capture.nodeID else { return }
        let sources: [GraphObject]
        do {
            sources = try context.nodesLinked(into: node)
        } catch {
            Log.debug("voice with \(peer): cannot see what the microphone stream records from: \(error)")
            return
        }
        guard !sources.isEmpty else { return }
        nextSourceCheck = nil
        Log.debug("voice with \(peer): the microphone stream records from \(sources.map { $0.properties["node.name"] ?? "node \($0.id)" })")
        if processing.processing.contains(.echoCancel), let canceller = sources.first(where: Self.isEchoCanceller) {
            let name = canceller.properties["node.name"] ?? "node \(canceller.id)"
            do {
                processing.replace(with: try WebRTCVoiceProcessor(processing: processing.processing.subtracting([.echoCancel])))
                Log.info("voice with \(peer): the microphone (\(name)) is PipeWire's echo canceller already: PeerVoice's echo cancellation is off")
            } catch {
                Log.warning("voice with \(peer): cannot turn echo cancellation off (\(error)); two cancellers run in series")
            }
        }
        processingToReport = processing.processing
    }

    /// A node of libpipewire-module-echo-cancel: it names its nodes' group "echo-cancel-…".
    static func isEchoCanceller(_ node: GraphObject) -> Bool {
        ["node.link-group", "node.group", "node.name"].contains { node.properties[$0]?.hasPrefix("echo-cancel") == true }
    }

    /// The peer's VOICE_REPORT: our encoder's in-band FEC follows what the peer loses.
    func peerReportedLoss(_ percent: Int) {
        let before = encoder.packetLossPercent
        peerLossPercent = percent
        encoder.setPacketLossPercent(FECPolicy.encoderHint(reportedLossPercent: percent))
        if (before == 0) != (encoder.packetLossPercent == 0) {
            Log.info("voice with \(peer): it loses \(percent) % of our packets: in-band FEC \(encoder.packetLossPercent == 0 ? "off" : "on, planned for \(encoder.packetLossPercent) %")")
        }
    }

    /// Decodes (or conceals, or silences) what the jitter buffer asks for into `decoded`.
    private func produce(_ output: JitterBuffer.Output) -> Int {
        do {
            switch output {
            case .frame(let payload):
                return try payload.withUnsafeBufferPointer { p in
                    try decoded.withUnsafeMutableBufferPointer { try decoder.decode(p, fec: false, into: $0) }
                }
            case .recoverWithFEC(let payload):
                return try payload.withUnsafeBufferPointer { p in
                    try decoded.withUnsafeMutableBufferPointer { try decoder.decode(p, fec: true, into: $0) }
                }
            case .conceal(let samples):
                return try decoded.withUnsafeMutableBufferPointer {
                    try decoder.decode(nil, fec: false, into: UnsafeMutableBufferPointer(rebasing: $0[0..<min(samples, $0.count)]))
                }
            case .silence(let samples):
                let count = min(samples, decoded.count)
                decoded.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
                return count
            }
        } catch {
            Log.debug("voice: decoding failed (\(error)); playing silence")
            let count = output.samples(frameSamples: decoder.frameSamples)
            decoded.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            return min(count, decoded.count)
        }
    }

    /// Takes one datagram if this session's keys open it.
    func receive(datagram: [UInt8], arrival: Int64) -> Bool {
        guard datagram.count > Wire.lengthPrefixBytes,
              Int(datagram[0]) << 24 | Int(datagram[1]) << 16 | Int(datagram[2]) << 8 | Int(datagram[3])
                == datagram.count - Wire.lengthPrefixBytes,
              let plaintext = try? opener.open(datagram[Wire.lengthPrefixBytes...]),
              case .voice(let voice)? = try? Frame(body: plaintext) else { return false }
        receive(voice, arrival: arrival)
        return true
    }

    /// Takes one VOICE frame (from a datagram this session opened, or from the peer's link).
    func receive(_ voice: VoiceFrame, arrival: Int64) {
        received += 1
        jitter.insert(seq: voice.seq, timestamp: voice.timestamp, payload: voice.payload, arrival: arrival)
    }

    /// True once, when both streams run and the peer's audio arrives.
    func becameActive() -> Bool {
        guard !reportedActive, received > 0, capture.state == .streaming, playback.state == .streaming else { return false }
        reportedActive = true
        return true
    }

    func close(cue: Bool) {
        if cue {
            Self.writeCue(into: playbackRing, rising: false)
            // Let the device play it before the stream goes.
            let deadline = Date().addingTimeInterval(0.3)
            while playbackRing.availableToRead > 0 && Date() < deadline { usleep(5_000) }
        }
        capture.stop()
        playback.stop()
    }

    var statisticsSummary: String {
        let stats = jitter.statistics
        return "sent \(sent) packets, received \(received), late \(stats.late), lost \(stats.lost), concealed \(stats.concealed), FEC-recovered \(stats.fecRecovered), rejected \(opener.rejections.total), peer-reported loss \(peerLossPercent) %, FEC hint \(encoder.packetLossPercent) %, delay \(Int(stats.currentDelayMs)) ms, speaker underruns \(playback.underruns), \(processing.summary)"
    }

    /// A two-note chime (up on start, down on stop), 150 ms at -20 dBFS: the cue people hear
    /// when voice with a peer comes and goes.
    static func writeCue(into ring: AudioRing, rising: Bool) {
        let notes: [Double] = rising ? [660, 880] : [880, 660]
        let noteSamples = voiceSampleRate * 75 / 1000
        var samples = [Int16](repeating: 0, count: noteSamples * notes.count)
        for (index, frequency) in notes.enumerated() {
            for n in 0..<noteSamples {
                let envelope = sin(Double.pi * Double(n) / Double(noteSamples))
                let value = 0.1 * envelope * sin(2 * Double.pi * frequency * Double(n) / Double(voiceSampleRate))
                samples[index * noteSamples + n] = Int16(value * Double(Int16.max))
            }
        }
        _ = ring.write(samples)
    }
}
