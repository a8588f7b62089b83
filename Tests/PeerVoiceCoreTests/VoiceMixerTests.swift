import Foundation
import PeerVoiceCore
import XCTest

final class VoiceMixerTests: XCTestCase {
    private let frame = 960

    /// `frames` frames of a sine at `dBFS` peak (0 = full scale).
    private func sine(hz: Double, dBFS: Double, frames: Int, phase: Double = 0) -> [Int16] {
        let amplitude = 32767 * Decibels.amplitudeRatio(dBFS)
        return (0..<(frames * frame)).map { n in
            Int16((amplitude * sin(2 * .pi * hz * Double(n) / 48000 + phase)).rounded())
        }
    }

    /// Mixes the sources frame by frame (each with its channel) and returns the whole output.
    private func mix(_ mixer: inout VoiceMixer, _ sources: [[Int16]], _ channels: inout [VoiceMixer.Channel]) -> [Int16] {
        let frames = sources.map(\.count).max()! / frame
        var output = [Int16](repeating: 0, count: frames * frame)
        for f in 0..<frames {
            for s in sources.indices {
                sources[s][(f * frame)..<((f + 1) * frame)].withUnsafeBufferPointer { mixer.add($0, channel: &channels[s]) }
            }
            output[(f * frame)..<((f + 1) * frame)].withUnsafeMutableBufferPointer { mixer.mix(into: $0) }
        }
        return output
    }

    private func mix(_ sources: [[Int16]], volumes: [Double]) throws -> [Int16] {
        var mixer = VoiceMixer(frameSamples: frame)
        var channels = try volumes.map { try VoiceMixer.Channel(volume: $0) }
        return mix(&mixer, sources, &channels)
    }

    func testAVoiceThatFitsPassesBitForBit() throws {
        // Below the knee (−3 dBFS peak), at volume 1, alone or with another quiet voice.
        for dBFS in [-60.0, -20, -6, -3.5] {
            let voice = sine(hz: 440, dBFS: dBFS, frames: 10)
            XCTAssertEqual(try mix([voice], volumes: [1]), voice, "\(dBFS) dBFS")
        }
        let a = sine(hz: 440, dBFS: -12, frames: 10)
        let b = sine(hz: 700, dBFS: -12, frames: 10)
        XCTAssertEqual(try mix([a, b], volumes: [1, 1]), zip(a, b).map { $0 + $1 })
    }

    func testNothingAddedIsSilence() {
        var mixer = VoiceMixer(frameSamples: frame)
        var output = [Int16](repeating: 7, count: frame)
        output.withUnsafeMutableBufferPointer { mixer.mix(into: $0) }
        XCTAssertEqual(output, [Int16](repeating: 0, count: frame))
    }

    func testVolumeZeroAndMuteRemoveAVoiceExactly() throws {
        let a = sine(hz: 440, dBFS: -10, frames: 10)
        let loud = sine(hz: 300, dBFS: 0, frames: 10)
        XCTAssertEqual(try mix([a, loud], volumes: [1, 0]), a)

        // Muting mid-call: one frame of ramp, then exactly the other voice; unmuting ramps back.
        var mixer = VoiceMixer(frameSamples: frame)
        var channels = [try VoiceMixer.Channel(), try VoiceMixer.Channel()]
        var output = mix(&mixer, [Array(a[0..<(2 * frame)]), Array(loud[0..<(2 * frame)])], &channels)
        channels[1].muted = true
        output = mix(&mixer, [Array(a[0..<(6 * frame)]), Array(loud[0..<(6 * frame)])], &channels)
        // After the frame of ramp, the limiter (which was holding the loud voice down) releases:
        // two frames later the envelope is under the knee and the quiet voice passes untouched.
        XCTAssertEqual(Array(output[(3 * frame)...]), Array(a[(3 * frame)..<(6 * frame)]))
        XCTAssertEqual(channels[1].volume, 1, "muting keeps the volume")
    }

    func testVolumeScalesAndRampsOverOneFrame() throws {
        let a = sine(hz: 440, dBFS: -20, frames: 4)
        let half = try mix([a], volumes: [0.5])
        XCTAssertEqual(half.map { Int($0) }, a.map { Int((Float($0) * 0.5 + ($0 < 0 ? -0.5 : 0.5)).rounded(.towardZero)) })

        var mixer = VoiceMixer(frameSamples: frame)
        var channels = [try VoiceMixer.Channel(volume: 1)]
        let dc = [Int16](repeating: 10000, count: 3 * frame)
        _ = mix(&mixer, [Array(dc[0..<frame])], &channels)
        try channels[0].setVolume(0.5)
        let ramp = mix(&mixer, [dc], &channels)
        // Frame 0 ramps down step by step, never jumping; then 0.5 exactly.
        let steps = zip(ramp[0..<frame], ramp[1..<frame]).map { abs(Int($0) - Int($1)) }
        XCTAssertLessThanOrEqual(steps.max()!, 6)
        XCTAssertEqual(ramp[frame - 1], 5000)
        XCTAssertEqual(Array(ramp[frame...]), [Int16](repeating: 5000, count: 2 * frame))
    }

