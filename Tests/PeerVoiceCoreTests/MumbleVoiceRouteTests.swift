import PeerVoiceCore
import XCTest

/// A room's voice path (tunnel or UDP) and the UDP ping it is decided by (PROTOCOL.md §14.7).
final class MumbleVoiceRouteTests: XCTestCase {
    private let second: Int64 = 1_000_000_000

    private func timestamp(of ping: [UInt8]) throws -> UInt64 {
        guard case .ping(let timestamp) = try MumbleUDPMessage(fromServer: ping[...]) else {
            XCTFail("not a ping: \(ping)")
            return 0
        }
        return timestamp
    }

    func testAPingIsTypeOneWithAMumbleVarintAndComesBackAsItWent() throws {
        XCTAssertEqual(MumbleUDPMessage.ping(timestamp: 300), [0x20, 0x81, 0x2C])
        XCTAssertEqual(try MumbleUDPMessage(fromServer: [0x20, 0x81, 0x2C]), .ping(timestamp: 300))
        XCTAssertThrowsError(try MumbleUDPMessage(fromServer: [0x20, 0x81]))
        XCTAssertThrowsError(try MumbleUDPMessage(fromServer: []))
        // Opus voice decodes as the tunnel's does; Speex (type 2) is passed over.
        let voice = MumbleVoicePacket(session: 3, sequence: 7, opus: [0xAA, 0xBB], isLast: false)
        XCTAssertEqual(try MumbleUDPMessage(fromServer: voice.fromServer[...]), .voice(voice))
        XCTAssertEqual(try MumbleUDPMessage(fromServer: [0x40, 0x03, 0x01]), .ignored)
    }

    func testVoiceTakesUDPAtTheFirstEchoFallsBackWhenEchoesStopAndReturnsAtTheNext() throws {
        var route = MumbleVoiceRoute(nowNs: 5 * second)
        XCTAssertEqual(route.path, .tcp)
        let first = try timestamp(of: route.nextPing(nowNs: 6 * second))
        XCTAssertFalse(route.check(nowNs: 7 * second), "no echo yet: nothing to fall back from")
        XCTAssertTrue(route.echoed(timestamp: first, nowNs: 6 * second + 4_000_000))
        XCTAssertEqual(route.path, .udp)
        XCTAssertEqual(route.roundTripNs, 4_000_000)

        // Pings go unanswered: still UDP after 3 s, the tunnel once more than 3.5 s passed.
        for t in 7...9 { _ = route.nextPing(nowNs: Int64(t) * second) }
        XCTAssertFalse(route.check(nowNs: 9 * second))
        XCTAssertEqual(route.path, .udp)
        XCTAssertTrue(route.check(nowNs: 10 * second))
        XCTAssertEqual(route.path, .tcp)
        XCTAssertFalse(route.check(nowNs: 11 * second), "falls back once")

        // The next echo brings voice back to UDP.
        let later = try timestamp(of: route.nextPing(nowNs: 12 * second))
        XCTAssertTrue(route.echoed(timestamp: later, nowNs: 12 * second + 1_000_000))
        XCTAssertEqual(route.path, .udp)
    }

    func testOnlyAnEchoOfARecentPingOfOursCounts() throws {
        var route = MumbleVoiceRoute(nowNs: 0)
        let sent = try timestamp(of: route.nextPing(nowNs: second))
        XCTAssertFalse(route.echoed(timestamp: sent + 1, nowNs: second), "a timestamp we never sent")
        XCTAssertFalse(route.echoed(timestamp: sent, nowNs: 12 * second), "an echo 11 s late says nothing about now")
        XCTAssertEqual(route.path, .tcp)
        // Timestamps grow even when the clock does not.
        let again = try timestamp(of: route.nextPing(nowNs: second))
        XCTAssertGreaterThan(again, sent)
    }
}
