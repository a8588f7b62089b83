import Foundation

/// The peervoiced built next to the test binary.
public enum Binaries {
    public static var directory: String {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return (executable as NSString).deletingLastPathComponent
    }
    public static var peervoiced: String { directory + "/peervoiced" }
}

/// One running peervoiced on a private bus, with its own state directory.
public final class Daemon {
    public let process: ChildProcess
    public let stateDirectory: String

    /// `launcher`: a command that runs peervoiced in its place (e.g. `ip netns exec NS`);
    /// `binary`: another peervoiced than this build's (the previous release's).
    public init(bus: PrivateBus, in directory: TemporaryDirectory, name: String = "daemon",
                arguments: [String] = [], environment: [String: String] = [:], launcher: [String] = [],
                binary: String = Binaries.peervoiced) throws {
        stateDirectory = directory.path + "/\(name)-state"
        let command = launcher + [binary, "--state-dir", stateDirectory, "--name", name] + arguments
        process = try ChildProcess(command[0], Array(command.dropFirst()),
                                   environment: ["DBUS_SESSION_BUS_ADDRESS": bus.address].merging(environment) { $1 },
                                   logPath: directory.path + "/\(name).log")
    }

    /// SIGTERM, then the exit status within `timeout` seconds (nil if it did not exit).
    public func terminate(timeout: Double = 5) -> Int32? {
        process.signal(SIGTERM)
        return process.wait(timeout: timeout)
    }
}
