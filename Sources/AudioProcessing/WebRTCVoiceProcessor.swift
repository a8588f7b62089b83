import CWebRTCAudio
import PeerVoiceCore

/// webrtc-audio-processing 0.3 (the engine of PipeWire's echo-cancel module) behind
/// PeerVoiceCore's ``VoiceProcessor``: the acoustic echo canceller with extended filter,
/// delay-agnostic mode and moderate suppression (low while the near end talks over the echo),
/// noise suppression at its low level, its high-pass
/// filter, adaptive digital gain control when asked for, and voice activity detection (the shim's
/// default settings). The only importer of `CWebRTCAudio`.
///
/// Not thread-safe: one thread (the voice thread) uses it. `Sendable` only so that it can be
/// handed to that thread.
public final class WebRTCVoiceProcessor: VoiceProcessor, @unchecked Sendable {
    public private(set) var processing: Set<VoiceProcessing>
    private let native: OpaquePointer

    /// A processor running `processing` (which may be empty: then only voice activity is judged).
    public init(processing: Set<VoiceProcessing>) throws(VoiceCodecError) {
        var settings = peervoice_webrtc_audio_default_settings()
        settings.echo_cancel = processing.contains(.echoCancel) ? 1 : 0
        settings.noise_suppression = processing.contains(.noiseSuppression) ? 1 : 0
        settings.high_pass = processing.contains(.highPass) ? 1 : 0
        settings.gain_control = processing.contains(.gainControl) ? 1 : 0
        var error: Int32 = 0
        guard let native = peervoice_webrtc_audio_create(&settings, &error) else {
            throw VoiceCodecError("webrtc-audio-processing refused its setup (error \(error))", code: error)
        }
        self.native = native
        self.processing = processing
    }

    deinit { peervoice_webrtc_audio_destroy(native) }

    public func setEchoCancellation(_ on: Bool) throws(VoiceCodecError) {
        guard on != processing.contains(.echoCancel) else { return }
        let result = peervoice_webrtc_audio_set_echo_cancel(native, on ? 1 : 0)
        if result != 0 { throw VoiceCodecError("webrtc-audio-processing: cannot turn echo cancellation \(on ? "on" : "off") (error \(result))", code: result) }
        if on { processing.insert(.echoCancel) } else { processing.remove(.echoCancel) }
    }

    public func analyzeFarEnd(_ block: UnsafeBufferPointer<Int16>) throws(VoiceCodecError) {
        try Self.checkSize(block.count)
        let result = peervoice_webrtc_audio_far_end(native, block.baseAddress!)
        if result != 0 { throw VoiceCodecError("webrtc-audio-processing: far-end block failed (error \(result))", code: result) }
    }

    public func processCapture(_ block: UnsafeMutableBufferPointer<Int16>, streamDelayMs: Int) throws(VoiceCodecError) -> Bool {
        try Self.checkSize(block.count)
        var hasVoice: Int32 = 0
        let result = peervoice_webrtc_audio_capture(native, block.baseAddress!, Int32(clamping: streamDelayMs), &hasVoice)
        if result != 0 { throw VoiceCodecError("webrtc-audio-processing: capture block failed (error \(result))", code: result) }
        return hasVoice != 0
    }

    private static func checkSize(_ count: Int) throws(VoiceCodecError) {
        guard count == voiceProcessingBlockSamples else {
            throw VoiceCodecError("webrtc-audio-processing takes blocks of \(voiceProcessingBlockSamples) samples, not \(count)")
        }
    }
}
