import Foundation
import GIO
import PeerVoiceCore
@testable import PeerVoiceDaemon
import TestHarness
import XCTest

/// `PeerObjects` exporting peers on one connection to a private dbus-daemon, seen from a second
/// connection the way an app sees them: ObjectManager, Properties, Introspectable.
final class PeerObjectsTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var bus: PrivateBus!
    private var service: DBusConnection!
    private var objects: PeerObjects!
    private var app: AppConnection!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("peervoice-objects")
        bus = try PrivateBus(in: directory)
        service = try DBusConnection.connect(address: bus.address)
        objects = try PeerObjects(connection: service)
        XCTAssertEqual(try service.requestName(BusObject.busName), .owned)
        app = try AppConnection(address: bus.address, service: service.uniqueName)
        try app.settle()
    }

    override func tearDown() {
        objects?.unregister()
        objects = nil
        app = nil
        service?.close()
        bus?.stop()
        directory?.remove()
    }

    private static let alice = PeerObjectSnapshot(
        path: PeerObjects.peerPath(PeerID("pv:abcdefghijklmnopqrstuvwxyz")!), id: "pv:abcdefghijklmnopqrstuvwxyz",
        name: "alice", state: .connected, transport: .ip,
        routes: [.init(transport: .ip, address: "ip:192.168.1.20:47800", lastSeenMs: 1_764_580_000_123),
                 .init(transport: .bluetooth, address: "AA:BB:CC:DD:EE:FF", lastSeenMs: 1_764_500_000_000)],
        fingerprint: "3F2A 9C01 77B4 E0D2", paired: true, voice: .active)

    private static let foundDevice = PeerObjectSnapshot(
        path: PeerObjects.foundPath(transport: .bluetooth, address: "11:22:33:44:55:66"), id: "",
        name: "Bob's phone", state: .disconnected, transport: .bluetooth,
        routes: [.init(transport: .bluetooth, address: "11:22:33:44:55:66", lastSeenMs: 1_764_580_001_000)],
        fingerprint: "", paired: false, voice: .stopped)

    // MARK: Paths

    func testAKeyedPeerLivesAtTheBase32OfItsID() {
        XCTAssertEqual(PeerObjects.peerPath(PeerID("pv:abcdefghijklmnopqrstuvwxyz")!),
                       "/org/example/PeerVoice/peers/abcdefghijklmnopqrstuvwxyz")
        XCTAssertEqual(PeerObjects.peerPath(PeerID("PV:234567ABCDEFGHIJKLMNOPQRST")!),
                       "/org/example/PeerVoice/peers/234567abcdefghijklmnopqrst", "ids are normalised to lower case")
    }

    func testAFoundDeviceLivesAtItsEscapedAddress() {
        let table: [(Transport, String, String)] = [
            (.ip, "ip:127.0.0.1:47800", "ip_ip_3a127_2e0_2e0_2e1_3a47800"),
            (.ip, "ip:[fe80::1%eth0]:47800", "ip_ip_3a_5bfe80_3a_3a1_25eth0_5d_3a47800"),
            (.ip, "ip:[::1]:47800", "ip_ip_3a_5b_3a_3a1_5d_3a47800"),
            (.bluetooth, "AA:BB:CC:DD:EE:FF", "bt_AA_3aBB_3aCC_3aDD_3aEE_3aFF"),
            (.bluetooth, "", "bt_"),
            (.ip, "a_b/ü\n", "ip_a_5fb_2f_c3_bc_0a"),
        ]
        for (transport, address, element) in table {
            let path = PeerObjects.foundPath(transport: transport, address: address)
            XCTAssertEqual(path, "/org/example/PeerVoice/found/" + element, address)
            XCTAssertTrue(Self.isObjectPath(path), path)
            XCTAssertEqual(Self.decodedAddress(of: element), address, "the path does not decode back to \(address)")
        }
        // Escaping keeps addresses apart that differ only in characters outside [A-Za-z0-9].
        let similar = ["ip:1.2.3.4:5", "ip:1:2:3:4:5", "ip_1_2e2_2e3_2e4_3a5", "ip:1.2.3.45"]
        XCTAssertEqual(Set(similar.map { PeerObjects.foundPath(transport: .ip, address: $0) }).count, similar.count)
    }

    // MARK: ObjectManager

    func testGetManagedObjectsReturnsEveryPublishedObjectWithAllItsProperties() throws {
        XCTAssertEqual(try app.managedObjects().count, 0, "no peers published yet")
        objects.publish(Self.alice)
        objects.publish(Self.foundDevice)

        let managed = try app.managedObjects()
        XCTAssertEqual(Set(managed.keys), [Self.alice.path, Self.foundDevice.path])
        XCTAssertEqual(managed[Self.alice.path].map { Array($0.keys) }, [PeerObjects.interface])
        let alice = try XCTUnwrap(managed[Self.alice.path]?[PeerObjects.interface])
        XCTAssertEqual(alice.mapValues(\.description), [
            "Id": "'pv:abcdefghijklmnopqrstuvwxyz'",
            "Name": "'alice'",
            "State": "'connected'",
            "StateReason": "''",
            "Transport": "'ip'",
            "Routes": "[('ip', 'ip:192.168.1.20:47800', uint64 1764580000123), ('bluetooth', 'AA:BB:CC:DD:EE:FF', 1764500000000)]",
            "Fingerprint": "'3F2A 9C01 77B4 E0D2'",
            "Paired": "true",
            "Voice": "'active'",
            "Speaking": "false",
            "Volume": "1.0",
            "Muted": "false",
        ])
        let found = try XCTUnwrap(managed[Self.foundDevice.path]?[PeerObjects.interface])
        XCTAssertEqual(found["Id"]?.string, "")
        XCTAssertEqual(found["Fingerprint"]?.string, "")
        XCTAssertEqual(found["Paired"]?.bool, false)
        XCTAssertEqual(found["Routes"]?.typeString, "a(sst)")
    }

    func testPublishAnnouncesTheObjectWhosePropertiesThenReadTheSame() throws {
        objects.publish(Self.alice)
        let added = try XCTUnwrap(app.waitForSignal("InterfacesAdded"))
        XCTAssertEqual(added.path, "/org/example/PeerVoice")
        XCTAssertEqual(added.interface, "org.freedesktop.DBus.ObjectManager")
        XCTAssertEqual(added.arguments.typeString, "(oa{sa{sv}})")
        XCTAssertEqual(added.arguments[0].string, Self.alice.path)
        let announced = try XCTUnwrap(added.arguments[1].lookup(PeerObjects.interface))

        let all = try app.call(Self.alice.path, "org.freedesktop.DBus.Properties", "GetAll", [Variant(PeerObjects.interface)])
        XCTAssertEqual(all[0], announced, "GetAll differs from what InterfacesAdded announced")
        XCTAssertEqual(all[0].count, PeerProperty.allCases.count)
        let name = try app.call(Self.alice.path, "org.freedesktop.DBus.Properties", "Get",
                                [Variant(PeerObjects.interface), Variant("Name")])
        XCTAssertEqual(name[0].unboxed?.string, "alice")
        XCTAssertEqual(app.signals("InterfacesAdded").count, 1)
    }

    func testOnlyChangedPropertiesAreSignalledAndUnchangedOnesNotAtAll() throws {
        objects.publish(Self.alice)
        XCTAssertNotNil(app.waitForSignal("InterfacesAdded"))
        app.clearSignals()

        objects.publish(Self.alice)
        var renamed = Self.alice
        renamed.name = "Alice (laptop)"
        objects.publish(renamed)
        // Signals from one sender arrive in order: a signal for the unchanged publish would come first.
        let changed = try XCTUnwrap(app.waitForSignal("PropertiesChanged"))
        try app.settle()
        XCTAssertEqual(app.signals.map(\.member), ["PropertiesChanged"], "exactly one signal for the two publishes")
        XCTAssertEqual(changed.path, Self.alice.path)
        XCTAssertEqual(changed.interface, "org.freedesktop.DBus.Properties")
        XCTAssertEqual(changed.arguments.typeString, "(sa{sv}as)")
        XCTAssertEqual(changed.arguments[0].string, PeerObjects.interface)
        XCTAssertEqual(changed.arguments[1].description, "{'Name': <'Alice (laptop)'>}")
        XCTAssertEqual(changed.arguments[2].count, 0, "nothing invalidated")
        let name = try app.call(Self.alice.path, "org.freedesktop.DBus.Properties", "Get",
                                [Variant(PeerObjects.interface), Variant("Name")])
        XCTAssertEqual(name[0].unboxed?.string, "Alice (laptop)")

        app.clearSignals()
        var hungUp = renamed
        hungUp.state = .disconnected
        hungUp.voice = .stopped
        hungUp.routes[0].lastSeenMs += 5_000
        objects.publish(hungUp)
        let second = try XCTUnwrap(app.waitForSignal("PropertiesChanged"))
        try app.settle()
        XCTAssertEqual(app.signals.count, 1)
        XCTAssertEqual(Set(second.arguments[1].children.compactMap { $0[0].string }), ["State", "Routes", "Voice"])
        XCTAssertEqual(second.arguments[1].lookup("State")?.string, "disconnected")
    }

    func testShowRemovesTheFoundObjectBeforeAddingThePeer() throws {
        objects.publish(Self.foundDevice)
        XCTAssertNotNil(app.waitForSignal("InterfacesAdded"))
        app.clearSignals()

        var keyed = Self.alice
        keyed.routes = Self.foundDevice.routes
        objects.show([keyed])
        XCTAssertNotNil(app.waitForSignal("InterfacesAdded"))
        try app.settle()
        XCTAssertEqual(app.signals.map { "\($0.member) \($0.arguments[0].string ?? "?")" },
                       ["InterfacesRemoved \(Self.foundDevice.path)", "InterfacesAdded \(keyed.path)"])
        XCTAssertEqual(app.signals[0].arguments.description,
                       "(objectpath '\(Self.foundDevice.path)', ['\(PeerObjects.interface)'])")
        XCTAssertEqual(Set(try app.managedObjects().keys), [keyed.path])
        XCTAssertThrowsError(try app.call(Self.foundDevice.path, "org.freedesktop.DBus.Properties", "GetAll",
                                          [Variant(PeerObjects.interface)]), "the found object is still exported")
    }

    func testWithdrawUnexportsOnceAndLeavesTheOthers() throws {
        objects.publish(Self.alice)
        objects.publish(Self.foundDevice)
        objects.withdraw(path: Self.foundDevice.path)
        objects.withdraw(path: Self.foundDevice.path)
        objects.withdraw(path: "/org/example/PeerVoice/peers/NEVERPUBLISHED")
        try app.settle()
        XCTAssertEqual(app.signals.map(\.member), ["InterfacesAdded", "InterfacesAdded", "InterfacesRemoved"])
        XCTAssertEqual(Set(try app.managedObjects().keys), [Self.alice.path])
        XCTAssertThrowsError(try app.call(Self.foundDevice.path, "org.freedesktop.DBus.Properties", "Get",
                                          [Variant(PeerObjects.interface), Variant("Name")]))
        XCTAssertFalse(try app.introspect(Self.foundDevice.path).contains(PeerObjects.interface))
        XCTAssertEqual(try app.call(Self.alice.path, "org.freedesktop.DBus.Properties", "Get",
                                    [Variant(PeerObjects.interface), Variant("Name")])[0].unboxed?.string, "alice")
    }

    func testOddAddressesGiveObjectsAnAppCanRead() throws {
        let addresses: [(Transport, String)] = [
            (.ip, "ip:[fe80::1%eth0]:47800"), (.ip, "ip:[fe80::abcd:1%wlp0s20f3]:47800"), (.ip, "ip:127.0.0.1:47800"),
            (.bluetooth, "AA:BB:CC:DD:EE:FF"), (.bluetooth, "aa:bb:cc:dd:ee:ff"),
        ]
        for (transport, address) in addresses {
            var found = Self.foundDevice
            found.path = PeerObjects.foundPath(transport: transport, address: address)
            found.transport = transport
            found.routes = [.init(transport: transport, address: address, lastSeenMs: 1)]
            objects.publish(found)
        }
        let managed = try app.managedObjects()
        XCTAssertEqual(managed.count, addresses.count)
        for (transport, address) in addresses {
            let path = PeerObjects.foundPath(transport: transport, address: address)
            let routes = try app.call(path, "org.freedesktop.DBus.Properties", "Get",
                                      [Variant(PeerObjects.interface), Variant("Routes")])[0].unboxed
            XCTAssertEqual(routes?[0][1].string, address, path)
        }
    }

    // MARK: Introspection

    func testAPeerObjectIntrospectsAsThePeerXMLDescribesIt() throws {
        objects.publish(Self.alice)
        let xmlPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../dbus/org.example.PeerVoice.Peer.xml").path
        let documented = try interfaceMembers(ofXML: String(contentsOfFile: xmlPath, encoding: .utf8),
                                              interface: PeerObjects.interface)
        XCTAssertEqual(documented, [
            "property Id s read", "property Name s read", "property State s read", "property StateReason s read", "property Transport s read",
            "property Routes a(sst) read", "property Fingerprint s read", "property Paired b read", "property Voice s read",
            "property Speaking b read", "property Volume d read", "property Muted b read",
        ])
        let live = try app.introspect(Self.alice.path)
        XCTAssertEqual(try interfaceMembers(ofXML: live, interface: PeerObjects.interface), documented)

        // An app walking the tree from the service object finds the manager and the peers below it.
        let root = try app.introspect(PeerObjects.managerPath)
        XCTAssertEqual(try interfaceMembers(ofXML: root, interface: "org.freedesktop.DBus.ObjectManager"), [
            "method GetManagedObjects(out a{oa{sa{sv}}} objects)",
            "signal InterfacesAdded(o object, a{sa{sv}} interfaces)",
            "signal InterfacesRemoved(o object, as interfaces)",
        ])
        XCTAssertTrue(root.contains("<node name=\"peers\"/>"), root)
        XCTAssertTrue(try app.introspect(PeerObjects.peersRoot).contains("<node name=\"abcdefghijklmnopqrstuvwxyz\"/>"))
    }

    // MARK: What apps and tools see

    func testAnObjectManagerClientFollowsTheTreeWithoutPolling() throws {
        objects.publish(Self.foundDevice)
        let mirror = ObjectManagerClient(connection: app.connection, service: BusObject.busName,
                                         managerPath: PeerObjects.managerPath)
        var changes: [String] = []
        mirror.onChange = { change in
            switch change {
            case .interfacesAdded(let path, _): changes.append("added \(path)")
            case .interfacesRemoved(let path, _): changes.append("removed \(path)")
            case .propertiesChanged(let path, _, let changed): changes.append("changed \(path) \(changed)")
            default: break
            }
        }
        mirror.start()
        XCTAssertTrue(eventually(timeout: 10) { mirror.isReady })
        XCTAssertEqual(mirror.paths(implementing: PeerObjects.interface), [Self.foundDevice.path])

        objects.show([Self.alice])
        var moved = Self.alice
        moved.routes.insert(.init(transport: .ip, address: "ip:192.168.1.21:47800", lastSeenMs: 1_764_580_009_000), at: 0)
        objects.publish(moved)
        XCTAssertTrue(eventually(timeout: 10) { changes.count == 3 }, "\(changes)")
        XCTAssertEqual(changes, ["removed \(Self.foundDevice.path)", "added \(Self.alice.path)", "changed \(Self.alice.path) [\"Routes\"]"])
        XCTAssertEqual(mirror.paths(implementing: PeerObjects.interface), [Self.alice.path])
        let routes = mirror.properties(of: Self.alice.path, interface: PeerObjects.interface)?["Routes"]
        XCTAssertEqual(routes?.children.map { $0[1].string }, ["ip:192.168.1.21:47800", "ip:192.168.1.20:47800", "AA:BB:CC:DD:EE:FF"])
        mirror.stop()
    }

    /// The README's commands, run against the objects.
    func testBusctlAndGdbusShowThePeerObjects() throws {
        objects.publish(Self.alice)
        objects.publish(Self.foundDevice)

        let tree = try run("busctl", ["--address=" + bus.address, "tree", BusObject.busName])
        for path in ["/org/example/PeerVoice", Self.alice.path, Self.foundDevice.path] {
            XCTAssertTrue(tree.contains(path + "\n"), "busctl tree lacks \(path):\n\(tree)")
        }
        let managed = try run("gdbus", ["call", "--address", bus.address, "-d", BusObject.busName, "-o", PeerObjects.managerPath,
                                        "-m", "org.freedesktop.DBus.ObjectManager.GetManagedObjects"])
        XCTAssertTrue(managed.contains("'\(Self.alice.path)': {'org.example.PeerVoice.Peer': {'Id': <'pv:abcdefghijklmnopqrstuvwxyz'>, 'Name': <'alice'>"), managed)
        XCTAssertTrue(managed.contains("'\(Self.foundDevice.path)': {"), managed)
        let introspection = try run("busctl", ["--address=" + bus.address, "introspect", BusObject.busName, Self.alice.path,
                                               PeerObjects.interface])
        XCTAssertTrue(introspection.contains(".Name"), introspection)
        XCTAssertTrue(introspection.contains("\"alice\""), introspection)
        XCTAssertTrue(introspection.contains(".Routes"), introspection)
    }

    /// Runs a command-line client to completion while this process's main context serves it.
    private func run(_ tool: String, _ arguments: [String]) throws -> String {
        let process = try ChildProcess(tool, arguments, logPath: directory.path + "/\(tool).log")
        // The service only wakes the main context when the tool calls; the ticks notice its exit.
        let ticks = Timer.every(.milliseconds(10)) { true }
        defer { ticks.cancel() }
        eventually(timeout: 20) { !process.isRunning }
        XCTAssertEqual(process.status, 0, "\(tool) \(arguments): \(process.log)")
        let output = process.log
        try? FileManager.default.removeItem(atPath: process.logPath)
        return output
    }

    // MARK: Helpers

    /// The D-Bus specification's rule for object paths.
    private static func isObjectPath(_ path: String) -> Bool {
        path.hasPrefix("/") && path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).allSatisfy { element in
            !element.isEmpty && element.utf8.allSatisfy { $0 < 0x80 && (Character(Unicode.Scalar($0)).isLetter || Character(Unicode.Scalar($0)).isNumber || $0 == UInt8(ascii: "_")) }
        }
    }

    /// The address a found object's last path element stands for (the inverse of the escaping).
    private static func decodedAddress(of element: String) -> String? {
        var bytes: [UInt8] = []
        var rest = Array(element.utf8.drop { $0 != UInt8(ascii: "_") }.dropFirst())
        while let byte = rest.first {
            if byte == UInt8(ascii: "_") {
                guard rest.count >= 3, let value = UInt8(String(decoding: rest[1...2], as: UTF8.self), radix: 16) else { return nil }
                bytes.append(value)
                rest.removeFirst(3)
            } else {
                bytes.append(byte)
                rest.removeFirst()
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

/// The app's side: a second connection that calls the service without blocking the main context
/// (in this process the service answers on it) and records every signal the service sends.
private final class AppConnection {
    let connection: DBusConnection
    private(set) var signals: [BusSignal] = []
    private var subscription: SignalSubscription?

    init(address: String, service: String) throws {
        connection = try DBusConnection.connect(address: address)
        subscription = connection.subscribe(sender: service) { [unowned self] signal in signals.append(signal) }
    }

    func call(_ path: String, _ interface: String, _ method: String, _ arguments: [Variant] = []) throws(BusError) -> Variant {
        var result: Result<Variant, BusError>?
        connection.callAsync(destination: BusObject.busName, path: path, interface: interface, method: method,
                             arguments: Variant(tuple: arguments), timeout: .seconds(5)) { result = $0 }
        eventually(timeout: 10) { result != nil }
        guard let result else { throw BusError(name: "test.NoReply", message: "\(method) on \(path) got no reply") }
        return try result.get()
    }

    /// `GetManagedObjects` as path → interface → property → value.
    func managedObjects() throws(BusError) -> [String: [String: [String: Variant]]] {
        let reply = try call(PeerObjects.managerPath, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        XCTAssertEqual(reply.typeString, "(a{oa{sa{sv}}})")
        var objects: [String: [String: [String: Variant]]] = [:]
        for object in reply[0].children {
            for interface in object[1].children {
                for property in interface[1].children {
                    objects[object[0].string!, default: [:]][interface[0].string!, default: [:]][property[0].string!] = property[1].unboxed
                }
            }
        }
        return objects
    }

    func introspect(_ path: String) throws(BusError) -> String {
        try call(path, "org.freedesktop.DBus.Introspectable", "Introspect")[0].string!
    }

    /// A round trip to the service: every signal it sent before answering has arrived after this.
    func settle() throws(BusError) {
        _ = try call(PeerObjects.managerPath, "org.freedesktop.DBus.Peer", "Ping")
        eventually(timeout: 0.05) { false }
    }

    func waitForSignal(_ member: String, timeout: Double = 10) -> BusSignal? {
        var found: BusSignal?
        eventually(timeout: timeout) {
            found = signals.first { $0.member == member }
            return found != nil
        }
        return found
    }

    func signals(_ member: String) -> [BusSignal] { signals.filter { $0.member == member } }

    func clearSignals() { signals.removeAll() }
}
