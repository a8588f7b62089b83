import Foundation
import GIO
import Glibc

/// The real Mumble server (Debian's `mumble-server`: murmurd 1.3.4), started as an ordinary
/// process on 127.0.0.1 with its own ini, database and certificate in a test directory. Run as
/// root (CI), it is started as `nobody` through setpriv (murmurd would switch to its own
/// `mumble-server` user otherwise), its folder owned by nobody.
public final class MumbleServer {
    public static let executable = "/usr/sbin/murmurd"
    /// The SuperUser's password (set with `-supw` before each start): it may create channels.
    public static let superUserPassword = "super-secret"

    public let directory: String
    public let port: UInt16
    /// SHA-256 of the certificate it presents, as openssl prints it.
    public private(set) var fingerprint = ""
    private var process: ChildProcess?
    private let serverPassword: String?
    private let maxUsers: Int

    public var log: String { (try? String(contentsOfFile: directory + "/murmur.log", encoding: .utf8)) ?? "" }

    /// Starts a server with a fresh database (hence a fresh certificate); `serverPassword`: the
    /// password every client must give; `maxUsers`: murmurd's `users=`.
    public init(in parent: TemporaryDirectory, serverPassword: String? = nil, maxUsers: Int = 100) throws {
        self.maxUsers = maxUsers
        directory = parent.path + "/murmur"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        port = try freeTCPPort()
        self.serverPassword = serverPassword
        try start()
    }

    deinit { process?.kill() }

    private var ini: String { directory + "/murmur.ini" }

    /// Starts it again (same database and certificate, unless `freshCertificate`: a new database,
    /// so murmurd generates a new certificate, as a reinstalled server would).
    public func start(freshCertificate: Bool = false) throws {
        precondition(process?.isRunning != true, "start() of a running murmurd")
        if freshCertificate { try? FileManager.default.removeItem(atPath: directory + "/murmur.sqlite") }
        let settings = ["database=\(directory)/murmur.sqlite", "host=127.0.0.1", "port=\(port)", "users=\(maxUsers)",
                        "bonjour=false", "serverpassword=\(serverPassword ?? "")", "logfile="]
        try (settings.joined(separator: "\n") + "\n").write(toFile: ini, atomically: true, encoding: .utf8)
        let asNobody = getuid() == 0
        if asNobody { try chownToNobody(directory) }
        let launcher = asNobody ? ["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] : []
        let setPassword = try ChildProcess((launcher + [Self.executable])[0], Array((launcher + [Self.executable]).dropFirst()) + ["-ini", ini, "-supw", Self.superUserPassword],
                                           logPath: directory + "/supw.log")
        guard setPassword.wait(timeout: 30) == 0 else { throw HarnessError("murmurd -supw failed: \(setPassword.log)") }
        let command = launcher + [Self.executable, "-ini", ini, "-fg"]
        process = try ChildProcess(command[0], Array(command.dropFirst()), logPath: directory + "/murmur.log")
        // The port listens a moment before a fresh certificate exists: wait for a TLS handshake.
        let deadline = Date().addingTimeInterval(20)
        while fingerprint(timeout: 2).map({ fingerprint = $0 }) == nil {
            guard Date() < deadline, process?.isRunning == true else {
                throw HarnessError("murmurd did not complete a TLS handshake on port \(port): \(log)")
            }
            usleep(50_000)
        }
    }

    /// SIGTERM, waiting until it has exited.
    public func stop() {
        process?.signal(SIGTERM)
        if process?.wait(timeout: 10) == nil { process?.kill() }
    }

    /// The certificate's fingerprint from one TLS handshake, or nil.
    private func fingerprint(timeout: Double) -> String? {
        var result: String?
        var done = false
        TLSClientConnection.connect(host: "127.0.0.1", port: port, timeout: .seconds(timeout)) { outcome in
            if case .success(let connection) = outcome {
                result = connection.peerCertificateFingerprint
                connection.close()
            }
            done = true
        }
        eventually(timeout: timeout + 1) { done }
        return result
    }

    private func chownToNobody(_ path: String) throws {
        guard let user = getpwnam("nobody") else { throw HarnessError("no user nobody") }
        let (uid, gid) = (user.pointee.pw_uid, user.pointee.pw_gid)
        let parent = (path as NSString).deletingLastPathComponent
        // murmurd must reach its folder: the test directory is mkdtemp's 0700.
        chmod(parent, 0o755)
        for entry in [path] + ((try? FileManager.default.subpathsOfDirectory(atPath: path)) ?? []).map({ path + "/" + $0 }) {
            guard chown(entry, uid, gid) == 0 else { throw HarnessError("chown \(entry): \(String(cString: strerror(errno)))") }
        }
    }
}

/// A Mumble client nobody here wrote: pymumble 1.6.1 from PyPI (in the venv `make rooms-venv`
/// makes under .build/), driven through tests/rooms/mumble_client.py: commands go in through a
/// FIFO, what it sees comes out as lines in its log.
public final class PyMumbleClient {
    public static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    public static let python = repository + "/.build/rooms-venv/bin/python"
    static let driver = repository + "/tests/rooms/mumble_client.py"

