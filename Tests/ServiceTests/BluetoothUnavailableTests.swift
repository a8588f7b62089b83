import Foundation
import GIO
import TestHarness
import XCTest

/// peervoiced whose system bus has no BlueZ (a private bus nobody serves org.bluez on), or no
/// system bus at all: Bluetooth calls answer NotAvailable saying BlueZ is not running, IP works.
final class BluetoothUnavailableTests: XCTestCase {
    private var buses: SessionAndSystemBus!
    private var daemon: Daemon!

    private static let notAvailable = "org.example.PeerVoice.Error.NotAvailable"

    override func setUpWithError() throws {
        buses = try SessionAndSystemBus()
    }

    override func tearDown() {
        daemon?.process.kill()
        buses?.stop()
    }

    private func startDaemon(systemBusAddress: String? = nil, arguments: [String] = []) throws {
        daemon = try Daemon(bus: buses.bus, in: buses.directory, arguments: arguments,
                            environment: ["DBUS_SYSTEM_BUS_ADDRESS": systemBusAddress ?? buses.systemBus.address])
        XCTAssertTrue(buses.client.waitForService(), "peervoiced did not own its name: \(daemon.process.log)")
    }

    /// Asserts that `method` fails with NotAvailable and a message saying BlueZ is not running.
    private func assertBlueZNotRunning(_ method: String, _ arguments: [Variant] = [],
                                       file: StaticString = #filePath, line: UInt = #line) {
        do {
            try buses.client.call(method, arguments)
            XCTFail("\(method) succeeded without BlueZ", file: file, line: line)
        } catch {
            XCTAssertEqual(error.name, Self.notAvailable, "\(method): \(error.message)", file: file, line: line)
            XCTAssertTrue(error.message.contains("BlueZ is not running"), "\(method): \(error.message)", file: file, line: line)
        }
    }

    func testBluetoothCallsSayBlueZIsNotRunning() throws {
        try startDaemon()
        assertBlueZNotRunning("StartDiscovery")
        assertBlueZNotRunning("StopDiscovery")
        assertBlueZNotRunning("Connect", [Variant("AA:BB:CC:DD:EE:FF")])
        assertBlueZNotRunning("Connect", [Variant("aa:bb:cc:dd:ee:01")])
        XCTAssertEqual(try buses.client.property("Adapter").string, "")
        XCTAssertEqual(try buses.client.property("Discovering").bool, false)
        XCTAssertEqual(try buses.client.property("DiscoveryMethods").strings, [])
        XCTAssertEqual(try buses.client.call("ListPeers")[0].count, 0)
        // An unknown Bluetooth peer is still unknown first; nothing is pending for it.
        XCTAssertEqual(buses.client.errorName("StartVoice", [Variant("AA:BB:CC:DD:EE:FF")]), "org.example.PeerVoice.Error.UnknownPeer")
        XCTAssertEqual(buses.client.errorName("ConfirmPairing", [Variant("AA:BB:CC:DD:EE:FF"), Variant(true)]),
                       "org.example.PeerVoice.Error.InvalidArgument")
        XCTAssertTrue(daemon.process.isRunning)
    }

    func testVoiceWithAKnownBluetoothPeerSaysBlueZIsNotRunning() throws {
        // A peer paired over Bluetooth in an earlier run: its key, and its address as its route.
        let state = buses.directory.path + "/daemon-state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let key = SecureLink.newIdentity()
        let id = SecureLink.peerID(of: key)
        let keyHex = key.publicKey.map { String(format: "%02x", $0) }.joined()
        try Data(#"{"format":4,"peers":[{"id":"\#(id)","key":"\#(keyHex)","name":"laptop","routes":[{"address":"AA:BB:CC:DD:EE:FF","lastSeenMs":1}],"stayDisconnected":false}]}"#.utf8)
            .write(to: URL(fileURLWithPath: state + "/peers.json"))
        try startDaemon()
        let peers = try buses.client.call("ListPeers")[0]
        XCTAssertEqual(peers.count, 1)
        XCTAssertEqual(peers[0][0].string, id)
        XCTAssertEqual(peers[0][2].string, "bluetooth")
        assertBlueZNotRunning("StartVoice", [Variant(id)])
        assertBlueZNotRunning("StartVoice", [Variant("AA:BB:CC:DD:EE:FF")])
        assertBlueZNotRunning("Connect", [Variant("AA:BB:CC:DD:EE:FF")])
    }

    /// Nothing owns org.freedesktop.Avahi either: StartDiscovery says why for both methods, and
    /// no default listener opens (nothing to be discoverable on).
    func testStartDiscoveryWithoutBlueZOrAvahiSaysWhyForBoth() throws {
        try startDaemon()
        do {
            try buses.client.call("StartDiscovery")
            XCTFail("StartDiscovery succeeded without BlueZ and Avahi")
        } catch {
            XCTAssertEqual(error.name, Self.notAvailable)
            XCTAssertTrue(error.message.contains("BlueZ is not running"), error.message)
            XCTAssertTrue(error.message.contains("Avahi is not running"), error.message)
        }
        XCTAssertEqual(try buses.client.property("ListenAddress").string, "")
        XCTAssertEqual(try buses.client.property("Discovering").bool, false)
        XCTAssertTrue(daemon.process.isRunning)
    }

    func testNoLANLeavesOnlyBluetoothInTheMessage() throws {
        try startDaemon(arguments: ["--no-lan"])
        XCTAssertEqual(try buses.client.property("DiscoveryMethods").strings, [])
        do {
            try buses.client.call("StartDiscovery")
            XCTFail("StartDiscovery succeeded without BlueZ")
        } catch {
            XCTAssertTrue(error.message.contains("LAN discovery is off (--no-lan)"), error.message)
        }
    }

    func testIPWorksWithoutBlueZ() throws {
        try startDaemon(arguments: ["--listen", "127.0.0.1:0"])
        XCTAssertEqual(buses.client.errorName("Send", [Variant("ip:127.0.0.1:9"), Variant("hello")]),
                       "org.example.PeerVoice.Error.UnknownPeer")
        XCTAssertNotEqual(try buses.client.property("ListenAddress").string, "")
    }

    func testNoSystemBusAtAll() throws {
        try startDaemon(systemBusAddress: "unix:path=" + buses.systemDirectory.path + "/nothing-here")
        assertBlueZNotRunning("StartDiscovery")
        assertBlueZNotRunning("Connect", [Variant("AA:BB:CC:DD:EE:FF")])
        XCTAssertEqual(try buses.client.property("Adapter").string, "")
        XCTAssertEqual(buses.client.errorName("Send", [Variant("ip:127.0.0.1:9"), Variant("hello")]),
                       "org.example.PeerVoice.Error.UnknownPeer")
    }

    func testHelpMentionsDefaultAgent() throws {
        let help = try ChildProcess(Binaries.peervoiced, ["--help"], logPath: buses.directory.path + "/help.log")
        XCTAssertEqual(help.wait(timeout: 5), 0)
        XCTAssertTrue(help.log.contains("--default-agent"), help.log)
    }
}
