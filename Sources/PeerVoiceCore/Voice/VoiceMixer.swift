/// Mixes the remote voices of a call into one playback frame, each voice at its own volume, through
/// a limiter, so that several people talking at once never overflow and wrap around.
///
/// Per frame: ``add(_:channel:)`` each remote voice's decoded frame (exactly ``frameSamples``
/// samples of 48 kHz mono, what ``VoiceDecoder`` writes), then ``mix(into:)`` the result, which also
/// starts the next frame. A voice that has nothing this frame is simply not added. Allocates
/// nothing after `init`, takes no lock, is not thread-safe: it belongs to the voice thread.
///
/// ## Limiter
/// Look-ahead free, so it adds no delay: a peak envelope that follows a rising signal at once and
/// falls back with ``Limiter/releaseMs``, and a gain from a soft-knee curve of that envelope. Below
/// the knee (``Limiter/kneeDBFS``) the gain is exactly 1, so a voice that fits passes bit for bit.
/// Above it, the curve bends the envelope smoothly towards full scale and never reaches it: the
/// output stays within Int16 whatever the sum, every sample keeps its sign (the gain is positive)
/// and is never louder than the plain sum. Because the envelope holds between the peaks of a
/// waveform, the gain moves slowly and distorts little (VoiceMixerTests measure it).
public struct VoiceMixer: Sendable {

    /// How the limiter behaves.
    public struct Limiter: Sendable, Equatable {
        /// Envelope level (peak, dBFS) where gain reduction starts; below it the mix is untouched.
        public var kneeDBFS: Double
        /// Time constant of the envelope's fall after a peak (ms): how smoothly the gain recovers.
        public var releaseMs: Double

        public init(kneeDBFS: Double = -3, releaseMs: Double = 50) {
            precondition(kneeDBFS < 0 && releaseMs > 0, "limiter knee \(kneeDBFS) dBFS, release \(releaseMs) ms")
            self.kneeDBFS = kneeDBFS
            self.releaseMs = releaseMs
        }
    }

    /// One remote voice's volume and mute, and the gain last applied to it, so that a change
    /// ramps over one frame instead of clicking. The voice engine keeps one per remote voice,
    /// next to its jitter buffer and decoder.
    public struct Channel: Sendable, Equatable {
        /// The volumes `SetVolume` accepts: 0.0 is silent, 1.0 as it comes, 2.0 twice as loud.
        public static let volumeRange: ClosedRange<Double> = 0...2

        /// The voice's volume, within ``volumeRange``.
        public private(set) var volume: Double
        /// A muted voice is not played (the same as volume 0, without losing the volume).
        public var muted: Bool
        /// The gain the last frame ended with.
        fileprivate var appliedGain: Float

        public init(volume: Double = 1, muted: Bool = false) throws(ServiceError) {
            self.volume = 1
            self.muted = muted
            appliedGain = 0
            try setVolume(volume)
            appliedGain = targetGain
        }

        /// Volume 1.0, not muted: a voice as it comes.
        public static let unity = Channel(unchecked: 1)

        private init(unchecked volume: Double) {
            self.volume = volume
            muted = false
            appliedGain = Float(volume)
        }

        /// Sets the volume; a value outside ``volumeRange`` is refused with a message for people.
        public mutating func setVolume(_ volume: Double) throws(ServiceError) {
            guard Self.volumeRange.contains(volume) else {  // NaN is in no range
                throw .invalidArgument(
                    "volume \(volume) is out of range: use 0.0 (silent) to 2.0 (twice as loud); 1.0 plays the voice as it comes")
            }
            self.volume = volume
        }

        /// The gain the next frame ramps to.
        fileprivate var targetGain: Float { muted ? 0 : Float(volume) }
    }

    /// Samples in each frame added and mixed (48 kHz mono).
    public let frameSamples: Int
    public let limiter: Limiter

    /// The sum of this frame's voices, in Int16 units.
    private var accumulator: [Float]
    private var envelope: Float = 0
    /// Envelope level where the gain curve starts, and the room above it up to full scale.
    private let knee: Float
    private let headroom: Float
    /// The envelope's factor per sample while it falls: e^(−1 / (release × 48 kHz)).
    private let release: Float

    /// The largest Int16 magnitude the limiter aims below.
    private static let fullScale: Float = 32767

    public init(frameSamples: Int, limiter: Limiter = Limiter()) {
        precondition(frameSamples > 0, "frameSamples \(frameSamples)")
        self.frameSamples = frameSamples
        self.limiter = limiter
        accumulator = [Float](repeating: 0, count: frameSamples)
        knee = Self.fullScale * Float(Decibels.amplitudeRatio(limiter.kneeDBFS))
        headroom = Self.fullScale - knee
        let samplesPerTimeConstant = limiter.releaseMs * Double(voiceSampleRate) / 1000
        release = Float(Decibels.exp2(-1 / samplesPerTimeConstant * 1.4426950408889634))  // 1/ln 2
    }

    /// Adds one voice's frame at its channel's gain. A channel whose gain is and was 0 (volume 0
    /// or muted) adds nothing at all; after a change, the gain ramps linearly over this frame.
    public mutating func add(_ pcm: UnsafeBufferPointer<Int16>, channel: inout Channel) {
        precondition(pcm.count == frameSamples, "a mixer frame is \(frameSamples) samples, not \(pcm.count)")
        let from = channel.appliedGain
        let to = channel.targetGain
        channel.appliedGain = to
        if from == 0 && to == 0 { return }
        accumulator.withUnsafeMutableBufferPointer { sum in
            if from == to {
                for i in 0..<sum.count { sum[i] += Float(pcm[i]) * to }
            } else {
                let step = (to - from) / Float(sum.count)
                for i in 0..<sum.count { sum[i] += Float(pcm[i]) * (from + step * Float(i + 1)) }
            }
        }
    }

    /// Writes the limited mix of the voices added since the last call (silence if none) into
    /// `output` (``frameSamples`` samples) and starts the next frame.
    public mutating func mix(into output: UnsafeMutableBufferPointer<Int16>) {
        precondition(output.count == frameSamples, "a mixer frame is \(frameSamples) samples, not \(output.count)")
        var envelope = self.envelope
        let (knee, headroom, release) = (self.knee, self.headroom, self.release)
        accumulator.withUnsafeMutableBufferPointer { sum in
            for i in 0..<sum.count {
                let x = sum[i]
                sum[i] = 0
                envelope = Swift.max(Swift.abs(x), envelope * release)
                var y = x
                if envelope > knee {
                    // Soft knee: the envelope e maps to knee + over / (1 + over / headroom), which
                    // has slope 1 at the knee and tends to full scale; |x| ≤ e, so |y| stays below.
                    let over = envelope - knee
                    y = x * ((knee + over / (1 + over / headroom)) / envelope)
                }
                // Rounding: truncation of ±0.5 (one instruction, unlike a call to round).
                y = Swift.min(Swift.max(y, -32768), 32767)
                output[i] = Int16(y < 0 ? y - 0.5 : y + 0.5)
            }
        }
        self.envelope = envelope
    }
}
