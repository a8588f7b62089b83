import Foundation
import GIO
import TestHarness
import XCTest

/// SetName and SetVisible with real peervoiced processes on private buses: what a person sets
/// is checked, kept across a restart, and what the other device sees.
final class SettingsTests: XCTestCase {
    private let started = StartedPeers()

    override func tearDown() {
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
    }

    func testANameIsCheckedKeptOverARestartAndSeenByThePeerOnItsNextLink() throws {
        let alpha = try started.make("alpha"), bravo = try started.make("bravo")
        XCTAssertEqual(try alpha.client.property("Name").string, "alpha", "the name it was started with")
        let pairing = alpha.pair(with: bravo)
        XCTAssertEqual(try pairing.connect.get()[0].string, bravo.id)
        XCTAssertNotNil(bravo.waitForState("connected", of: alpha.id))

        for bad in ["", "   ", "two\nlines", "tab\there", String(repeating: "x", count: 129)] {
            XCTAssertEqual(alpha.client.errorName("SetName", [Variant(bad)]), "org.example.PeerVoice.Error.InvalidArgument", bad)
        }
        XCTAssertEqual(try alpha.client.property("Name").string, "alpha", "a refused name changed nothing")

        let mark = alpha.mark
        try alpha.client.call("SetName", [Variant("  Alpha’s laptop ")])
        XCTAssertEqual(try alpha.client.property("Name").string, "Alpha’s laptop", "white space around it dropped")
        XCTAssertNotNil(alpha.client.waitForSignalIndex("PropertiesChanged", after: mark) { $0.arguments[1].lookup("Name")?.string == "Alpha’s laptop" },
                        "no PropertiesChanged for Name")

        // Restarted with the same --name: the name a person chose stays, and goes with the next link.
        let bravoMark = bravo.mark
        XCTAssertEqual(alpha.stop(), 0)
        try alpha.restart()
        XCTAssertEqual(try alpha.client.property("Name").string, "Alpha’s laptop")
        try alpha.client.call("Connect", [Variant(bravo.id)], timeout: .seconds(20))
        XCTAssertNotNil(bravo.waitForState("connected", of: alpha.id, after: bravoMark), bravo.log)
        XCTAssertTrue(eventually(timeout: 5) {
            let rows = (try? bravo.client.call("ListPeers")[0].children) ?? []
            return rows.contains { $0[0].string == alpha.id && $0[1].string == "Alpha’s laptop" }
        }, "bravo does not show alpha's new name")
        let object = try bravo.client.connection.call(destination: APIClient.name, path: "/org/example/PeerVoice",
                                                      interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
        let names = object[0].children.compactMap { $0[1].lookup("org.example.PeerVoice.Peer")?.lookup("Name")?.string }
        XCTAssertTrue(names.contains("Alpha’s laptop"), "the peer object's Name: \(names)")
    }

    /// While discovering, Bluetooth visibility applies at once (python-dbusmock's BlueZ): off makes
    /// the adapter undiscoverable, on discoverable again; with neither method left, discovery ends.
    func testVisibilityOverBluetoothAppliesWhileDiscovering() throws {
        let bluez = try MockBlueZ()
        defer { bluez.stop() }
        let alpha = try TestPeer(name: "settings-bt", environment: bluez.environment)
        defer { alpha.shutdown() }
        XCTAssertTrue(eventually(timeout: 10) { (try? alpha.client.property("DiscoveryMethods").strings)?.contains("bluetooth") == true })
        try alpha.client.call("StartDiscovery")
        XCTAssertEqual(try bluez.adapterProperty("Discoverable")?.bool, true)

        try alpha.client.call("SetVisible", [Variant("bluetooth"), Variant(false)])
        XCTAssertTrue(eventually(timeout: 10) { (try? bluez.adapterProperty("Discoverable")?.bool) == false }, alpha.log)
        XCTAssertEqual(try alpha.client.property("Discovering").bool, true, "the LAN is still wanted")
        try alpha.client.call("SetVisible", [Variant("bluetooth"), Variant(true)])
        XCTAssertTrue(eventually(timeout: 10) { (try? bluez.adapterProperty("Discoverable")?.bool) == true }, alpha.log)

        try alpha.client.call("SetVisible", [Variant("lan"), Variant(false)])
        try alpha.client.call("SetVisible", [Variant("bluetooth"), Variant(false)])
        XCTAssertTrue(eventually(timeout: 10) { (try? bluez.adapterProperty("Discoverable")?.bool) == false }, alpha.log)
        XCTAssertTrue(eventually(timeout: 5) { (try? alpha.client.property("Discovering").bool) == false },
                      "visible nowhere, yet discovering")
    }

    func testVisibilityChoosesWhereDiscoveryRunsAndIsKeptOverARestart() throws {
        let alpha = try started.make("alpha")
        XCTAssertEqual(try alpha.client.property("Visible").strings, ["bluetooth", "lan"], "visible everywhere by default")
        XCTAssertEqual(alpha.client.errorName("SetVisible", [Variant("wifi"), Variant(true)]), "org.example.PeerVoice.Error.InvalidArgument")

        try alpha.client.call("SetVisible", [Variant("lan"), Variant(false)])
        try alpha.client.call("SetVisible", [Variant("bluetooth"), Variant(false)])
        XCTAssertEqual(try alpha.client.property("Visible").strings, [])
        XCTAssertEqual(alpha.stop(), 0)
        try alpha.restart()
        XCTAssertEqual(try alpha.client.property("Visible").strings, [], "kept over a restart")
        do {
            try alpha.client.call("StartDiscovery")
            XCTFail("StartDiscovery ran while visible nowhere")
        } catch {
            XCTAssertEqual(error.name, "org.example.PeerVoice.Error.NotAvailable")
            XCTAssertTrue(error.message.contains("not visible on the LAN") && error.message.contains("not visible over Bluetooth"), error.message)
        }
        XCTAssertEqual(try alpha.client.property("Discovering").bool, false)
        try alpha.client.call("SetVisible", [Variant("lan"), Variant(true)])
        XCTAssertEqual(try alpha.client.property("Visible").strings, ["lan"])
    }
}
