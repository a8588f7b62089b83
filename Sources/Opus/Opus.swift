import COpus
import PeerVoiceCore

// libopus behind PeerVoiceCore's VoiceEncoder / VoiceDecoder: 48 kHz mono, OPUS_APPLICATION_VOIP.
// Settings and the reasons for them: docs/VOICE.md.

/// The text libopus gives for one of its error codes.
func opusErrorText(_ code: Int32) -> String {
    guard let text = opus_strerror(code) else { return "error \(code)" }
    return String(cString: text)
}

private func check(_ code: Int32, _ what: String) throws(VoiceCodecError) {
    if code != OPUS_OK {
        throw VoiceCodecError("\(what): \(opusErrorText(code)) (\(code))", code: code)
    }
}

/// Frame durations the voice path supports (both ends must use the same one).
public enum OpusFrameDuration: Int, Sendable, CaseIterable {
    case ms10 = 10
    case ms20 = 20

    /// Samples per frame at 48 kHz.
    public var samples: Int { rawValue * 48 }
}

/// Encodes 48 kHz mono voice with libopus.
///
/// Not thread-safe, and not `Sendable`: the voice thread creates and uses its own.
public final class OpusVoiceEncoder: VoiceEncoder {

    public struct Configuration: Sendable, Equatable {
        /// 20 ms: half the packets (and header overhead) of 10 ms, the usual VoIP choice; 10 ms
        /// saves 10 ms of latency for 2× the packet rate.
        public var frameDuration: OpusFrameDuration
        /// Bits per second. 24 kbit/s gives wideband-to-super-wideband speech with room for FEC;
        /// 24–32 kbit/s is the useful range for voice.
        public var bitrate: Int
        /// 0–10. 10 is the best quality and costs about 2 % of one core here (bench/voice/README.md).
        public var complexity: Int
        /// In-band FEC (LBRR): each packet also carries a coarse copy of the previous frame,
        /// which the receiver decodes when that frame was lost. Active when the expected loss > 0.
        public var inbandFEC: Bool
        /// Discontinuous transmission: during silence, packets shrink to 1–2 bytes (which need
        /// not be sent) except for an occasional comfort-noise update.
        public var dtx: Bool
        /// Expected packet loss, 0–100: how much redundancy FEC spends. Update it from the
        /// receiver's ``JitterBuffer/Statistics/lossPercent`` when it is known.
        public var packetLossPercent: Int

        public init(
            frameDuration: OpusFrameDuration = .ms20,
            bitrate: Int = 24_000,
            complexity: Int = 10,
            inbandFEC: Bool = true,
            dtx: Bool = true,
            packetLossPercent: Int = 10
        ) {
            self.frameDuration = frameDuration
            self.bitrate = bitrate
            self.complexity = complexity
            self.inbandFEC = inbandFEC
            self.dtx = dtx
            self.packetLossPercent = packetLossPercent
        }
    }

    public let configuration: Configuration
    public let frameSamples: Int
    /// The encoder's algorithmic delay in samples (lookahead): decoded audio lags the input by
    /// this much (312 at 48 kHz in VOIP mode: 2.5 ms + 4 ms).
    public let lookahead: Int
    /// The packet-loss percentage the encoder currently plans for.
    public private(set) var packetLossPercent: Int

    private let state: OpaquePointer

    /// - Throws: ``VoiceCodecError`` when libopus refuses a setting or cannot allocate.
    public init(configuration: Configuration = Configuration()) throws(VoiceCodecError) {
        self.configuration = configuration
        frameSamples = configuration.frameDuration.samples
        var error: Int32 = 0
        guard let state = opus_encoder_create(48_000, 1, OPUS_APPLICATION_VOIP, &error), error == OPUS_OK else {
            throw VoiceCodecError("opus_encoder_create: \(opusErrorText(error)) (\(error))", code: error)
        }
        self.state = state
        let loss = min(100, max(0, configuration.packetLossPercent))
        packetLossPercent = loss
        var lookahead: Int32 = 0
        do throws(VoiceCodecError) {
            guard (6000...510_000).contains(configuration.bitrate) else {
                throw VoiceCodecError("Opus bitrate must be 6000–510000 bit/s, got \(configuration.bitrate)")
            }
            guard (0...10).contains(configuration.complexity) else {
                throw VoiceCodecError("Opus complexity must be 0–10, got \(configuration.complexity)")
            }
            try check(peervoice_opus_set_bitrate(state, Int32(configuration.bitrate)), "setting the Opus bitrate")
            try check(peervoice_opus_set_complexity(state, Int32(configuration.complexity)), "setting the Opus complexity")
            try check(peervoice_opus_set_signal(state, OPUS_SIGNAL_VOICE), "setting the Opus signal type")
            try check(peervoice_opus_set_inband_fec(state, configuration.inbandFEC ? 1 : 0), "enabling Opus in-band FEC")
            try check(peervoice_opus_set_packet_loss_perc(state, Int32(loss)), "setting the Opus packet loss")
            try check(peervoice_opus_set_dtx(state, configuration.dtx ? 1 : 0), "enabling Opus DTX")
            try check(peervoice_opus_get_lookahead(state, &lookahead), "reading the Opus lookahead")
        } catch {
            opus_encoder_destroy(state)
            throw error
        }
        self.lookahead = Int(lookahead)
    }

    deinit {
        opus_encoder_destroy(state)
    }

