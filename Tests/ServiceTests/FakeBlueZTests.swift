import Foundation
import GIO
import TestHarness
import XCTest

/// A stand-in for bluetoothd on a private system bus: owns org.bluez when asked, lists one
/// powered adapter through ObjectManager, and records what peervoiced registers with it.
private final class FakeBlueZ {
    struct Call {
        let sender: String
        let method: String
        let arguments: Variant
    }

    let connection: DBusConnection
    private(set) var calls: [Call] = []
    private var registrations: [ObjectRegistration] = []

    static let adapterAddress = "00:AA:01:00:00:99"
    private static let objects = """
        (@a{oa{sa{sv}}} {objectpath '/org/bluez': {'org.bluez.AgentManager1': @a{sv} {}, 'org.bluez.ProfileManager1': @a{sv} {}},
          objectpath '/org/bluez/hci0': {'org.bluez.Adapter1': {'Address': <'\(adapterAddress)'>, 'Powered': <true>,
            'Discoverable': <false>, 'Pairable': <false>, 'DiscoverableTimeout': <uint32 180>}}},)
        """

    init(address: String) throws {
        connection = try DBusConnection.connect(address: address)
        registrations.append(try connection.registerObject(
            path: "/", introspectionXML: """
                <node><interface name="org.freedesktop.DBus.ObjectManager">
                  <method name="GetManagedObjects"><arg name="objects" type="a{oa{sa{sv}}}" direction="out"/></method>
                </interface></node>
                """, interface: "org.freedesktop.DBus.ObjectManager",
            methods: { call in call.reply(Variant(parsing: Self.objects)!) }, properties: { _ in nil }))
        registrations.append(try connection.registerObject(
            path: "/org/bluez", introspectionXML: """
                <node><interface name="org.bluez.ProfileManager1">
                  <method name="RegisterProfile"><arg type="o" direction="in"/><arg type="s" direction="in"/><arg type="a{sv}" direction="in"/></method>
                </interface></node>
                """, interface: "org.bluez.ProfileManager1",
            methods: { [unowned self] call in record(call) }, properties: { _ in nil }))
        registrations.append(try connection.registerObject(
            path: "/org/bluez", introspectionXML: """
                <node><interface name="org.bluez.AgentManager1">
                  <method name="RegisterAgent"><arg type="o" direction="in"/><arg type="s" direction="in"/></method>
                  <method name="RequestDefaultAgent"><arg type="o" direction="in"/></method>
                </interface></node>
                """, interface: "org.bluez.AgentManager1",
            methods: { [unowned self] call in record(call) }, properties: { _ in nil }))
    }

    private func record(_ call: MethodCall) {
        calls.append(Call(sender: call.sender, method: call.method, arguments: call.arguments))
        call.reply()
    }

    func calls(_ method: String) -> [Call] { calls.filter { $0.method == method } }

    /// bluetoothd starts: takes org.bluez.
    func start() throws { XCTAssertEqual(try connection.requestName("org.bluez"), .owned) }

    /// bluetoothd exits: org.bluez loses its owner.
    func stop() { connection.releaseName("org.bluez") }

    /// Calls peervoiced's pairing agent as BlueZ would, without waiting; `result` is set on reply.
    func askAgent(_ daemon: String, _ method: String, _ arguments: [Variant], result: @escaping (Result<Variant, BusError>) -> Void) {
        connection.callAsync(destination: daemon, path: "/org/example/PeerVoice/bluetooth/agent", interface: "org.bluez.Agent1",
                             method: method, arguments: Variant(tuple: arguments), timeout: .seconds(20), completion: result)
    }
}

/// peervoiced against a fake BlueZ: registration, re-registration when org.bluez comes back, the
/// Adapter property, and pairing prompts answered through ConfirmPairing.
final class FakeBlueZTests: XCTestCase {
    private var buses: SessionAndSystemBus!
    private var daemon: Daemon!
    private var bluez: FakeBlueZ!

    private static let peer = "AA:BB:CC:DD:EE:01"
    private static let devicePath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"

