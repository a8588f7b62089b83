import GIO
import PeerVoiceBus

/// PeerVoice's pairing agent: `org.bluez.Agent1` on our system-bus connection, registered with
/// `AgentManager1.RegisterAgent` (capability DisplayYesNo: we show a code and a person answers yes
/// or no). BlueZ asks it about pairings our own `Pair` calls start and, as the default agent
/// (`--default-agent`), about pairings other computers start. A question that needs a person
/// becomes a prompt (`PairingRequested`); `answer` (from `ConfirmPairing`) replies to BlueZ, and
/// no answer within `PeerVoiceBus.pairingConfirmationWindow` is a no.
final class BluezAgent {
    static let path = "/org/example/PeerVoice/bluetooth/agent"
    static let capability = "DisplayYesNo"
    static let promptTimeout = PeerVoiceBus.pairingConfirmationWindow

    enum Outcome: Equatable {
        case accepted, rejected, timedOut, canceled
    }

    /// A question BlueZ waits on, by device path.
    private final class Prompt {
        let call: MethodCall
        var timer: EventSource?

        init(call: MethodCall) { self.call = call }
    }

    /// Whether a method call comes from BlueZ (the current owner of org.bluez).
    var isFromBluez: (_ sender: String) -> Bool = { _ in false }
    /// A person should compare `passkey` (6 digits, or "" when there is nothing to compare) and
    /// answer; `needsAnswer` is false when BlueZ only shows a code (the other side types it).
    var onPrompt: (_ devicePath: String, _ passkey: String, _ needsAnswer: Bool) -> Void = { _, _, _ in }
    var onPromptEnded: (_ devicePath: String, _ outcome: Outcome) -> Void = { _, _ in }
    /// Whether the device may use the service (UUID) without asking a person.
    var mayUseService: (_ devicePath: String, _ uuid: String) -> Bool = { _, _ in false }

    private var prompts: [String: Prompt] = [:]
    private var registration: ObjectRegistration?

    private static let introspectionXML = """
        <node>
          <interface name="org.bluez.Agent1">
            <method name="Release"/>
            <method name="RequestPinCode">
              <arg name="device" type="o" direction="in"/>
              <arg name="pincode" type="s" direction="out"/>
            </method>
            <method name="DisplayPinCode">
              <arg name="device" type="o" direction="in"/>
              <arg name="pincode" type="s" direction="in"/>
            </method>
            <method name="RequestPasskey">
              <arg name="device" type="o" direction="in"/>
              <arg name="passkey" type="u" direction="out"/>
            </method>
            <method name="DisplayPasskey">
              <arg name="device" type="o" direction="in"/>
              <arg name="passkey" type="u" direction="in"/>
              <arg name="entered" type="q" direction="in"/>
            </method>
            <method name="RequestConfirmation">
              <arg name="device" type="o" direction="in"/>
              <arg name="passkey" type="u" direction="in"/>
            </method>
            <method name="RequestAuthorization">
              <arg name="device" type="o" direction="in"/>
            </method>
            <method name="AuthorizeService">
              <arg name="device" type="o" direction="in"/>
              <arg name="uuid" type="s" direction="in"/>
            </method>
            <method name="Cancel"/>
          </interface>
        </node>
        """

    init(connection: DBusConnection) throws(BusError) {
        registration = try connection.registerObject(
            path: Self.path, introspectionXML: Self.introspectionXML, interface: "org.bluez.Agent1",
            methods: { [weak self] call in self?.handle(call) }, properties: { _ in nil })
    }

    /// `AgentManager1.RegisterAgent`, and `RequestDefaultAgent` when `asDefault`: once per
    /// bluetoothd (it forgets us when it exits).
    func register(with bluez: BluezClient, asDefault: Bool, completion: @escaping (Result<Void, BusError>) -> Void) {
        bluez.call(Bluez.managerPath, Bluez.agentManagerInterface, "RegisterAgent",
                   [Variant(objectPath: Self.path), Variant(Self.capability)]) { result in
            guard case .success = result, asDefault else { return completion(result.map { _ in () }) }
            bluez.call(Bluez.managerPath, Bluez.agentManagerInterface, "RequestDefaultAgent",
                       [Variant(objectPath: Self.path)]) { completion($0.map { _ in () }) }
        }
    }

