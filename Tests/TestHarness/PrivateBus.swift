import Foundation
import GIO
import Glibc

/// A private session bus (`dbus-daemon`) for one test; nothing else talks on it.
public final class PrivateBus {
    public let address: String
    private let process: ChildProcess

    /// A session bus that starts nothing by bus activation: what a test needs it starts itself, and
    /// the services installed on this machine (a desktop portal, an installed PeerVoice) stay out.
    public convenience init(in directory: TemporaryDirectory) throws {
        try self.init(in: directory, activatingFrom: [])
    }

    /// A bus with `dbus-daemon`'s own arguments (`--config-file=…`).
    public init(in directory: TemporaryDirectory, configArguments: [String]) throws {
        let socket = directory.path + "/bus"
        address = "unix:path=" + socket
        process = try ChildProcess("dbus-daemon", configArguments + ["--nofork", "--nopidfile", "--address=" + address],
                                   logPath: directory.path + "/dbus-daemon.log")
        // The socket file appears a moment before dbus-daemon listens on it: ready means a client
        // can connect.
        let address = address
        guard eventually(timeout: 10, { !process.isRunning || (try? DBusConnection.connect(address: address)) != nil }),
              process.isRunning else {
            throw HarnessError("dbus-daemon did not start: \(process.log)")
        }
    }

    /// A private session bus that starts services by bus activation from `serviceDirectories`
    /// only (so a PeerVoice installed on this machine is not found unless a directory is listed).
    public convenience init(in directory: TemporaryDirectory, activatingFrom serviceDirectories: [String]) throws {
        let config = directory.path + "/session.conf"
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:tmpdir=\(directory.path)</listen>
              <auth>EXTERNAL</auth>
            \(serviceDirectories.map { "  <servicedir>\($0)</servicedir>" }.joined(separator: "\n"))
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>

            """.write(toFile: config, atomically: true, encoding: .utf8)
        try self.init(in: directory, configArguments: ["--config-file=" + config])
    }

    /// Sends `dbus-daemon` a signal (SIGSTOP: nobody's messages are read, so a client's writes
    /// back up once its socket buffer is full).
    public func signal(_ signal: Int32) { process.signal(signal) }

    public func stop() {
        process.signal(SIGTERM)
        if process.wait(timeout: 5) == nil { process.kill() }
    }
}

/// A session bus for peervoiced and a client on it, and a system bus of their own (where a
/// stand-in BlueZ, or nobody, serves org.bluez): what the Bluetooth tests start from.
public final class SessionAndSystemBus {
    public let directory: TemporaryDirectory
    public let bus: PrivateBus
    public let client: APIClient
    public let systemDirectory: TemporaryDirectory
    public let systemBus: PrivateBus

    public init() throws {
        directory = try TemporaryDirectory()
        bus = try PrivateBus(in: directory)
        client = try APIClient(address: bus.address)
        systemDirectory = try TemporaryDirectory("peervoice-system-bus")
        systemBus = try PrivateBus(in: systemDirectory)
    }

    /// What a peervoiced needs to use this system bus.
    public var environment: [String: String] { ["DBUS_SYSTEM_BUS_ADDRESS": systemBus.address] }

    public func stop() {
        systemBus.stop()
        bus.stop()
        systemDirectory.remove()
        directory.remove()
    }
}