    override func setUpWithError() throws {
        buses = try SessionAndSystemBus()
        bluez = try FakeBlueZ(address: buses.systemBus.address)
        daemon = try Daemon(bus: buses.bus, in: buses.directory, arguments: ["--default-agent", "--verbose"],
                            environment: buses.environment)
        XCTAssertTrue(buses.client.waitForService(), "peervoiced did not own its name: \(daemon.process.log)")
    }

    override func tearDown() {
        daemon?.process.kill()
        bluez = nil
        buses?.stop()
    }

    private func waitForAdapter(_ name: String) -> Bool {
        buses.client.waitForSignal("PropertiesChanged", timeout: 10) { $0.arguments[1].lookup("Adapter")?.string == name } != nil
    }

    private func waitForRegistrations(_ count: Int) -> Bool {
        eventually(timeout: 10) { self.bluez.calls("RegisterAgent").count >= count && bluez.calls("RequestDefaultAgent").count >= count }
    }

    func testRegistersWithBlueZAndAgainWhenItComesBack() throws {
        XCTAssertEqual(try buses.client.property("Adapter").string, "")
        XCTAssertEqual(try buses.client.property("DiscoveryMethods").strings, [])
        try bluez.start()
        XCTAssertTrue(waitForAdapter("hci0"), daemon.process.log)
        XCTAssertEqual(try buses.client.property("Adapter").string, "hci0")
        // Bluetooth only: nothing owns org.freedesktop.Avahi on this system bus.
        XCTAssertEqual(try buses.client.property("DiscoveryMethods").strings, ["bluetooth"])
        XCTAssertTrue(waitForRegistrations(1), daemon.process.log)

        let profile = try XCTUnwrap(bluez.calls("RegisterProfile").first).arguments
        XCTAssertEqual(profile[0].string, "/org/example/PeerVoice/bluetooth/profile")
        XCTAssertEqual(profile[1].string, "9b03c5d9-ad7f-4c13-9ced-e08dea6492c8")
        let options = profile[2]
        XCTAssertEqual(options.lookup("Channel")?.uint16, 23)
        XCTAssertEqual(options.lookup("RequireAuthentication")?.bool, true)
        XCTAssertEqual(options.lookup("RequireAuthorization")?.bool, false)
        XCTAssertEqual(options.lookup("AutoConnect")?.bool, false)
        XCTAssertEqual(options.lookup("Name")?.string, "PeerVoice")
        XCTAssertNil(options.lookup("Role"), "both roles: no Role option")
        let agent = try XCTUnwrap(bluez.calls("RegisterAgent").first).arguments
        XCTAssertEqual(agent[0].string, "/org/example/PeerVoice/bluetooth/agent")
        XCTAssertEqual(agent[1].string, "DisplayYesNo")

        // bluetoothd exits: Bluetooth is unavailable, saying why.
        buses.client.clearSignals()
        bluez.stop()
        XCTAssertTrue(waitForAdapter(""), daemon.process.log)
        do {
            try buses.client.call("StartDiscovery")
            XCTFail("StartDiscovery succeeded without BlueZ")
        } catch {
            XCTAssertEqual(error.name, "org.example.PeerVoice.Error.NotAvailable")
            XCTAssertTrue(error.message.contains("BlueZ is not running"), error.message)
        }

        // bluetoothd is back: everything is registered again.
        buses.client.clearSignals()
        try bluez.start()
        XCTAssertTrue(waitForAdapter("hci0"), daemon.process.log)
        XCTAssertTrue(waitForRegistrations(2), daemon.process.log)
        XCTAssertEqual(bluez.calls("RegisterProfile").count, 2)
        XCTAssertTrue(eventually(timeout: 5) { self.daemon.process.log.contains("re-registered the PeerVoice profile") },
                      daemon.process.log)
        XCTAssertTrue(daemon.process.isRunning)
    }