    /// Device paths with a question waiting for a person.
    var promptedDevices: [String] { prompts.keys.sorted() }

    /// Answers the device's pending prompt; false if there is none.
    func answer(_ devicePath: String, accept: Bool) -> Bool {
        guard prompts[devicePath] != nil else { return false }
        finish(devicePath, accept ? .accepted : .rejected)
        return true
    }

    /// BlueZ went away: nobody waits for these answers any more.
    func cancelAll() {
        for devicePath in prompts.keys.sorted() { finish(devicePath, .canceled) }
    }

    // MARK: Agent1

    private func handle(_ call: MethodCall) {
        guard isFromBluez(call.sender) else {
            call.fail(name: Bluez.rejected, message: "only BlueZ may call \(call.method)")
            return
        }
        let arguments = call.arguments
        let device = arguments.count > 0 ? arguments[0].string ?? "" : ""
        switch call.method {
        case "RequestConfirmation":
            ask(call, device: device, passkey: Self.sixDigits(arguments[1].uint32 ?? 0))
        case "RequestAuthorization":
            // Pairing without a code to compare ("just works"): still a person's yes or no.
            ask(call, device: device, passkey: "")
        case "DisplayPasskey":
            // The other side types the code; show it once, when typing starts.
            if arguments[2].uint16 == 0 { onPrompt(device, Self.sixDigits(arguments[1].uint32 ?? 0), false) }
            call.reply()
        case "DisplayPinCode":
            let pin = arguments[1].string ?? ""
            onPrompt(device, pin.count == 6 && pin.allSatisfy { $0.isASCII && $0.isNumber } ? pin : "", false)
            call.reply()
        case "RequestPinCode", "RequestPasskey":
            // The bus API answers prompts with yes or no; it has no way to type a code.
            Log.info("\(device) asks for a typed \(call.method == "RequestPinCode" ? "PIN code" : "passkey"), which PeerVoice cannot enter: pair it with bluetoothctl")
            call.fail(name: Bluez.rejected, message: "PeerVoice cannot enter codes")
        case "AuthorizeService":
            let uuid = arguments[1].string ?? ""
            if mayUseService(device, uuid) {
                call.reply()
            } else {
                Log.info("refused \(device) the service \(uuid): PeerVoice's agent only authorizes PeerVoice for paired devices")
                call.fail(name: Bluez.rejected, message: "not authorized by PeerVoice")
            }
        case "Cancel":
            // BlueZ gave up on its outstanding question (the other side cancelled or timed out).
            cancelAll()
            call.reply()
        case "Release":
            Log.info("BlueZ released the PeerVoice pairing agent")
            cancelAll()
            call.reply()
        default:
            call.fail(name: Bluez.rejected, message: "\(call.method) is not supported")
        }
    }

    private func ask(_ call: MethodCall, device: String, passkey: String) {
        if prompts[device] != nil { finish(device, .canceled) }
        let prompt = Prompt(call: call)
        prompts[device] = prompt
        prompt.timer = Timer.after(Self.promptTimeout) { [weak self] in
            self?.finish(device, .timedOut)
        }
        onPrompt(device, passkey, true)
    }

    private func finish(_ devicePath: String, _ outcome: Outcome) {
        guard let prompt = prompts.removeValue(forKey: devicePath) else { return }
        prompt.timer?.cancel()
        switch outcome {
        case .accepted: prompt.call.reply()
        case .rejected: prompt.call.fail(name: Bluez.rejected, message: "the user refused the pairing")
        case .timedOut: prompt.call.fail(name: Bluez.rejected, message: "nobody confirmed the pairing within \(Self.promptTimeout.components.seconds) s")
        case .canceled: prompt.call.fail(name: Bluez.canceled, message: "the pairing was cancelled")
        }
        onPromptEnded(devicePath, outcome)
    }

    static func sixDigits(_ passkey: UInt32) -> String {
        let digits = String(passkey % 1_000_000)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }
}
