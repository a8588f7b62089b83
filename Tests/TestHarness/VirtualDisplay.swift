import Foundation
import Glibc

/// A private X server (Xvfb) for tests of desktop programs, and optionally the accessibility bus on
/// a session bus, so that AT-SPI can read what those programs show.
public final class VirtualDisplay {
    /// The `DISPLAY` value, e.g. `:141`.
    public let name: String
    private let xvfb: ChildProcess
    private var accessibilityBus: ChildProcess?

    /// Xvfb on a display it finds free itself (`-displayfd`: it takes the first display whose
    /// socket and lock it can create, and writes the number once it serves). Choosing a number
    /// here raced with other tests' servers: a display seen free was taken by the time ours
    /// started, ours exited, and a program found no server or another test's ("cannot open
    /// display: :140"). `-noreset`: every server started this way tries :0 first, and one that
    /// finds it taken has already unlinked the holder's socket file; the holder still answers on
    /// its abstract socket, until its last client leaves and it resets: then it re-creates its
    /// listeners and the next client (our app, after at-spi-bus-launcher left) hung or got
    /// "cannot open display: :0" (2 AppTests runs in 3 here; reproduced by removing the file and
    /// connecting twice). A display counts once a client was served on it, else it is replaced.
    public init(in directory: TemporaryDirectory, size: String = "1024x768x24") throws {
        var failures: [String] = []
        for attempt in 1...3 {
            let numberFile = directory.path + "/xvfb-display"
            try? FileManager.default.removeItem(atPath: numberFile)
            // Through sh only to open the file as descriptor 3; exec keeps the pid Xvfb's.
            let xvfb = try ChildProcess("/bin/sh", ["-c", "exec Xvfb -displayfd 3 -noreset -screen 0 \"$1\" -nolisten tcp 3>\"$0\"", numberFile, size],
                                    logPath: directory.path + "/xvfb-\(attempt).log")
            // The number and a newline, once it serves.
            var written = ""
            let numbered = eventually(timeout: 10) {
                written = (try? String(contentsOfFile: numberFile, encoding: .utf8)) ?? ""
                return written.hasSuffix("\n") || !xvfb.isRunning
            }
            if numbered, let number = Int(written.dropLast()), Self.serves(":\(number)", in: directory), xvfb.isRunning {
                self.xvfb = xvfb
                name = ":\(number)"
                return
            }
            xvfb.kill()
            failures.append("display \(written.isEmpty ? "none" : ":" + written.dropLast()): \(xvfb.log)")
        }
        throw HarnessError("no X display could be started:\n" + failures.joined(separator: "\n"))
    }

    /// Whether a client gets an answer from the server on `display` (its screen's size).
    private static func serves(_ display: String, in directory: TemporaryDirectory) -> Bool {
        (try? runCommand("xdotool", ["getdisplaygeometry"], environment: ["DISPLAY": display], in: directory, timeout: 5)) != nil
    }

    /// What the X server printed (its warnings, or why it stopped).
    public var log: String { xvfb.log }

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
