import PeerVoiceCore
import XCTest

/// ``RefillSchedule`` on its own, and with a ``JitterBuffer`` fed as the daemon feeds it: a device
/// drawing 256 samples a cycle, a sender whose capture runs in the same cycles (one machine's
/// PipeWire graph), its packets coming 0.4 ms after the draw that completed their frame.
final class RefillScheduleTests: XCTestCase {

    static let quantum: Int64 = 256
    static func ns(samples: Int64) -> Int64 { samples * 1_000_000_000 / 48_000 }

    func testARefillWaitsForAMissingPacketUntilTheMarginBeforeTheNextDraw() {
        let schedule = RefillSchedule(marginNs: 2_000_000)
        XCTAssertEqual(schedule.decide(clock: 1_000_000, nextDrawNs: 6_000_000, awaitingPacket: true), .wait(until: 4_000_000))
        // The jitter buffers are told the deadline, whether the refill waited or not.
        XCTAssertEqual(schedule.decide(clock: 1_000_000, nextDrawNs: 6_000_000, awaitingPacket: false), .refill(now: 4_000_000))
        // Past the deadline (woken late, or the draw is overdue): at once, at the clock.
        XCTAssertEqual(schedule.decide(clock: 4_500_000, nextDrawNs: 6_000_000, awaitingPacket: true), .refill(now: 4_500_000))
        // Before the device's first draw nothing is known: at once.
        XCTAssertEqual(schedule.decide(clock: 1_000_000, nextDrawNs: 0, awaitingPacket: true), .refill(now: 1_000_000))
    }

    func testTheBufferAwaitsOnlyAFrameDueThatWasSent() {
        var jb = JitterBuffer(configuration: .init(frameSamples: 480))
        XCTAssertFalse(jb.isAwaitingFrameDue, "not playing")
        let frameNs = Self.ns(samples: 480)
        jb.insert(seq: 1, timestamp: 0, payload: [1, 2, 3], arrival: 0)
        XCTAssertFalse(jb.isAwaitingFrameDue, "not playing yet")
        guard case .frame = jb.next(now: 0) else { return XCTFail("the first frame plays") }
        XCTAssertTrue(jb.isAwaitingFrameDue, "frame 1 has not come")
        // The next packet is seq 2 but two frames on: the sender skipped frame 1 (DTX).
        jb.insert(seq: 2, timestamp: 960, payload: [4, 5, 6], arrival: frameNs)
        XCTAssertFalse(jb.isAwaitingFrameDue, "nothing was sent for frame 1")
    }

    /// Mouth-to-ear of every frame in the second half of a 4 s call (ms), and the concealments
    /// after its first 100 frames, with the refill scheduled by `schedule`.
    static func call(_ schedule: RefillSchedule) -> (latenciesMs: [Double], concealed: Int, underruns: Int) {
        let frame: Int64 = 480
        let fill: Int64 = 256
        let frames = 400
        // Frame n leaves when the capture quantum that completes it is delivered, at that draw.
        let arrivals = (0..<frames).map { n in ns(samples: (Int64(n + 1) * frame + quantum - 1) / quantum * quantum) + 400_000 }
        var jb = JitterBuffer(configuration: .init(frameSamples: Int(frame)))
        var nextPacket = 0
        func insert(until clock: Int64) {
            while nextPacket < frames && arrivals[nextPacket] <= clock {
                jb.insert(seq: UInt64(nextPacket + 1), timestamp: UInt32(Int64(nextPacket) * frame), payload: [UInt8(nextPacket & 0xFF), UInt8(nextPacket >> 8), 0],
                          arrival: arrivals[nextPacket])
                nextPacket += 1
            }
        }
        var written: Int64 = 0  // samples the refills put in the ring
        var read: Int64 = 0  // samples the device drew from it
        var frameStarts: [Int: Int64] = [:]  // frame → its first sample's place in the played stream
        var concealed = 0
        var underruns = 0
        var latencies: [Double] = []
        var draw: Int64 = 0
        var playing = false
        while draw < 4 * 48_000 / quantum {
            let drawNs = ns(samples: draw * quantum)
            // The device draws a quantum; each frame's first sample drawn now plays at its place in it.
            let count = min(quantum, written - read)
            if count < quantum && playing { underruns += 1 }
            for (n, start) in frameStarts where start >= read && start < read + count && n >= frames / 2 {
                let playsAt = drawNs + ns(samples: start - read)
                latencies.append(Double(playsAt - ns(samples: Int64(n) * frame)) / 1e6)
            }
            read += quantum
            written = max(written, read)  // what it lacked was played as zeros
            // The voice thread wakes 0.05 ms after the draw and refills as CallAudio does.
            var clock = drawNs + 50_000
            while written - read < fill {
                insert(until: clock)
                let awaiting = jb.isAwaitingFrameDue
                switch schedule.decide(clock: clock, nextDrawNs: drawNs + ns(samples: quantum), awaitingPacket: awaiting) {
                case .wait(let until):
                    clock = nextPacket < frames ? min(until, arrivals[nextPacket]) : until
                    continue
                case .refill(let now):
                    let output = jb.next(now: now)
                    switch output {
                    case .frame(let payload):
                        playing = true
                        frameStarts[Int(payload[0]) | Int(payload[1]) << 8] = written
                    case .conceal: if jb.statistics.played > 100 { concealed += 1 }
                    default: break
                    }
                    written += Int64(output.samples(frameSamples: Int(frame)))
                }
            }
            draw += 1
        }
        return (latencies, concealed, underruns)
    }

    func testWaitingForPacketsThatComeJustAfterTheDrawPlaysThemSooner() {
        let waiting = Self.call(RefillSchedule())
        // A margin of a whole quantum puts the deadline at the draw: every refill decides at once.
        let atOnce = Self.call(RefillSchedule(marginNs: Self.ns(samples: Self.quantum)))
        let median = { (x: [Double]) in x.sorted()[x.count / 2] }
        print("refill: waiting \(median(waiting.latenciesMs)) ms, at once \(median(atOnce.latenciesMs)) ms")
        for result in [waiting, atOnce] {
            XCTAssertGreaterThan(result.latenciesMs.count, 190, "the second half's frames played")
            XCTAssertEqual(result.concealed, 0, "nothing concealed once the call runs")
            XCTAssertEqual(result.underruns, 0)
            XCTAssertLessThan(result.latenciesMs.max()! - result.latenciesMs.min()!, 0.01, "a steady delay")
        }
        // The floor here: a frame, the capture quantum's ripple (up to 224 samples at 10 ms frames)
        // and the draw that plays it: 20 ms, which the playout reaches to within its 2.5 ms steps.
        // Deciding at the draw, each frame waits for the next draw instead (here 2.5 ms more; up
        // to a quantum, 5.3 ms, with the steps' luck).
        XCTAssertLessThanOrEqual(median(waiting.latenciesMs), 20 + 2.5 + 0.5)
        XCTAssertGreaterThanOrEqual(median(atOnce.latenciesMs) - median(waiting.latenciesMs), 2.0)
    }
}
