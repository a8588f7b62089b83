// The cost of VoiceMixer per frame, next to a baseline in the same run: the plainest mix that does
// not wrap (sum in Int32, clamp to Int16; hard clipping, no volume ramps, no limiter). Compiled
// with VoiceMixer.swift and the few core files it needs (bench/mixer/run.sh).

@main
enum MixerBench {
    static let frame = 960
    static let runs = 7
    static let framesPerRun = 5000

    /// A speech-like test voice per source: a harmonic tone with a syllable-rate envelope.
    static func voice(_ index: Int) -> [Int16] {
        var x: UInt32 = 12345 &+ UInt32(index) &* 7919
        return (0..<frame).map { n in
            x = x &* 1_664_525 &+ 1_013_904_223  // a little noise, so no two sources are alike
            let saw = (n * (110 + 23 * index)) % 480 - 240
            return Int16(truncatingIfNeeded: saw * 40 + Int(x >> 24) - 128)
        }
    }

    /// Median microseconds per frame of `body`, run `framesPerRun` times per run.
    static func measure(_ body: () -> Void) -> Double {
        var results: [Double] = []
        for _ in 0..<runs {
            let elapsed = ContinuousClock().measure { for _ in 0..<framesPerRun { body() } }
            let us = Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12
            results.append(us / Double(framesPerRun))
        }
        return results.sorted()[runs / 2]
    }

    static func main() throws {
        print("voices | VoiceMixer µs/frame | clamped sum µs/frame | of a 20 ms frame")
        var sink = 0
        for voices in [1, 2, 4, 8] {
            let sources = (0..<voices).map(voice)
            var channels = try (0..<voices).map { _ in try VoiceMixer.Channel(volume: 0.8) }
            var mixer = VoiceMixer(frameSamples: frame)
            var output = [Int16](repeating: 0, count: frame)
            var sum = [Int32](repeating: 0, count: frame)
            let mixed = measure {
                for s in 0..<voices { sources[s].withUnsafeBufferPointer { mixer.add($0, channel: &channels[s]) } }
                output.withUnsafeMutableBufferPointer { mixer.mix(into: $0) }
                sink &+= Int(output[17])
            }
            let clamped = measure {
                sum.withUnsafeMutableBufferPointer { acc in
                    for s in 0..<voices {
                        sources[s].withUnsafeBufferPointer { pcm in for i in 0..<frame { acc[i] += Int32(pcm[i]) } }
                    }
                    output.withUnsafeMutableBufferPointer { out in
                        for i in 0..<frame {
                            out[i] = Int16(Swift.min(Swift.max(acc[i], -32768), 32767))
                            acc[i] = 0
                        }
                    }
                }
                sink &+= Int(output[17])
            }
            let share = mixed / 20_000 * 100
            print("\(voices) | \(rounded(mixed)) | \(rounded(clamped)) | \(rounded(share, places: 3)) %")
        }
        if sink == 42 { print("") }  // keeps the work from being optimized away
    }

    static func rounded(_ x: Double, places: Int = 2) -> String {
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let r = Double(Int(x * scale + 0.5)) / scale
        return "\(r)"
    }
}
