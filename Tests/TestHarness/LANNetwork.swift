import Foundation
import Glibc

/// Runs a command to completion; throws with its output when it fails.
public func runCommand(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                       in directory: TemporaryDirectory, timeout: Double = 20) throws -> String {
    let log = directory.path + "/command-\(UUID().uuidString.prefix(8)).log"
    defer { try? FileManager.default.removeItem(atPath: log) }
    let process = try ChildProcess(executable, arguments, environment: environment, logPath: log)
    guard let status = process.wait(timeout: timeout) else {
        process.kill()
        throw HarnessError("\(executable) \(arguments.joined(separator: " ")) did not finish within \(timeout) s")
    }
    guard status == 0 else {
        throw HarnessError("\(executable) \(arguments.joined(separator: " ")) exited \(status): \(process.log)")
    }
    return process.log
}

/// One computer on a test LAN: a network namespace (`pvlan…`) with one end of a veth pair, its
/// own "system" bus (a private dbus-daemon) with a real avahi-daemon on it, and a session bus for
/// the peervoiced that runs inside the namespace. Needs root (network namespaces).
public final class LANHost {
    public let namespace: String
    public let interface: String
    public let address: String
    public let hostName: String
    /// IPv6 only: no IPv4 address, avahi-daemon on IPv6 (the veth's link-local address).
    public let ipv6Only: Bool
    public let directory: TemporaryDirectory
    public private(set) var systemBus: PrivateBus!
    public private(set) var sessionBus: PrivateBus!
    public private(set) var avahi: ChildProcess?
    private var busDirectories: [TemporaryDirectory] = []

    init(namespace: String, interface: String, address: String, hostName: String, ipv6Only: Bool) throws {
        self.namespace = namespace
        self.interface = interface
        self.address = address
        self.hostName = hostName
        self.ipv6Only = ipv6Only
        directory = try TemporaryDirectory("peervoice-\(namespace)")
    }

    /// `DBUS_SYSTEM_BUS_ADDRESS` and `DBUS_SESSION_BUS_ADDRESS` for processes of this host.
    public var busEnvironment: [String: String] {
        ["DBUS_SYSTEM_BUS_ADDRESS": systemBus.address, "DBUS_SESSION_BUS_ADDRESS": sessionBus.address]
    }

    func startBuses() throws {
        let systemDirectory = try TemporaryDirectory("peervoice-\(namespace)-system")
        let sessionDirectory = try TemporaryDirectory("peervoice-\(namespace)-session")
        busDirectories = [systemDirectory, sessionDirectory]
        // A system bus as avahi-daemon expects one, open to everyone (the test is the only user).
        let config = systemDirectory.path + "/system-bus.conf"
        try Data("""
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>system</type>
              <listen>unix:path=\(systemDirectory.path)/bus</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow user="*"/>
                <allow own="*"/>
                <allow send_destination="*"/>
                <allow receive_sender="*"/>
              </policy>
            </busconfig>
            """.utf8).write(to: URL(fileURLWithPath: config))
        systemBus = try PrivateBus(in: systemDirectory, configArguments: ["--config-file=" + config])
        sessionBus = try PrivateBus(in: sessionDirectory)
    }

    /// Starts avahi-daemon inside the namespace on this host's system bus, on its veth only,
    /// IPv4 and IPv6 (or IPv6 only), no wide area; returns once it owns org.freedesktop.Avahi.
    public func startAvahi() throws {
        let config = directory.path + "/avahi-daemon.conf"
        try Data("""
            [server]
            host-name=\(hostName)
            domain-name=local
            use-ipv4=\(ipv6Only ? "no" : "yes")
            use-ipv6=yes
            allow-interfaces=\(interface)
            enable-dbus=yes
            ratelimit-interval-usec=1000000
            ratelimit-burst=1000
            [wide-area]
            enable-wide-area=no
            [publish]
            publish-hinfo=no
            publish-workstation=no
            [reflector]
            enable-reflector=no
            """.utf8).write(to: URL(fileURLWithPath: config))
        // `ip netns exec` gives the process a mount namespace of its own: a tmpfs on /run keeps
        // each avahi-daemon's pid file and socket apart from the others' (and the host's).
        avahi = try ChildProcess("ip", ["netns", "exec", namespace, "sh", "-c",
                                        "mount -t tmpfs tmpfs /run && mkdir -p /run/avahi-daemon && exec avahi-daemon -f \(config) --no-drop-root --no-chroot --no-rlimits"],
                                 environment: ["DBUS_SYSTEM_BUS_ADDRESS": systemBus.address],
                                 logPath: directory.path + "/avahi-daemon.log")
        guard eventually(timeout: 10, { avahi?.isRunning == false || nameHasOwner("org.freedesktop.Avahi") }),
              avahi?.isRunning == true else {
            throw HarnessError("avahi-daemon did not start in \(namespace): \(avahi?.log ?? "")")
        }
    }

    /// Stops avahi-daemon as `systemctl stop` would (SIGTERM: it says goodbye on the LAN first).
    public func stopAvahi() {
        avahi?.signal(SIGTERM)
        if avahi?.wait(timeout: 5) == nil { avahi?.kill() }
        avahi = nil
    }

    /// SIGKILL: avahi-daemon dies without a word to the LAN or the bus.
    public func killAvahi() {
        avahi?.kill()
        avahi = nil
    }

