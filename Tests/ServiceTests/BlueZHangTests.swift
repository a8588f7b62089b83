import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// python-dbusmock's bluez5 template on a private system bus: one powered adapter (hci0) and one
/// paired device that offers nothing (ConnectProfile would answer at once, if BlueZ answered).
final class MockBlueZ {
    static let device = "AA:BB:CC:DD:EE:02"

    let bus: PrivateBus
    let mock: DBusMock
    private let directory: TemporaryDirectory

    /// What a peervoiced needs to find this BlueZ.
    var environment: [String: String] { ["DBUS_SYSTEM_BUS_ADDRESS": bus.address] }

    init() throws {
        directory = try TemporaryDirectory("peervoice-arch-system-bus")
        bus = try PrivateBus(in: directory)
        let bus = bus
        let client = try APIClient(address: bus.address)
        mock = try DBusMock(template: "bluez5", busName: "org.bluez", path: "/", bus: bus, systemBus: true,
                            client: client, in: directory, name: "bluez")
        try mock.call("org.bluez.Mock", "AddAdapter", [Variant("hci0"), Variant("arch-test")])
        try mock.call("org.bluez.Mock", "AddDevice", [Variant("hci0"), Variant(Self.device), Variant("frozen")])
        try mock.call("org.bluez.Mock", "PairDevice", [Variant("hci0"), Variant(Self.device), Variant(Int32(0))])
    }

    /// A property of the adapter, as BlueZ (the mock) has it now.
    func adapterProperty(_ name: String) throws -> Variant? {
        try mock.call("org.freedesktop.DBus.Properties", "Get", [Variant("org.bluez.Adapter1"), Variant(name)],
                      on: "/org/bluez/hci0")[0].unboxed
    }

    func stop() {
        mock.stop()
        bus.stop()
        directory.remove()
    }

    /// Freezes BlueZ, asks `client`'s daemon for StartDiscovery and a Bluetooth Connect, and calls
    /// `meanwhile` every 200 ms until both answered (at most 20 s); returns the two calls and how
    /// many seconds they took.
    func whileHung(_ client: APIClient, meanwhile: () throws -> Void) rethrows -> (discovery: PendingCall, connect: PendingCall, seconds: Double) {
        mock.freeze()
        let frozenAt = Date()
        let discovery = client.callAsync("StartDiscovery", timeout: 30)
        let connect = client.callAsync("Connect", [Variant(Self.device)], timeout: 30)
        while !(discovery.isDone && connect.isDone) && Date().timeIntervalSince(frozenAt) < 20 {
            try meanwhile()
            eventually(timeout: 0.2) { false }
        }
        return (discovery, connect, Date().timeIntervalSince(frozenAt))
    }

    /// Both calls ended with NotAvailable, saying BlueZ does not answer.
    static func assertFailedSayingBlueZHangs(_ discovery: PendingCall, _ connect: PendingCall,
                                             file: StaticString = #filePath, line: UInt = #line) {
        for (call, says) in [(discovery, "BlueZ did not answer"), (connect, "BlueZ stopped answering")] {
            guard case .failure(let error) = call.result else {
                return XCTFail("a call waiting for a hung BlueZ answered \(String(describing: call.result))", file: file, line: line)
            }
            XCTAssertEqual(error.name, "org.example.PeerVoice.Error.NotAvailable", file: file, line: line)
            XCTAssertTrue(error.message.contains(says), error.message, file: file, line: line)
        }
    }
}

/// A bluetoothd that stops answering (SIGSTOP) must not stop the service: every BlueZ call is
/// asynchronous, so the bus API and IP peers carry on, the calls waiting for BlueZ answer with an
/// error that says so, and Bluetooth works again once BlueZ answers.
final class BlueZHangTests: XCTestCase {
    /// A loop blocked on a BlueZ call would take that call's 5 s timeout to answer.
    static let answerWithinSeconds = 0.5

    private var bluez: MockBlueZ?
    private var peers: [TestPeer] = []

    override func tearDown() {
        if (testRun?.totalFailureCount ?? 0) > 0 {
            for peer in peers { print("----- log of \(peer.name) -----\n\(peer.log.suffix(6_000))") }
        }
        bluez?.stop()
        peers.forEach { $0.shutdown() }
    }

