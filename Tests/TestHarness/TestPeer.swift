import Foundation
import GIO

/// One PeerVoice peer for tests: its own directory, private bus and client, and a peervoiced on
/// that bus listening on 127.0.0.1 (or on another loopback host, or not at all, as most laptops
/// run). `restart()` brings the daemon back with the same state directory and port, hence the
/// same key and id.
public final class TestPeer {
    public let name: String
    public let directory: TemporaryDirectory
    public let bus: PrivateBus
    public let client: APIClient
    public private(set) var daemon: Daemon
    /// The TCP port the daemon listens on (0 when it does not listen).
    public private(set) var port: UInt16
    /// The loopback address it listens on.
    public private(set) var host = "127.0.0.1"
    private let listens: Bool
    private let extraArguments: [String]
    private let environment: [String: String]
    private let binary: String
    /// What runs the daemon in its place in every life (e.g. `ip netns exec NS`: a computer on a test LAN).
    private let launcher: [String]

    /// The address other peers dial this one at.
    public var address: String { "ip:\(host):\(port)" }
    /// Its peer id (`pv:…`, from its key): what other peers' signals name it by once it is identified.
    public private(set) var id = ""
    /// Everything every life of the daemon has logged (the log file is appended to).
    public var log: String { daemon.process.log }
    public var isRunning: Bool { daemon.process.isRunning }

    /// Starts a bus and a daemon named `name`, listening on `port` (0: any free port, read back
    /// from `ListenAddress`), or not listening at all (`listens` false: the daemon's defaults);
    /// `environment` is added to the daemon's; `binary` runs another peervoiced than this build's;
    /// `launcher` runs it in each of its lives (see `Daemon`).
    public init(name: String, port: UInt16 = 0, listens: Bool = true, arguments: [String] = ["--verbose"],
                environment: [String: String] = [:], binary: String = Binaries.peervoiced, launcher: [String] = []) throws {
        self.name = name
        self.listens = listens
        self.extraArguments = arguments
        self.binary = binary
        self.launcher = launcher
        // The session bus is always the peer's own (a PipeWire session's environment names
        // WirePlumber's).
        self.environment = environment.filter { $0.key != "DBUS_SESSION_BUS_ADDRESS" }
        directory = try TemporaryDirectory("peervoice-\(name)")
        do {
            bus = try PrivateBus(in: directory)
        } catch {
            directory.remove()
            throw error
        }
        do {
            client = try Self.connectClient(to: bus)
            self.port = port
            daemon = try Daemon(bus: bus, in: directory, name: name,
                                arguments: (listens ? ["--listen", "127.0.0.1:\(port)"] : []) + arguments, environment: self.environment,
                                launcher: launcher, binary: binary)
            try awaitStart(expectedPort: port)
        } catch {
            bus.stop()
            directory.remove()
            throw error
        }
    }

    private var listenArguments: [String] { listens ? ["--listen", "\(host):\(port)"] : [] }

    /// PrivateBus returns once dbus-daemon's socket file exists, which is a moment before it
    /// listens: on a loaded machine the first connection can be refused, so retry for a while.
    private static func connectClient(to bus: PrivateBus) throws -> APIClient {
        let deadline = Date().addingTimeInterval(10)
        while true {
            do {
                return try APIClient(address: bus.address)
            } catch {
                if Date() > deadline { throw error }
                usleep(20_000)
            }
        }
    }