    func testTwoLoudVoicesAtOnceNeverWrapAndStayClean() throws {
        // Two voices near full scale: their plain sum reaches about 1.8 × full scale.
        let a = sine(hz: 440, dBFS: -1, frames: 25)
        let b = sine(hz: 660, dBFS: -1, frames: 25, phase: 0.3)
        let sum = zip(a, b).map { Float($0) + Float($1) }
        XCTAssertGreaterThan(sum.map(abs).max()!, 1.6 * 32767)
        let wrapped = zip(a, b).map { $0 &+ $1 }
        XCTAssertTrue(zip(wrapped, sum).contains { Float($0).sign != $1.sign && abs($1) > 1000 },
                      "the plain Int16 sum flips signs: what the limiter prevents")

        let out = try mix([a, b], volumes: [1, 1])
        for (y, x) in zip(out, sum) {
            XCTAssertTrue(y == 0 || Float(y).sign == x.sign, "a sample flipped: \(x) → \(y)")
            XCTAssertLessThanOrEqual(abs(Float(y)), abs(x) + 0.5, "the limiter never amplifies")
        }
        XCTAssertGreaterThan(out.map { abs(Int($0)) }.max()!, 28000, "still loud")
        // Distortion: what remains of the output after removing its best fit to the sum, after
        // the first 20 ms: well below the output.
        let settled = (frame)..<out.count
        let xs = settled.map { Double(sum[$0]) }
        let ys = settled.map { Double(out[$0]) }
        let fit = zip(xs, ys).map { $0 * $1 }.reduce(0, +) / xs.map { $0 * $0 }.reduce(0, +)
        let residual = zip(xs, ys).map { ($1 - fit * $0) * ($1 - fit * $0) }.reduce(0, +)
        let signal = ys.map { $0 * $0 }.reduce(0, +)
        let distortionDB = Decibels.fromPower(residual / signal)
        print("VoiceMixer: two voices at −1 dBFS, gain \(fit), distortion \(distortionDB) dB")
        XCTAssertLessThan(distortionDB, -28)  // measured −31
    }

    func testEightVoicesAtVolumeTwoStayWithinFullScale() throws {
        let voices = (0..<8).map { sine(hz: 200 + 97 * Double($0), dBFS: 0, frames: 5) }
        let out = try mix(voices, volumes: Array(repeating: 2, count: 8))
        XCTAssertLessThan(out.map { abs(Int($0)) }.max()!, 32767)
    }

    func testTheGainRecoversSmoothlyAfterABurst() throws {
        // 100 ms of two loud voices, then one quiet voice alone: the gain on the quiet one rises
        // back without a jump and is exactly 1 once the envelope has fallen under the knee.
        let quiet = sine(hz: 500, dBFS: -20, frames: 20)
        var loud = sine(hz: 300, dBFS: 0, frames: 20)
        for i in (5 * frame)..<loud.count { loud[i] = 0 }
        let out = try mix([loud, quiet], volumes: [1, 1])
        let tail = (5 * frame)..<out.count
        // The gain on the quiet voice at its peaks (every 96 samples), in order.
        let peaks = tail.filter { abs(Int(quiet[$0])) > 3200 && $0 % 96 == 24 }
        let gains = peaks.map { Double(out[$0]) / Double(quiet[$0]) }
        XCTAssertLessThan(gains.first!, 0.95, "the burst pulled the gain down")
        for (g0, g1) in zip(gains, gains.dropFirst()) {
            XCTAssertGreaterThanOrEqual(g1, g0 - 0.001, "recovering, never falling again")
            XCTAssertLessThan(g1 - g0, 0.1, "no jump")
        }
        XCTAssertEqual(Array(out[(15 * frame)...]), Array(quiet[(15 * frame)...]), "unchanged 200 ms later")
    }

    func testBadVolumesAreRefused() {
        for bad in [-0.1, 2.01, .nan, .infinity] {
            XCTAssertThrowsError(try VoiceMixer.Channel(volume: bad)) { error in
                guard case ServiceError.invalidArgument(let message) = error else { return XCTFail("\(error)") }
                XCTAssertTrue(message.contains("0.0 (silent) to 2.0"), message)
            }
        }
        XCTAssertNoThrow(try VoiceMixer.Channel(volume: 0))
        XCTAssertNoThrow(try VoiceMixer.Channel(volume: 2))
    }

    func testCostOfEightVoicesPerFrame() throws {
        // A printout for bench/mixer/README.md, not an assertion: the test build is unoptimized.
        let voices = (0..<8).map { sine(hz: 200 + 97 * Double($0), dBFS: -6, frames: 1) }
        var channels = try (0..<8).map { _ in try VoiceMixer.Channel(volume: 0.8) }
        var mixer = VoiceMixer(frameSamples: frame)
        var output = [Int16](repeating: 0, count: frame)
        let frames = 500
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            for _ in 0..<frames {
                for s in 0..<8 { voices[s].withUnsafeBufferPointer { mixer.add($0, channel: &channels[s]) } }
                output.withUnsafeMutableBufferPointer { mixer.mix(into: $0) }
            }
        }
        let microseconds = Double(elapsed.components.attoseconds) / 1e12 + Double(elapsed.components.seconds) * 1e6
        print("VoiceMixer: 8 voices, 20 ms frame: \(microseconds / Double(frames)) µs per frame (this build)")
    }
}