    /// The services avahi-browse lists on this host's avahi-daemon, until the cache is exhausted,
    /// with its `\DDD` escapes (`\032` for a space) decoded. Resolved (`-t -p -r`): one
    /// `=;interface;protocol;name;type;domain;host;address;port;txt` line each. Not resolved
    /// (`-t -p`): one `+;interface;protocol;name;type;domain` line each, what the cache holds; use
    /// it around a withdrawal: avahi-browse 0.8 never ends when a goodbye comes while it resolves
    /// (avahi/avahi pull request 583).
    public func browse(_ type: String, resolve: Bool = true) throws -> [String] {
        try runCommand("avahi-browse", ["-t", "-p"] + (resolve ? ["-r"] : []) + [type],
                       environment: ["DBUS_SYSTEM_BUS_ADDRESS": systemBus.address], in: directory)
            .split(separator: "\n").filter { $0.hasPrefix(resolve ? "=" : "+") }.map { Self.unescaped(String($0)) }
    }

    /// The instance names (avahi-browse's field 3) of the `type` services `browse` lists.
    public func instanceNames(_ type: String, resolve: Bool = true) throws -> [String] {
        try browse(type, resolve: resolve).map { String($0.split(separator: ";", omittingEmptySubsequences: false)[3]) }
    }

    private static func unescaped(_ line: String) -> String {
        var bytes: [UInt8] = []
        var rest = Array(line.utf8)[...]
        while let byte = rest.popFirst() {
            let digits = rest.prefix(3)
            if byte == UInt8(ascii: "\\"), digits.count == 3, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
               let value = UInt8(String(decoding: digits, as: UTF8.self)) {
                bytes.append(value)
                rest = rest.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether `name` has an owner on this host's system bus.
    public func nameHasOwner(_ name: String) -> Bool {
        let output = try? runCommand("gdbus", ["call", "--address", systemBus.address, "--dest", "org.freedesktop.DBus",
                                               "--object-path", "/org/freedesktop/DBus", "--method",
                                               "org.freedesktop.DBus.NameHasOwner", name], in: directory, timeout: 5)
        return output?.contains("true") ?? false
    }

    /// A peervoiced inside this namespace on this host's buses.
    public func startDaemon(name: String, arguments: [String] = [], sessionBus: PrivateBus? = nil) throws -> Daemon {
        try Daemon(bus: sessionBus ?? self.sessionBus, in: directory, name: name, arguments: arguments,
                   environment: ["DBUS_SYSTEM_BUS_ADDRESS": systemBus.address],
                   launcher: ["ip", "netns", "exec", namespace])
    }

    func stop() {
        stopAvahi()
        sessionBus?.stop()
        systemBus?.stop()
        busDirectories.forEach { $0.remove() }
        directory.remove()
    }
}

/// Two hosts on one LAN: namespaces `pvlan<pid>a` and `pvlan<pid>b` joined by a veth pair,
/// 10.77.0.1 and 10.77.0.2 and their link-local IPv6 addresses (or, `ipv6Only`, only those),
/// each with its buses and avahi-daemon running.
public final class LANPair {
    public let a: LANHost
    public let b: LANHost
    private let scratch: TemporaryDirectory

    public init(ipv6Only: Bool = false) throws {
        let tag = "pvlan\(getpid())"
        scratch = try TemporaryDirectory("peervoice-\(tag)")
        a = try LANHost(namespace: tag + "a", interface: "veth-\(getpid())a", address: "10.77.0.1", hostName: "pv-lan-a", ipv6Only: ipv6Only)
        b = try LANHost(namespace: tag + "b", interface: "veth-\(getpid())b", address: "10.77.0.2", hostName: "pv-lan-b", ipv6Only: ipv6Only)
        do {
            try setUpNetwork()
            for host in [a, b] {
                try host.startBuses()
                try host.startAvahi()
            }
        } catch {
            stop()
            throw error
        }
    }

    private func setUpNetwork() throws {
        let ip = { (arguments: [String]) throws in _ = try runCommand("ip", arguments, in: self.scratch) }
        for host in [a, b] { try ip(["netns", "add", host.namespace]) }
        try ip(["link", "add", a.interface, "type", "veth", "peer", "name", b.interface])
        for host in [a, b] {
            try ip(["link", "set", host.interface, "netns", host.namespace])
            if !host.ipv6Only { try ip(["-n", host.namespace, "addr", "add", host.address + "/24", "dev", host.interface]) }
            try ip(["-n", host.namespace, "link", "set", "lo", "up"])
            try ip(["-n", host.namespace, "link", "set", host.interface, "up"])
        }
        // The kernel gives each veth a link-local IPv6 address once duplicate address detection
        // has passed (about a second); avahi-daemon only uses addresses that are ready.
        if a.ipv6Only {
            for host in [a, b] {
                guard eventually(timeout: 10, {
                    let shown = (try? runCommand("ip", ["-n", host.namespace, "-6", "addr", "show", "dev", host.interface], in: self.scratch)) ?? ""
                    return shown.contains("fe80:") && !shown.contains("tentative")
                }) else { throw HarnessError("no link-local IPv6 address on \(host.interface)") }
            }
        }
    }

    /// Stops every process of both hosts and deletes the namespaces (and with them the veth pair).
    public func stop() {
        a.stop()
        b.stop()
        for host in [a, b] { _ = try? runCommand("ip", ["netns", "del", host.namespace], in: scratch) }
        scratch.remove()
    }
}