    func testAHungBlueZStopsNeitherTheBusAPINorIPPeers() throws {
        let bluez = try MockBlueZ()
        self.bluez = bluez
        let a = try TestPeer(name: "arch-hang-a", environment: bluez.environment)
        peers.append(a)
        let b = try TestPeer(name: "arch-hang-b")
        peers.append(b)
        XCTAssertTrue(eventually(timeout: 10) { (try? a.client.property("Adapter").string) == "hci0" }, a.log)
        _ = try a.pair(with: b).connect.get()
        XCTAssertNotNil(b.waitForState("connected", of: a.id, timeout: 10), b.log)

        // While both wait for BlueZ, the rest of the API answers at once, and messages go out over IP.
        var slowest = (seconds: 0.0, method: "")
        var sent: [String] = []
        func timed(_ method: String, _ arguments: [Variant] = []) throws -> Variant {
            let start = Date()
            let reply = try a.client.call(method, arguments, timeout: .seconds(10))
            let seconds = Date().timeIntervalSince(start)
            if seconds > slowest.seconds { slowest = (seconds, method) }
            return reply
        }
        let (discovery, connect, seconds) = try bluez.whileHung(a.client) {
            let listed = try timed("ListPeers")[0].children.map { $0[0].string ?? "" }
            XCTAssertTrue(listed.contains(b.id), "ListPeers: \(listed)")
            _ = try timed("Mute", [Variant(sent.count % 2 == 0)])
            sent.append(try XCTUnwrap(try timed("Send", [Variant(b.id), Variant("still here \(sent.count)")])[0].string))
        }
        print("BlueZ frozen: slowest other call \(String(format: "%.3f", slowest.seconds)) s (\(slowest.method)) "
              + "in \(sent.count) rounds; StartDiscovery and Connect answered within \(String(format: "%.1f", seconds)) s")
        XCTAssertLessThan(slowest.seconds, Self.answerWithinSeconds,
                          "\(slowest.method) took \(slowest.seconds) s while BlueZ did not answer")
        XCTAssertGreaterThanOrEqual(sent.count, 10, "too few rounds while the calls were pending")
        MockBlueZ.assertFailedSayingBlueZHangs(discovery, connect)

        // Every message sent meanwhile arrived.
        XCTAssertTrue(eventually(timeout: 10) {
            Set(b.client.signals.filter { $0.member == "MessageReceived" }.map { $0.string(1) }).isSuperset(of: sent)
        }, "not every message sent while BlueZ hung arrived")

        // BlueZ answers again: so does Bluetooth.
        bluez.mock.thaw()
        try a.client.call("StartDiscovery", timeout: .seconds(10))
        XCTAssertEqual(try a.client.property("Discovering").bool, true)
        XCTAssertEqual(try bluez.adapterProperty("Discoverable")?.bool, true)

        // StopDiscovery while BlueZ hangs: an error saying so, discovery off here at once, and the
        // adapter's settings back as they were once BlueZ answers.
        bluez.mock.freeze()
        let stopped = Date()
        let stop = a.client.callAsync("StopDiscovery", timeout: 30)
        XCTAssertTrue(eventually(timeout: 15) { stop.isDone })
        print("StopDiscovery against a hung BlueZ answered after \(String(format: "%.1f", Date().timeIntervalSince(stopped))) s")
        guard case .failure(let stopError) = stop.result else { return XCTFail("StopDiscovery: \(String(describing: stop.result))") }
        XCTAssertEqual(stopError.name, "org.example.PeerVoice.Error.NotAvailable")
        XCTAssertTrue(stopError.message.contains("did not answer StopDiscovery"), stopError.message)
        XCTAssertEqual(try a.client.property("Discovering").bool, false)
        bluez.mock.thaw()
        XCTAssertTrue(eventually(timeout: 10) { (try? bluez.adapterProperty("Discoverable")?.bool) == false })
        XCTAssertEqual(try bluez.adapterProperty("DiscoverableTimeout")?.uint32, 180)
        XCTAssertTrue(a.isRunning)
    }

