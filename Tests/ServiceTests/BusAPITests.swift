import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// The bus API of one real peervoiced on a private dbus-daemon.
final class BusAPITests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var bus: PrivateBus!
    private var daemon: Daemon!
    private var client: APIClient!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        bus = try PrivateBus(in: directory)
        daemon = try Daemon(bus: bus, in: directory)
        client = try APIClient(address: bus.address)
        XCTAssertTrue(client.waitForService(), "peervoiced did not own its name: \(daemon.process.log)")
    }

    override func tearDown() {
        daemon?.process.kill()
        bus?.stop()
        directory?.remove()
    }

    // MARK: Introspection

    func testIntrospectionMatchesTheInterfaceXML() throws {
        let introspected = try client.connection.call(
            destination: APIClient.name, path: APIClient.path, interface: "org.freedesktop.DBus.Introspectable",
            method: "Introspect")[0].string!
        let xmlPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../dbus/org.example.PeerVoice.xml").path
        let documented = try String(contentsOfFile: xmlPath, encoding: .utf8)

        let live = try interfaceMembers(ofXML: introspected, interface: APIClient.interface)
        XCTAssertEqual(live, try interfaceMembers(ofXML: documented, interface: APIClient.interface))
        XCTAssertTrue(live.contains("method Send(in s peer, in s text, out s message_id)"))
        XCTAssertTrue(live.contains("property Muted b read"))
        XCTAssertTrue(live.contains("signal PairingPrompt(s peer, s name, s passkey, s kind)"))
        XCTAssertTrue(live.contains("signal PairingSettled(s peer, b accepted)"))
        XCTAssertTrue(live.contains("method SetName(in s name)"))
        XCTAssertTrue(live.contains("method SetVisible(in s method, in b visible)"))
        XCTAssertTrue(live.contains("method SetVolume(in s peer, in d volume)"))
        XCTAssertTrue(live.contains("method OpenStream(in s peer, in s channel, in a{sv} options, out h socket)"))
        XCTAssertTrue(live.contains("method RegisterChannel(in s name, in o handler, in a{sv} options)"))
        XCTAssertTrue(live.contains("signal StreamClosed(s peer, s channel, s reason)"))
        XCTAssertTrue(live.contains("method JoinRoom(in s url, in a{sv} options, out o room)"))
        XCTAssertTrue(live.contains("method SendFiles(in s peer, in as paths, in a{sv} options, out o transfer)"))
        XCTAssertEqual(live.filter { $0.hasPrefix("method ") }.count, 25)
        XCTAssertEqual(live.filter { $0.hasPrefix("signal ") }.count, 14)
        XCTAssertTrue(live.contains("property Participants a(ssb) read"))
        XCTAssertEqual(live.filter { $0.hasPrefix("property ") }.count, 13)
    }

    func testTheServiceObjectIsAlsoTheObjectManagerOfPeerObjects() throws {
        let managed = try client.connection.call(destination: APIClient.name, path: APIClient.path,
                                                 interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
        XCTAssertEqual(managed.description, "(@a{oa{sa{sv}}} {},)", "a fresh peervoiced knows no peers")
        let introspected = try client.connection.call(
            destination: APIClient.name, path: APIClient.path, interface: "org.freedesktop.DBus.Introspectable",
            method: "Introspect")[0].string!
        XCTAssertTrue(try interfaceMembers(ofXML: introspected, interface: "org.freedesktop.DBus.ObjectManager")
            .contains("method GetManagedObjects(out a{oa{sa{sv}}} objects)"))
        // The second interface on the path leaves the first one working.
        XCTAssertEqual(try client.property("Version").string?.isEmpty, false)
        XCTAssertEqual(try client.call("ListPeers").typeString, "(a(ssss))")
    }

    // MARK: Arguments

    private static let malformedPeerIDs = [
        "", "nonsense", "AA:BB:CC:DD:EE", "AA:BB:CC:DD:EE:GG", "AA-BB-CC-DD-EE-FF", "ip:", "ip:1.2.3.4",
        "ip:1.2.3.4:", "ip:999.1.1.1:80", "ip:1.2.3:80", "ip:1.2.3.4:0", "ip:1.2.3.4:70000", "ip:1.2.3.4:http",
        "ip:[zz]:80", "ip:[::1]", "ip:::1:80", "ip:example.org:80",
    ]

    func testMalformedPeerIDsAreInvalidArgumentForEveryMethod() {
        let invalid = "org.example.PeerVoice.Error.InvalidArgument"
        for id in Self.malformedPeerIDs {
            let peer = Variant(id)
            XCTAssertEqual(client.errorName("Connect", [peer]), invalid, "Connect(\(id))")
            XCTAssertEqual(client.errorName("Disconnect", [peer]), invalid, "Disconnect(\(id))")
            XCTAssertEqual(client.errorName("RemovePeer", [peer]), invalid, "RemovePeer(\(id))")
            XCTAssertEqual(client.errorName("History", [peer, Variant(UInt32(10))]), invalid, "History(\(id))")
            XCTAssertEqual(client.errorName("ConfirmPairing", [peer, Variant(true)]), invalid, "ConfirmPairing(\(id))")
            XCTAssertEqual(client.errorName("StartVoice", [peer]), invalid, "StartVoice(\(id))")
            XCTAssertEqual(client.errorName("StopVoice", [peer]), invalid, "StopVoice(\(id))")
            XCTAssertEqual(client.errorName("SetVolume", [peer, Variant(1.0)]), invalid, "SetVolume(\(id))")
            XCTAssertEqual(client.errorName("SetPeerMuted", [peer, Variant(true)]), invalid, "SetPeerMuted(\(id))")
            if !id.isEmpty {
                XCTAssertEqual(client.errorName("Send", [peer, Variant("hello")]), invalid, "Send(\(id))")
            }
        }
    }

    func testErrorMessagesSayWhatToDo() {
        do {
            try client.call("Disconnect", [Variant("ip:1.2.3.4")])
            XCTFail("Disconnect of a malformed id succeeded")
        } catch {
            XCTAssertTrue(error.message.contains("ip:HOST:PORT") || error.message.contains("port"), error.message)
        }
        do {
            try client.call("History", [Variant("AA:BB:CC:DD:EE:FF"), Variant(UInt32(5))])
            XCTFail("History of an unknown peer succeeded")
        } catch {
            XCTAssertEqual(error.name, "org.example.PeerVoice.Error.UnknownPeer")
            XCTAssertTrue(error.message.contains("AA:BB:CC:DD:EE:FF"), error.message)
        }
    }

    func testUnknownPeersAreUnknownPeer() {
        let unknown = "org.example.PeerVoice.Error.UnknownPeer"
        for id in ["AA:BB:CC:DD:EE:FF", "aa:bb:cc:dd:ee:01", "ip:127.0.0.1:9", "ip:[::1]:47800"] {
            let peer = Variant(id)
            XCTAssertEqual(client.errorName("Disconnect", [peer]), unknown, id)
            XCTAssertEqual(client.errorName("RemovePeer", [peer]), unknown, id)
            XCTAssertEqual(client.errorName("Send", [peer, Variant("hello")]), unknown, id)
            XCTAssertEqual(client.errorName("History", [peer, Variant(UInt32(10))]), unknown, id)
            XCTAssertEqual(client.errorName("StartVoice", [peer]), unknown, id)
            XCTAssertEqual(client.errorName("StopVoice", [peer]), unknown, id)
            XCTAssertEqual(client.errorName("SetVolume", [peer, Variant(0.5)]), unknown, id)
            XCTAssertEqual(client.errorName("SetPeerMuted", [peer, Variant(true)]), unknown, id)
            // A bad volume is refused before the peer is looked at.
            for volume in [-0.1, 2.01, Double.nan, Double.infinity] {
                XCTAssertEqual(client.errorName("SetVolume", [peer, Variant(volume)]), "org.example.PeerVoice.Error.InvalidArgument", "\(id) \(volume)")
            }
            // Nothing is pending for a peer never seen.
            XCTAssertEqual(client.errorName("ConfirmPairing", [peer, Variant(false)]),
                           "org.example.PeerVoice.Error.InvalidArgument", id)
        }
    }

    func testTextIsCheckedBeforeThePeer() {
        let tooLarge = String(repeating: "a", count: 65_537)
        for peer in ["", "AA:BB:CC:DD:EE:FF", "ip:127.0.0.1:9"] {
            XCTAssertEqual(client.errorName("Send", [Variant(peer), Variant(tooLarge)]),
                           "org.example.PeerVoice.Error.TooLarge", "65537 bytes to '\(peer)'")
            XCTAssertEqual(client.errorName("Send", [Variant(peer), Variant("")]),
                           "org.example.PeerVoice.Error.InvalidArgument", "empty text to '\(peer)'")
        }
        // 65536 bytes of multi-byte text is within the limit: the answer is about the peer, not the text.
        let atLimit = String(repeating: "€", count: 65_536 / 3) + "a"
        XCTAssertEqual(atLimit.utf8.count, 65_536 - 65_536 % 3 + 1)
        XCTAssertEqual(client.errorName("Send", [Variant("AA:BB:CC:DD:EE:FF"), Variant(atLimit)]),
                       "org.example.PeerVoice.Error.UnknownPeer")
        XCTAssertEqual(client.errorName("Send", [Variant(""), Variant("hello")]),
                       "org.example.PeerVoice.Error.NotConnected", "broadcast with nobody connected")
    }

    func testWrongArgumentTypesAreRefusedByTheBus() {
        let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        XCTAssertEqual(client.errorName("Send", [Variant(UInt32(1)), Variant("hi")]), invalidArgs)
        XCTAssertEqual(client.errorName("Send", [Variant("AA:BB:CC:DD:EE:FF")]), invalidArgs)
        XCTAssertEqual(client.errorName("Mute", [Variant("yes")]), invalidArgs)
        XCTAssertEqual(client.errorName("History", [Variant("AA:BB:CC:DD:EE:FF"), Variant("10")]), invalidArgs)
        XCTAssertEqual(client.errorName("ToggleMute", [Variant(true)]), invalidArgs)
        XCTAssertEqual(client.errorName("NoSuchMethod"), "org.freedesktop.DBus.Error.UnknownMethod")
    }

    func testBluetoothIsNotAvailableWithoutBlueZ() throws {
        for method in ["StartDiscovery", "StopDiscovery"] {
            do {
                try client.call(method)
                XCTFail("\(method) succeeded without BlueZ")
            } catch {
                XCTAssertEqual(error.name, "org.example.PeerVoice.Error.NotAvailable", method)
                XCTAssertTrue(error.message.contains("Bluetooth"), error.message)
            }
        }
        XCTAssertEqual(try client.property("Discovering").bool, false)
        XCTAssertEqual(try client.property("Adapter").string, "")
    }

    func testListPeersIsEmptyAtFirst() throws {
        let reply = try client.call("ListPeers")
        XCTAssertEqual(reply.typeString, "(a(ssss))")
        XCTAssertEqual(reply[0].count, 0)
    }

    // MARK: Mute

    func testMuteAndToggleMuteChangeMutedAndSignalOnlyOnChange() throws {
        XCTAssertEqual(try client.property("Muted").bool, false)

        try client.call("Mute", [Variant(true)])
        let muted = try XCTUnwrap(client.waitForSignal("MuteChanged"))
        XCTAssertEqual(muted.arguments[0].bool, true)
        let changed = try XCTUnwrap(client.waitForSignal("PropertiesChanged"))
        XCTAssertEqual(changed.arguments[0].string, APIClient.interface)
        XCTAssertEqual(changed.arguments[1].lookup("Muted")?.bool, true)
        XCTAssertEqual(try client.property("Muted").bool, true)

        client.clearSignals()
        try client.call("Mute", [Variant(true)])
        dispatchEvents(for: 0.3)
        XCTAssertTrue(client.signals("MuteChanged").isEmpty, "Mute(true) while muted must not signal")
        XCTAssertTrue(client.signals("PropertiesChanged").isEmpty)

        XCTAssertEqual(try client.call("ToggleMute")[0].bool, false)
        XCTAssertEqual(client.waitForSignal("MuteChanged")?.arguments[0].bool, false)
        XCTAssertEqual(try client.property("Muted").bool, false)
        XCTAssertEqual(try client.call("ToggleMute")[0].bool, true)
        XCTAssertEqual(try client.property("Muted").bool, true)
    }

    // MARK: Properties

    func testPropertiesDescribeTheService() throws {
        let version = try XCTUnwrap(try client.property("Version").string)
        XCTAssertTrue(version.first?.isNumber == true, "Version '\(version)'")
        XCTAssertEqual(try client.property("ListenAddress").string, "", "no --listen, not discoverable, no known peers: no listener")
        let all = try client.connection.call(destination: APIClient.name, path: APIClient.path,
                                             interface: "org.freedesktop.DBus.Properties", method: "GetAll",
                                             arguments: Variant(tuple: [Variant(APIClient.interface)]))
        XCTAssertEqual(Set(all[0].children.map { $0[0].string! }),
                       ["Muted", "Discovering", "Version", "ListenAddress", "Adapter", "Id", "Fingerprint", "DiscoveryMethods", "AudioProcessing",
                        "Name", "Visible", "Speaking", "Participants"])
        XCTAssertEqual(try client.property("Speaking").bool, false, "no voice runs")
        XCTAssertEqual(try client.property("Participants").count, 0, "no voice peer hosts a call")
        let id = try XCTUnwrap(try client.property("Id").string)
        XCTAssertTrue(id.hasPrefix("pv:") && id.count == 29, "Id '\(id)'")
        let fingerprint = try XCTUnwrap(try client.property("Fingerprint").string)
        XCTAssertEqual(fingerprint.split(separator: " ").count, 16, "Fingerprint '\(fingerprint)'")
        XCTAssertEqual(try client.audioProcessing(), ["echo-cancel on: default", "noise-suppression on: default", "high-pass on: default",
                                                      "gain-control off: default"], "all processing but gain control is on by default")
    }

    // MARK: Life cycle

    func testSigtermExitsZeroWithinASecondAndReleasesTheName() {
        let started = Date()
        XCTAssertEqual(daemon.terminate(timeout: 1), 0, daemon.process.log)
        XCTAssertLessThan(Date().timeIntervalSince(started), 1)
        XCTAssertFalse(client.nameHasOwner())
    }

    func testSigintExitsZero() {
        daemon.process.signal(SIGINT)
        XCTAssertEqual(daemon.process.wait(timeout: 1), 0, daemon.process.log)
        XCTAssertFalse(client.nameHasOwner())
    }

    /// A session's bus ends with the session (dbus-run-session, a logout): the service ends too
    /// instead of running on with nobody to serve (it did, found by the package test).
    func testTheServiceEndsWithItsSessionBus() {
        bus.stop()
        XCTAssertEqual(daemon.process.wait(timeout: 5), 0, daemon.process.log)
        XCTAssertTrue(daemon.process.log.contains("the session bus went away: shutting down"), daemon.process.log)
    }

    func testSecondInstanceFailsClearlyAndTheFirstKeepsServing() throws {
        let second = try Daemon(bus: bus, in: directory, name: "second")
        let status = second.process.wait(timeout: 10)
        XCTAssertNotNil(status, "second instance kept running")
        XCTAssertNotEqual(status, 0)
        XCTAssertTrue(second.process.log.contains("already owned"), second.process.log)
        XCTAssertTrue(daemon.process.isRunning)
        XCTAssertEqual(try client.call("ToggleMute")[0].bool, true)
    }

    func testNameIsOwnedWithinASecondOfStart() throws {
        let otherDirectory = try TemporaryDirectory()
        defer { otherDirectory.remove() }
        let otherBus = try PrivateBus(in: otherDirectory)
        defer { otherBus.stop() }
        let otherClient = try APIClient(address: otherBus.address)
        let started = Date()
        let other = try Daemon(bus: otherBus, in: otherDirectory)
        defer { other.process.kill() }
        XCTAssertTrue(otherClient.waitForService(timeout: 5))
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.0, "name owned after \(Date().timeIntervalSince(started)) s")
    }

    func testHelpAndVersionAndBadOptions() throws {
        let help = try ChildProcess(Binaries.peervoiced, ["--help"], logPath: directory.path + "/help.log")
        XCTAssertEqual(help.wait(timeout: 5), 0)
        XCTAssertTrue(help.log.contains("--listen HOST:PORT"), help.log)
        let version = try ChildProcess(Binaries.peervoiced, ["--version"], logPath: directory.path + "/version.log")
        XCTAssertEqual(version.wait(timeout: 5), 0)
        XCTAssertTrue(version.log.hasPrefix("peervoiced "), version.log)
        let bad = try ChildProcess(Binaries.peervoiced, ["--frobnicate"], logPath: directory.path + "/bad.log")
        XCTAssertEqual(bad.wait(timeout: 5), 2)
        XCTAssertTrue(bad.log.contains("unknown option '--frobnicate'"), bad.log)
    }
}
