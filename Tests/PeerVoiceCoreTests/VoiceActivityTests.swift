import Foundation
import PeerVoiceCore
import SeededRandom
import XCTest

final class VoiceActivityTests: XCTestCase {

    // MARK: SpeakingState: a transcript of (block's decision → flip) per 10 or 20 ms block

    /// Runs `blocks` (S = speech, - = not) of `ms` each and returns the flips as "+" and "x", one
    /// character per block ("." = no flip).
    private func flips(_ blocks: String, ms: Int, _ state: inout SpeakingState) -> String {
        String(blocks.map { c -> Character in
            switch state.update(isSpeech: c == "S", samples: ms * 48) {
            case true?: "+"
            case false?: "x"
            case nil: "."
            }
        })
    }

    func testSpeakingFlipsAfterTheAttackAndEndsAfterTheHangover() {
        let table: [(String, Int, String, String)] = [
            ("one 20 ms block of speech is not speaking", 20, "S----", "....."),
            ("two 20 ms blocks are", 20, "SS---", ".+..."),
            ("four 10 ms blocks are", 10, "SSSS-", "...+."),
            ("a click between silences never flips", 10, "-S-S-S-S-S", ".........."),
            ("hangover: 400 ms of 20 ms blocks after the last speech", 20,
             "SS" + String(repeating: "-", count: 20) + "-",
             ".+" + String(repeating: ".", count: 19) + "x."),
            ("pauses shorter than the hangover do not flicker", 20,
             "SS" + String(repeating: "-", count: 19) + "S" + String(repeating: "-", count: 20),
             ".+" + String(repeating: ".", count: 19) + "." + String(repeating: ".", count: 19) + "x"),
            ("after the end, the attack is needed again", 20,
             "SS" + String(repeating: "-", count: 20) + "SS",
             ".+" + String(repeating: ".", count: 19) + "x.+"),
        ]
        for (name, ms, blocks, expected) in table {
            var state = SpeakingState()
            XCTAssertEqual(flips(blocks, ms: ms, &state), expected, name)
        }
    }

    func testEndStopsSpeakingAtOnceAndOnlyFlipsOnce() {
        var state = SpeakingState()
        XCTAssertEqual(flips("SS", ms: 20, &state), ".+")
        XCTAssertEqual(state.end(), false, "muted speech is not speaking")
        XCTAssertFalse(state.isSpeaking)
        XCTAssertNil(state.end(), "not a flip the second time")
        XCTAssertEqual(flips("S-SS", ms: 20, &state), "...+", "the attack counts from the end")
    }

    func testCustomAttackAndHangover() {
        var state = SpeakingState(attackMs: 10, hangoverMs: 0)
        XCTAssertEqual(flips("S-S-", ms: 10, &state), "+x+x")
    }

    // MARK: EnergyVoiceActivityDetector

    /// 20 ms blocks: noise at `noiseDBFS` (RMS) plus, where `speech` says S, a 300 Hz tone at
    /// `speechDBFS` (RMS) with a vowel-like amplitude wobble.
    private func decisions(_ speech: String, noiseDBFS: Double, speechDBFS: Double) -> String {
        var detector = EnergyVoiceActivityDetector()
        var random = SplitMix64(seed: 17)
        let noiseAmplitude = 32768 * Decibels.amplitudeRatio(noiseDBFS) * 3.0.squareRoot()  // uniform: rms = a/√3
        let toneAmplitude = 32768 * Decibels.amplitudeRatio(speechDBFS) * 2.0.squareRoot()
        var n = 0
        return String(speech.map { c -> Character in
            let block = (0..<960).map { _ -> Int16 in
                defer { n += 1 }
                var x = noiseAmplitude * Double.random(in: -1...1, using: &random)
                if c == "S" { x += toneAmplitude * sin(2 * .pi * 300 * Double(n) / 48000) }
                return Int16(max(-32768, min(32767, x.rounded())))
            }
            return block.withUnsafeBufferPointer { detector.isSpeech($0) } ? "S" : "-"
        })
    }

    func testSpeechAboveTheNoiseIsDetected() {
        let pattern = "-----SSSSSSSSSS-----SSSSS-----"
        let table: [(String, Double, Double)] = [
            ("quiet room", -70, -30),
            ("noisy room, speech 15 dB over it", -45, -30),
            ("digital silence", -200, -25),
        ]
        for (name, noise, speech) in table {
            XCTAssertEqual(decisions(pattern, noiseDBFS: noise, speechDBFS: speech), pattern, name)
        }
    }

    func testSteadyNoiseIsNotSpeechForLong() {
        // Steady noise from the start is never speech.
        let steady = String(repeating: "-", count: 250)
        XCTAssertEqual(decisions(steady, noiseDBFS: -50, speechDBFS: 0), steady)

        // A fan switched on in a quiet room (−81 → −40.8 dBFS): speech at first, until the floor
        // has climbed to 9 dB under it at 3 dB/s, 31 dB in about 10.4 s (520 blocks of 20 ms).
        var detector = EnergyVoiceActivityDetector()
        let quiet = (0..<960).map { Int16($0 % 2 == 0 ? 3 : -3) }
        let fan = (0..<960).map { Int16($0 % 2 == 0 ? 300 : -300) }
        for _ in 0..<5 { _ = quiet.withUnsafeBufferPointer { detector.isSpeech($0) } }
        let fanDecisions = (0..<700).map { _ in fan.withUnsafeBufferPointer { detector.isSpeech($0) } }
        XCTAssertTrue(fanDecisions[0], "a sudden sound is speech at first")
        let lastSpeech = fanDecisions.lastIndex(of: true)!
        XCTAssertTrue((500...540).contains(lastSpeech), "last speech at block \(lastSpeech)")
        XCTAssertFalse(fanDecisions[(lastSpeech + 1)...].contains(true))
        XCTAssertEqual(detector.noiseFloorDBFS!, -40.77, accuracy: 0.01)
    }

    func testBlocksBelowTheMinimumAreNeverSpeech() {
        var detector = EnergyVoiceActivityDetector()
        let silence = [Int16](repeating: 0, count: 480)
        let faint = (0..<480).map { Int16($0 % 2 == 0 ? 30 : -30) }  // −61 dBFS: 39 dB over silence
        XCTAssertFalse(silence.withUnsafeBufferPointer { detector.isSpeech($0) })
        XCTAssertFalse(faint.withUnsafeBufferPointer { detector.isSpeech($0) })
    }
}

