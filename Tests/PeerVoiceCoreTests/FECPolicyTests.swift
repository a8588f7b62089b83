import PeerVoiceCore
import XCTest

final class FECPolicyTests: XCTestCase {
    func testNoFECUntilTheReportedLossIsWorthIt() {
        for reported in 0..<FECPolicy.minimumLossPercent {
            XCTAssertEqual(FECPolicy.encoderHint(reportedLossPercent: reported), 0, "\(reported) % reported")
        }
    }

    func testTheHintFollowsTheReportedLossUpToItsCap() {
        XCTAssertEqual(FECPolicy.encoderHint(reportedLossPercent: 3), 3)
        XCTAssertEqual(FECPolicy.encoderHint(reportedLossPercent: 5), 5)
        for reported in [6, 10, 20, 100] {
            XCTAssertEqual(FECPolicy.encoderHint(reportedLossPercent: reported), FECPolicy.maximumHintPercent, "\(reported) % reported")
        }
    }
}
