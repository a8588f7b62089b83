import Opus
import PeerVoiceCore

/// One remote voice's receive pipeline on the voice thread: its VOICE packets → jitter buffer →
/// Opus decoder (FEC recovery, concealment) → a small queue of PCM the call's mixer takes from;
/// and, on what was decoded, whether the peer is speaking.
///
/// The engine reaches the jitter buffer and the decoder only through this type (``insert(_:arrival:)``,
/// ``decode(untilQueued:now:)``, ``take(into:)``, ``isDormant``, ``lossPercent``, ``statistics``),
/// so playout changes stay here. The queue plays the part the playback ring played when each
/// peer had its own: the jitter buffer is asked for more, at the time of decoding, only when what
/// is queued here plus what the ring holds falls below the ring's fill level, and whatever it
/// gives (a frame, a 2.5 ms step of silence or concealment) is queued whole.
final class RemoteVoice {
    /// Samples per block the voice activity detector judges (10 ms).
    static let activityBlockSamples = 480

    private var jitter: JitterBuffer
    private let decoder: OpusVoiceDecoder
    /// Renders the jitter buffer's outputs with the decoder (concealment kept whole, merges).
    private var playout: VoicePlayout
    /// Scratch for one decoder output.
    private var decoded = [Int16](repeating: 0, count: voiceMaxPacketSamples)
    /// Decoded samples not mixed yet: `queue[queueStart..<queueEnd]`.
    private var queue = [Int16](repeating: 0, count: 2 * voiceMaxPacketSamples)
    private var queueStart = 0
    private var queueEnd = 0
    private var detector = EnergyVoiceActivityDetector()
    private var speaking = SpeakingState()
    /// What was taken since the detector last judged a block.
    private var activityBlock = [Int16](repeating: 0, count: activityBlockSamples)
    private var activityFill = 0
    /// When the speaking state last heard of time passing while dormant (``idle(now:)``).
    private var idleSinceNs: Int64?
    /// A flip of `Speaking` not yet taken by ``speakingFlip()``.
    private var pendingFlip: Bool?
    /// What was mixed since ``takeLevel()`` (only while someone meters).
    private var meter = LevelMeter()

    /// `frameMs`: the peer's Opus frame length (10 or 20), from its VOICE_START.
    init(frameMs: Int) throws(VoiceCodecError) {
        let duration: OpusFrameDuration = frameMs == 10 ? .ms10 : .ms20
        decoder = try OpusVoiceDecoder(frameDuration: duration)
        jitter = JitterBuffer(configuration: .init(frameSamples: duration.samples))
        playout = VoicePlayout(frameSamples: duration.samples)
    }

    /// Takes one VOICE frame, stamped with its arrival (CLOCK_MONOTONIC, ns).
    func insert(_ voice: VoiceFrame, arrival: Int64) {
        jitter.insert(seq: voice.seq, timestamp: voice.timestamp, payload: voice.payload, arrival: arrival)
    }

    /// The far side is silent: the jitter buffer holds nothing and is not playing, and nothing
    /// decoded is left. The mixer then leaves this voice out (and the speaker may run dry) until
    /// a packet comes.
    var isDormant: Bool { !jitter.isPlaying && jitter.isEmpty && queued == 0 }

    /// Decoded samples waiting to be mixed.
    var queued: Int { queueEnd - queueStart }

    /// ``decode(untilQueued:now:)`` would have to ask the jitter buffer for a frame whose packet
    /// has not come: the refill may wait for it (``RefillSchedule``). A voice awaiting a frame is
    /// playing, so never dormant.
    func awaitsPacket(toQueue samples: Int) -> Bool {
        queued < samples && jitter.isAwaitingFrameDue
    }

    /// The share of the peer's packets lost, as the jitter buffer last measured it.
    var lossPercent: Int { jitter.lossPercent }

    var statistics: JitterBuffer.Statistics { jitter.statistics }

