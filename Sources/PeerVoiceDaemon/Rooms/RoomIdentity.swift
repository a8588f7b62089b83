import Foundation
import GIO
import Glibc

/// The client certificate this installation presents to every Mumble server: what Mumble calls
/// your identity (servers recognise a registered user by it). `room-identity.pem` in the state
/// directory, mode 0600: an EC P-256 private key and a self-signed certificate (CN "PeerVoice",
/// 20 years), made once by openssl on a thread of its own (so the main loop never waits for it).
/// Main loop only, apart from that thread.
final class RoomIdentity {
    let path: String
    /// Joins waiting for the certificate while it is made.
    private var waiting: [(String?) -> Void] = []
    static let openssl = "/usr/bin/openssl"

    init(stateDirectory: String) {
        path = stateDirectory + "/room-identity.pem"
    }

    /// Calls `body` with the certificate's path, made first if needed; nil when it cannot be made
    /// (logged: the room then joins without one, as an unregistered user).
    func withCertificate(_ body: @escaping (String?) -> Void) {
        if FileManager.default.fileExists(atPath: path) { return body(path) }
        waiting.append(body)
        guard waiting.count == 1 else { return }
        let path = path
        let control = MainContextReference(self)
        _ = NamedThread(name: "peervoice-certgen") {
            let problem = Self.make(at: path)
            runOnMainContext {
                guard let identity = control.object else { return }
                if let problem { Log.warning("rooms: no client certificate (\(problem)); joining without one") }
                else { Log.info("rooms: made this installation's Mumble identity, \(path)") }
                let waiting = identity.waiting
                identity.waiting = []
                for body in waiting { body(problem == nil ? path : nil) }
            }
        }
    }

    /// Runs openssl into temporary files, then puts key and certificate together in place; the problem, or nil.
    private static func make(at path: String) -> String? {
        let key = path + ".key.tmp", certificate = path + ".crt.tmp", combined = path + ".tmp"
        defer { for file in [key, certificate, combined] { unlink(file) } }
        let arguments = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                         "-keyout", key, "-out", certificate, "-days", "7300", "-subj", "/CN=PeerVoice"]
        var pid: pid_t = 0
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in [0, 1, 2] { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0) }
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let spawned = withDefaultSignalSpawnAttributes { posix_spawn(&pid, openssl, &actions, &$0, argv, environ) }
        guard spawned == 0 else { return "cannot run \(openssl): \(String(cString: strerror(spawned)))" }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0 else { return "openssl req failed (status \(status))" }
        guard let keyData = FileManager.default.contents(atPath: key),
              let certificateData = FileManager.default.contents(atPath: certificate) else { return "openssl wrote nothing" }
        guard FileManager.default.createFile(atPath: combined, contents: certificateData + keyData, attributes: [.posixPermissions: 0o600]),
              rename(combined, path) == 0 else { return "cannot write \(path)" }
        return nil
    }
}