    /// Encodes exactly ``frameSamples`` samples; returns the packet length (1–2 bytes in DTX
    /// silence: such a packet need not be sent). `packet` should hold ``voiceMaxPacketBytes``.
    public func encode(
        _ pcm: UnsafeBufferPointer<Int16>, into packet: UnsafeMutableBufferPointer<UInt8>
    ) throws(VoiceCodecError) -> Int {
        guard pcm.count == frameSamples, let input = pcm.baseAddress else {
            throw VoiceCodecError("Opus encode takes exactly \(frameSamples) samples (one frame), got \(pcm.count)")
        }
        guard let output = packet.baseAddress, !packet.isEmpty else {
            throw VoiceCodecError("Opus encode needs an output buffer (\(voiceMaxPacketBytes) bytes)")
        }
        let result = opus_encode(state, input, Int32(frameSamples), output, Int32(min(packet.count, voiceMaxPacketBytes)))
        if result < 0 {
            throw VoiceCodecError("opus_encode: \(opusErrorText(result)) (\(result))", code: result)
        }
        return Int(result)
    }

    /// Clamped to 0–100. Cheap: call it whenever a new loss estimate comes in.
    public func setPacketLossPercent(_ percent: Int) {
        let clamped = min(100, max(0, percent))
        guard clamped != packetLossPercent else { return }
        if peervoice_opus_set_packet_loss_perc(state, Int32(clamped)) == OPUS_OK {
            packetLossPercent = clamped
        }
    }

    /// Changes the bitrate (6000–510000 bit/s).
    public func setBitrate(_ bitsPerSecond: Int) throws(VoiceCodecError) {
        guard (6000...510_000).contains(bitsPerSecond) else {
            throw VoiceCodecError("Opus bitrate must be 6000–510000 bit/s, got \(bitsPerSecond)")
        }
        try check(peervoice_opus_set_bitrate(state, Int32(bitsPerSecond)), "setting the Opus bitrate")
    }

    /// Whether the last frame was encoded as DTX silence.
    public var isInDTX: Bool {
        var value: Int32 = 0
        return peervoice_opus_get_in_dtx(state, &value) == OPUS_OK && value != 0
    }

    /// Starts a new stream (e.g. when voice restarts), keeping the settings.
    public func reset() {
        _ = peervoice_opus_encoder_reset(state)
    }
}

/// Decodes 48 kHz mono voice with libopus, conceals lost packets and recovers them from FEC.
///
/// Not thread-safe, and not `Sendable`: the voice thread creates and uses its own.
public final class OpusVoiceDecoder: VoiceDecoder {
    public let frameSamples: Int
    private let state: OpaquePointer

    /// - Parameter frameDuration: the peer's frame duration: what concealment and FEC produce.
    public init(frameDuration: OpusFrameDuration = .ms20) throws(VoiceCodecError) {
        frameSamples = frameDuration.samples
        var error: Int32 = 0
        guard let state = opus_decoder_create(48_000, 1, &error), error == OPUS_OK else {
            throw VoiceCodecError("opus_decoder_create: \(opusErrorText(error)) (\(error))", code: error)
        }
        self.state = state
    }

    deinit {
        opus_decoder_destroy(state)
    }

    /// See ``VoiceDecoder/decode(_:fec:into:)``. Concealment (`payload` nil) produces
    /// `min(pcm.count, frameSamples)` samples, which must be a multiple of 2.5 ms (120 samples):
    /// pass a shorter buffer for a shorter concealment (``JitterBuffer/Output/conceal(samples:)``).
    public func decode(
        _ payload: UnsafeBufferPointer<UInt8>?, fec: Bool, into pcm: UnsafeMutableBufferPointer<Int16>
    ) throws(VoiceCodecError) -> Int {
        guard let output = pcm.baseAddress else {
            throw VoiceCodecError("Opus decode needs an output buffer")
        }
        let result: Int32
        if let payload, !payload.isEmpty {
            if fec {
                guard pcm.count >= frameSamples else {
                    throw VoiceCodecError("Opus FEC recovery produces \(frameSamples) samples; the buffer holds \(pcm.count)")
                }
                result = opus_decode(state, payload.baseAddress, Int32(payload.count), output, Int32(frameSamples), 1)
            } else {
                result = opus_decode(state, payload.baseAddress, Int32(payload.count), output,
                                     Int32(min(pcm.count, voiceMaxPacketSamples)), 0)
            }
        } else {
            let count = min(pcm.count, frameSamples)
            guard count > 0, count % 120 == 0 else {
                throw VoiceCodecError("Opus concealment must be a multiple of 120 samples (2.5 ms), got \(count)")
            }
            result = opus_decode(state, nil, 0, output, Int32(count), 0)
        }
        if result < 0 {
            let what = payload == nil ? "opus_decode (concealment)" : fec ? "opus_decode (FEC)" : "opus_decode"
            throw VoiceCodecError("\(what): \(opusErrorText(result)) (\(result))", code: result)
        }
        return Int(result)
    }

    /// Duration of the last packet decoded (or concealed), in samples.
    public var lastPacketDuration: Int {
        var value: Int32 = 0
        return peervoice_opus_get_last_packet_duration(state, &value) == OPUS_OK ? Int(value) : 0
    }

    public func reset() {
        _ = peervoice_opus_decoder_reset(state)
    }
}
