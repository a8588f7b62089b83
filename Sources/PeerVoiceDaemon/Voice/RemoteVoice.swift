import Opus
import PeerVoiceCore

/// One remote voice's receive pipeline on the voice thread: its VOICE packets → jitter buffer →
/// Opus decoder (FEC recovery, concealment) → PCM, pulled by the call's mixer a few milliseconds
/// at a time; and, on what was decoded, whether the peer is speaking.
///
/// The engine reaches the jitter buffer and the decoder only through this type (``insert(_:arrival:)``,
/// ``pull(into:now:)``, ``isDormant``, ``lossPercent``, ``statistics``), so playout changes stay here.
final class RemoteVoice {
    private var jitter: JitterBuffer
    private let decoder: OpusVoiceDecoder
    /// Decoded samples; those in `decodedStart..<decodedEnd` are not mixed yet.
    private var decoded = [Int16](repeating: 0, count: voiceMaxPacketSamples)
    private var decodedStart = 0
    private var decodedEnd = 0
    private var detector = EnergyVoiceActivityDetector()
    private var speaking = SpeakingState()
    /// When the speaking state last heard of time passing (a pull, or ``idle(now:)``).
    private var speakingClockNs: Int64?
    /// A flip of ``isSpeaking`` not yet taken by ``speakingFlip()``.
    private var pendingFlip: Bool?

    /// `frameMs`: the peer's Opus frame length (10 or 20), from its VOICE_START.
    init(frameMs: Int) throws(VoiceCodecError) {
        let duration: OpusFrameDuration = frameMs == 10 ? .ms10 : .ms20
        decoder = try OpusVoiceDecoder(frameDuration: duration)
        jitter = JitterBuffer(configuration: .init(frameSamples: duration.samples))
    }

    /// Takes one VOICE frame, stamped with its arrival (CLOCK_MONOTONIC, ns).
    func insert(_ voice: VoiceFrame, arrival: Int64) {
        jitter.insert(seq: voice.seq, timestamp: voice.timestamp, payload: voice.payload, arrival: arrival)
    }

    /// The far side is silent: nothing buffered, nothing playing, nothing decoded left. The
    /// mixer then leaves this voice out (and the speaker may run dry) until a packet comes.
    var isDormant: Bool { jitterIdle && decodedStart == decodedEnd }

    /// The jitter buffer holds nothing and is not playing: it would only give silence.
    private var jitterIdle: Bool { !jitter.isPlaying && jitter.isEmpty }

    /// The share of the peer's packets lost, as the jitter buffer last measured it.
    var lossPercent: Int { jitter.lossPercent }

    var statistics: JitterBuffer.Statistics { jitter.statistics }

    var isSpeaking: Bool { speaking.isSpeaking }

    /// Fills `output` (10 or 20 ms, which the voice activity detector judges as one block) with what
    /// plays next, decoding as needed, and judges it for speech; returns false, writing nothing,
    /// while dormant. `now` is the time of decoding (CLOCK_MONOTONIC), which the jitter buffer
    /// compares arrival times with: a refill starts when the playback ring runs low, so the ring's
    /// lead is about the same at every refill. Within one pull the time given to the jitter buffer
    /// advances by what was produced before, so that a wait for a talkspurt's target delay is not
    /// filled twice over at one instant.
    func pull(into output: UnsafeMutableBufferPointer<Int16>, now: Int64) -> Bool {
        guard !isDormant else { return false }
        var filled = 0
        while filled < output.count {
            if decodedStart == decodedEnd {
                guard !jitterIdle else { break }
                decodedStart = 0
                decodedEnd = produce(jitter.next(now: now + Int64(filled) * 1_000_000_000 / Int64(voiceSampleRate)))
                guard decodedEnd > 0 else { break }
            }
            let count = min(output.count - filled, decodedEnd - decodedStart)
            decoded.withUnsafeBufferPointer { source in
                _ = UnsafeMutableBufferPointer(rebasing: output[filled..<filled + count])
                    .update(fromContentsOf: UnsafeBufferPointer(rebasing: source[decodedStart..<decodedStart + count]))
            }
            decodedStart += count
            filled += count
        }
        // A talkspurt that ended inside this pull: silence for the rest.
        UnsafeMutableBufferPointer(rebasing: output[filled...]).update(repeating: 0)
        speakingClockNs = now
        if let flip = speaking.update(isSpeech: detector.isSpeech(UnsafeBufferPointer(output)), samples: output.count) {
            pendingFlip = flip
        }
        return true
    }

    /// While dormant, lets the speaking state hear that time passes in silence, so that its
    /// hangover runs out when the peer stops talking. Call it on every pass of the voice thread.
    func idle(now: Int64) {
        guard isDormant else { return }
        let elapsed = speakingClockNs.map { now - $0 } ?? 0
        speakingClockNs = now
        let samples = Int(elapsed * Int64(voiceSampleRate) / 1_000_000_000)
        if samples > 0, let flip = speaking.update(isSpeech: false, samples: samples) { pendingFlip = flip }
    }

    /// The new ``isSpeaking`` if it flipped since the last call, or nil.
    func speakingFlip() -> Bool? {
        defer { pendingFlip = nil }
        return pendingFlip
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
}
