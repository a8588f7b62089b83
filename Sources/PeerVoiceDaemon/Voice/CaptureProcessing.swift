import Glibc
import PeerVoiceCore

/// The call's capture processing, on the voice thread (docs/VOICE.md, "Capture processing"):
/// the processor hears what the speaker played, taken from ``playedRing`` 10 ms at a time, then
/// cleans each microphone frame in 10 ms blocks before it is encoded, told the delay between the
/// two from the streams' own timing. It adds no buffering: a frame is processed as soon as it
/// is read.
final class CaptureProcessing {
    /// What ``process(_:pendingCaptureSamples:deviceDelayFrames:)`` found in a frame.
    struct Outcome: Equatable {
        /// The processor's voice detector heard voice in one of the frame's blocks (the
        /// microphone's `Speaking` follows it).
        var voiced: Bool
        /// The frame is digital silence, and now exact zeros: the encoder may rest on it.
        var isDigitalSilence: Bool
    }

    /// What the playback callback handed PipeWire, silence included (`PlaybackRingSource` writes
    /// it on the real-time thread); about 340 ms, far more than one voice-thread pass drains.
    let playedRing = AudioRing(minimumCapacity: 16_384)
    private let processor: any VoiceProcessor
    /// The parts the options chose; the echo canceller among them runs only while something
    /// can echo (``echoCanceller``).
    private let options: Set<VoiceProcessing>
    /// What can echo, as far as is known: the microphone's node when it is PipeWire's own
    /// canceller, and the sinks the speaker plays into.
    private var microphoneCanceller: String?
    private var sinks: [PlaybackSink] = []
    private(set) var echoCanceller: EchoCancellerDecision
    private var farBlock = [Int16](repeating: 0, count: voiceProcessingBlockSamples)
    private var blocks = 0
    private var voicedBlocks = 0
    private var cpuNs: Int64 = 0
    private var reportedFailure = false

    /// `processor` runs the parts the options chose (`options`), the echo canceller included if
    /// chosen: on until something says nothing can echo.
    init(processor: any VoiceProcessor) {
        self.processor = processor
        options = processor.processing
        echoCanceller = .decide(wanted: options.contains(.echoCancel), microphoneCanceller: nil, sinks: [])
    }

    /// The parts that run now.
    var processing: Set<VoiceProcessing> { processor.processing }

    /// Every part, whether it runs and why (`AudioProcessing`).
    var states: [VoiceProcessingState] { VoiceProcessingState.all(options: options, echoCanceller: echoCanceller) }

    /// The microphone records from PipeWire's own echo canceller (`node`): never two in series.
    /// Whether ``states`` changed.
    func microphoneIsCanceller(_ node: String) -> Bool {
        microphoneCanceller = node
        return decide()
    }

    /// The speaker now plays into `sinks`. Whether ``states`` changed.
    func speakerPlays(into sinks: [PlaybackSink]) -> Bool {
        self.sinks = sinks
        return decide()
    }

    /// Turns the canceller on or off as what can echo says, and logs it when it flips.
    private func decide() -> Bool {
        let decision = EchoCancellerDecision.decide(wanted: options.contains(.echoCancel), microphoneCanceller: microphoneCanceller,
                                                    sinks: sinks)
        guard decision != echoCanceller else { return false }
        if decision.running != echoCanceller.running {
            do {
                try processor.setEchoCancellation(decision.running)
            } catch {
                Log.warning("voice: cannot turn echo cancellation \(decision.running ? "on" : "off") (\(decision.reason)): \(error)")
                return false
            }
            if let microphoneCanceller, !decision.running {
                Log.info("voice: the microphone (\(microphoneCanceller)) is PipeWire's echo canceller already: PeerVoice's echo cancellation is off")
            } else {
                Log.info("voice: echo cancellation \(decision.running ? "on" : "off"), \(decision.reason)")
            }
        }
        echoCanceller = decision
        return true
    }

    /// Feeds the processor everything played since the last call, then processes `frame` (a
    /// whole number of blocks) in place. `pendingCaptureSamples`: what the capture ring still
    /// holds behind this frame; `deviceDelayFrames`: the two streams' device delays together.
    /// Digital silence in (a muted or idle source's exact zeros) comes out as exact zeros, so
    /// the encoder can rest on it (docs/VOICE.md, "Digital silence"), once what the processor
    /// still held of the sound before is out: it delays the microphone by up to 14 ms, so the
    /// first silent frame after a word carries the word's end.
    func process(_ frame: UnsafeMutableBufferPointer<Int16>, pendingCaptureSamples: Int, deviceDelayFrames: Int) -> Outcome {
        let silentIn = !frame.contains { $0 != 0 }
        let voiced = clean(frame, pendingCaptureSamples: pendingCaptureSamples, deviceDelayFrames: deviceDelayFrames)
        let digitalSilence = silentIn && !frame.contains { abs(Int32($0)) > Self.silentTailPeak }
        if digitalSilence { frame.update(repeating: 0) }
        return Outcome(voiced: voiced, isDigitalSilence: digitalSilence)
    }

    /// A silent frame's output peaking at most this (−60 dBFS) holds only the end of a filter's
    /// tail (the high-pass filter's rings out at ±23 for a frame or two), nothing of a word.
    static let silentTailPeak: Int32 = 32

    /// The processor over `frame`, in place; whether it heard voice in any of its blocks.
    private func clean(_ frame: UnsafeMutableBufferPointer<Int16>, pendingCaptureSamples: Int, deviceDelayFrames: Int) -> Bool {
        let started = Self.threadCPUNs()
        defer { cpuNs += Self.threadCPUNs() - started }
        let block = voiceProcessingBlockSamples
        var voiced = false
        do {
            while playedRing.availableToRead >= block {
                try farBlock.withUnsafeMutableBufferPointer { buffer throws(VoiceCodecError) in
                    _ = playedRing.read(into: buffer)
                    try processor.analyzeFarEnd(UnsafeBufferPointer(buffer))
                }
            }
            let count = frame.count / block
            for index in 0..<count {
                // An echo reaches this block after both devices' delays and the samples captured
                // since (those queued behind it); the far end was given just now.
                let behind = (count - 1 - index) * block + pendingCaptureSamples
                let delayMs = (deviceDelayFrames + behind) * 1000 / voiceSampleRate
                let part = UnsafeMutableBufferPointer(rebasing: frame[index * block..<(index + 1) * block])
                if try processor.processCapture(part, streamDelayMs: delayMs) {
                    voicedBlocks += 1
                    voiced = true
                }
                blocks += 1
            }
        } catch {
            // The frame goes out as it is (partly processed at worst); say so once.
            if !reportedFailure { Log.warning("voice: audio processing failed, sending the microphone unprocessed: \(error)") }
            reportedFailure = true
        }
        return voiced
    }

    /// For the closing log line of a peer's session.
    var summary: String {
        let names = VoiceProcessing.allCases.filter(processing.contains).map(\.rawValue).joined(separator: " + ")
        guard blocks > 0 else { return "audio processing \(names): nothing processed" }
        let audioNs = Int64(blocks) * 10_000_000
        return "audio processing \(names): voice in \(voicedBlocks * 100 / blocks) % of 10 ms blocks, "
            + "\(String(format: "%.2f", Double(cpuNs) * 100 / Double(audioNs))) % of a core"
    }

    private static func threadCPUNs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}
