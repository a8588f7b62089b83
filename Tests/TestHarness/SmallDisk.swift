import Foundation
import Glibc

/// A peer's state directory on a small tmpfs of its own (root: `mount`), so a test can fill it up
/// (the disk full) and free it again while the daemon runs.
extension TestPeer {
    private var fillPath: String { daemon.stateDirectory + "/test-fill" }

    /// Stops the daemon (SIGTERM), moves its state directory onto a tmpfs of `megabytes` MiB and
    /// starts it again: same key, id and port.
    public func moveStateOntoTmpfs(megabytes: Int) throws {
        guard getuid() == 0 else { throw HarnessError("a tmpfs state directory needs root (mount)") }
        guard stop() == 0 else { throw HarnessError("\(name) did not stop: \(log.suffix(2_000))") }
        let state = daemon.stateDirectory
        try runShell("set -e; mv '\(state)' '\(state).old'; mkdir '\(state)'; "
            + "mount -t tmpfs -o size=\(megabytes)m,mode=0700 peervoice-test '\(state)'; cp -a '\(state).old/.' '\(state)/'; rm -rf '\(state).old'")
        try restart()
    }

    /// Fills the tmpfs to the last byte (again: what was freed since is taken too).
    public func fillState() throws { try runShell("cat /dev/zero >> '\(fillPath)' 2>/dev/null; true") }

    /// Gives the space back.
    public func freeState() throws { try runShell("rm -f '\(fillPath)'") }

    /// Unmounts the tmpfs (lazily: the daemon may still hold files); call before `shutdown`.
    public func unmountState() { _ = try? runShell("umount -l '\(daemon.stateDirectory)'") }

    private func runShell(_ command: String) throws {
        let process = try ChildProcess("/bin/sh", ["-c", command], logPath: directory.path + "/small-disk.log")
        guard process.wait(timeout: 60) == 0 else { throw HarnessError("\(command): \(process.log.suffix(1_000))") }
    }
}
