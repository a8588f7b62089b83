/// Cleaning the microphone signal before it is encoded, as the voice pipeline sees it: echo
/// cancellation against what the speaker plays, noise suppression, a high-pass filter, and a
/// voice-activity decision. `Sources/AudioProcessing` implements it with webrtc-audio-processing.
///
/// Both streams go through in 10 ms blocks of 48 kHz mono (``voiceProcessingBlockSamples``).
/// Not thread-safe: one processor belongs to one thread (the voice thread), never PipeWire's
/// real-time one.

/// Samples in one processing block: 10 ms at 48 kHz.
public let voiceProcessingBlockSamples = 480

/// The parts of capture processing, by the names the D-Bus API lists them with
/// (`AudioProcessing` in dbus/org.example.PeerVoice.xml).
public enum VoiceProcessing: String, Sendable, CaseIterable {
    case echoCancel = "echo-cancel"
    case noiseSuppression = "noise-suppression"
    case highPass = "high-pass"
    /// Automatic gain control: off unless asked for (`--gain-control`).
    case gainControl = "gain-control"

    /// What runs unless an option says otherwise.
    public static let defaults: Set<VoiceProcessing> = [.echoCancel, .noiseSuppression, .highPass]
}

public protocol VoiceProcessor: AnyObject {
    /// The parts this processor runs.
    var processing: Set<VoiceProcessing> { get }

    /// Turns the echo canceller on or off while running (nothing to cancel with headphones); the
    /// other parts go on undisturbed. On again, it learns the echo path afresh.
    func setEchoCancellation(_ on: Bool) throws(VoiceCodecError)

    /// One block of what the speaker plays, in the order it plays (silence included: the
    /// canceller needs the far end continuous).
    func analyzeFarEnd(_ block: UnsafeBufferPointer<Int16>) throws(VoiceCodecError)

    /// Processes one block of the microphone in place and returns whether it holds voice.
    /// `streamDelayMs`: how long after the far-end block that caused an echo was given to
    /// ``analyzeFarEnd(_:)`` that echo arrives here (the devices' and rings' delays; a room
    /// adds its own, which the canceller finds by itself).
    func processCapture(_ block: UnsafeMutableBufferPointer<Int16>, streamDelayMs: Int) throws(VoiceCodecError) -> Bool
}
