import Foundation
import GIO
import Glibc
import PeerVoiceBus

/// A TCP port on 127.0.0.1 that was free when asked: bound to port 0, read back, closed. For a
/// peer that must keep its port (and so its id) across a restart.
public func freeTCPPort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = loopback(port: 0)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw HarnessError("bind 127.0.0.1:0: \(String(cString: strerror(errno)))") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    guard named == 0 else { throw HarnessError("getsockname: \(String(cString: strerror(errno)))") }
    return UInt16(bigEndian: address.sin_port)
}

private func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}

/// Dispatches the main context (bus signals and replies of every `APIClient`) until `condition`
/// holds or `timeout` seconds pass; returns whether it holds.
@discardableResult
public func dispatch(timeout: Double, until condition: () -> Bool) -> Bool {
    iterateMainContext(timeout: timeout, until: condition)
}

extension BusSignal {
    /// The `index`th argument as a string ("" if it is not one).
    public func string(_ index: Int) -> String {
        index < arguments.count ? arguments[index].string ?? "" : ""
    }
}

extension APIClient {
    /// Calls a PeerVoice method without blocking the main context; returns the reply and how many
    /// signals had been recorded when it was dispatched, so a test can tell which signals came
    /// before the reply (GDBus dispatches replies and signals in the order they arrived).
    public func callRecordingOrder(_ method: String, _ arguments: [Variant] = [], timeout: Double = 15)
        -> (result: Result<Variant, BusError>, signalsBefore: Int) {
        final class Box { var result: Result<Variant, BusError>?; var signalsBefore = 0 }
        let box = Box()
        connection.callAsync(destination: Self.name, path: Self.path, interface: Self.interface, method: method,
                             arguments: Variant(tuple: arguments), timeoutMs: Int32(timeout * 1000)) { [unowned self] result in
            box.result = result
            box.signalsBefore = signals.count
        }
        dispatch(timeout: timeout + 5) { box.result != nil }
        return (box.result ?? .failure(BusError(name: "harness.NoReply", message: "no reply within \(timeout) s")),
                box.signalsBefore)
    }

    /// Index of the first `member` signal at or after `start` that satisfies `matching`, waiting
    /// up to `timeout` seconds for it.
    public func waitForSignalIndex(_ member: String, after start: Int = 0, timeout: Double = 10,
                                   matching: (BusSignal) -> Bool = { _ in true }) -> Int? {
        var next = start
        var found: Int?
        dispatch(timeout: timeout) {
            while found == nil && next < signals.count {
                if signals[next].member == member && matching(signals[next]) { found = next }
                next += 1
            }
            return found != nil
        }
        return found
    }
}

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

    /// The address other peers dial this one at.
    public var address: String { "ip:\(host):\(port)" }
    /// Its peer id (`pv:…`, from its key): what other peers' signals name it by once it is identified.
    public private(set) var id = ""
    /// Everything every life of the daemon has logged (the log file is appended to).
    public var log: String { daemon.process.log }
    public var isRunning: Bool { daemon.process.isRunning }

    /// Starts a bus and a daemon named `name`, listening on `port` (0: any free port, read back
    /// from `ListenAddress`), or not listening at all (`listens` false: the daemon's defaults);
    /// `environment` is added to the daemon's.
    public init(name: String, port: UInt16 = 0, listens: Bool = true, arguments: [String] = ["--verbose"],
                environment: [String: String] = [:]) throws {
        self.name = name
        self.listens = listens
        self.extraArguments = arguments
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
                                arguments: (listens ? ["--listen", "127.0.0.1:\(port)"] : []) + arguments, environment: self.environment)
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
            _ = eventually(timeout: 10) {
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
    /// on `host` if given (a device that moved to another address).
    public func restart(onHost newHost: String? = nil) throws {
        precondition(!daemon.process.isRunning, "restart() of a running daemon")
        // The bus drops the dead daemon's name when it sees its connection close.
        guard eventually(timeout: 10, { !client.nameHasOwner() }) else {
            throw HarnessError("\(name): the bus name is still owned after the daemon ended")
        }
        if let newHost { host = newHost }
        daemon = try Daemon(bus: bus, in: directory, name: name, arguments: listenArguments + extraArguments,
                            environment: environment)
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

/// A plain blocking TCP client, for feeding a peervoiced bytes a peer would not send.
public final class RawTCPConnection {
    private var fd: Int32

    /// Connects to 127.0.0.1:`port`.
    public init(port: UInt16) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        var address = loopback(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let message = String(cString: strerror(errno))
            close()
            throw HarnessError("connect 127.0.0.1:\(port): \(message)")
        }
    }

    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Writes all of `bytes` (without SIGPIPE).
    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                throw HarnessError("send: \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    /// How the other side ended the stream, if it did.
    public enum Ending: Equatable { case closed, reset, stillOpen }

    /// Reads until the other side ends the stream or `timeout` seconds pass: what arrived, and how it ended.
    public func readUntilEnd(timeout: Double) -> (bytes: [UInt8], ending: Ending) {
        read(timeout: timeout) { _ in false }
    }

    /// Reads until `enough` says what arrived so far (all of it, from the first read) is enough,
    /// the other side ends the stream, or `timeout` seconds pass.
    public func read(timeout: Double, until enough: ([UInt8]) -> Bool) -> (bytes: [UInt8], ending: Ending) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0, !enough(received) else { return (received, .stillOpen) }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(remaining * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                received += buffer[0..<count]
            } else if count == 0 {
                return (received, .closed)
            } else if errno == EINTR {
                continue
            } else {
                return (received, .reset)
            }
        }
    }
}

