import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// A bluetoothd that stops answering (python-dbusmock's bluez5 template, SIGSTOPped) must not
/// stop the service: every BlueZ call is asynchronous, so the bus API and IP peers carry on, and
/// the calls waiting for BlueZ answer with an error that says so.
final class BlueZHangTests: XCTestCase {
    private static let device = "AA:BB:CC:DD:EE:02"
    /// A loop blocked on a BlueZ call would take that call's 5 s timeout to answer.
    private static let answerWithinSeconds = 0.5

    private var systemDirectory: TemporaryDirectory?
    private var systemBus: PrivateBus?
    private var bluez: DBusMock?
    private var peers: [TestPeer] = []

    override func tearDown() {
        if (testRun?.totalFailureCount ?? 0) > 0 {
            for peer in peers { print("----- log of \(peer.name) -----\n\(peer.log.suffix(6_000))") }
        }
        bluez?.stop()
        peers.forEach { $0.shutdown() }
        systemBus?.stop()
        systemDirectory?.remove()
    }

    /// A private system bus with dbusmock's BlueZ on it: one powered adapter (hci0) and one paired
    /// device that offers nothing (ConnectProfile would answer at once, if BlueZ answered).
    private func startBlueZ() throws -> PrivateBus {
        let directory = try TemporaryDirectory("peervoice-arch-system-bus")
        systemDirectory = directory
        let bus = try PrivateBus(in: directory)
        systemBus = bus
        let client = try whenBusListens { try APIClient(address: bus.address) }
        let mock = try DBusMock(template: "bluez5", busName: "org.bluez", path: "/", bus: bus, systemBus: true,
                                client: client, in: directory, name: "bluez")
        bluez = mock
        try mock.call("org.bluez.Mock", "AddAdapter", [Variant("hci0"), Variant("arch-test")])
        try mock.call("org.bluez.Mock", "AddDevice", [Variant("hci0"), Variant(Self.device), Variant("frozen")])
        try mock.call("org.bluez.Mock", "PairDevice", [Variant("hci0"), Variant(Self.device), Variant(Int32(0))])
        return bus
    }

    func testAHungBlueZStopsNeitherTheBusAPINorIPPeers() throws {
        let system = try startBlueZ()
        let a = try TestPeer(name: "arch-hang-a", environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address])
        peers.append(a)
        let b = try TestPeer(name: "arch-hang-b")
        peers.append(b)
        XCTAssertTrue(eventually(timeout: 10) { (try? a.client.property("Adapter").string) == "hci0" }, a.log)
        let pairing = a.pair(with: b)
        _ = try pairing.connect.get()
        XCTAssertNotNil(b.waitForState("connected", of: a.id, timeout: 10), b.log)

        let bluez = try XCTUnwrap(bluez)
        bluez.freeze()
        let frozenAt = Date()
        let discovery = a.client.callAsync("StartDiscovery", timeout: 30)
        let connect = a.client.callAsync("Connect", [Variant(Self.device)], timeout: 30)

        // While both wait for BlueZ, the rest of the API answers at once, and messages go out over IP.
        var slowest = (seconds: 0.0, method: "")
        var sent: [String] = []
        func timed(_ method: String, _ arguments: [Variant] = []) throws -> Variant {
            let start = Date()
            let reply = try a.client.call(method, arguments, timeoutMs: 10_000)
            let seconds = Date().timeIntervalSince(start)
            if seconds > slowest.seconds { slowest = (seconds, method) }
            return reply
        }
        while !(discovery.isDone && connect.isDone) && Date().timeIntervalSince(frozenAt) < 20 {
            let listed = try timed("ListPeers")[0].children.map { $0[0].string ?? "" }
            XCTAssertTrue(listed.contains(b.id), "ListPeers: \(listed)")
            try timed("Mute", [Variant(sent.count % 2 == 0)])
            sent.append(try XCTUnwrap(try timed("Send", [Variant(b.id), Variant("still here \(sent.count)")])[0].string))
            dispatch(timeout: 0.2) { false }
        }
        XCTAssertLessThan(slowest.seconds, Self.answerWithinSeconds,
                          "\(slowest.method) took \(slowest.seconds) s while BlueZ did not answer")
        XCTAssertGreaterThanOrEqual(sent.count, 10, "too few rounds while the calls were pending")

        // The calls that waited for BlueZ end with errors that say what is wrong.
        guard case .failure(let discoveryError) = discovery.result else {
            return XCTFail("StartDiscovery did not fail against a hung BlueZ: \(String(describing: discovery.result))")
        }
        XCTAssertEqual(discoveryError.name, "org.example.PeerVoice.Error.NotAvailable")
        XCTAssertTrue(discoveryError.message.contains("BlueZ did not answer"), discoveryError.message)
        guard case .failure(let connectError) = connect.result else {
            return XCTFail("Connect did not fail against a hung BlueZ: \(String(describing: connect.result))")
        }
        XCTAssertEqual(connectError.name, "org.example.PeerVoice.Error.NotAvailable")
        XCTAssertTrue(connectError.message.contains("BlueZ stopped answering"), connectError.message)
        print("BlueZ frozen: slowest other call \(String(format: "%.3f", slowest.seconds)) s (\(slowest.method)), "
              + "\(sent.count) rounds; StartDiscovery and Connect failed within \(String(format: "%.1f", Date().timeIntervalSince(frozenAt))) s")

        // Every message sent meanwhile arrived.
        XCTAssertTrue(dispatch(timeout: 10) {
            Set(b.client.signals.filter { $0.member == "MessageReceived" }.map { $0.string(1) }).isSuperset(of: sent)
        }, "not every message sent while BlueZ hung arrived")

        // BlueZ answers again: so does Bluetooth.
        bluez.thaw()
        try a.client.call("StartDiscovery", timeoutMs: 10_000)
        XCTAssertEqual(try a.client.property("Discovering").bool, true)
        try a.client.call("StopDiscovery", timeoutMs: 10_000)
        XCTAssertEqual(try a.client.property("Discovering").bool, false)
        XCTAssertTrue(a.isRunning)
    }
}
