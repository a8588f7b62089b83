/// Whether a block of voice holds speech: the microphone's, for the service's `Speaking`, or a
/// remote voice's as decoded, for that peer's `Speaking`.
///
/// Blocks are 48 kHz mono Int16, 10 ms (480 samples) or 20 ms (960), the same blocks and the same
/// decision (one `Bool` per block) as `VoiceProcessor`'s `processCapture(_:streamDelayMs:)`
/// result, so the audio-processing library's detector can stand in for the microphone's.
/// A detector is not thread-safe: it belongs to the thread that handles its voice.
///
/// The decision only ever feeds ``SpeakingState``, a display. It never drives DTX (the encoder's
/// own detector does) and never gates audio: a word the detector misses is still heard.
public protocol VoiceActivityDetector {
    /// Whether `block` (10 or 20 ms) holds speech. Call it for every block of the voice, in
    /// order, silence included: detectors adapt to what came before.
    mutating func isSpeech(_ block: UnsafeBufferPointer<Int16>) -> Bool
}

/// Speech is a block that is clearly louder than the noise floor, which this detector learns:
/// the floor falls at once to a quieter block and rises slowly through louder ones, so a steady
/// noise (a fan, a hum) stops counting as speech within seconds while words stay far above it.
///
/// Simple and cheap (one multiply-add per sample, one log per block), but it cannot tell a voice
/// from any other sound that starts suddenly; a spectral detector can replace it behind
/// ``VoiceActivityDetector``.
public struct EnergyVoiceActivityDetector: VoiceActivityDetector, Sendable {
    /// How far above the noise floor a block must be to be speech (dB).
    public let marginDB: Double
    /// Blocks quieter than this are never speech, whatever the floor (dBFS): digital silence and
    /// a muted stream's zeros make the floor meaningless.
    public let minimumSpeechDBFS: Double
    /// How fast the floor rises while blocks are louder than it (dB per second).
    public let floorRiseDBPerSecond: Double

    /// The learned noise floor (dBFS): the first block's level, then learned as described above.
    public private(set) var noiseFloorDBFS: Double?

    public init(marginDB: Double = 9, minimumSpeechDBFS: Double = -55, floorRiseDBPerSecond: Double = 3) {
        precondition(marginDB > 0 && floorRiseDBPerSecond > 0, "margin \(marginDB) dB, rise \(floorRiseDBPerSecond) dB/s")
        self.marginDB = marginDB
        self.minimumSpeechDBFS = minimumSpeechDBFS
        self.floorRiseDBPerSecond = floorRiseDBPerSecond
    }

    public mutating func isSpeech(_ block: UnsafeBufferPointer<Int16>) -> Bool {
        let level = LevelMeter.dBFS(of: block)
        guard let floor = noiseFloorDBFS else {
            // Nothing to compare the first block with: it is the floor until a quieter one comes.
            noiseFloorDBFS = level
            return false
        }
        let seconds = Double(block.count) / Double(voiceSampleRate)
        noiseFloorDBFS = min(level, floor + floorRiseDBPerSecond * seconds)
        return level >= minimumSpeechDBFS && level >= floor + marginDB
    }
}

/// Turns per-block speech decisions into a `Speaking` flag that does not flicker: it turns on
/// after ``attackMs`` of consecutive speech and off after ``hangoverMs`` without any, and says
/// only when it flips, so `PropertiesChanged` goes out only then.
///
/// Durations are counted in samples, so 10 ms and 20 ms blocks may be mixed. `Speaking` is for
/// people to see; it never drives DTX and never gates audio.
public struct SpeakingState: Sendable, Equatable {
    /// Consecutive speech needed to start speaking (ms).
    public let attackMs: Int
    /// Time without speech after which speaking ends (ms).
    public let hangoverMs: Int

    public private(set) var isSpeaking = false

    private var speechSamples = 0
    private var quietSamples = 0

    /// Defaults: speaking starts after two 20 ms frames (four 10 ms blocks) and ends 400 ms after
    /// the last: words and the short pauses between them stay one stretch of speaking.
    public init(attackMs: Int = 40, hangoverMs: Int = 400) {
        precondition(attackMs > 0 && hangoverMs >= 0, "attack \(attackMs) ms, hangover \(hangoverMs) ms")
        self.attackMs = attackMs
        self.hangoverMs = hangoverMs
    }

    /// Takes one block's decision (`samples` long, 48 kHz) and returns the new ``isSpeaking``
    /// when it flipped, nil when it did not.
    public mutating func update(isSpeech: Bool, samples: Int) -> Bool? {
        if isSpeech {
            speechSamples += samples
            quietSamples = 0
            if !isSpeaking && speechSamples * 1000 >= attackMs * voiceSampleRate { return flip(to: true) }
        } else {
            speechSamples = 0
            quietSamples += samples
            if isSpeaking && quietSamples * 1000 >= hangoverMs * voiceSampleRate { return flip(to: false) }
        }
        return nil
    }

    /// Stops speaking at once, without the hangover: the microphone was muted (muted speech is
    /// not speaking) or the voice ended. Returns false when that is a flip, nil otherwise.
    public mutating func end() -> Bool? {
        speechSamples = 0
        quietSamples = 0
        return isSpeaking ? flip(to: false) : nil
    }

    private mutating func flip(to speaking: Bool) -> Bool {
        isSpeaking = speaking
        speechSamples = 0
        quietSamples = 0
        return speaking
    }
}