// MARK: Pairing (protocol version 6)

/// A method call in flight: dispatch the main context (e.g. `dispatch(timeout:until:)`) until
/// `result` is set.
public final class PendingCall {
    public fileprivate(set) var result: Result<Variant, BusError>?
    /// How many signals the client had recorded when the reply was dispatched.
    public fileprivate(set) var signalsBefore = 0
    public var isDone: Bool { result != nil }
}

extension APIClient {
    /// Starts a PeerVoice method call without waiting for its reply (Connect waits for pairing).
    public func callAsync(_ method: String, _ arguments: [Variant] = [],
                          timeout: Double = Double(PeerVoiceBus.connectCallTimeout.components.seconds)) -> PendingCall {
        let pending = PendingCall()
        connection.callAsync(destination: Self.name, path: Self.path, interface: Self.interface, method: method,
                             arguments: Variant(tuple: arguments), timeoutMs: Int32(timeout * 1000)) { [unowned self] result in
            pending.result = result
            pending.signalsBefore = signals.count
        }
        return pending
    }
}

/// How a first contact between two daemons went: each side's prompt, and the dialler's Connect.
public struct Pairing {
    /// The dialler's `PairingRequested` (nil if none came).
    public let dialler: BusSignal?
    /// The dialled side's `PairingRequested` (nil if none came).
    public let dialled: BusSignal?
    /// The dialler's Connect reply (failure `harness.NoReply` if it did not come in time).
    public let connect: Result<Variant, BusError>
    /// Signals the dialler had recorded when the Connect reply was dispatched.
    public let signalsBeforeReply: Int

    /// The passkeys each side showed ("" when there was no prompt).
    public var passkeys: (dialler: String, dialled: String) { (dialler?.string(2) ?? "", dialled?.string(2) ?? "") }

    /// True for exactly 6 ASCII digits.
    public static func isPasskey(_ text: String) -> Bool {
        text.utf8.count == 6 && text.utf8.allSatisfy { (0x30...0x39).contains($0) }
    }
}

extension TestPeer {
    /// The first `PairingRequested` for `peer` at or after signal index `start`, waiting up to `timeout`.
    public func pairingRequest(for peer: String, after start: Int = 0, timeout: Double = 10) -> BusSignal? {
        client.waitForSignalIndex("PairingRequested", after: start, timeout: timeout) { $0.string(0) == peer }
            .map { client.signals[$0] }
    }

    /// `PairingRequested` signals for `peer` at or after `start`.
    public func pairingRequests(for peer: String? = nil, after start: Int = 0) -> [BusSignal] {
        client.signals[min(start, client.signals.count)...]
            .filter { $0.member == "PairingRequested" && (peer == nil || $0.string(0) == peer) }
    }

    /// The id `address` turned out to belong to: the first `PeerIdentified(address, id)` at or after `start`.
    public func identified(_ address: String, after start: Int = 0) -> String? {
        client.signals[min(start, client.signals.count)...]
            .first { $0.member == "PeerIdentified" && $0.string(0) == address }?.string(1)
    }

    /// First contact: this daemon dials `address` (`other`'s own by default, or a relay in front of
    /// it) with an asynchronous Connect; waits until both daemons ask their person (here for the id
    /// the address turned out to have, on `other` for `otherSeesID`, by default this peer's id);
    /// answers `ConfirmPairing` with `accept` here and `otherAccepts` there; then waits for the
    /// Connect reply. A side that shows no prompt within `timeout` is not asked; the reply is
    /// awaited all the same.
    public func pair(with other: TestPeer, via address: String? = nil, otherSeesID: String? = nil,
                     accept: Bool = true, otherAccepts: Bool = true, timeout: Double = 15) -> Pairing {
        let dialled = address ?? other.address
        let diallerID = otherSeesID ?? id
        let mark = self.mark, otherMark = other.mark
        let connect = client.callAsync("Connect", [Variant(dialled)])
        var here: BusSignal?, there: BusSignal?
        dispatch(timeout: timeout) {
            if here == nil, let dialledID = identified(dialled, after: mark) {
                here = pairingRequests(for: dialledID, after: mark).first
            }
            there = there ?? other.pairingRequests(for: diallerID, after: otherMark).first
            return (here != nil && there != nil) || connect.isDone
        }
        if let here { _ = try? client.call("ConfirmPairing", [Variant(here.string(0)), Variant(accept)]) }
        if there != nil { _ = try? other.client.call("ConfirmPairing", [Variant(diallerID), Variant(otherAccepts)]) }
        dispatch(timeout: timeout) { connect.isDone }
        return Pairing(dialler: here, dialled: there,
                       connect: connect.result ?? .failure(BusError(name: "harness.NoReply", message: "no Connect reply within \(timeout) s")),
                       signalsBeforeReply: connect.signalsBefore)
    }
}

/// The peers one test started: made here and shut down at its end, with their logs printed when
/// the test failed, so no suite keeps its own copy of that bookkeeping.
public final class StartedPeers {
    public private(set) var all: [TestPeer] = []

    public init() {}

    /// A `TestPeer` that `shutdown(printingLogs:)` will stop.
    public func make(_ name: String, port: UInt16 = 0, listens: Bool = true,
                     arguments: [String] = ["--verbose"], environment: [String: String] = [:]) throws -> TestPeer {
        let peer = try TestPeer(name: name, port: port, listens: listens, arguments: arguments, environment: environment)
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
