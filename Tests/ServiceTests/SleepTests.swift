import Foundation
import GIO
import TestHarness
import XCTest

/// Suspend and resume through logind (python-dbusmock's logind template on a private system bus,
/// as the real logind would send them): peers are told before the computer sleeps, nothing is
/// dialled while it sleeps, and queued messages go out as soon as it wakes.
final class SleepTests: XCTestCase {
    private let started = StartedPeers()
    private var directory: TemporaryDirectory!
    private var systemBus: PrivateBus!
    private var logind: DBusMock!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("peervoice-sleep")
        systemBus = try PrivateBus(in: directory)
        let bus = systemBus!
        let client = try APIClient(address: bus.address)
        logind = try DBusMock(template: "logind", busName: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                              bus: bus, systemBus: true, client: client, in: directory, name: "logind")
    }

    override func tearDown() {
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
        logind?.stop()
        systemBus?.stop()
        directory?.remove()
    }

    private func inhibitors() -> [String] {
        let reply = try? logind.call("org.freedesktop.login1.Manager", "ListInhibitors", [])
        return reply?[0].children.map { "\($0[0].string!) \($0[1].string!) \($0[3].string!)" } ?? []
    }

    private func prepareForSleep(_ sleeping: Bool) throws {
        try logind.emit("org.freedesktop.login1.Manager", "PrepareForSleep", "b", [Variant(sleeping)])
    }

    func testPeersAreToldBeforeSleepAndQueuedMessagesLeaveOnWaking() throws {
        let a = try started.make("alice", environment: ["DBUS_SYSTEM_BUS_ADDRESS": systemBus.address])
        let b = try started.make("bob")
        let pairing = a.pair(with: b)
        XCTAssertNoThrow(try pairing.connect.get())
        XCTAssertTrue(eventually(timeout: 10) { self.inhibitors() == ["sleep PeerVoice delay"] }, "no delay inhibitor: \(inhibitors())\n\(a.log)")

        // Going to sleep: B hears of it at once (the silence limit would take 4 s), and the
        // inhibitor is let go so the computer can sleep.
        let mark = b.mark
        let asked = Date()
        try prepareForSleep(true)
        XCTAssertNotNil(b.waitForState("disconnected", of: a.id, after: mark, timeout: 3), a.log)
        let told = Date().timeIntervalSince(asked)
        print("SleepTests: PrepareForSleep -> the peer sees disconnected in \(String(format: "%.2f", told)) s")
        XCTAssertLessThan(told, 1.5)
        XCTAssertTrue(eventually(timeout: 3) { self.inhibitors().isEmpty }, "the inhibitor was kept: \(inhibitors())")

        // Asleep: a message waits, nothing is dialled.
        try a.client.call("Send", [Variant(b.id), Variant("good morning")])
        dispatchEvents(for: 1.5)
        XCTAssertTrue(b.client.signals("MessageReceived").isEmpty, "dialled while asleep")

        // Awake: the message goes out at once, and a new inhibitor is held.
        try prepareForSleep(false)
        XCTAssertNotNil(b.client.waitForSignal("MessageReceived", timeout: 10) { $0.string(2) == "good morning" }, a.log)
        XCTAssertEqual(b.client.signals("MessageReceived").count, 1)
        XCTAssertTrue(eventually(timeout: 5) { self.inhibitors() == ["sleep PeerVoice delay"] }, "\(inhibitors())")
    }
}
