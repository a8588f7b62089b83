/// The voice codec, as the voice pipeline sees it: one frame of 48 kHz mono PCM in, one packet out,
/// and back. `Sources/Opus` implements it with libopus; tests can use a fake.
///
/// Both directions write into buffers the caller owns, so a voice thread that keeps its buffers
/// allocates nothing per frame. Neither side is thread-safe: use each from one thread at a time.

/// The sample rate of every voice stream, in Hz. Opus always runs at 48 kHz internally, and the
/// VOICE frame's timestamp counts 48 kHz samples (docs/PROTOCOL.md §5.6).
public let voiceSampleRate = 48_000

/// The largest packet an encoder writes (RFC 6716's limit; the wire's ``Wire/maxOpusPayloadBytes``).
public let voiceMaxPacketBytes = 1275

/// The most samples one packet can decode to: 120 ms at 48 kHz. A decode buffer of this size fits
/// any packet a peer may send, whatever its frame duration.
public let voiceMaxPacketSamples = 5760

/// A codec call that failed, with a message a person can act on.
public struct VoiceCodecError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What was being done and why it failed, e.g. "opus_encode: buffer too small".
    public let message: String
    /// The codec library's own error code, when it gave one (libopus: a negative `OPUS_*` value).
    public let code: Int32?

    public init(_ message: String, code: Int32? = nil) {
        self.message = message
        self.code = code
    }

    public var description: String { message }
}

/// Turns frames of PCM into codec packets.
public protocol VoiceEncoder {
    /// Samples in one frame (48 kHz mono): 480 for 10 ms, 960 for 20 ms. ``encode(_:into:)``
    /// takes exactly this many.
    var frameSamples: Int { get }

    /// Encodes one frame of `frameSamples` samples into `packet` and returns the packet's length.
    ///
    /// During silence with DTX on, the packet may be 1 or 2 bytes: such a packet carries no audio
    /// and need not be sent (the receiver conceals the gap, which gives the same output).
    /// `packet` should hold ``voiceMaxPacketBytes`` bytes; 1500 is plenty.
    mutating func encode(
        _ pcm: UnsafeBufferPointer<Int16>, into packet: UnsafeMutableBufferPointer<UInt8>
    ) throws(VoiceCodecError) -> Int

    /// Tells the encoder how much loss to expect (0–100, clamped), so it spends bits on
    /// redundancy (in-band FEC) accordingly; 0 turns FEC off. See ``FECPolicy``.
    mutating func setPacketLossPercent(_ percent: Int)
}

/// How much loss the encoder is told to expect, from the loss the *receiver* reports (VOICE_REPORT,
/// docs/PROTOCOL.md): in-band FEC takes its bits from the frames themselves, so it is worth it only
/// when packets are really lost. `make bench-fec` measures it (docs/VOICE.md, "FEC follows the
/// peer's loss reports"): at 24 kbit/s FEC costs a clean path 0.2–0.7 PESQ-WB, gains 0.3–0.5 from
/// 5 % loss up, and a hint of 10 % ruins 10 ms frames (PESQ 1.98 with no loss at all).
public enum FECPolicy {
    /// Reported loss below this: no FEC (it would cost more quality than it saves).
    public static let minimumLossPercent = 3
    /// The hint never goes above this: higher hints spend more bits on redundancy than they
    /// repair (at 10 ms frames, much more).
    public static let maximumHintPercent = 5

    /// The packet-loss percentage for the encoder when the peer reports losing `reportedPercent`.
    public static func encoderHint(reportedLossPercent reportedPercent: Int) -> Int {
        reportedPercent < minimumLossPercent ? 0 : min(reportedPercent, maximumHintPercent)
    }
}

/// Turns codec packets back into PCM, and makes up audio for packets that never came.
public protocol VoiceDecoder {
    /// Samples in one frame (48 kHz mono): what FEC recovery produces, and the most that one
    /// concealment call produces.
    var frameSamples: Int { get }

    /// Decodes into `pcm` and returns the number of samples written.
    ///
    /// - `payload` present, `fec` false: decodes that packet (its whole duration, normally
    ///   `frameSamples`; `pcm` must be large enough, ``voiceMaxPacketSamples`` always is).
    /// - `payload` nil: packet loss concealment (PLC) of `min(pcm.count, frameSamples)` samples;
    ///   pass a shorter buffer for ``JitterBuffer/Output/conceal(samples:)``'s shorter stretches.
    /// - `payload` present, `fec` true: recovers the frame *before* `payload` (which was lost)
    ///   from the in-band FEC that `payload` carries, `frameSamples` samples; falls back to PLC
    ///   when `payload` has no FEC data. Decode `payload` itself normally afterwards.
    mutating func decode(
        _ payload: UnsafeBufferPointer<UInt8>?, fec: Bool, into pcm: UnsafeMutableBufferPointer<Int16>
    ) throws(VoiceCodecError) -> Int

    /// Forgets the stream's history, e.g. after the peer restarted (``JitterBuffer/Statistics/resets``).
    mutating func reset()
}

extension VoiceEncoder {
    /// Encodes one frame and returns the packet in a new array. Allocates: for tests and
    /// cold paths; the voice thread should use ``encode(_:into:)``.
    public mutating func encode(_ pcm: [Int16]) throws(VoiceCodecError) -> [UInt8] {
        var packet = [UInt8](repeating: 0, count: voiceMaxPacketBytes)
        let count = try pcm.withUnsafeBufferPointer { (pcmBuffer) throws(VoiceCodecError) -> Int in
            try packet.withUnsafeMutableBufferPointer { (out) throws(VoiceCodecError) -> Int in
                try encode(pcmBuffer, into: out)
            }
        }
        packet.removeLast(packet.count - count)
        return packet
    }
}

extension VoiceDecoder {
    /// ``decode(_:fec:into:)`` for a payload held in an array (what ``JitterBuffer`` hands out).
    /// Allocates nothing.
    public mutating func decode(
        _ payload: [UInt8]?, fec: Bool, into pcm: UnsafeMutableBufferPointer<Int16>
    ) throws(VoiceCodecError) -> Int {
        guard let payload else { return try decode(nil, fec: fec, into: pcm) }
        return try payload.withUnsafeBufferPointer { (bytes) throws(VoiceCodecError) -> Int in
            try decode(bytes, fec: fec, into: pcm)
        }
    }

    /// Decodes into a new array (allocates: for tests and cold paths).
    public mutating func decode(_ payload: [UInt8]?, fec: Bool = false) throws(VoiceCodecError) -> [Int16] {
        var pcm = [Int16](repeating: 0, count: Swift.max(voiceMaxPacketSamples, frameSamples))
        let count = try pcm.withUnsafeMutableBufferPointer { (out) throws(VoiceCodecError) -> Int in
            try decode(payload, fec: fec, into: out)
        }
        pcm.removeLast(pcm.count - count)
        return pcm
    }
}
