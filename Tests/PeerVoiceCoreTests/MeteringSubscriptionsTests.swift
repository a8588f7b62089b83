import PeerVoiceCore
import XCTest

final class MeteringSubscriptionsTests: XCTestCase {
    private let ms: Int64 = 1_000_000

    private let peerA = PeerID("pv:" + String(repeating: "a", count: PeerID.base32Characters))!
    private let peerB = PeerID("pv:" + String(repeating: "b", count: PeerID.base32Characters))!

    private func levels(_ input: Double, _ peers: [PeerID: Double] = [:]) -> VoiceLevels {
        VoiceLevels(inputDBFS: input, peersDBFS: peers)
    }

    func testEachClientAtItsOwnIntervalOnlyWhenSomethingMoved() throws {
        var metering = MeteringSubscriptions()
        XCTAssertTrue(metering.isEmpty)
        XCTAssertNil(metering.nextDue, "nobody asked: no timer, nothing measured")
        try metering.start(client: ":1.7", intervalMs: 50, now: 0)
        try metering.start(client: ":1.9", intervalMs: 200, now: 0)
        XCTAssertFalse(metering.isEmpty)

        // (time ms, input dBFS, peer A dBFS, who gets Levels)
        let transcript: [(Int64, Double, Double, [String])] = [
            (0, -40, -100, [":1.7", ":1.9"]),  // first reading: everyone
            (50, -40.5, -100, []),             // moved by 0.5 dB: skipped
            (100, -38.9, -100, [":1.7"]),      // 1.1 dB since what :1.7 was sent
            (150, -38.9, -60, [":1.7"]),       // A started speaking
            (200, -38.9, -60, [":1.9"]),       // :1.9's turn; it was last sent −40/−100
            (250, -38.9, -60, []),
            (400, -20, -60, [":1.7", ":1.9"]), // both due (the timer came late for :1.7)
        ]
        for (time, input, levelA, expected) in transcript {
            XCTAssertEqual(metering.tick(now: time * ms, levels: levels(input, [peerA: levelA])), expected, "at \(time) ms")
        }
        XCTAssertEqual(metering.nextDue, 450 * ms, ":1.7 next, an interval after the late tick")
    }

    func testAPeerJoiningOrLeavingIsAChange() throws {
        var metering = MeteringSubscriptions()
        try metering.start(client: "c", intervalMs: 100, now: 0)
        XCTAssertEqual(metering.tick(now: 0, levels: levels(-50, [peerA: -30])), ["c"])
        XCTAssertEqual(metering.tick(now: 100 * ms, levels: levels(-50, [peerA: -30, peerB: -100])), ["c"], "B joined")
        XCTAssertEqual(metering.tick(now: 200 * ms, levels: levels(-50, [peerB: -100])), ["c"], "A left")
        XCTAssertEqual(metering.tick(now: 300 * ms, levels: levels(-50, [peerB: -100])), [])
        XCTAssertEqual(metering.tick(now: 350 * ms, levels: levels(0, [peerB: -100])), [], "not due yet")
    }

    func testSubscriptionsEndWithStopOrWhenTheClientLeaves() throws {
        var metering = MeteringSubscriptions()
        try metering.start(client: ":1.7", intervalMs: 50, now: 0)
        try metering.start(client: ":1.8", intervalMs: 50, now: 0)
        metering.clientLeft(":1.8")
        XCTAssertEqual(metering.tick(now: 0, levels: levels(-40)), [":1.7"], "the one that left gets nothing")
        XCTAssertTrue(metering.stop(client: ":1.7"))
        XCTAssertFalse(metering.stop(client: ":1.7"), "stopping twice is harmless")
        XCTAssertTrue(metering.isEmpty)
        XCTAssertEqual(metering.tick(now: 1000 * ms, levels: levels(0)), [])
    }

    func testStartingAgainChangesTheInterval() throws {
        var metering = MeteringSubscriptions()
        try metering.start(client: "c", intervalMs: 1000, now: 0)
        XCTAssertEqual(metering.tick(now: 0, levels: levels(-40)), ["c"])
        try metering.start(client: "c", intervalMs: 50, now: 10 * ms)
        XCTAssertEqual(metering.clients, ["c"], "still one subscription")
        XCTAssertEqual(metering.tick(now: 10 * ms, levels: levels(-40)), ["c"], "due at once, as a new start")
        XCTAssertEqual(metering.tick(now: 60 * ms, levels: levels(-30)), ["c"])
    }

    func testBadIntervalsAndTooManyClientsAreRefused() throws {
        var metering = MeteringSubscriptions()
        for bad: UInt32 in [0, 1, 49] {
            XCTAssertThrowsError(try metering.start(client: "c", intervalMs: bad, now: 0)) { error in
                guard case ServiceError.invalidArgument(let message) = error else { return XCTFail("\(error)") }
                XCTAssertTrue(message.contains("ask for 50 or more"), message)
            }
        }
        XCTAssertTrue(metering.isEmpty)
        for i in 0..<MeteringSubscriptions.maximumClients {
            try metering.start(client: ":1.\(i)", intervalMs: 50, now: 0)
        }
        XCTAssertThrowsError(try metering.start(client: ":1.99", intervalMs: 50, now: 0)) { error in
            guard case ServiceError.notAvailable(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("8 clients"), message)
        }
        XCTAssertNoThrow(try metering.start(client: ":1.0", intervalMs: 100, now: 0), "one already metering may change")
        metering.clientLeft(":1.3")
        XCTAssertNoThrow(try metering.start(client: ":1.99", intervalMs: 50, now: 0), "room again")
    }
}