    public let name: String
    private let process: ChildProcess
    private let commands: Int32

    public var log: String { process.log }

    /// The server refused the client (a Reject): its reason.
    public struct Rejected: Error {
        public let reason: String
    }

    /// Connects as `name` (with the client certificate and key in the PEM file `certificate`,
    /// if given) and enters `channel` (creating it first when `createChannel`: the SuperUser may);
    /// returns once it is there; throws ``Rejected`` when the server refuses it.
    public init(_ name: String, server: MumbleServer, in directory: TemporaryDirectory, password: String? = nil,
                certificate: String? = nil, channel: String? = nil, createChannel: Bool = false) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.python) else {
            throw HarnessError("no pymumble venv at \(Self.python): run `make rooms-venv` (make test does)")
        }
        self.name = name
        // Unique: the same name may connect again (after a Reject, or to try a registered name).
        let files = directory.path + "/pymumble-\(name)-\(UInt32.random(in: 0...UInt32.max))"
        let fifo = files + ".fifo"
        guard mkfifo(fifo, 0o600) == 0 else { throw HarnessError("mkfifo \(fifo): \(String(cString: strerror(errno)))") }
        // Read-write, so neither side blocks waiting for the other to open it.
        commands = open(fifo, O_RDWR)
        var arguments = [Self.driver, "--port", String(server.port), "--user", name]
        if let password { arguments += ["--password", password] }
        if let certificate { arguments += ["--certificate", certificate] }
        if let channel { arguments += (createChannel ? ["--create-channel", channel] : []) + ["--channel", channel] }
        process = try ChildProcess(Self.python, arguments, logPath: files + ".log", stdinPath: fifo)
        guard eventually(timeout: 30, { log.contains("\nready") || log.hasPrefix("ready") || !process.isRunning }), process.isRunning else {
            if let line = log.split(separator: "\n").first(where: { $0.hasPrefix("rejected ") }),
               let reason = try? JSONSerialization.jsonObject(with: Data(line.dropFirst(9).utf8), options: .fragmentsAllowed) as? String {
                throw Rejected(reason: reason)
            }
            throw HarnessError("pymumble \(name) did not get ready: \(log)")
        }
    }

    deinit {
        send("quit")
        close(commands)
        process.kill()
    }

    public func send(_ command: String) {
        let line = command + "\n"
        _ = line.withCString { write(commands, $0, strlen($0)) }
    }

    /// The JSON of each line of its log that starts with `kind ` (`text`, `users`).
    public func lines(_ kind: String) -> [Any] {
        log.split(separator: "\n").filter { $0.hasPrefix(kind + " ") }.compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.dropFirst(kind.count + 1).utf8))
        }
    }

    /// The others in its channel as it sees them now: name → self-muted.
    public func usersInChannel(timeout: Double = 5) -> [String: Bool]? {
        let before = lines("users").count
        send("users")
        guard eventually(timeout: timeout, { lines("users").count > before }),
              let users = lines("users").last as? [[String: Any]] else { return nil }
        return Dictionary(users.map { ($0["name"] as? String ?? "", $0["self_mute"] as? Bool ?? false) }) { a, _ in a }
    }

    /// The others in its channel: name → the SHA-1 of their client certificate as the server
    /// reports it ("" without one).
    public func certificateHashes(timeout: Double = 5) -> [String: String]? {
        let before = lines("users").count
        send("users")
        guard eventually(timeout: timeout, { lines("users").count > before }),
              let users = lines("users").last as? [[String: Any]] else { return nil }
        return Dictionary(users.map { ($0["name"] as? String ?? "", $0["hash"] as? String ?? "") }) { a, _ in a }
    }

    /// How many seconds of voice it received so far, and how many of them loud (above -40 dBFS).
    public func heard(timeout: Double = 5) -> (seconds: Double, loudSeconds: Double)? {
        let before = lines("heard").count
        send("heard")
        guard eventually(timeout: timeout, { lines("heard").count > before }),
              let heard = lines("heard").last as? [String: Double] else { return nil }
        return (heard["seconds"] ?? 0, heard["loud_seconds"] ?? 0)
    }

    /// The texts it received: (sender's name, text).
    public var texts: [(String, String)] {
        lines("text").compactMap { $0 as? [String: String] }.map { ($0["actor"] ?? "", $0["message"] ?? "") }
    }
}
