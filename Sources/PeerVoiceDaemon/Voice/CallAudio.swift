import AudioProcessing
import Foundation
import Opus
import PeerVoiceCore
import PipeWire

/// The call's audio on the voice thread, shared by every peer in it: one microphone stream,
/// cleaned once (``CaptureProcessing``) and encoded once per FEC group (``MicrophoneEncoders``),
/// each packet sealed per peer; one speaker stream playing the mix (``VoiceMixer``, with its
/// limiter) of every peer's ``RemoteVoice``; and the microphone's `Speaking`. Exists while at
/// least one peer is in the call. Used only by the voice thread, except the rings, which
/// PipeWire's real-time thread fills and drains.
final class CallAudio {
    static let quantumSamples = VoiceAudio.defaultLatencyFrames
    /// The playback ring is refilled (by mixing) whenever it holds less than this: one device
    /// quantum, no margin. Woken when a callback left less than a quantum, the voice thread has
    /// until the next callback (a quantum) to refill, whatever the margin: a margin only makes
    /// some refills earlier, and every sample in the ring is latency (docs/VOICE.md, "Playback loop").
    static let playbackFillSamples = quantumSamples
    /// The mixer's frame: the jitter buffer's 2.5 ms step, which every decoder output is a
    /// whole number of (frames, concealment and silence steps), so what the voices have queued
    /// is always whole mixer frames.
    static let mixFrameSamples = 120
    /// How long a refill may wait for a packet that has not come: until 3 ms before the device's
    /// next draw (docs/VOICE.md, "Playback loop").
    static let refillSchedule = RefillSchedule()
    /// An Opus packet this small is DTX silence: not worth sending.
    static let dtxPacketBytes = 2
    /// Digital silence (muted, or a source giving exact zeros) is still encoded this long after
    /// sound: as long as Opus itself sends before its DTX starts, so the far decoder ends on
    /// decoded silence and conceals from that, not from speech. Then the encoders rest.
    static let silenceHangoverMs = 200
    /// While resting, one frame of silence is encoded and sent this often, as Opus's DTX sends a
    /// comfort-noise update: the peers still hear from us (their sessions turn active on that).
    static let restKeepaliveMs = 400
    /// While resting (and not cleaning in step with the speaker), the captured zeros are taken
    /// this much at a time: the voice thread wakes 10 times a second for them instead of once a
    /// frame. Sound wakes it as soon as a frame of it is whole, and a keepalive frame when it is
    /// (its peers time their playout by when packets come).
    static let restingBatchMs = 100

    let encoders: MicrophoneEncoders
    private let captureRing = AudioRing(minimumCapacity: 48_000)
    private let playbackRing = AudioRing(minimumCapacity: 24_000)
    private let capture: CaptureStream
    private let playback: PlaybackStream
    private let playbackSource: PlaybackRingSource
    private let captureSink: CaptureRingSink
    private let context: PipeWireContext
    private let processing: CaptureProcessing
    /// When to look (again) at what the microphone stream is linked to; nil once done.
    private var nextSourceCheck: Int64? = 0
    /// What the speaker stream plays into (while echo cancellation is wanted, once the stream has
    /// a node), the watch's generation last seen, and since when what it says has not changed.
    private var sinkWatch: SinkWatch?
    /// Whether to watch it: echo cancellation is wanted, and the watch could be made.
    private var followsSinks: Bool
    private var sinkGeneration: UInt64 = 0
    private var sinksChangedAt: Int64?
    /// The processing's parts and why, when they changed and were not reported yet.
    private var processingToReport: [VoiceProcessingState]?
    private var frame: [Int16]
    private let silenceHangoverFrames: Int
    private let restKeepaliveFrames: Int
    private let restingBatchFrames: Int
    /// Captured frames in a row that were all zeros.
    private var silentFrames = 0
    /// The call's RTP-style timestamp: every peer gets the same one with each packet.
    private var timestamp = UInt32.random(in: 0...UInt32.max)
    private var mixer = VoiceMixer(frameSamples: mixFrameSamples)
    private var voiceFrame = [Int16](repeating: 0, count: mixFrameSamples)
    private var mixedFrame = [Int16](repeating: 0, count: mixFrameSamples)
    /// A start or stop chime still to be mixed in, and how much of it was.
    private var cue: [Int16] = []
    private var cuePlayed = 0
    private var cueChannel = VoiceMixer.Channel.unity
    private var speaking = SpeakingState()
    private var speakingFlip: Bool?
    /// Mumble rooms' encoder (20 ms, no FEC: the server relays to everyone alike) and where its
    /// packets go, while any room is in the call.
    private var roomEncoder: (encoder: OpusVoiceEncoder, deliver: (_ opus: [UInt8], _ timestamp: UInt32) -> Void)?
    private var roomPacket = [UInt8](repeating: 0, count: 1500)
    /// What the microphone sent since ``takeInputLevel()`` (only while someone meters).
    private var inputMeter = LevelMeter()