    func testPairingConfirmationIsAPromptThatConfirmPairingAnswers() throws {
        try bluez.start()
        XCTAssertTrue(waitForRegistrations(1), daemon.process.log)
        let daemonOnSystemBus = try XCTUnwrap(bluez.calls("RegisterAgent").first).sender

        // Accepted.
        var answer: Result<Variant, BusError>?
        bluez.askAgent(daemonOnSystemBus, "RequestConfirmation", [Variant(objectPath: Self.devicePath), Variant(UInt32(42))]) {
            answer = $0
        }
        let prompt = try XCTUnwrap(buses.client.waitForSignal("PairingRequested"), daemon.process.log)
        XCTAssertEqual(prompt.arguments[0].string, Self.peer)
        XCTAssertEqual(prompt.arguments[2].string, "000042")
        XCTAssertEqual(buses.client.signals("PairingPrompt").first?.arguments[3].string, "confirm", "a code to confirm")
        XCTAssertNotNil(buses.client.waitForSignal("PeerStateChanged") { $0.arguments[0].string == Self.peer && $0.arguments[1].string == "pairing" })
        XCTAssertNil(answer, "BlueZ got an answer before anyone confirmed")
        try buses.client.call("ConfirmPairing", [Variant(Self.peer.lowercased()), Variant(true)])
        XCTAssertTrue(eventually(timeout: 10) { answer != nil })
        if case .failure(let error) = answer { XCTFail("accepted pairing answered \(error)") }
        XCTAssertEqual(buses.client.waitForSignal("PairingSettled")?.arguments[1].bool, true)
        // The prompt is gone.
        XCTAssertEqual(buses.client.errorName("ConfirmPairing", [Variant(Self.peer), Variant(true)]),
                       "org.example.PeerVoice.Error.InvalidArgument")

        // Refused.
        buses.client.clearSignals()
        answer = nil
        bluez.askAgent(daemonOnSystemBus, "RequestConfirmation", [Variant(objectPath: Self.devicePath), Variant(UInt32(123456))]) {
            answer = $0
        }
        XCTAssertEqual(buses.client.waitForSignal("PairingRequested")?.arguments[2].string, "123456")
        try buses.client.call("ConfirmPairing", [Variant(Self.peer), Variant(false)])
        XCTAssertTrue(eventually(timeout: 10) { answer != nil })
        guard case .failure(let error) = answer else { return XCTFail("refused pairing answered with success") }
        XCTAssertEqual(error.name, "org.bluez.Error.Rejected")
        XCTAssertNotNil(buses.client.waitForSignal("PeerStateChanged") { $0.arguments[0].string == Self.peer && $0.arguments[1].string == "disconnected" })
        XCTAssertEqual(buses.client.waitForSignal("PairingSettled")?.arguments[1].bool, false)

        // A passkey only to show (DisplayPasskey, nothing typed yet): a prompt with nothing to answer.
        buses.client.clearSignals()
        bluez.askAgent(daemonOnSystemBus, "DisplayPasskey", [Variant(objectPath: Self.devicePath), Variant(UInt32(654321)), Variant(parsing: "uint16 0")!]) { _ in }
        let shown = try XCTUnwrap(buses.client.waitForSignal("PairingPrompt"), daemon.process.log)
        XCTAssertEqual(shown.arguments[2].string, "654321")
        XCTAssertEqual(shown.arguments[3].string, "display")
    }

    func testOnlyBlueZMayTalkToTheAgent() throws {
        try bluez.start()
        XCTAssertTrue(waitForRegistrations(1), daemon.process.log)
        let daemonOnSystemBus = try XCTUnwrap(bluez.calls("RegisterAgent").first).sender
        let stranger = try DBusConnection.connect(address: buses.systemBus.address)
        do {
            try stranger.call(destination: daemonOnSystemBus, path: "/org/example/PeerVoice/bluetooth/agent",
                              interface: "org.bluez.Agent1", method: "RequestConfirmation",
                              arguments: Variant(tuple: [Variant(objectPath: Self.devicePath), Variant(UInt32(1))]))
            XCTFail("a stranger's RequestConfirmation was accepted")
        } catch {
            XCTAssertEqual(error.name, "org.bluez.Error.Rejected")
        }
        dispatchEvents(for: 0.3)
        XCTAssertTrue(buses.client.signals("PairingRequested").isEmpty)
    }
}
