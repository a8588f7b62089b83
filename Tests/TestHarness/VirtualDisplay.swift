import Foundation
import Glibc

/// A private X server (Xvfb) for tests of desktop programs, and optionally the accessibility bus on
/// a session bus, so that AT-SPI can read what those programs show.
public final class VirtualDisplay {
    /// The `DISPLAY` value, e.g. `:141`.
    public let name: String
    private let xvfb: ChildProcess
    private var accessibilityBus: ChildProcess?

    /// Xvfb on the first free display from :140 (other tests and people may hold some).
    public init(in directory: TemporaryDirectory, size: String = "1024x768x24") throws {
        for number in 140..<200 where !FileManager.default.fileExists(atPath: "/tmp/.X11-unix/X\(number)")
            && !FileManager.default.fileExists(atPath: "/tmp/.X\(number)-lock") {
            let xvfb = try ChildProcess("Xvfb", [":\(number)", "-screen", "0", size, "-nolisten", "tcp"],
                                        logPath: directory.path + "/xvfb-\(number).log")
            // Ready once a client gets an answer (its socket appears before it serves). An answer
            // can come from another server that holds the display while ours finds it taken and
            // exits: ours must still run a moment later.
            if eventually(timeout: 10, { !xvfb.isRunning || Self.answers(":\(number)", in: directory) }),
               xvfb.wait(timeout: 0.3) == nil {
                self.xvfb = xvfb
                name = ":\(number)"
                return
            }
            xvfb.kill()
        }
        throw HarnessError("no X display could be started")
    }

    private static func answers(_ display: String, in directory: TemporaryDirectory) -> Bool {
        (try? runCommand("xdotool", ["getdisplaygeometry"], environment: ["DISPLAY": display], in: directory, timeout: 5)) != nil
    }

    /// Starts the AT-SPI bus launcher for `bus` (the session bus the programs on this display use);
    /// returns once `org.a11y.Bus` is owned there.
    public func startAccessibilityBus(on bus: PrivateBus, client: APIClient, in directory: TemporaryDirectory) throws {
        // A desktop session's accessibility bus would win over the one started here.
        unsetenv("AT_SPI_BUS_ADDRESS")
        let launcher = try ChildProcess("/usr/libexec/at-spi-bus-launcher", ["--launch-immediately"],
                                        environment: ["DISPLAY": name, "DBUS_SESSION_BUS_ADDRESS": bus.address],
                                        logPath: directory.path + "/at-spi.log")
        accessibilityBus = launcher
        guard eventually(timeout: 10, { client.nameHasOwner("org.a11y.Bus") }) else {
            throw HarnessError("the AT-SPI bus launcher did not own org.a11y.Bus: \(launcher.log)")
        }
    }

    public func stop() {
        for process in [accessibilityBus, xvfb].compactMap({ $0 }) {
            process.signal(SIGTERM)
            if process.wait(timeout: 5) == nil { process.kill() }
        }
    }
}
