import GIO
import Glibc

/// PeerVoice's Bluetooth profile: `org.bluez.Profile1` on our system-bus connection, registered
/// with `ProfileManager1.RegisterProfile`. BlueZ listens on our RFCOMM channel, publishes an SDP
/// record for our UUID (BlueZ builds it from the UUID, name and channel), connects it on
/// `Device1.ConnectProfile`, and hands every connected RFCOMM socket, dialled or accepted, to
/// `NewConnection`. The socket carries the peer-link protocol, as a TCP connection does.
final class BluezProfile {
    /// PeerVoice's service UUID (random, version 4), in SDP records and `Device1.UUIDs`.
    static let uuid = "9b03c5d9-ad7f-4c13-9ced-e08dea6492c8"
    /// The RFCOMM server channel BlueZ listens on for us. Dialling sides find it through SDP.
    static let channel: UInt16 = 23
    static let path = "/org/example/PeerVoice/bluetooth/profile"
    static let name = "PeerVoice"

    /// An RFCOMM socket connected to the device at the path. Returns whether it was taken (the
    /// receiver then owns the descriptor); a refused one is closed, and BlueZ drops the channel.
    var onNewConnection: (_ devicePath: String, _ fd: Int32) -> Bool = { _, _ in false }
    /// BlueZ asks us to close our side of the device's channel (someone called DisconnectProfile).
    var onRequestDisconnection: (_ devicePath: String) -> Void = { _ in }
    /// Whether a method call comes from BlueZ (the current owner of org.bluez): nobody else may
    /// hand us sockets.
    var isFromBluez: (_ sender: String) -> Bool = { _ in false }

    private var registration: ObjectRegistration?

    private static let introspectionXML = """
        <node>
          <interface name="org.bluez.Profile1">
            <method name="Release"/>
            <method name="NewConnection">
              <arg name="device" type="o" direction="in"/>
              <arg name="fd" type="h" direction="in"/>
              <arg name="fd_properties" type="a{sv}" direction="in"/>
            </method>
            <method name="RequestDisconnection">
              <arg name="device" type="o" direction="in"/>
            </method>
            <method name="Cancel"/>
          </interface>
        </node>
        """

    init(connection: DBusConnection) throws(BusError) {
        registration = try connection.registerObject(
            path: Self.path, introspectionXML: Self.introspectionXML, interface: "org.bluez.Profile1",
            methods: { [weak self] call in self?.handle(call) }, properties: { _ in nil })
    }

    /// `ProfileManager1.RegisterProfile`: once per bluetoothd (it forgets us when it exits).
    func register(with bluez: BluezClient, completion: @escaping (Result<Void, BusError>) -> Void) {
        let options: [(String, Variant)] = [
            ("Name", Variant(Self.name)),
            ("Channel", Variant(uint16: Self.channel)),
            // Security level MEDIUM: the link must be paired (authenticated and encrypted).
            ("RequireAuthentication", Variant(true)),
            // Pairing is the authorization: paired devices connect without asking the agent.
            ("RequireAuthorization", Variant(false)),
            ("AutoConnect", Variant(false)),
        ]
        bluez.call(Bluez.managerPath, Bluez.profileManagerInterface, "RegisterProfile",
                   [Variant(objectPath: Self.path), Variant(Self.uuid), Variant(dictionary: options)]) { result in
            completion(result.map { _ in () })
        }
    }

    private func handle(_ call: MethodCall) {
        guard isFromBluez(call.sender) else {
            call.fail(name: Bluez.rejected, message: "only BlueZ may call \(call.method)")
            return
        }
        switch call.method {
        case "NewConnection":
            let device = call.arguments[0].string!
            guard let handle = call.arguments[1].handle, let fd = call.fileDescriptor(handle: handle) else {
                call.fail(name: Bluez.rejected, message: "no file descriptor in NewConnection")
                return
            }
            if onNewConnection(device, fd) {
                call.reply()
            } else {
                close(fd)
                call.fail(name: Bluez.rejected, message: "PeerVoice does not want this connection now")
            }
        case "RequestDisconnection":
            onRequestDisconnection(call.arguments[0].string!)
            call.reply()
        case "Release":
            Log.info("BlueZ released the PeerVoice profile")
            call.reply()
        default:
            call.reply()
        }
    }
}
