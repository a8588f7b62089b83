/// The level of one voice (the microphone, or one remote voice as decoded), as `Levels` reports it:
/// RMS in dBFS over the blocks added since the last ``restart()``.
///
/// dBFS here is `20 × log10(rms / 32768)`: a full-scale square wave reads 0.0, a full-scale sine
/// −3.0, and silence (digital zero, or anything below −100) reads ``silenceDBFS``. Adding a block
/// costs one multiply-add per sample and allocates nothing, so the voice thread can meter every
/// block it handles; the conversion to dB happens only when the level is read.
public struct LevelMeter: Sendable, Equatable {
    /// What silence reads, and the lowest value ever reported.
    public static let silenceDBFS = -100.0

    /// Sum of squared samples (in units of full scale squared) since the last restart.
    private var sumOfSquares = 0.0
    private var samples = 0

    public init() {}

    /// Adds one block (any length) to the level.
    public mutating func add(_ block: UnsafeBufferPointer<Int16>) {
        // Squares of Int16 are exact in Double, and so is their sum over any block of voice.
        var blockSum = 0.0
        for sample in block {
            let x = Double(sample)
            blockSum += x * x
        }
        sumOfSquares += blockSum / (32768.0 * 32768.0)
        samples += block.count
    }

    /// The RMS level in dBFS of everything added since the last restart; ``silenceDBFS`` when
    /// nothing was added.
    public var dBFS: Double {
        Self.dBFS(meanSquare: samples == 0 ? 0 : sumOfSquares / Double(samples))
    }

    /// Starts a new measurement: what follows no longer includes what came before.
    public mutating func restart() {
        sumOfSquares = 0
        samples = 0
    }

    /// The dBFS of one block on its own.
    public static func dBFS(of block: UnsafeBufferPointer<Int16>) -> Double {
        var meter = LevelMeter()
        meter.add(block)
        return meter.dBFS
    }

    /// The dBFS of a mean square in units of full scale squared, floored at ``silenceDBFS``.
    public static func dBFS(meanSquare: Double) -> Double {
        // −100 dBFS is a mean square of 1e-10; below it (zero included) is silence.
        guard meanSquare > 1e-10 else { return silenceDBFS }
        return Decibels.fromPower(meanSquare)
    }
}