    init(context: PipeWireContext, options: VoiceAudioOptions, wakeup: VoiceWakeup) throws {
        let duration: OpusFrameDuration = options.frameMs == 10 ? .ms10 : .ms20
        encoders = MicrophoneEncoders(frameDuration: duration)
        frame = [Int16](repeating: 0, count: duration.samples)
        silenceHangoverFrames = Self.silenceHangoverMs / options.frameMs
        restKeepaliveFrames = Self.restKeepaliveMs / options.frameMs
        restingBatchFrames = Self.restingBatchMs / options.frameMs
        self.context = context
        processing = CaptureProcessing(processor: try WebRTCVoiceProcessor(processing: options.processing))
        followsSinks = options.processing.contains(.echoCancel)
        // The streams reach the rings through these, which wake the voice thread when there is work.
        captureSink = CaptureRingSink(ring: captureRing, frameSamples: frame.count, wakeup: wakeup)
        playbackSource = PlaybackRingSource(ring: playbackRing, refillBelowSamples: Self.playbackFillSamples, wakeup: wakeup,
                                            played: processing.playedRing)
        capture = try CaptureStream(context: context, sink: captureSink, target: options.source)
        playback = try PlaybackStream(context: context, source: playbackSource, target: options.sink)
        try capture.start()
        try playback.start()
    }

    /// Encodes the microphone for Mumble rooms too and hands each packet, with the call's timestamp
    /// of its first sample, to `deliver` (nil: stop).
    func sendToRooms(_ deliver: ((_ opus: [UInt8], _ timestamp: UInt32) -> Void)?) throws(VoiceCodecError) {
        guard let deliver else {
            roomEncoder = nil
            return
        }
        if let kept = roomEncoder?.encoder {
            roomEncoder = (kept, deliver)
        } else {
            roomEncoder = (try OpusVoiceEncoder(configuration: .init(frameDuration: .ms20, packetLossPercent: 0)), deliver)
        }
    }

    /// Why the call's audio cannot go on (a stream failed), or nil.
    var failure: String? {
        if case .error(let message) = capture.state { return "microphone stream failed: \(message)" }
        if case .error(let message) = playback.state { return "speaker stream failed: \(message)" }
        return nil
    }

    var isStreaming: Bool { capture.state == .streaming && playback.state == .streaming }

    /// Keeps the speaker fed with the mix of `voices` (the participants' own and those relayed
    /// to us), then encodes what the microphone gave and sends it to `participants`. Returns when
    /// the voice thread must look again if nothing wakes it before (a refill waits for a packet), or nil.
    func pump(now: Int64, muted: Bool, metering: Bool, participants: [PeerID: VoiceParticipant], voices: [any MixedVoice],
              socket: Socket) -> Int64? {
        if let due = nextSourceCheck, now >= due, capture.state == .streaming { checkSourceForEchoCanceller(now: now) }
        followSinks(now: now)
        // The speaker first: its ring holds only a few ms beyond a quantum, the microphone's a second.
        let wakeAt = feedPlayback(clock: now, metering: metering, voices: voices)
        sendCaptured(muted: muted, metering: metering, participants: participants, socket: socket)
        return wakeAt
    }

