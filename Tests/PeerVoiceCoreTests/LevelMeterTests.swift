import Foundation
import PeerVoiceCore
import XCTest

final class LevelMeterTests: XCTestCase {
    func testDecibelConversionsMatchLibm() {
        for x in [1e-12, 1e-10, 0.001, 0.5, 1, 2, 10, 1000, 32768, 1e9] {
            XCTAssertEqual(Decibels.fromPower(x), 10 * log10(x), accuracy: 1e-9, "\(x)")
            XCTAssertEqual(Decibels.fromAmplitude(x), 20 * log10(x), accuracy: 1e-9, "\(x)")
        }
        for dB in [-200.0, -100, -60, -6.02, -3, 0, 0.5, 6, 40] {
            XCTAssertEqual(Decibels.powerRatio(dB), pow(10, dB / 10), accuracy: 1e-12 * pow(10, dB / 10), "\(dB)")
            XCTAssertEqual(Decibels.amplitudeRatio(dB), pow(10, dB / 20), accuracy: 1e-12 * pow(10, dB / 20), "\(dB)")
        }
    }

    private func dBFS(_ block: [Int16]) -> Double { block.withUnsafeBufferPointer { LevelMeter.dBFS(of: $0) } }

    func testLevelsOfKnownSignals() {
        let table: [(String, [Int16], Double)] = [
            ("digital silence", [Int16](repeating: 0, count: 960), -100),
            ("full-scale square", (0..<960).map { $0 % 2 == 0 ? -32768 : -32768 }, 0),
            ("half-scale square", (0..<960).map { $0 % 48 < 24 ? 16384 : -16384 }, -6.0206),
            ("full-scale sine", (0..<960).map { Int16((32767 * sin(2 * .pi * 1000 * Double($0) / 48000)).rounded()) }, -3.0106),
            ("one LSB of noise, −90 dBFS", (0..<960).map { $0 % 2 == 0 ? 1 : -1 }, -90.309),
            ("below −100 is silence", (0..<960).map { $0 == 0 ? 1 : 0 }, -100),
        ]
        for (name, block, expected) in table {
            XCTAssertEqual(dBFS(block), expected, accuracy: 0.001, name)
        }
    }

    func testTheMeterAveragesEverythingSinceItsRestart() {
        var meter = LevelMeter()
        XCTAssertEqual(meter.dBFS, LevelMeter.silenceDBFS, "nothing yet")
        let loud = [Int16](repeating: 16384, count: 480)
        let silent = [Int16](repeating: 0, count: 480)
        loud.withUnsafeBufferPointer { meter.add($0) }
        XCTAssertEqual(meter.dBFS, -6.0206, accuracy: 0.001)
        silent.withUnsafeBufferPointer { meter.add($0) }
        XCTAssertEqual(meter.dBFS, -6.0206 - 3.0103, accuracy: 0.001, "half the power")
        meter.restart()
        silent.withUnsafeBufferPointer { meter.add($0) }
        XCTAssertEqual(meter.dBFS, LevelMeter.silenceDBFS)
    }
}
