import PeerVoiceCore
import XCTest

final class FECGroupPlanTests: XCTestCase {
    private typealias Encoder = FECGroupPlan<String>.Encoder

    func testGroupsFromOneRoundOfReports() {
        let table: [(String, [String: Int], [Encoder])] = [
            ("nobody in the call", [:], []),
            ("one clean receiver", ["B": 0], [Encoder(packetLossPercent: 0, receivers: ["B"])]),
            ("all clean, 2 % is still clean", ["B": 0, "C": 2, "D": 1],
             [Encoder(packetLossPercent: 0, receivers: ["B", "C", "D"])]),
            ("all lossy: one encoder with the worst hint", ["B": 3, "C": 4],
             [Encoder(packetLossPercent: 4, receivers: ["B", "C"])]),
            ("hints stop at 5 %", ["B": 30], [Encoder(packetLossPercent: 5, receivers: ["B"])]),
            ("mixed: a clean and a lossy encoder", ["B": 0, "C": 8, "D": 1, "E": 3],
             [Encoder(packetLossPercent: 0, receivers: ["B", "D"]), Encoder(packetLossPercent: 5, receivers: ["C", "E"])]),
        ]
        for (name, reports, expected) in table {
            var plan = FECGroupPlan<String>()
            plan.update(reportedLossPercent: reports)
            XCTAssertEqual(plan.encoders, expected, name)
        }
    }

    func testAReceiverNearTheThresholdDoesNotSwitchAtEveryReport() {
        var plan = FECGroupPlan<String>()
        // (C's report, C's encoder hint, whether the plan changed)
        let transcript: [(Int, Int, Bool)] = [
            (0, 0, true),  // first plan
            (3, 3, true),  // joins the lossy group
            (2, 3, false), // stays: 2 % is not below leaveLossPercent
            (3, 3, false),
            (5, 5, true),  // the lossy encoder's hint follows
            (1, 0, true),  // leaves
            (2, 0, false), // 2 % does not bring it back
        ]
        for (step, (report, hint, changed)) in transcript.enumerated() {
            XCTAssertEqual(plan.update(reportedLossPercent: ["B": 0, "C": report]), changed, "step \(step)")
            let cEncoder = plan.encoders.first { $0.receivers.contains("C") }!
            XCTAssertEqual(cEncoder.packetLossPercent, hint, "step \(step): C reports \(report) %")
            XCTAssertEqual(plan.encoders.first { $0.receivers.contains("B") }!.packetLossPercent, 0, "B stays clean")
        }
    }

    func testReceiversThatLeaveAreForgotten() {
        var plan = FECGroupPlan<String>()
        plan.update(reportedLossPercent: ["B": 0, "C": 4])
        XCTAssertEqual(plan.encoders.count, 2)
        XCTAssertTrue(plan.update(reportedLossPercent: ["B": 0]))
        XCTAssertEqual(plan.encoders, [Encoder(packetLossPercent: 0, receivers: ["B"])], "one encoder again")
        plan.update(reportedLossPercent: ["B": 0, "C": 2])
        XCTAssertEqual(plan.encoders, [Encoder(packetLossPercent: 0, receivers: ["B", "C"])], "C came back clean: no memory of it")
    }
}