    /// The microphone's level (dBFS) since the last call, as sent (silence while muted).
    func takeInputLevel() -> Double {
        defer { inputMeter.restart() }
        return inputMeter.dBFS
    }

    private func sendCaptured(muted: Bool, metering: Bool, participants: [PeerID: VoiceParticipant], socket: Socket) {
        if muted, let flip = speaking.end() { speakingFlip = flip }
        // Whether the microphone gave exact zeros in the last frame taken now (nil: none was whole).
        var sourceSilent: Bool?
        while captureRing.availableToRead >= frame.count {
            sourceSilent = frame.withUnsafeMutableBufferPointer { buffer in
                _ = captureRing.read(into: buffer)
                // Processed even when muted or silent, so the canceller keeps pace with the far end.
                let outcome = processing.process(buffer, pendingCaptureSamples: captureRing.availableToRead,
                                                 deviceDelayFrames: capture.deviceDelayFrames + playback.deviceDelayFrames)
                // Muted speech is not speaking.
                if !muted, let flip = speaking.update(isSpeech: outcome.voiced, samples: buffer.count) { speakingFlip = flip }
                // Muting happens here, within one frame: the encoder hears silence, then rests
                // (WirePlumber would remember a muted node).
                if muted { buffer.update(repeating: 0) }
                if metering { inputMeter.add(UnsafeBufferPointer(buffer)) }
                return outcome.isDigitalSilence
            }
            // Every frame moves the timestamp, sent or not: the receivers tell silence from loss.
            defer { timestamp &+= UInt32(frame.count) }
            silentFrames = muted || frame.allSatisfy({ $0 == 0 }) ? silentFrames + 1 : 0
            let resting = silentFrames - silenceHangoverFrames
            if resting > 0 {
                // Encoding digital silence costs a full encode for a DTX byte nobody sends. A fresh
                // encoder starts out of DTX, so the keepalive frame is a real (small) packet; its
                // delay line holds zeros, which is what came in. The first sound after the rest
                // is encoded with whatever state the silence left: nothing to reset then.
                guard resting % restKeepaliveFrames == 0 else { continue }
                encoders.reset()
            }
            let timestamp = timestamp
            frame.withUnsafeBufferPointer { pcm in
                encoders.encode(pcm, dtxPacketBytes: Self.dtxPacketBytes) { payload, receivers in
                    for receiver in receivers { participants[receiver]?.send(payload, timestamp: timestamp, socket: socket) }
                }
                if let (encoder, deliver) = roomEncoder, pcm.count == OpusFrameDuration.ms20.samples,
                   let bytes = try? roomPacket.withUnsafeMutableBufferPointer({ try encoder.encode(pcm, into: $0) }),
                   bytes > Self.dtxPacketBytes {
                    deliver(Array(roomPacket[0..<bytes]), timestamp)
                }
            }
        }
        // The canceller learns the echo path from each frame heard next to what played at its
        // time: while anything plays, frames are cleaned as they come.
        let inStep = processing.processing.contains(.echoCancel) && !playbackSource.isDormant.load(ordering: .relaxed)
        let resting = silentFrames - silenceHangoverFrames
        if inStep {
            captureSink.restingWakeSamples.store(0, ordering: .relaxed)
        } else if let sourceSilent {
            // What is left in the ring is less than a frame: wake for a batch, or for the next
            // keepalive frame if that is due sooner.
            let frames = min(restingBatchFrames, restKeepaliveFrames - max(0, resting) % restKeepaliveFrames)
            captureSink.restingWakeSamples.store(sourceSilent && resting > 0 ? frames * frame.count : 0, ordering: .relaxed)
        }
    }

