import PeerVoiceCore
import XCTest

/// The delay-based rate control of channel data over IP (docs/PROTOCOL.md §13.7), against a
/// simulated bottleneck: a link of fixed rate with a FIFO queue in front of it.
final class DelayBasedRateControlTests: XCTestCase {
    /// A bottleneck of `bytesPerMs` with a base one-way delay; the sender sends chunks whenever its
    /// window allows, and the receiver reports every chunk. Returns the queue's delay (ms) and the
    /// throughput (share of the rate) over the last half of `durationMs`.
    private func simulate(bytesPerMs: Int, baseDelayUs: UInt32 = 300, durationMs: Int,
                          parameters: DelayBasedRateControl.Parameters = .init(),
                          crossQueueUs: (Int) -> Int = { _ in 0 }) -> (queueMs: [Double], share: Double, control: DelayBasedRateControl) {
        var control = DelayBasedRateControl(parameters: parameters)
        var queueBytes = 0
        var delivered = 0
        var deliveredInLastHalf = 0
        var queueSamples: [Double] = []
        // Chunks on their way: (bytes, sent at µs).
        var inQueue: [(bytes: Int, remaining: Int, sentAtUs: UInt64)] = []
        let clockOffset: UInt32 = 0xFFFF_F000
        for ms in 0..<durationMs {
            for tick in 0..<10 {
                let nowUs = UInt64(ms * 1000 + tick * 100)
                let chunk = ChannelChunking.ipChunkBytes(windowBytes: control.windowBytes)
                while control.allows(chunk) {
                    control.sent(chunk)
                    inQueue.append((chunk, chunk, nowUs))
                    queueBytes += chunk
                }
                // The link drains bytesPerMs per millisecond.
                var budget = bytesPerMs / 10
                while budget > 0, let first = inQueue.first {
                    let take = min(budget, first.remaining)
                    budget -= take
                    queueBytes -= take
                    if ms >= durationMs / 2 { deliveredInLastHalf += take }
                    if take == first.remaining {
                        inQueue.removeFirst()
                        delivered += first.bytes
                        let oneWay = UInt32(nowUs - first.sentAtUs) + baseDelayUs + UInt32(crossQueueUs(ms))
                        // The receiver's clock minus the sender's: the one-way delay plus the clocks' unknown offset.
                        let sample = oneWay &+ clockOffset
                        control.feedback(receivedBytes: UInt64(delivered), delayUs: sample, nowUs: nowUs)
                    } else {
                        inQueue[0].remaining -= take
                    }
                }
            }
            if ms >= durationMs / 2 { queueSamples.append(Double(queueBytes) / Double(bytesPerMs)) }
        }
        let share = Double(deliveredInLastHalf) / Double(bytesPerMs * (durationMs - durationMs / 2))
        return (queueSamples, share, control)
    }

    private func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

    func testOnABottleneckTheQueueStaysNearTheTargetAndTheLinkStaysBusy() {
        // 20 Mbit/s, as a home Wi-Fi; 100 Mbit/s (a 2.5 ms target: 4.2 and 3.0 ms here); 2 Mbit/s,
        // where the smallest window, two 1 KiB chunks, is 8 ms of queue by itself.
        for (bytesPerMs, maxQueueMs) in [(2_500, 6.0), (12_500, 6.0), (250, 12.0)] {
            let result = simulate(bytesPerMs: bytesPerMs, durationMs: 20_000)
            let queue = median(result.queueMs)
            XCTAssertLessThanOrEqual(queue, maxQueueMs, "\(bytesPerMs) B/ms: median queue \(queue) ms")
            XCTAssertGreaterThanOrEqual(result.share, 0.9, "\(bytesPerMs) B/ms: \(result.share) of the link")
        }
    }

    func testTheWindowShrinksWhenSomethingElseFillsTheQueue() {
        // From 5 s on, other traffic keeps 40 ms of queue in front of ours: our window falls to its floor.
        let result = simulate(bytesPerMs: 2_500, durationMs: 10_000) { $0 >= 5_000 ? 40_000 : 0 }
        XCTAssertEqual(result.control.windowBytes, DelayBasedRateControl.Parameters().minWindowBytes)
        XCTAssertFalse(result.control.inSlowStart)
    }

    func testAFastPathOpensTheWindowQuickly() {
        // Loopback-like: 1 GB/s, no queue ever: slow start reaches the largest window.
        var control = DelayBasedRateControl()
        var received: UInt64 = 0
        for step in 0..<200 {
            let chunk = ChannelChunking.ipChunkBytes(windowBytes: control.windowBytes)
            var burst = 0
            while control.allows(chunk) {
                control.sent(chunk)
                burst += chunk
            }
            received += UInt64(burst)
            control.feedback(receivedBytes: received, delayUs: 1_000, nowUs: UInt64(step * 100))
        }
        XCTAssertEqual(control.windowBytes, DelayBasedRateControl.Parameters().maxWindowBytes)
        XCTAssertEqual(ChannelChunking.ipChunkBytes(windowBytes: control.windowBytes), ChannelWire.maxDataBytes)
    }

    func testFeedbackBeyondWhatWasSentAcknowledgesNoMore() {
        var control = DelayBasedRateControl()
        control.sent(1_000)
        control.feedback(receivedBytes: 1 << 40, delayUs: 5, nowUs: 1)
        XCTAssertEqual(control.acknowledgedBytes, 1_000)
        XCTAssertEqual(control.inFlightBytes, 0)
        XCTAssertLessThanOrEqual(control.windowBytes, DelayBasedRateControl.Parameters().initialWindowBytes)
    }
}
