import Foundation
import GIO
import Glibc

/// A process the tests start and stop by its own PID.
///
/// Spawned with an empty signal mask and default dispositions: a child inheriting a blocked
/// SIGTERM (as happens from Swift-concurrency threads) would ignore the tests' SIGTERM.
public final class ChildProcess {
    public let pid: pid_t
    public let executable: String
    /// Where stdout and stderr go.
    public let logPath: String
    private var exitStatus: Int32?

    /// `stdinPath`: a file to read standard input from (default /dev/null).
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                logPath: String, stdinPath: String? = nil) throws {
        self.executable = executable
        self.logPath = logPath
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdinPath ?? "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var env = ProcessInfo.processInfo.environment
        env["LANG"] = "C.UTF-8"
        env.merge(environment) { _, new in new }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }

        var pid: pid_t = 0
        let result = withDefaultSignalSpawnAttributes { posix_spawnp(&pid, executable, &actions, &$0, argv, envp) }
        guard result == 0 else { throw HarnessError("cannot start \(executable): \(String(cString: strerror(result)))") }
        self.pid = pid
    }

    deinit { kill() }

    /// The exit status (or 128 + signal), once the process has ended; nil while it runs.
    public var status: Int32? {
        if exitStatus == nil {
            var raw: Int32 = 0
            if waitpid(pid, &raw, WNOHANG) == pid { exitStatus = Self.decode(raw) }
        }
        return exitStatus
    }

    public var isRunning: Bool { status == nil }

    public func signal(_ signal: Int32) {
        if isRunning { Glibc.kill(pid, signal) }
    }

    /// Waits up to `timeout` seconds for the process to end; returns its status or nil.
    @discardableResult
    public func wait(timeout: Double) -> Int32? {
        // Polls without dispatching the main context: a process ending is no bus event, and a
        // wait for a command (avahi-browse, make) should not run other tests' leftover callbacks.
        let deadline = Date().addingTimeInterval(timeout)
        while status == nil && Date() < deadline { usleep(2_000) }
        return status
    }

    /// SIGKILL and reap.
    public func kill() {
        guard isRunning else { return }
        Glibc.kill(pid, SIGKILL)
        var raw: Int32 = 0
        if waitpid(pid, &raw, 0) == pid { exitStatus = Self.decode(raw) }
    }

    /// What the process has written so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    private static func decode(_ raw: Int32) -> Int32 {
        let signal = raw & 0x7f
        return signal == 0 ? (raw >> 8) & 0xff : 128 + signal
    }
}

/// The resident set size of process `pid` in KiB (VmRSS), or 0 when it cannot be read.
public func residentKiB(of pid: pid_t) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
    return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0
}