    /// Keeps the speaker's ring fed as each peer's session fed its own ring before: each voice
    /// whose far side is not silent decodes until what it has queued plus what the ring holds
    /// reaches the fill level (one frame at a time, at the time of decoding), then as much as every
    /// such voice (and a chime) has queued is mixed into the ring. A voice whose far side is silent
    /// (its jitter buffer idle, holding nothing to start) is left out; while every voice is, the
    /// speaker runs dry instead of being fed zeros in 2.5 ms steps for a wake-up every device
    /// quantum. The next packet wakes this thread, which then feeds the ring again.
    ///
    /// While a voice's frame due has not come, the refill waits for its packet until shortly
    /// before the device's next draw (``RefillSchedule``), and returns when to look again.
    private func feedPlayback(clock: Int64, metering: Bool, voices: [any MixedVoice]) -> Int64? {
        var wakeAt: Int64?
        refill: while playbackRing.availableToRead < Self.playbackFillSamples {
            let wanted = Self.playbackFillSamples - playbackRing.availableToRead
            let now: Int64
            switch Self.refillSchedule.decide(clock: clock, nextDrawNs: playbackSource.nextDrawNs.load(ordering: .relaxed),
                                              awaitingPacket: voices.contains { $0.remote.awaitsPacket(toQueue: wanted) }) {
            case .wait(let until):
                wakeAt = until
                break refill
            case .refill(let at):
                now = at
            }
            for voice in voices { voice.remote.decode(untilQueued: wanted, now: now) }
            // The voice (or chime) with the least queued sets how much is mixed now.
            var frames = cue.count - cuePlayed > 0 ? (cue.count - cuePlayed) / Self.mixFrameSamples : Int.max
            for voice in voices where voice.remote.queued > 0 {
                frames = min(frames, max(1, voice.remote.queued / Self.mixFrameSamples))
            }
            guard frames < Int.max else { break }
            for _ in 0..<frames { mixFrame(voices, metering: metering) }
        }
        for voice in voices { voice.remote.idle(now: clock) }
        let dormant = cuePlayed == cue.count && voices.allSatisfy { $0.remote.isDormant }
        playbackSource.isDormant.store(dormant, ordering: .releasing)
        return wakeAt
    }

    /// Mixes one mixer frame of every voice that has something queued, and of the chime, into the ring.
    private func mixFrame(_ voices: [any MixedVoice], metering: Bool) {
        voiceFrame.withUnsafeMutableBufferPointer { pcm in
            for voice in voices where voice.remote.queued > 0 {
                voice.remote.take(into: pcm, metering: metering)
                mixer.add(UnsafeBufferPointer(pcm), channel: &voice.channel)
            }
            if cuePlayed < cue.count {
                cue.withUnsafeBufferPointer { chime in
                    _ = pcm.update(fromContentsOf: UnsafeBufferPointer(rebasing: chime[cuePlayed..<cuePlayed + pcm.count]))
                }
                cuePlayed += pcm.count
                mixer.add(UnsafeBufferPointer(pcm), channel: &cueChannel)
            }
        }
        mixedFrame.withUnsafeMutableBufferPointer { out in
            mixer.mix(into: out)
            _ = playbackRing.write(UnsafeBufferPointer(out))
        }
    }

    /// Mixes a chime in: up when a peer joins, down when one leaves.
    func playCue(rising: Bool) {
        cue = Array(cue[cuePlayed...]) + Self.cue(rising: rising)
        cuePlayed = 0
    }

    /// The new microphone `Speaking` if it flipped since the last call, or nil.
    func microphoneSpeakingFlip() -> Bool? {
        defer { speakingFlip = nil }
        return speakingFlip
    }

    var isMicrophoneSpeaking: Bool { speaking.isSpeaking }

