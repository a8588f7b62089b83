// Decibel conversions for levels, thresholds and detectors. PeerVoiceCore imports no C module, so
// libm's log10/pow are not available here: these are short series, accurate to about 1e-12,
// used per block or per setting, never per sample.

/// Conversions between linear ratios and decibels.
public enum Decibels {
    /// `10 × log10(power)`: a power (mean square) ratio in dB. `power` must be > 0.
    public static func fromPower(_ power: Double) -> Double { 10 * log10(power) }

    /// `20 × log10(amplitude)`: an amplitude ratio in dB. `amplitude` must be > 0.
    public static func fromAmplitude(_ amplitude: Double) -> Double { 20 * log10(amplitude) }

    /// The power ratio of `decibels` dB: `10^(dB/10)`.
    public static func powerRatio(_ decibels: Double) -> Double { exp2(decibels / 10 * log2Of10) }

    /// The amplitude ratio of `decibels` dB: `10^(dB/20)`.
    public static func amplitudeRatio(_ decibels: Double) -> Double { exp2(decibels / 20 * log2Of10) }

    static let log2Of10 = 3.321928094887362

    private static let ln2 = 0.6931471805599453

    /// log10 of a positive finite `x`.
    static func log10(_ x: Double) -> Double {
        precondition(x > 0 && x.isFinite, "log10 of \(x)")
        // x = m × 2^e with m in [√½, √2), so that the series below converges fast.
        var exponent = Double(x.exponent)
        var m = x.significand  // [1, 2)
        if m > 1.4142135623730951 {
            m /= 2
            exponent += 1
        }
        // ln m = 2 atanh(z), z = (m − 1)/(m + 1), |z| < 0.172.
        let z = (m - 1) / (m + 1)
        let z2 = z * z
        var term = z
        var sum = 0.0
        var k = 1.0
        while k < 30 {
            sum += term / k
            term *= z2
            k += 2
        }
        let lnX = 2 * sum + exponent * ln2
        return lnX / (ln2 * log2Of10)
    }

    /// 2^y for finite `y` (0 below about 2^-1074, +infinity above 2^1024).
    static func exp2(_ y: Double) -> Double {
        precondition(y.isFinite, "exp2 of \(y)")
        if y < -1075 { return 0 }
        if y > 1024 { return .infinity }
        // floor(y) without libm's floor (|y| ≤ 1075 here, so Int holds it).
        var whole = Double(Int(y))
        if whole > y { whole -= 1 }
        // e^t, t = frac × ln 2 in [0, 0.694): the Taylor series is below 1e-17 after 20 terms.
        let t = (y - whole) * ln2
        var term = 1.0
        var sum = 1.0
        var n = 1.0
        while n <= 20 {
            term *= t / n
            sum += term
            n += 1
        }
        // Scale in two steps so that results near the subnormal range do not underflow early.
        let half = Int(whole) / 2
        let scale1 = Double(sign: .plus, exponent: half, significand: 1)
        let scale2 = Double(sign: .plus, exponent: Int(whole) - half, significand: 1)
        return sum * scale1 * scale2
    }
}
