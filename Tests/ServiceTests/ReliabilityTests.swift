import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// Faults that real links meet: a path that goes away for 10 s with messages in flight, a
/// client that leaves in the middle of a call, and a burst of Sends as fast as one client can.
final class ReliabilityTests: XCTestCase {
    private let started = StartedPeers()
    private var relays: [Relay] = []

    override func tearDown() {
        relays.forEach { $0.stop() }
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
        relays = []
    }

    private func makePeer(_ name: String) throws -> TestPeer {
        try started.make(name)
    }

    /// A dials B through a relay; the relay goes away for 10 s while A keeps sending, then comes
    /// back on the same port: every message arrives exactly once, in order.
    func testMessagesSentWhileThePathIsCutForTenSecondsArriveExactlyOnce() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        let relayPort = try freeTCPPort()
        var relay = try Relay(targetPort: b.port, listenPort: relayPort)
        relays.append(relay)
        let pairing = a.pair(with: b, via: relay.address)
        XCTAssertNoThrow(try pairing.connect.get())

        var sent: [String] = []
        func send(_ count: Int) throws {
            for index in 0..<count {
                sent.append(try XCTUnwrap(try a.client.call("Send", [Variant(relay.address), Variant("message \(sent.count) \(index)")])[0].string))
            }
        }
        try send(50)
        let markA = a.mark
        relay.stop()  // the path goes away with whatever was in flight
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markA, timeout: 6), "A did not notice the cut")
        let cutAt = Date()
        while Date().timeIntervalSince(cutAt) < 10 {
            try send(10)
            dispatchEvents(for: 0.5)
        }
        relay = try Relay(targetPort: b.port, listenPort: relayPort)
        relays.append(relay)
        let healedAt = Date()
        let everything = eventually(timeout: 30) {
            dispatchEvents(for: 0.1)
            return Set(b.client.signals("MessageReceived").map { $0.string(1) }).isSuperset(of: sent)
        }
        XCTAssertTrue(everything, "not every message arrived after the path came back")
        print("link cut 10 s: \(sent.count) messages, all delivered \(String(format: "%.1f", Date().timeIntervalSince(healedAt))) s after it healed")
        dispatchEvents(for: 0.5)
        let received = b.client.signals("MessageReceived").map { $0.string(1) }
        XCTAssertEqual(received, sent, "each message once, in order")
        XCTAssertTrue(eventually(timeout: 10) {
            dispatchEvents(for: 0.1)
            return Set(a.client.signals("MessageDelivered").map { $0.string(1) }).isSuperset(of: sent)
        })
        XCTAssertEqual(a.client.signals("MessageDelivered").count, sent.count, "MessageDelivered once per message")
        XCTAssertTrue(a.client.signals("MessageFailed").isEmpty)
    }

    /// A client calls Connect and leaves before the reply: the attempt goes on, the service keeps
    /// serving, and other clients see the peer connect.
    func testAClientThatLeavesDuringConnectLeavesNothingStuck() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        let leaving = try DBusConnection.connect(address: a.bus.address)
        leaving.callAsync(destination: APIClient.name, path: APIClient.path, interface: APIClient.interface,
                          method: "Connect", arguments: Variant(tuple: [Variant(b.address)]), timeout: .seconds(90)) { _ in }
        leaving.flush()
        XCTAssertNotNil(a.pairingRequest(for: b.id), "the Connect did not start")
        leaving.close()

        // The pairing the gone client started can still be confirmed, and completes.
        try a.client.call("ConfirmPairing", [Variant(b.id), Variant(true)])
        XCTAssertNotNil(b.pairingRequest(for: a.id))
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        XCTAssertNotNil(a.waitForState("connected", of: b.id, timeout: 10), a.log)
        XCTAssertTrue(a.isRunning)
        XCTAssertEqual(try a.client.call("ToggleMute")[0].bool, true, "the service still answers")
    }

    /// 10,000 Sends as fast as one client can make them (pipelined): none lost, duplicated or
    /// reordered, and the daemon's memory stays bounded.
    func testABurstOfTenThousandSendsLosesNothing() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        XCTAssertNoThrow(try a.pair(with: b).connect.get())
        let rssBefore = residentKiB(of: a.daemon.process.pid)
        let count = 10_000
        var ids = [String?](repeating: nil, count: count)
        var replies = 0
        var errors: [String] = []
        var next = 0
        func issue() {
            let index = next
            next += 1
            a.client.connection.callAsync(destination: APIClient.name, path: APIClient.path, interface: APIClient.interface,
                                          method: "Send", arguments: Variant(tuple: [Variant(b.id), Variant("burst \(index)")]),
                                          timeout: .seconds(30)) { result in
                replies += 1
                switch result {
                case .success(let reply): ids[index] = reply[0].string
                case .failure(let error): errors.append(error.description)
                }
                if next < count { issue() }
            }
        }
        for _ in 0..<64 { issue() }
        XCTAssertTrue(eventually(timeout: 60) { replies == count }, "\(replies) of \(count) Sends answered")
        XCTAssertEqual(errors, [])
        let sent = ids.compactMap { $0 }
        XCTAssertTrue(eventually(timeout: 60) {
            dispatchEvents(for: 0.1)
            return b.client.signals("MessageReceived").count >= count
        }, "\(b.client.signals("MessageReceived").count) of \(count) received")
        dispatchEvents(for: 0.5)
        XCTAssertEqual(b.client.signals("MessageReceived").map { $0.string(1) }, sent, "lost, duplicated or reordered")
        let rssAfter = residentKiB(of: a.daemon.process.pid)
        print("burst: \(count) Sends, RSS of the sender \(rssBefore) KiB before, \(rssAfter) KiB after")
        XCTAssertLessThan(rssAfter - rssBefore, 64 * 1024, "the sender's memory grew by more than 64 MiB")
    }
}
