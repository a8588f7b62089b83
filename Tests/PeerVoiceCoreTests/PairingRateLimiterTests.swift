import PeerVoiceCore
import XCTest

final class PairingRateLimiterTests: XCTestCase {
    func testEachHostGetsAFewPromptsPerWindow() {
        var limiter = PairingRateLimiter(perHost: 3, overall: 10, windowMs: 60_000)
        XCTAssertEqual((0..<5).map { limiter.allow(host: "10.0.0.9", nowMs: 1_000 + UInt64($0)) }, [true, true, true, false, false])
        XCTAssertTrue(limiter.allow(host: "10.0.0.10", nowMs: 2_000), "another host is not held back")
        XCTAssertFalse(limiter.allow(host: "10.0.0.9", nowMs: 60_999), "still inside the window")
        XCTAssertTrue(limiter.allow(host: "10.0.0.9", nowMs: 61_000), "the first prompt has left the window")
    }

    func testAllHostsTogetherAreLimited() {
        var limiter = PairingRateLimiter(perHost: 3, overall: 4, windowMs: 1_000)
        XCTAssertEqual((0..<6).map { limiter.allow(host: "host\($0)", nowMs: 0) }, [true, true, true, true, false, false])
        XCTAssertTrue(limiter.allow(host: "host9", nowMs: 1_000))
    }
}

extension PairingRateLimiterTests {
    func testAnAttemptThatEndedOnAPinnedKeyIsGivenBack() {
        var limiter = PairingRateLimiter(perHost: 2, overall: 10, windowMs: 60_000)
        XCTAssertTrue(limiter.allow(host: "h", nowMs: 0))
        XCTAssertTrue(limiter.allow(host: "h", nowMs: 1))
        XCTAssertTrue(limiter.isExhausted(host: "h", nowMs: 2))
        limiter.giveBack(host: "h")
        XCTAssertFalse(limiter.isExhausted(host: "h", nowMs: 2))
        XCTAssertTrue(limiter.allow(host: "h", nowMs: 3))
        limiter.giveBack(host: "other")  // nothing to give back: no effect
        XCTAssertFalse(limiter.allow(host: "h", nowMs: 4))
    }
}
