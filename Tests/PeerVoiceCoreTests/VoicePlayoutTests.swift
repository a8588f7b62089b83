import PeerVoiceCore
import XCTest

/// ``VoicePlayout`` with a decoder that writes recognizable samples and records its calls.
final class VoicePlayoutTests: XCTestCase {
    /// Decodes a packet to its first byte × 100, conceals with −1, −2, … (one value per call).
    struct ScriptedDecoder: VoiceDecoder {
        let frameSamples = 960
        var calls: [String] = []
        var concealments = 0

        mutating func decode(_ payload: UnsafeBufferPointer<UInt8>?, fec: Bool,
                             into pcm: UnsafeMutableBufferPointer<Int16>) throws(VoiceCodecError) -> Int {
            if let payload {
                calls.append(fec ? "fec" : "frame")
                let count = fec ? frameSamples : min(pcm.count, frameSamples)
                UnsafeMutableBufferPointer(rebasing: pcm[0..<count]).update(repeating: Int16(payload[0]) * 100)
                return count
            }
            concealments += 1
            let count = min(pcm.count, frameSamples)
            calls.append("conceal \(count)")
            UnsafeMutableBufferPointer(rebasing: pcm[0..<count]).update(repeating: Int16(-concealments))
            return count
        }

        mutating func reset() {}
    }

    func render(_ output: JitterBuffer.Output, _ playout: inout VoicePlayout, _ decoder: inout ScriptedDecoder) -> [Int16] {
        var pcm = [Int16](repeating: 0, count: voiceMaxPacketSamples)
        let count = pcm.withUnsafeMutableBufferPointer { try! playout.render(output, decoder: &decoder, into: $0) }
        return Array(pcm[0..<count])
    }

    func testConcealmentInStepsIsOneDecoderCallPerFrame() {
        var playout = VoicePlayout(frameSamples: 960)
        var decoder = ScriptedDecoder()
        var concealed: [Int16] = []
        for _ in 0..<12 { concealed += render(.conceal(samples: 120), &playout, &decoder) }
        XCTAssertEqual(decoder.calls, ["conceal 960", "conceal 960"], "a frame at a time, handed out in steps")
        XCTAssertEqual(concealed, [Int16](repeating: -1, count: 960) + [Int16](repeating: -2, count: 480))
        // A whole frame after part of one: continues the kept frame, then a new one.
        let next = render(.conceal(samples: 960), &playout, &decoder)
        XCTAssertEqual(next, [Int16](repeating: -2, count: 480) + [Int16](repeating: -3, count: 480))
    }

    func testAMergedPacketFadesInFromTheKeptConcealment() {
        var playout = VoicePlayout(frameSamples: 960)
        var decoder = ScriptedDecoder()
        _ = render(.conceal(samples: 240), &playout, &decoder)
        let frame = render(.frame([10]), &playout, &decoder)
        XCTAssertEqual(frame.count, 960)
        XCTAssertEqual(playout.crossFades, 1)
        // From the concealment's −1 up to the packet's 1000 over 2.5 ms, monotonically.
        let fade = Array(frame[0..<VoicePlayout.mergeFadeSamples])
        XCTAssertEqual(fade, fade.sorted())
        XCTAssertLessThan(fade[0], 20)
        XCTAssertGreaterThan(fade.last!, 980)
        XCTAssertEqual(Array(frame[VoicePlayout.mergeFadeSamples...]), [Int16](repeating: 1000, count: 960 - VoicePlayout.mergeFadeSamples))
        // Nothing kept afterwards: the next frame is decoded as it is.
        XCTAssertEqual(render(.frame([20]), &playout, &decoder), [Int16](repeating: 2000, count: 960))
        XCTAssertEqual(playout.crossFades, 1)
    }

    func testFECAndSilenceAreAsAsked() {
        var playout = VoicePlayout(frameSamples: 960)
        var decoder = ScriptedDecoder()
        XCTAssertEqual(render(.recoverWithFEC([3]), &playout, &decoder), [Int16](repeating: 300, count: 960))
        _ = render(.conceal(samples: 120), &playout, &decoder)
        XCTAssertEqual(render(.silence(samples: 120), &playout, &decoder), [Int16](repeating: 0, count: 120))
        // Silence forgot the kept concealment: no fade into the next packet.
        XCTAssertEqual(render(.frame([4]), &playout, &decoder), [Int16](repeating: 400, count: 960))
        XCTAssertEqual(decoder.calls, ["fec", "conceal 960", "frame"])
        XCTAssertEqual(playout.crossFades, 0)
    }
}