    /// Disconnect while BlueZ pairs a device for a Connect (BlueZ slow to answer: frozen): the
    /// Connect fails at once, BlueZ is asked to cancel the pairing, and when its Pair does answer
    /// the dial goes no further (no ConnectProfile for a dial nobody waits for).
    func testDisconnectWhileBlueZPairsCancelsTheBluetoothDial() throws {
        let bluez = try MockBlueZ()
        self.bluez = bluez
        let device = "AA:BB:CC:DD:EE:03"
        let path = try XCTUnwrap(try bluez.mock.call("org.bluez.Mock", "AddDevice", [Variant("hci0"), Variant(device), Variant("unpaired")])[0].string)
        let a = try TestPeer(name: "arch-cancel", environment: bluez.environment)
        peers.append(a)
        XCTAssertTrue(eventually(timeout: 10) { (try? a.client.property("Adapter").string) == "hci0" }, a.log)

        bluez.mock.freeze()
        let connect = a.client.callAsync("Connect", [Variant(device)], timeout: 30)
        XCTAssertTrue(eventually(timeout: 5) { a.log.contains("pairing with \(device)") }, a.log)
        let disconnectedAt = Date()
        try a.client.call("Disconnect", [Variant(device)])
        XCTAssertTrue(eventually(timeout: 2) { connect.isDone }, "Connect still waits after Disconnect")
        print("Connect answered \(String(format: "%.3f", Date().timeIntervalSince(disconnectedAt))) s after Disconnect")
        guard case .failure(let error)? = connect.result else { return XCTFail("Connect: \(String(describing: connect.result))") }
        XCTAssertEqual(error.message, "Disconnect(\(device)) was called while connecting")

        bluez.mock.thaw()
        XCTAssertTrue(eventually(timeout: 10) { !bluez.mock.calls("CancelPairing", on: path).isEmpty }, "BlueZ was not asked to cancel the pairing")
        XCTAssertEqual(bluez.mock.calls("Pair", on: path).count, 1)
        dispatchEvents(for: 1)
        XCTAssertEqual(bluez.mock.calls("ConnectProfile", on: path).count, 0, "the cancelled dial went on after the pairing")
        XCTAssertTrue(a.isRunning)
    }
}

extension VoiceTests {
    /// Voice inside the link (as with Bluetooth peers) passes through the main loop: while BlueZ
    /// hangs and StartDiscovery and a Bluetooth Connect wait for it, voice keeps flowing both ways
    /// (few packets late, hardly an underrun) and the bus API answers at once.
    func testVoiceOnTheLinkCarriesOnWhileBlueZHangs() throws {
        let bluez = try MockBlueZ()
        defer { bluez.stop() }
        let (rig, _) = try makeRig(extraArguments: ["--voice-over-link"], extraEnvironment: bluez.environment)
        XCTAssertTrue(eventually(timeout: 10) { (try? rig.a.client.property("Adapter").string) == "hci0" }, rig.a.log)
        var slowest = 0.0
        // Speech both ways the whole time (DTX would send next to nothing in silence); bob says
        // it backwards, or his echo canceller may take his speech for alice's coming back.
        let bobSays = try backwardsSpeech(in: rig.directory)
        var injections: [Injection] = []
        defer { injections.forEach { $0.stop() } }
        let (discovery, connect, _) = try bluez.whileHung(rig.a.client) {
            injections.removeAll { !$0.process.isRunning }
            if injections.isEmpty { injections = [try rig.pwA.inject(Self.speech), try rig.pwB.inject(bobSays)] }
            let start = Date()
            try rig.a.client.call("ListPeers", timeout: .seconds(10))
            slowest = max(slowest, Date().timeIntervalSince(start))
        }
        MockBlueZ.assertFailedSayingBlueZHangs(discovery, connect)
        XCTAssertLessThan(slowest, BlueZHangTests.answerWithinSeconds, "ListPeers took \(slowest) s while BlueZ did not answer")
        let statistics = stopAndReadStatistics(rig)
        for (name, numbers) in statistics {
            let received = try XCTUnwrap(numbers["received"], "\(name): \(numbers)")
            XCTAssertGreaterThan(received, 200, "\(name) received too little voice while BlueZ hung: \(numbers)")
            XCTAssertLessThanOrEqual(numbers["late"] ?? .max, received / 20, "\(name): \(numbers)")
            XCTAssertLessThanOrEqual(numbers["speaker underruns"] ?? .max, 5, "\(name): \(numbers)")
        }
    }
}