    private func awaitStart(expectedPort: UInt16) throws {
        guard client.waitForService(timeout: 15) else {
            daemon.process.kill()
            throw HarnessError("\(name): peervoiced did not own its name: \(log)")
        }
        if listens {
            var address = ""
            eventually(timeout: 10) {
                address = (try? client.property("ListenAddress").string) ?? ""
                return !address.isEmpty
            }
            guard address.hasPrefix(host + ":"), let actual = UInt16(address.dropFirst(host.count + 1)), actual != 0,
                  expectedPort == 0 || actual == expectedPort else {
                daemon.process.kill()
                throw HarnessError("\(name): ListenAddress is '\(address)', expected \(host):\(expectedPort == 0 ? "PORT" : "\(expectedPort)"): \(log)")
            }
            port = actual
        }
        id = (try? client.property("Id").string) ?? ""
        guard id.hasPrefix("pv:") else {
            daemon.process.kill()
            throw HarnessError("\(name): Id is '\(id)', not a peer id: \(log)")
        }
    }

    /// SIGKILL and reap: no goodbye, no clean-up.
    public func kill() { daemon.process.kill() }

    /// SIGTERM; the exit status, or nil if it did not exit within `timeout`.
    @discardableResult
    public func stop(timeout: Double = 5) -> Int32? { daemon.terminate(timeout: timeout) }

    /// Starts the daemon again (it must have ended) with the same state directory and port,
    /// on `host` if given (a device that moved to another address), with `adding` added to its
    /// environment and run by `launcher` (after the peer's own, see `Daemon`) for this run only.
    public func restart(onHost newHost: String? = nil, adding extraEnvironment: [String: String] = [:],
                        launcher: [String] = []) throws {
        precondition(!daemon.process.isRunning, "restart() of a running daemon")
        // The bus drops the dead daemon's name when it sees its connection close.
        guard eventually(timeout: 10, { !client.nameHasOwner() }) else {
            throw HarnessError("\(name): the bus name is still owned after the daemon ended")
        }
        if let newHost { host = newHost }
        daemon = try Daemon(bus: bus, in: directory, name: name, arguments: listenArguments + extraArguments,
                            environment: environment.merging(extraEnvironment) { $1 }, launcher: self.launcher + launcher, binary: binary)
        try awaitStart(expectedPort: port)
    }

    /// Kills the daemon, stops the bus, removes the directory.
    public func shutdown(keepDirectory: Bool = false) {
        daemon.process.kill()
        bus.stop()
        if !keepDirectory { directory.remove() }
    }

    // MARK: Signals

    /// `PeerStateChanged` states for `peer` at or after signal index `start`, in order.
    public func states(of peer: String, after start: Int = 0) -> [String] {
        client.signals[min(start, client.signals.count)...]
            .filter { $0.member == "PeerStateChanged" && $0.string(0) == peer }.map { $0.string(1) }
    }

    /// Waits for `PeerStateChanged(peer, state)` at or after signal index `start`; its index.
    @discardableResult
    public func waitForState(_ state: String, of peer: String, after start: Int = 0, timeout: Double = 15) -> Int? {
        client.waitForSignalIndex("PeerStateChanged", after: start, timeout: timeout) {
            $0.string(0) == peer && $0.string(1) == state
        }
    }

    /// A mark for "signals from now on".
    public var mark: Int { client.signals.count }
}

/// The peers one test started: made here and shut down at its end, with their logs printed when
/// the test failed, so no suite keeps its own copy of that bookkeeping.
public final class StartedPeers {
    public private(set) var all: [TestPeer] = []

    public init() {}

    /// A `TestPeer` that `shutdown(printingLogs:)` will stop.
    public func make(_ name: String, port: UInt16 = 0, listens: Bool = true, arguments: [String] = ["--verbose"],
                     environment: [String: String] = [:], binary: String = Binaries.peervoiced) throws -> TestPeer {
        let peer = try TestPeer(name: name, port: port, listens: listens, arguments: arguments, environment: environment,
                                binary: binary)
        all.append(peer)
        return peer
    }

    /// Stops every peer (and removes its directory), printing the end of each log first if asked.
    public func shutdown(printingLogs: Bool) {
        for peer in all {
            if printingLogs { print("----- log of \(peer.name) (\(peer.id)) -----\n\(peer.log.suffix(6_000))") }
            peer.shutdown()
        }
        all = []
    }
}