    /// The capture processing's parts and why each runs or not (the control plane shows them as
    /// `AudioProcessing`): once the microphone was checked for an echo canceller of its own, and
    /// whenever what the speaker plays into turns the canceller on or off; else nil.
    func processingChanged() -> [VoiceProcessingState]? {
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
            Log.debug("voice: cannot see what the microphone stream records from: \(error)")
            return
        }
        guard !sources.isEmpty else { return }
        nextSourceCheck = nil
        Log.debug("voice: the microphone stream records from \(sources.map { $0.properties["node.name"] ?? "node \($0.id)" })")
        if let canceller = sources.first(where: Self.isEchoCanceller) {
            _ = processing.microphoneIsCanceller(canceller.properties["node.name"] ?? "node \(canceller.id)")
        }
        processingToReport = processing.states
    }

    /// How long what the speaker plays into must hold before the canceller follows it: a stream
    /// being moved is linked to nothing for a moment, and a device's routes come one by one.
    static let sinkSettleNs: Int64 = 300_000_000

    /// Turns the echo canceller off while everything the speaker plays into is at the ear
    /// (headphones, a headset, a Bluetooth headset) and on again when it is not (docs/VOICE.md,
    /// "No canceller where nothing can echo"). PipeWire's events keep the watch current on its own
    /// thread; here only its generation is read, and the sinks once they have settled.
    private func followSinks(now: Int64) {
        guard followsSinks else { return }
        if sinkWatch == nil, let node = playback.nodeID {
            do {
                sinkWatch = try SinkWatch(context: context, playbackNode: node)
            } catch {
                Log.warning("voice: cannot follow what the speaker plays into (\(error)); echo cancellation stays on")
                followsSinks = false
            }
        }
        guard let sinkWatch else { return }
        let generation = sinkWatch.generation
        if generation != sinkGeneration {
            sinkGeneration = generation
            sinksChangedAt = now
        }
        guard let changedAt = sinksChangedAt, now - changedAt >= Self.sinkSettleNs else { return }
        sinksChangedAt = nil
        let sinks = sinkWatch.sinks.map { PlaybackSink(node: $0.node, device: $0.device, routes: $0.routes) }
        Log.debug("voice: the speaker stream plays into \(sinks.map(\.name))")
        if processing.speakerPlays(into: sinks) { processingToReport = processing.states }
    }

    /// A node of libpipewire-module-echo-cancel: it names its nodes' group "echo-cancel-…".
    static func isEchoCanceller(_ node: GraphObject) -> Bool {
        ["node.link-group", "node.group", "node.name"].contains { node.properties[$0]?.hasPrefix("echo-cancel") == true }
    }

    /// Stops both streams, after the stop chime (if `cue`) has played.
    func close(cue: Bool) {
        if cue {
            _ = playbackRing.write(Array(self.cue[cuePlayed...]) + Self.cue(rising: false))
            playbackSource.isDormant.store(false, ordering: .releasing)
            // Let the device play it before the stream goes.
            let deadline = Date().addingTimeInterval(0.3)
            while playbackRing.availableToRead > 0 && Date() < deadline { usleep(5_000) }
        }
        capture.stop()
        playback.stop()
    }

    /// The call's side of a peer's closing log line.
    var summary: String {
        "speaker underruns \(playback.underruns), \(encoders.count) microphone encoder\(encoders.count == 1 ? "" : "s"), \(processing.summary)"
    }

    /// A two-note chime (up on start, down on stop), 150 ms at -20 dBFS: the cue people hear
    /// when voice with a peer comes and goes.
    static func cue(rising: Bool) -> [Int16] {
        let notes: [Double] = rising ? [660, 880] : [880, 660]
        let noteSamples = voiceSampleRate * 75 / 1000  // 3600: whole mixer frames
        var samples = [Int16](repeating: 0, count: noteSamples * notes.count)
        for (index, frequency) in notes.enumerated() {
            for n in 0..<noteSamples {
                let envelope = sin(Double.pi * Double(n) / Double(noteSamples))
                let value = 0.1 * envelope * sin(2 * Double.pi * frequency * Double(n) / Double(voiceSampleRate))
                samples[index * noteSamples + n] = Int16(value * Double(Int16.max))
            }
        }
        return samples
    }
}