    /// Unless dormant, asks the jitter buffer for what plays next and decodes it (or conceals, or
    /// silences) until at least `samples` are queued. `now` is the refill's deadline (or the clock,
    /// once past it), which the jitter buffer compares arrival times with: the caller asks
    /// whenever the ring plus this queue falls below one level, so the lead after each answer is
    /// about the same.
    func decode(untilQueued samples: Int, now: Int64) {
        guard !isDormant else { return }
        idleSinceNs = nil
        while queued < samples {
            let count = produce(jitter.next(now: now))
            guard count > 0 else { return }
            if queueStart > 0 {
                // Keep the queue at the front: it holds at most a frame or two.
                queue.withUnsafeMutableBufferPointer { q in
                    _ = UnsafeMutableBufferPointer(rebasing: q[0..<queued])
                        .update(fromContentsOf: UnsafeBufferPointer(rebasing: q[queueStart..<queueEnd]))
                }
                (queueStart, queueEnd) = (0, queued)
            }
            let room = min(count, queue.count - queueEnd)
            queue.withUnsafeMutableBufferPointer { q in
                decoded.withUnsafeBufferPointer { d in
                    _ = UnsafeMutableBufferPointer(rebasing: q[queueEnd..<queueEnd + room])
                        .update(fromContentsOf: UnsafeBufferPointer(rebasing: d[0..<room]))
                }
            }
            queueEnd += room
        }
    }

    /// Moves the next `output.count` queued samples into `output` (zeros for any it does not
    /// have), judges them for speech and, if `metering`, adds them to the level.
    func take(into output: UnsafeMutableBufferPointer<Int16>, metering: Bool) {
        let count = min(output.count, queued)
        queue.withUnsafeBufferPointer { q in
            _ = UnsafeMutableBufferPointer(rebasing: output[0..<count])
                .update(fromContentsOf: UnsafeBufferPointer(rebasing: q[queueStart..<queueStart + count]))
        }
        UnsafeMutableBufferPointer(rebasing: output[count...]).update(repeating: 0)
        queueStart += count
        judge(UnsafeBufferPointer(output))
        if metering { meter.add(UnsafeBufferPointer(output)) }
    }

    /// The voice's level (dBFS, before the volume) since the last call; silence while dormant.
    func takeLevel() -> Double {
        defer { meter.restart() }
        return meter.dBFS
    }

    /// While dormant, lets the speaking state hear that time passes in silence, so that its
    /// hangover runs out when the peer stops talking. Call it on every pass of the voice thread.
    func idle(now: Int64) {
        guard isDormant else { return }
        let elapsed = idleSinceNs.map { now - $0 } ?? 0
        idleSinceNs = now
        let samples = Int(elapsed * Int64(voiceSampleRate) / 1_000_000_000)
        if samples > 0, let flip = speaking.update(isSpeech: false, samples: samples) { pendingFlip = flip }
    }

    /// The new `Speaking` if it flipped since the last call, or nil.
    func speakingFlip() -> Bool? {
        defer { pendingFlip = nil }
        return pendingFlip
    }

    /// Judges what was mixed in 10 ms blocks, before the volume (`Speaking` describes the peer).
    private func judge(_ samples: UnsafeBufferPointer<Int16>) {
        var offset = 0
        while offset < samples.count {
            let count = min(samples.count - offset, Self.activityBlockSamples - activityFill)
            activityBlock.withUnsafeMutableBufferPointer { block in
                _ = UnsafeMutableBufferPointer(rebasing: block[activityFill..<activityFill + count])
                    .update(fromContentsOf: UnsafeBufferPointer(rebasing: samples[offset..<offset + count]))
            }
            activityFill += count
            offset += count
            guard activityFill == Self.activityBlockSamples else { continue }
            activityFill = 0
            let isSpeech = activityBlock.withUnsafeBufferPointer { detector.isSpeech($0) }
            if let flip = speaking.update(isSpeech: isSpeech, samples: Self.activityBlockSamples) { pendingFlip = flip }
        }
    }

    /// Decodes (or conceals, or silences) what the jitter buffer asks for into `decoded`.
    private func produce(_ output: JitterBuffer.Output) -> Int {
        var decoder = self.decoder
        do {
            return try decoded.withUnsafeMutableBufferPointer { try playout.render(output, decoder: &decoder, into: $0) }
        } catch {
            Log.debug("voice: decoding failed (\(error)); playing silence")
            let count = output.samples(frameSamples: decoder.frameSamples)
            decoded.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            return min(count, decoded.count)
        }
    }
}
