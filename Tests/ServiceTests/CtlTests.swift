import Foundation
import FoundationXML
import GIO
import Glibc
import TestHarness
import XCTest

/// peervoicectl, run as a child process against real peervoiced processes on private buses.
final class CtlTests: XCTestCase {
    private var directory: TemporaryDirectory!
    /// Run in reverse order by tearDown: daemons, then buses, then directories.
    private var cleanups: [() -> Void] = []
    private let started = StartedPeers()
    private var runCount = 0

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("peervoice-ctl")
    }

    override func tearDown() {
        cleanups.reversed().forEach { $0() }
        cleanups = []
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
        directory?.remove()
    }

    private static var peervoicectl: String { Binaries.directory + "/peervoicectl" }
    private static var packageDirectory: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
    }

    // MARK: Helpers

    /// One peervoiced on its own private bus, listening on 127.0.0.1 unless `listen` is false.
    private func node(_ name: String, listen: Bool = true) throws -> TestPeer {
        try started.make(name, listens: listen)
    }

    private struct Run: CustomStringConvertible {
        let arguments: [String]
        let status: Int32?
        /// stdout and stderr, interleaved as written.
        let output: String
        var description: String { "peervoicectl \(arguments) exited \(status.map(String.init) ?? "-"): \(output)" }
    }

    /// Runs peervoicectl to its end with the session bus at `bus` (a dead address when nil).
    private func ctl(_ arguments: [String], bus: String?, stdin: String? = nil, stdinBytes: [UInt8]? = nil,
                     environment extra: [String: String] = [:], timeout: Double = 30) throws -> Run {
        runCount += 1
        var stdinPath: String?
        if let bytes = stdinBytes ?? stdin.map({ Array($0.utf8) }) {
            stdinPath = directory.path + "/stdin-\(runCount)"
            try Data(bytes).write(to: URL(fileURLWithPath: stdinPath!))
        }
        let process = try ChildProcess(Self.peervoicectl, arguments, environment: environment(bus: bus).merging(extra) { $1 },
                                       logPath: directory.path + "/ctl-\(runCount).log", stdinPath: stdinPath)
        let status = process.wait(timeout: timeout)
        if status == nil { process.kill() }
        return Run(arguments: arguments, status: status, output: process.log)
    }

    private func environment(bus: String?) -> [String: String] {
        ["DBUS_SESSION_BUS_ADDRESS": bus ?? "unix:path=\(directory.path)/no-bus-here"]
    }

    /// Starts `peervoicectl monitor` and waits until it says it is watching.
    private func startMonitor(_ arguments: [String] = [], bus: String, name: String) throws -> ChildProcess {
        let monitor = try ChildProcess(Self.peervoicectl, ["monitor"] + arguments, environment: environment(bus: bus),
                                       logPath: directory.path + "/\(name).log")
        cleanups.append { monitor.kill() }
        XCTAssertTrue(eventually(timeout: 10) { monitor.log.contains("peervoicectl: monitoring org.example.PeerVoice") },
                      "monitor did not start: \(monitor.log)")
        return monitor
    }

    /// What peervoicectl must print when `method` fails: "peervoicectl: ShortName: message".
    private func expectedError(_ client: APIClient, _ method: String, _ arguments: [Variant],
                               file: StaticString = #filePath, line: UInt = #line) -> String {
        do {
            try client.call(method, arguments)
            XCTFail("\(method) succeeded", file: file, line: line)
            return ""
        } catch {
            return "peervoicectl: \(error.name.split(separator: ".").last!): \(error.message)\n"
        }
    }

    /// "Key:  value" lines as a dictionary.
    private static func fields(_ output: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in output.split(separator: "\n") where !line.hasPrefix(" ") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return fields
    }

    private static func columns(_ line: Substring) -> [String] {
        line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
    }

    /// Parses ISO 8601 with a numeric offset, with or without fractional seconds.
    private static func isoDate(_ text: String, fractional: Bool) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = fractional ? [.withInternetDateTime, .withFractionalSeconds] : [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// A `monitor` timestamp: local ISO 8601 with milliseconds and a +HH:MM offset, close to now.
    private static func assertRecentTimestamp(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNotNil(text.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$"#, options: .regularExpression),
                        "timestamp '\(text)'", file: file, line: line)
        guard let date = isoDate(text, fractional: true) else {
            return XCTFail("unparsable timestamp '\(text)'", file: file, line: line)
        }
        XCTAssertLessThan(abs(date.timeIntervalSinceNow), 120, "timestamp '\(text)'", file: file, line: line)
    }

    /// Polls History until every message with `peer` has `status`.
    private func waitForHistory(_ client: APIClient, peer: String, count: Int, status: String) -> Bool {
        eventually(timeout: 10) {
            guard let rows = try? client.call("History", [Variant(peer), Variant(UInt32(100))])[0].children else { return false }
            return rows.count == count && rows.allSatisfy { $0[1].string == status }
        }
    }

    /// Each line's blank-separated columns.
    private static func rows(_ output: String) -> [[String]] {
        output.split(separator: "\n").map(columns)
    }

    /// First contact through the API: `a` connects to `b` and both people accept the code.
    /// Returns the code both were shown.
    @discardableResult
    private func pair(_ a: TestPeer, _ b: TestPeer, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        var reply: Result<Variant, BusError>?
        a.client.connection.callAsync(destination: APIClient.name, path: APIClient.path, interface: APIClient.interface,
                                      method: "Connect", arguments: Variant(tuple: [Variant(b.address)]), timeout: .seconds(90)) {
            reply = $0
        }
        let promptA = try XCTUnwrap(a.client.waitForSignal("PairingRequested") { $0.arguments[0].string == b.id },
                                    a.daemon.process.log, file: file, line: line)
        let promptB = try XCTUnwrap(b.client.waitForSignal("PairingRequested") { $0.arguments[0].string == a.id },
                                    b.daemon.process.log, file: file, line: line)
        let code = try XCTUnwrap(promptA.arguments[2].string)
        XCTAssertEqual(promptB.arguments[2].string, code, "both people see the same code", file: file, line: line)
        try a.client.call("ConfirmPairing", [Variant(b.id), Variant(true)])
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        XCTAssertTrue(eventually(timeout: 15) { reply != nil }, "Connect did not answer", file: file, line: line)
        if case .failure(let error)? = reply { throw error }
        return code
    }

    // MARK: Command line

    func testHelpAndVersionNeedNoBus() throws {
        let version = try ctl(["--version"], bus: nil)
        XCTAssertEqual(version.status, 0, "\(version)")
        XCTAssertEqual(version.output, "peervoicectl 0.1.0\n")

        let help = try ctl(["--help"], bus: nil)
        XCTAssertEqual(help.status, 0, "\(help)")
        XCTAssertTrue(help.output.hasPrefix("Usage: peervoicectl "), help.output)
        let commands = ["status", "peers", "discover", "connect", "disconnect", "send", "history", "remove",
                        "mute", "name", "visible", "confirm", "voice", "volume", "mute-peer", "monitor", "open", "listen",
                        "join", "rooms", "room-send", "room-register", "leave", "shortcut"]
        for command in commands {
            XCTAssertTrue(help.output.contains("\n  \(command) "), "--help lists \(command): \(help.output)")
            for arguments in [[command, "--help"], ["help", command], [command, "-h"]] {
                let run = try ctl(arguments, bus: nil)
                XCTAssertEqual(run.status, 0, "\(run)")
                XCTAssertTrue(run.output.hasPrefix("Usage: peervoicectl \(command)"), "\(run)")
            }
        }
        XCTAssertTrue(try ctl(["history", "--help"], bus: nil).output.contains("--max N"))
        XCTAssertTrue(try ctl(["monitor", "--help"], bus: nil).output.contains("--json"))
        XCTAssertEqual(try ctl(["help"], bus: nil).output, help.output)
        XCTAssertTrue(help.output.contains("3 the service is not running"), help.output)
    }

    /// GNOME 43-47 has no GlobalShortcuts portal: `shortcut install` adds a custom keyboard
    /// shortcut next to the person's own (real GSettings with GNOME's schemas, in a keyfile of the
    /// test's), its command mutes the service, and `shortcut remove` takes only it away.
    func testAGnomeShortcutIsAddedBesideTheOthersMutesAndIsRemovedAlone() throws {
        let settings = ["GSETTINGS_BACKEND": "keyfile", "XDG_CONFIG_HOME": directory.path + "/config"]
        func gsettings(_ arguments: [String]) throws -> String {
            try runCommand("gsettings", arguments, environment: settings, in: directory).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let list = ["org.gnome.settings-daemon.plugins.media-keys", "custom-keybindings"]
        let theirs = "/org/gnome/settings-daemon/plugins/media-keys/custom-keybindings/custom0/"
        let ours = "/org/gnome/settings-daemon/plugins/media-keys/custom-keybindings/peervoice-mute/"
        let keybinding = { (path: String) in "org.gnome.settings-daemon.plugins.media-keys.custom-keybinding:" + path }
        _ = try gsettings(["set", keybinding(theirs), "name", "Terminal"])
        _ = try gsettings(["set", keybinding(theirs), "binding", "<Super>t"])
        _ = try gsettings(["set"] + list + ["['\(theirs)']"])

        let install = try ctl(["shortcut", "install", "ctrl+alt+m"], bus: nil, environment: settings)
        XCTAssertEqual(install.status, 0, "\(install)")
        XCTAssertEqual(try gsettings(["get"] + list), "['\(theirs)', '\(ours)']")
        XCTAssertEqual(try gsettings(["get", keybinding(ours), "binding"]), "'<Control><Alt>m'")
        let command = try gsettings(["get", keybinding(ours), "command"])
        XCTAssertEqual(command, "'\(Self.peervoicectl) mute toggle'")
        // Installing again changes it in place; the list keeps one entry of ours.
        XCTAssertEqual(try ctl(["shortcut", "install", "super+F8"], bus: nil, environment: settings).status, 0)
        XCTAssertEqual(try gsettings(["get"] + list), "['\(theirs)', '\(ours)']")
        XCTAssertEqual(try gsettings(["get", keybinding(ours), "binding"]), "'<Super>F8'")

        // What GNOME runs when the keys are pressed mutes the service, and again unmutes it.
        let a = try node("alice")
        for expected in ["muted", "unmuted"] {
            let words = command.trimmingCharacters(in: CharacterSet(charactersIn: "'")).split(separator: " ").map(String.init)
            let run = try ctl(Array(words.dropFirst()), bus: a.bus.address)
            XCTAssertEqual(run.output, expected + "\n", "\(run)")
        }

        let remove = try ctl(["shortcut", "remove"], bus: nil, environment: settings)
        XCTAssertEqual(remove.status, 0, "\(remove)")
        XCTAssertEqual(try gsettings(["get"] + list), "['\(theirs)']")
        XCTAssertEqual(try gsettings(["get", keybinding(ours), "binding"]), "''")
        XCTAssertEqual(try gsettings(["get", keybinding(theirs), "name"]), "'Terminal'")

        for keys in ["m", "ctrl+alt", "ctrl+alt+", "hyper+m", "ctrl+alt+m+n", "ctrl+ä"] {
            let bad = try ctl(["shortcut", "install", keys], bus: nil, environment: settings)
            XCTAssertEqual(bad.status, 2, "\(bad)")
        }
        XCTAssertEqual(try gsettings(["get"] + list), "['\(theirs)']", "a refused install changed nothing")
    }

    func testUsageErrorsExitTwoBeforeTouchingTheBus() throws {
        // No bus at all: a usage error must be found before peervoicectl would exit 3 for that.
        let cases: [[String]] = [
            [], ["frobnicate"], ["--frobnicate"], ["status", "extra"], ["peers", "--bogus"], ["peers", "--ids=yes"],
            ["connect"], ["connect", "a", "b"], ["disconnect"], ["remove"], ["send"], ["send", "P", "-x"],
            ["history"], ["history", "P", "--max"], ["history", "P", "--max", "many"], ["history", "P", "--max=-1"],
            ["mute"], ["mute", "maybe"], ["mute", "on", "off"], ["confirm", "P"], ["confirm", "P", "perhaps"],
            ["voice", "start"], ["voice", "jump", "P"], ["name"], ["visible", "lan"], ["visible", "wifi", "on"],
            ["visible", "lan", "yes"], ["discover", "--timeout", "0"], ["discover", "--timeout", "soon"],
            ["discover", "extra"], ["monitor", "--json=yes"], ["monitor", "--xml"], ["help", "nothing"],
        ]
        for arguments in cases {
            let run = try ctl(arguments, bus: nil)
            XCTAssertEqual(run.status, 2, "\(run)")
            XCTAssertTrue(run.output.hasPrefix("peervoicectl: "), "\(run)")
            XCTAssertTrue(run.output.contains("Try 'peervoicectl"), "\(run)")
        }
        let mute = try ctl(["mute", "maybe"], bus: nil)
        XCTAssertEqual(mute.output, """
            peervoicectl: mute: expected on, off or toggle, not 'maybe'
            Usage: peervoicectl mute on|off|toggle
            Try 'peervoicectl mute --help'.

            """)
        let dash = try ctl(["send", "P", "-x"], bus: nil)
        XCTAssertTrue(dash.output.contains("put -- before text"), "\(dash)")
        // Text from standard input must be UTF-8.
        let binary = try ctl(["send", "ip:127.0.0.1:9"], bus: nil, stdinBytes: [0x68, 0xff, 0xfe, 0x0a])
        XCTAssertEqual(binary.status, 2, "\(binary)")
        XCTAssertTrue(binary.output.contains("not UTF-8"), "\(binary)")
    }

    func testNoServiceExitsThreeAndSaysHowToStartIt() throws {
        // A bus without peervoiced (and nothing to activate it).
        let bus = try privateBus(activating: nil, in: directory)
        for arguments in [["status"], ["peers"], ["peers", "--ids"], ["mute", "on"], ["send", "ip:127.0.0.1:9", "hi"],
                          ["history", "ip:127.0.0.1:9"], ["connect", "ip:127.0.0.1:9"], ["discover", "--timeout", "1"]] {
            let run = try ctl(arguments, bus: bus.address)
            XCTAssertEqual(run.status, 3, "\(run)")
            XCTAssertTrue(run.output.hasPrefix("peervoicectl: the PeerVoice service is not running"), "\(run)")
            XCTAssertTrue(run.output.contains("systemctl --user start peervoiced"), "\(run)")
            XCTAssertTrue(run.output.contains("make run"), "\(run)")
            XCTAssertFalse(run.output.contains("Fatal error"), "\(run)")
        }
        // No bus at all.
        for arguments in [["status"], ["monitor"], ["mute", "toggle"]] {
            let run = try ctl(arguments, bus: nil)
            XCTAssertEqual(run.status, 3, "\(run)")
            XCTAssertTrue(run.output.hasPrefix("peervoicectl: cannot connect to the session bus: "), "\(run)")
            XCTAssertTrue(run.output.contains("DBUS_SESSION_BUS_ADDRESS"), "\(run)")
        }
    }

    // MARK: One service

    func testStatusAndPeersOfAFreshService() throws {
        let a = try node("alpha")
        let status = try ctl(["status"], bus: a.bus.address)
        XCTAssertEqual(status.status, 0, "\(status)")
        let fields = Self.fields(status.output)
        XCTAssertEqual(fields["Version"], try a.client.property("Version").string, status.output)
        XCTAssertEqual(fields["Id"], try a.client.property("Id").string, status.output)
        XCTAssertEqual(fields["Fingerprint"], try a.client.property("Fingerprint").string, status.output)
        XCTAssertEqual(fields["Muted"], "no", status.output)
        XCTAssertEqual(fields["Discovering"], "no", status.output)
        XCTAssertEqual(fields["ListenAddress"], "127.0.0.1:\(a.port)", status.output)
        XCTAssertEqual(fields["Adapter"], "none (no Bluetooth)", status.output)
        XCTAssertEqual(fields["Discovery"], "none (neither BlueZ nor Avahi)", status.output)
        XCTAssertEqual(fields["Peers"], "none", status.output)
        XCTAssertEqual(fields["Name"], "alpha", status.output)
        XCTAssertEqual(fields["Visible"], "bluetooth, lan", status.output)
        XCTAssertEqual(fields["Processing"], "echo-cancel on, noise-suppression on, high-pass on, gain-control off", status.output)
        XCTAssertTrue(status.output.contains("\nListenAddress:  127.0.0.1:\(a.port)\n"), status.output)

        let peers = try ctl(["peers"], bus: a.bus.address)
        XCTAssertEqual(peers.status, 0, "\(peers)")
        XCTAssertEqual(peers.output, "no known peers (peervoicectl connect PEER adds one)\n")
        let ids = try ctl(["peers", "--ids"], bus: a.bus.address)
        XCTAssertEqual(ids.status, 0, "\(ids)")
        XCTAssertEqual(ids.output, "")

        // Without --listen, not discoverable and with no known peers, nothing listens.
        let b = try node("bravo", listen: false)
        let off = try ctl(["status"], bus: b.bus.address)
        XCTAssertEqual(Self.fields(off.output)["ListenAddress"], "none (not listening for IP peers)", off.output)
    }

    func testMuteOnOffToggleChangeMuted() throws {
        let a = try node("alpha", listen: false)
        let bus = a.bus.address
        let steps: [(String, String, Bool)] = [
            ("on", "muted", true), ("on", "muted", true), ("toggle", "unmuted", false), ("toggle", "muted", true),
            ("off", "unmuted", false), ("off", "unmuted", false),
        ]
        for (argument, printed, muted) in steps {
            let run = try ctl(["mute", argument], bus: bus)
            XCTAssertEqual(run.status, 0, "\(run)")
            XCTAssertEqual(run.output, printed + "\n", "mute \(argument)")
            XCTAssertEqual(try a.client.property("Muted").bool, muted, "after mute \(argument)")
        }
        _ = try ctl(["mute", "on"], bus: bus)
        XCTAssertEqual(Self.fields(try ctl(["status"], bus: bus).output)["Muted"], "yes")
    }

    func testNameAndVisibleChangeTheSettings() throws {
        let a = try node("alpha", listen: false)
        let bus = a.bus.address
        let renamed = try ctl(["name", "Kitchen", "laptop"], bus: bus)
        XCTAssertEqual(renamed.status, 0, "\(renamed)")
        XCTAssertEqual(renamed.output, "name: Kitchen laptop\n")
        XCTAssertEqual(try a.client.property("Name").string, "Kitchen laptop")
        let refused = try ctl(["name", " "], bus: bus)
        XCTAssertEqual(refused.status, 1, "\(refused)")
        XCTAssertTrue(refused.output.hasPrefix("peervoicectl: InvalidArgument: the name is empty"), "\(refused)")

        let hidden = try ctl(["visible", "lan", "off"], bus: bus)
        XCTAssertEqual(hidden.status, 0, "\(hidden)")
        XCTAssertEqual(hidden.output, "not visible on lan\n")
        XCTAssertEqual(try a.client.property("Visible").strings, ["bluetooth"])
        let fields = Self.fields(try ctl(["status"], bus: bus).output)
        XCTAssertEqual(fields["Name"], "Kitchen laptop")
        XCTAssertEqual(fields["Visible"], "bluetooth")
        _ = try ctl(["visible", "bluetooth", "off"], bus: bus)
        XCTAssertEqual(Self.fields(try ctl(["status"], bus: bus).output)["Visible"], "nowhere (peervoicectl visible lan on)")
    }

    func testServiceErrorsExitOneWithTheServiceMessage() throws {
        let a = try node("alpha")
        let bus = a.bus.address
        let unknown = "ip:127.0.0.1:9"
        let cases: [([String], String, [Variant])] = [
            (["disconnect", unknown], "Disconnect", [Variant(unknown)]),
            (["remove", unknown], "RemovePeer", [Variant(unknown)]),
            (["history", unknown], "History", [Variant(unknown), Variant(UInt32(20))]),
            (["history", unknown, "--max", "3"], "History", [Variant(unknown), Variant(UInt32(3))]),
            (["send", unknown, "hello"], "Send", [Variant(unknown), Variant("hello")]),
            (["send", "", "hello"], "Send", [Variant(""), Variant("hello")]),
            (["send", unknown, String(repeating: "x", count: 65_537)], "Send",
             [Variant(unknown), Variant(String(repeating: "x", count: 65_537))]),
            (["voice", "start", unknown], "StartVoice", [Variant(unknown)]),
            (["voice", "stop", unknown], "StopVoice", [Variant(unknown)]),
            (["volume", unknown, "0.5"], "SetVolume", [Variant(unknown), Variant(0.5)]),
            (["volume", unknown, "3"], "SetVolume", [Variant(unknown), Variant(3.0)]),
            (["mute-peer", unknown, "on"], "SetPeerMuted", [Variant(unknown), Variant(true)]),
            (["confirm", unknown, "yes"], "ConfirmPairing", [Variant(unknown), Variant(true)]),
            (["confirm", unknown, "no"], "ConfirmPairing", [Variant(unknown), Variant(false)]),
            (["disconnect", "nonsense"], "Disconnect", [Variant("nonsense")]),
            (["discover"], "StartDiscovery", []),
            (["discover", "--timeout", "5"], "StartDiscovery", []),
        ]
        for (arguments, method, callArguments) in cases {
            let expected = expectedError(a.client, method, callArguments)
            let started = Date()
            let run = try ctl(arguments, bus: bus)
            XCTAssertEqual(run.status, 1, "\(run)")
            XCTAssertEqual(run.output, expected, "peervoicectl \(arguments.map { $0.prefix(30) })")
            XCTAssertLessThan(Date().timeIntervalSince(started), 4, "\(arguments.first!) took too long")
        }
        // The ones the brief names, spelled out.
        XCTAssertTrue(try ctl(["history", unknown], bus: bus).output
            .hasPrefix("peervoicectl: UnknownPeer: ip:127.0.0.1:9 "))
        XCTAssertTrue(try ctl(["discover"], bus: bus).output.hasPrefix("peervoicectl: NotAvailable: "))
        XCTAssertTrue(try ctl(["send", unknown, String(repeating: "x", count: 65_537)], bus: bus).output
            .hasPrefix("peervoicectl: TooLarge: "))

        // Connect to a port nobody listens on: progress, then the service's error.
        let expected = expectedError(a.client, "Connect", [Variant(unknown)])
        let connect = try ctl(["connect", unknown], bus: bus)
        XCTAssertEqual(connect.status, 1, "\(connect)")
        XCTAssertEqual(connect.output, "connecting to \(unknown)...\n" + expected)
        XCTAssertTrue(expected.hasPrefix("peervoicectl: Failed: "), expected)
    }

    // MARK: Two services

    func testConnectSendHistoryDisconnectRemoveBetweenTwoServices() throws {
        let a = try node("alpha")
        let b = try node("bravo")
        let busA = a.bus.address

        // connect: first contact, so both people compare the code and confirm (with peervoicectl).
        let connect = try start(["connect", b.address], bus: busA)
        let theirPrompt = try XCTUnwrap(b.client.waitForSignal("PairingRequested") { $0.arguments[0].string == a.id },
                                        b.daemon.process.log)
        let code = try XCTUnwrap(theirPrompt.arguments[2].string)
        XCTAssertNotNil(code.range(of: #"^[0-9]{6}$"#, options: .regularExpression), code)
        let prompt = "pairing with \(b.id) (bravo): compare code \(code), then run: peervoicectl confirm \(b.id) yes"
        XCTAssertTrue(eventually(timeout: 10) { connect.log.contains(prompt + "\n") }, connect.log)
        XCTAssertTrue(connect.isRunning, "connect must wait for the confirmation: \(connect.log)")
        let confirmHere = try ctl(["confirm", b.id, "yes"], bus: busA)
        XCTAssertEqual(confirmHere.status, 0, "\(confirmHere)")
        XCTAssertEqual(confirmHere.output, "accepted pairing with \(b.id)\n")
        let confirmThere = try ctl(["confirm", a.id, "yes"], bus: b.bus.address)
        XCTAssertEqual(confirmThere.status, 0, "\(confirmThere)")
        XCTAssertEqual(connect.wait(timeout: 15), 0, connect.log)
        XCTAssertEqual(connect.log, "connecting to \(b.address)...\n\(b.address) is \(b.id)\npairing with \(b.id)...\n\(prompt)\nconnected to \(b.id) (bravo)\n")
        let again = try ctl(["connect", b.id], bus: busA)
        XCTAssertEqual(again.status, 0, "\(again)")
        XCTAssertEqual(again.output, "connected to \(b.id) (bravo)\n")
        XCTAssertTrue(eventually(timeout: 10) {
            (try? b.client.call("ListPeers")[0].children.contains { $0[0].string == a.id && $0[3].string == "connected" }) == true
        }, "bravo does not see alpha connected")

        // peers and status
        // peer: one peer's id, state, routes and key, by its address or by its id.
        let shown = try ctl(["peer", b.address], bus: busA)
        XCTAssertEqual(shown.status, 0, "\(shown)")
        let shownFields = Self.fields(shown.output)
        XCTAssertEqual(shownFields["Id"], b.id, shown.output)
        XCTAssertEqual(shownFields["Name"], "bravo", shown.output)
        XCTAssertEqual(shownFields["State"], "connected", shown.output)
        XCTAssertEqual(shownFields["Paired"], "yes", shown.output)
        XCTAssertEqual(shownFields["Fingerprint"], try b.client.property("Fingerprint").string,
                       "A shows the key B's own service shows")
        XCTAssertEqual(shownFields["Routes"]?.hasPrefix(b.address + " (last seen "), true, shown.output)
        XCTAssertEqual(try ctl(["peer", b.id], bus: busA).output, shown.output)
        let nobody = try ctl(["peer", "ip:127.0.0.1:1"], bus: busA)
        XCTAssertEqual(nobody.status, 1, "\(nobody)")
        XCTAssertTrue(nobody.output.hasPrefix("peervoicectl: UnknownPeer: ip:127.0.0.1:1 "), "\(nobody)")

        let peers = try ctl(["peers"], bus: busA)
        XCTAssertEqual(peers.status, 0, "\(peers)")
        XCTAssertEqual(Self.rows(peers.output), [["ID", "NAME", "TRANSPORT", "STATE"], [b.id, "bravo", "ip", "connected"]])
        XCTAssertEqual(try ctl(["peers", "--ids"], bus: busA).output, b.id + "\n")
        XCTAssertEqual(Self.rows(try ctl(["peers"], bus: b.bus.address).output).last, [a.id, "alpha", "ip", "connected"])
        let status = try ctl(["status"], bus: busA)
        XCTAssertEqual(Self.fields(status.output)["Peers"], "1", status.output)
        XCTAssertTrue(status.output.contains("\n  ID "), status.output)
        XCTAssertEqual(Self.rows(status.output).last, [b.id, "bravo", "ip", "connected"])

        // send: arguments, stdin without TEXT, stdin with "-"
        let messageID = #"^[0-9a-f]{32}\n$"#
        let sent = try ctl(["send", b.id, "hello", "wörld 🎉"], bus: busA)
        XCTAssertEqual(sent.status, 0, "\(sent)")
        XCTAssertNotNil(sent.output.range(of: messageID, options: .regularExpression), "\(sent)")
        let multiline = "first line\nsecond — ünïcödé ✓ \"quoted\" \\ tab\t"
        let piped = try ctl(["send", b.id], bus: busA, stdin: multiline + "\n")
        XCTAssertEqual(piped.status, 0, "\(piped)")
        XCTAssertNotNil(piped.output.range(of: messageID, options: .regularExpression), "\(piped)")
        let dashed = try ctl(["send", b.id, "-"], bus: busA, stdin: "dash")
        XCTAssertEqual(dashed.status, 0, "\(dashed)")
        let dashWord = try ctl(["send", b.id, "--", "-5", "degrees"], bus: busA)
        XCTAssertEqual(dashWord.status, 0, "\(dashWord)")
        let ids = [sent, piped, dashed, dashWord].map { $0.output.trimmingCharacters(in: .newlines) }
        let texts = ["hello wörld 🎉", multiline, "dash", "-5 degrees"]

        XCTAssertTrue(waitForHistory(a.client, peer: b.id, count: 4, status: "delivered"),
                      "not delivered: \(a.daemon.process.log)")
        let received = try b.client.call("History", [Variant(a.id), Variant(UInt32(10))])[0].children
        XCTAssertEqual(received.map { $0[0].string! }, ids)
        XCTAssertEqual(received.map { $0[3].string! }, texts, "the text arrives exactly as given")

        // history: local ISO 8601 time, status, id, text as is
        let history = try ctl(["history", b.id], bus: busA)
        XCTAssertEqual(history.status, 0, "\(history)")
        let rows = try a.client.call("History", [Variant(b.id), Variant(UInt32(20))])[0].children
        var expected = ""
        for (index, row) in rows.enumerated() {
            let prefix = #"(?m)^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d) delivered "# + ids[index] + " "
            let match = try XCTUnwrap(history.output.range(of: prefix, options: .regularExpression), history.output)
            let time = String(history.output[match].prefix(25))
            let date = try XCTUnwrap(Self.isoDate(time, fractional: false), time)
            XCTAssertEqual(UInt64(date.timeIntervalSince1970), row[2].uint64! / 1000, "time of \(ids[index])")
            expected += "\(time) delivered \(ids[index]) \(texts[index])\n"
        }
        XCTAssertEqual(history.output, expected)
        let last = try ctl(["history", b.id, "--max", "1"], bus: busA)
        XCTAssertEqual(last.output, String(expected.split(separator: "\n").last!) + "\n")
        XCTAssertEqual(try ctl(["history", b.id, "--max=0"], bus: busA).output, "")
        let theirs = try ctl(["history", a.id], bus: b.bus.address)
        XCTAssertEqual(theirs.output.components(separatedBy: " received ").count - 1, 4, theirs.output)

        // Refusing the code here fails the connect with the service's Rejected error.
        let c = try node("charlie")
        let refused = try start(["connect", c.address], bus: busA)
        XCTAssertTrue(eventually(timeout: 10) { refused.log.contains(": compare code ") }, refused.log)
        let no = try ctl(["confirm", c.id, "no"], bus: busA)
        XCTAssertEqual(no.output, "refused pairing with \(c.id)\n")
        XCTAssertEqual(refused.wait(timeout: 15), 1, refused.log)
        XCTAssertTrue(refused.log.hasSuffix("peervoicectl: Rejected: pairing with \(c.id) was refused here with ConfirmPairing\n"),
                      refused.log)

        // voice: these daemons have no PipeWire, and StartVoice says so; StopVoice with no voice
        // running is done at once
        let expectedVoice = expectedError(a.client, "StartVoice", [Variant(b.id)])
        XCTAssertTrue(expectedVoice.hasPrefix("peervoicectl: NotAvailable: "), expectedVoice)
        XCTAssertTrue(expectedVoice.contains("PipeWire"), expectedVoice)
        let start = try ctl(["voice", "start", b.id], bus: busA)
        XCTAssertEqual(start.status, 1, "\(start)")
        XCTAssertEqual(start.output, expectedVoice)
        let stop = try ctl(["voice", "stop", b.id], bus: busA)
        XCTAssertEqual(stop.status, 0, "\(stop)")
        XCTAssertEqual(stop.output, "voice stopped with \(b.id)\n")

        // disconnect
        let disconnect = try ctl(["disconnect", b.id], bus: busA)
        XCTAssertEqual(disconnect.status, 0, "\(disconnect)")
        XCTAssertEqual(disconnect.output, "disconnected from \(b.id)\n")
        XCTAssertTrue(eventually(timeout: 5) {
            Self.rows((try? self.ctl(["peers"], bus: busA))?.output ?? "").last == [b.id, "bravo", "ip", "disconnected"]
        })
        let twice = try ctl(["disconnect", b.id], bus: busA)
        XCTAssertEqual(twice.status, 1, "\(twice)")
        XCTAssertTrue(twice.output.hasPrefix("peervoicectl: NotConnected: \(b.id) "), "\(twice)")

        // A message to a disconnected peer is queued...
        let queued = try ctl(["send", b.id, "later"], bus: busA)
        XCTAssertEqual(queued.status, 0, "\(queued)")
        let queuedID = queued.output.trimmingCharacters(in: .newlines)
        XCTAssertTrue(try ctl(["history", b.id], bus: busA).output.contains(" queued    \(queuedID) later\n"))

        // ...and fails when the peer is removed.
        let remove = try ctl(["remove", b.id], bus: busA)
        XCTAssertEqual(remove.status, 0, "\(remove)")
        XCTAssertEqual(remove.output, "removed \(b.id)\n")
        XCTAssertNotNil(a.client.waitForSignal("MessageFailed") { $0.arguments[1].string == queuedID })
        XCTAssertEqual(try ctl(["peers"], bus: busA).output, "no known peers (peervoicectl connect PEER adds one)\n")
        XCTAssertEqual(try ctl(["peers", "--ids"], bus: busA).output, "")
        let gone = try ctl(["history", b.id], bus: busA)
        XCTAssertEqual(gone.status, 1, "\(gone)")
        XCTAssertTrue(gone.output.hasPrefix("peervoicectl: UnknownPeer: \(b.id) "), "\(gone)")
        let removeAgain = try ctl(["remove", b.id], bus: busA)
        XCTAssertEqual(removeAgain.status, 1, "\(removeAgain)")
    }

    func testMonitorPrintsEverySignalAsOneFlushedLine() throws {
        let a = try node("alpha")
        let b = try node("bravo")
        let monitorA = try startMonitor(bus: a.bus.address, name: "monitor-a")
        let monitorB = try startMonitor(bus: b.bus.address, name: "monitor-b")

        /// Waits (briefly: the lines must be flushed as they happen) for `line` after the timestamp.
        func expectLine(_ monitor: ChildProcess, _ line: String, file: StaticString = #filePath, lineNumber: UInt = #line) {
            XCTAssertTrue(eventually(timeout: 3) {
                monitor.log.split(separator: "\n").contains { $0.split(separator: " ", maxSplits: 1).last == Substring(line) }
            }, "no line '\(line)' in: \(monitor.log)", file: file, line: lineNumber)
        }

        let code = try pair(a, b)
        expectLine(monitorA, "PeerStateChanged peer=\(b.address) state=connecting")
        expectLine(monitorA, "PeerIdentified address=\(b.address) peer=\(b.id)")
        expectLine(monitorA, "PeerStateChanged peer=\(b.id) state=pairing")
        expectLine(monitorA, #"PairingRequested peer=\#(b.id) name="bravo" passkey=\#(code)"#)
        expectLine(monitorB, #"PairingRequested peer=\#(a.id) name="alpha" passkey=\#(code)"#)
        expectLine(monitorA, "PeerStateChanged peer=\(b.id) state=connected")
        expectLine(monitorB, "PeerStateChanged peer=\(a.id) state=connected")

        let text = "two\nlines, \"quoted\" \\ back\ttab é🎉\r"
        let messageID = try XCTUnwrap(try a.client.call("Send", [Variant(b.id), Variant(text)])[0].string)
        expectLine(monitorB, #"MessageReceived peer=\#(a.id) message_id=\#(messageID) text="two\nlines, \"quoted\" \\ back\ttab é🎉\r""#)
        expectLine(monitorA, "MessageDelivered peer=\(b.id) message_id=\(messageID)")

        try b.client.call("Mute", [Variant(true)])
        expectLine(monitorB, "MuteChanged muted=true")
        try b.client.call("ToggleMute")
        expectLine(monitorB, "MuteChanged muted=false")

        try a.client.call("Disconnect", [Variant(b.id)])
        expectLine(monitorA, "PeerStateChanged peer=\(b.id) state=disconnected")
        expectLine(monitorB, "PeerStateChanged peer=\(a.id) state=disconnected")

        try a.client.call("Send", [Variant(b.id), Variant("never")])
        try a.client.call("RemovePeer", [Variant(b.id)])
        XCTAssertTrue(eventually(timeout: 3) { monitorA.log.contains(#"reason="the peer was removed""#) }, monitorA.log)

        // Every line but the banner (stderr) is one event: a timestamp, a signal name, then the
        // signal's arguments as NAME=VALUE with the XML's names.
        let xmlSignals = try Self.signalArguments()
        for monitor in [monitorA, monitorB] {
            let lines = monitor.log.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            XCTAssertEqual(lines.first, "peervoicectl: monitoring org.example.PeerVoice; Ctrl-C to stop")
            for line in lines.dropFirst() {
                let parts = line.split(separator: " ", maxSplits: 2)
                XCTAssertEqual(parts.count, 3, String(line))
                guard parts.count == 3 else { continue }
                Self.assertRecentTimestamp(String(parts[0]))
                let names = String(parts[2]).matches(of: /(?:^| )([a-z_]+)=/).map { String($0.output.1) }
                XCTAssertEqual(names, xmlSignals[String(parts[1])], "arguments of '\(line)'")
            }
            monitor.signal(SIGINT)
            XCTAssertEqual(monitor.wait(timeout: 5), 0, monitor.log)
        }
        XCTAssertEqual(monitorB.log.split(separator: "\n").filter { $0.contains(" MessageReceived ") }.count, 1,
                       "a multi-line text stays on one line")
    }

    func testMonitorJSONLinesParseAndUseTheXMLArgumentNames() throws {
        let a = try node("alpha")
        let b = try node("bravo")
        let monitor = try startMonitor(["--json"], bus: b.bus.address, name: "monitor-json")

        let code = try pair(a, b)
        let text = "line one\nline \"two\" \\ ünïcödé 🎉\u{1}"
        let messageID = try XCTUnwrap(try a.client.call("Send", [Variant(b.id), Variant(text)])[0].string)
        try b.client.call("Mute", [Variant(true)])

        var objects: [[String: Any]] = []
        let complete = eventually(timeout: 5) {
            objects = monitor.log.split(separator: "\n").filter { !$0.hasPrefix("peervoicectl: ") }.compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }
            return objects.contains { $0["signal"] as? String == "MuteChanged" }
        }
        XCTAssertTrue(complete, monitor.log)
        monitor.signal(SIGTERM)
        XCTAssertEqual(monitor.wait(timeout: 5), 0, monitor.log)
        let lines = monitor.log.split(separator: "\n").filter { !$0.hasPrefix("peervoicectl: ") }
        XCTAssertEqual(objects.count, lines.count, "every line is one JSON object: \(monitor.log)")

        let xmlSignals = try Self.signalArguments()
        for object in objects {
            let signal = try XCTUnwrap(object["signal"] as? String)
            Self.assertRecentTimestamp(try XCTUnwrap(object["time"] as? String))
            XCTAssertEqual(Set(object.keys), Set(["time", "signal"] + (xmlSignals[signal] ?? ["?"])), "\(object)")
        }
        let states = objects.filter { $0["signal"] as? String == "PeerStateChanged" }
        XCTAssertEqual(states.map { $0["peer"] as? String }, [a.id, a.id])
        XCTAssertEqual(states.map { $0["state"] as? String }, ["pairing", "connected"])
        let pairing = try XCTUnwrap(objects.first { $0["signal"] as? String == "PairingRequested" }, monitor.log)
        XCTAssertEqual(pairing["peer"] as? String, a.id)
        XCTAssertEqual(pairing["name"] as? String, "alpha")
        XCTAssertEqual(pairing["passkey"] as? String, code)
        let message = try XCTUnwrap(objects.first { $0["signal"] as? String == "MessageReceived" }, monitor.log)
        XCTAssertEqual(message["peer"] as? String, a.id)
        XCTAssertEqual(message["message_id"] as? String, messageID)
        XCTAssertEqual(message["text"] as? String, text)
        let mute = try XCTUnwrap(objects.first { $0["signal"] as? String == "MuteChanged" })
        XCTAssertEqual(mute["muted"] as? Bool, true)
        XCTAssertTrue(monitor.log.contains(#""signal": "MuteChanged", "muted": true}"#), monitor.log)
    }

    /// Signal name → argument names, from dbus/org.example.PeerVoice.xml.
    private static func signalArguments() throws -> [String: [String]] {
        let document = try XMLDocument(contentsOf: URL(fileURLWithPath: packageDirectory + "/dbus/org.example.PeerVoice.xml"))
        var signals: [String: [String]] = [:]
        for case let element as XMLElement in try document.nodes(forXPath: "/node/interface/signal") {
            signals[element.attribute(forName: "name")!.stringValue!] =
                element.elements(forName: "arg").map { $0.attribute(forName: "name")!.stringValue! }
        }
        return signals
    }

    // MARK: Paths the daemon cannot reach yet

    /// Stands in for peervoiced where it answers NotAvailable today (discovery, pairing, voice):
    /// serves the interface from the XML on a private bus and plays a scripted peer.
    private final class FakeService {
        static let peer = "AA:BB:CC:DD:EE:FF"
        let connection: DBusConnection
        private var registration: ObjectRegistration?
        private(set) var calls: [String] = []
        private var pendingConnect: MethodCall?

        init(address: String, xml: String) throws {
            connection = try DBusConnection.connect(address: address)
            registration = try connection.registerObject(
                path: APIClient.path, introspectionXML: xml, interface: APIClient.interface,
                methods: { [unowned self] call in handle(call) },
                properties: { name in
                    switch name {
                    case "Muted", "Discovering": Variant(false)
                    case "Version": Variant("0.0.0-fake")
                    default: Variant("")
                    }
                })
            guard try connection.requestName(APIClient.name) == .owned else { throw HarnessError("name taken") }
        }

        private func emit(_ name: String, _ arguments: [Variant]) {
            try? connection.emitSignal(path: APIClient.path, interface: APIClient.interface, name: name,
                                       arguments: Variant(tuple: arguments))
        }

        private func handle(_ call: MethodCall) {
            calls.append(call.method)
            let peer = Variant(Self.peer)
            switch call.method {
            case "StartDiscovery":
                call.reply()
                emit("PeerFound", [peer, Variant("Kitchen radio")])
                emit("PeerFound", [Variant("11:22:33:44:55:66"), Variant("")])
                emit("PeerLost", [Variant("11:22:33:44:55:66")])
            case "Connect":
                // The caller's id is lower case; the service speaks of the normalised one.
                emit("PeerStateChanged", [Variant("00:00:00:00:00:01"), Variant("connecting")])
                emit("PeerStateChanged", [peer, Variant("connecting")])
                emit("PeerStateChanged", [peer, Variant("pairing")])
                emit("PairingRequested", [peer, Variant("Kitchen radio"), Variant("012345")])
                pendingConnect = call
            case "ConfirmPairing":
                call.reply()
                if call.arguments[1].bool == true {
                    emit("PeerStateChanged", [peer, Variant("connected")])
                    pendingConnect?.reply(Variant(tuple: [peer]))
                } else {
                    emit("PeerStateChanged", [peer, Variant("disconnected")])
                    pendingConnect?.fail(name: "org.example.PeerVoice.Error.Rejected", message: "pairing with \(Self.peer) was refused")
                }
                pendingConnect = nil
            case "ListPeers":
                call.reply(Variant(tuple: [Variant(array: [Variant(tuple: [peer, Variant("Kitchen radio"), Variant("bluetooth"),
                                                                            Variant("connected")])], elementType: "(ssss)")]))
            case "StopDiscovery", "StartVoice", "StopVoice":
                call.reply()
            default:
                call.fail(name: "org.example.PeerVoice.Error.Failed", message: "\(call.method) is not faked")
            }
        }
    }

    /// Starts peervoicectl; it runs while this process dispatches the fake service's calls.
    private func start(_ arguments: [String], bus: String) throws -> ChildProcess {
        runCount += 1
        let process = try ChildProcess(Self.peervoicectl, arguments, environment: environment(bus: bus),
                                       logPath: directory.path + "/ctl-\(runCount).log")
        cleanups.append { process.kill() }
        return process
    }

    private func serve(_ arguments: [String], bus: String) throws -> Run {
        let process = try start(arguments, bus: bus)
        eventually(timeout: 10) { !process.isRunning }
        process.kill()
        return Run(arguments: arguments, status: process.status, output: process.log)
    }

    func testDiscoverPairingAndVoiceAgainstAFakeService() throws {
        let bus = try privateBus(activating: nil, in: directory)
        let xml = try String(contentsOfFile: Self.packageDirectory + "/dbus/org.example.PeerVoice.xml", encoding: .utf8)
        let fake = try FakeService(address: bus.address, xml: xml)
        let peer = FakeService.peer

        // discover: every PeerFound and PeerLost, then StopDiscovery at the timeout.
        let started = Date()
        let discover = try serve(["discover", "--timeout", "0.5"], bus: bus.address)
        XCTAssertEqual(discover.status, 0, "\(discover)")
        XCTAssertEqual(discover.output, "found \(peer) (Kitchen radio)\nfound 11:22:33:44:55:66\nlost 11:22:33:44:55:66\n")
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.5)
        XCTAssertEqual(fake.calls, ["StartDiscovery", "StopDiscovery"])

        // discover until Ctrl-C: StopDiscovery too.
        let interrupted = try start(["discover"], bus: bus.address)
        XCTAssertTrue(eventually(timeout: 10) { interrupted.log.contains("lost ") }, interrupted.log)
        interrupted.signal(SIGINT)
        eventually(timeout: 10) { !interrupted.isRunning }
        XCTAssertEqual(interrupted.status, 0, interrupted.log)
        XCTAssertEqual(fake.calls.suffix(2), ["StartDiscovery", "StopDiscovery"])

        // connect: progress, the pairing prompt, and success once confirmed (from another peervoicectl).
        let prompt = "pairing with \(peer) (Kitchen radio): compare code 012345, then run: peervoicectl confirm \(peer) yes"
        for answer in ["yes", "no"] {
            let connect = try start(["connect", peer.lowercased()], bus: bus.address)
            XCTAssertTrue(eventually(timeout: 10) { connect.log.contains(prompt + "\n") }, connect.log)
            let confirm = try serve(["confirm", peer, answer], bus: bus.address)
            XCTAssertEqual(confirm.status, 0, "\(confirm)")
            XCTAssertEqual(confirm.output, answer == "yes" ? "accepted pairing with \(peer)\n" : "refused pairing with \(peer)\n")
            eventually(timeout: 10) { !connect.isRunning }
            let progress = "connecting to \(peer)...\npairing with \(peer)...\n\(prompt)\n"
            if answer == "yes" {
                XCTAssertEqual(connect.status, 0, connect.log)
                XCTAssertEqual(connect.log, progress + "connected to \(peer) (Kitchen radio)\n")
            } else {
                XCTAssertEqual(connect.status, 1, connect.log)
                XCTAssertEqual(connect.log, progress + "peervoicectl: Rejected: pairing with \(peer) was refused\n")
            }
        }

        // voice
        let start = try serve(["voice", "start", peer], bus: bus.address)
        XCTAssertEqual(start.status, 0, "\(start)")
        XCTAssertEqual(start.output, "voice started with \(peer)\n")
        let stop = try serve(["voice", "stop", peer], bus: bus.address)
        XCTAssertEqual(stop.status, 0, "\(stop)")
        XCTAssertEqual(stop.output, "voice stopped with \(peer)\n")
        XCTAssertEqual(fake.calls.suffix(2), ["StartVoice", "StopVoice"])
    }

    // MARK: Completion

    func testBashCompletion() throws {
        let a = try node("alpha")
        let b = try node("bravo")
        try pair(a, b)
        let lines = [
            "peervoicectl ", "peervoicectl mu", "peervoicectl mute ", "peervoicectl voice ", "peervoicectl voice start ", "peervoicectl visible ", "peervoicectl visible lan ",
            "peervoicectl confirm ", "peervoicectl confirm \(b.id) ", "peervoicectl connect pv:",
            "peervoicectl history \(b.id) --", "peervoicectl peers -", "peervoicectl send ", "peervoicectl send \(b.id) ",
            "peervoicectl help re", "peervoicectl --ver", "peervoicectl volume ", "peervoicectl mute-peer \(b.id) ",
            "peervoicectl send-file ", "peervoicectl send-file \(b.id) \(directory.path)/comp", "peervoicectl transfer ",
        ]
        var script = """
            COMP_WORDBREAKS=$' \\t\\n"\\'><=;|&(:'
            source '\(Self.packageDirectory)/completion/peervoicectl.bash'
            complete -p peervoicectl
            t() { COMP_LINE=$1; COMP_POINT=${#COMP_LINE}; _peervoicectl; echo "[$1] ${COMPREPLY[*]}"; }

            """
        for line in lines { script += "t '\(line)'\n" }
        let process = try ChildProcess("/bin/bash", ["-c", script],
                                       environment: ["DBUS_SESSION_BUS_ADDRESS": a.bus.address,
                                                     "PATH": Binaries.directory + ":/usr/bin:/bin"],
                                       logPath: directory.path + "/completion.log")
        XCTAssertEqual(process.wait(timeout: 30), 0, process.log)
        let output = process.log
        XCTAssertTrue(output.hasPrefix("complete -F _peervoicectl peervoicectl\n"), output)
        let expected = [
            "[peervoicectl ] status peers peer discover connect disconnect send history remove mute name visible confirm voice volume mute-peer monitor open listen join rooms room-send room-register leave send-file transfers transfer shortcut help --help --version",
            "[peervoicectl mu] mute mute-peer",
            "[peervoicectl mute ] on off toggle",
            "[peervoicectl voice ] start stop",
            "[peervoicectl voice start ] \(b.id)",
            "[peervoicectl visible ] bluetooth lan",
            "[peervoicectl visible lan ] on off",
            "[peervoicectl confirm ] \(b.id)",
            "[peervoicectl confirm \(b.id) ] yes no",
            // bash completes after the last ':', so the candidate is trimmed to what follows it.
            "[peervoicectl connect pv:] \(b.id.dropFirst(3))",
            "[peervoicectl history \(b.id) --] --max --help",
            "[peervoicectl peers -] --ids --help",
            "[peervoicectl send ] \(b.id)",
            "[peervoicectl send \(b.id) ] ",
            "[peervoicectl help re] remove",
            "[peervoicectl --ver] --version",
            "[peervoicectl volume ] \(b.id)",
            "[peervoicectl mute-peer \(b.id) ] on off",
            "[peervoicectl send-file ] \(b.id)",
            "[peervoicectl send-file \(b.id) \(directory.path)/comp] \(directory.path)/completion.log",
            "[peervoicectl transfer ] accept decline cancel",
        ]
        for line in expected {
            XCTAssertTrue(output.contains("\n" + line + "\n"), "missing '\(line)' in:\n\(output)")
        }
    }

    // MARK: Installation and activation

    func testMakeInstallProducesTheExpectedTree() throws {
        let root = directory.path + "/root"
        let started = Date()
        // -o deps: the test does not install Debian packages. INSTALL_CONFIGURATION=debug: the build
        // `make test` made (the recipe is the same for release, which would take minutes more).
        // --ignore-lock: `swift test` holds SwiftPM's lock on .build while tests run; the build
        // (here a check that everything is up to date) would wait for it forever. timeout(1) ends
        // the whole process group (make, swift-build, the compilers) if it takes too long.
        let flags = (ProcessInfo.processInfo.environment["SWIFT_FLAGS"].map { $0 + " " } ?? "") + "--ignore-lock"
        let make = try ChildProcess("timeout", ["-k", "10", "420", "make", "-C", Self.packageDirectory, "-o", "deps",
                                                "install", "DESTDIR=\(root)", "PREFIX=/usr", "SWIFT_FLAGS=\(flags)",
                                                "INSTALL_CONFIGURATION=debug"],
                                    logPath: directory.path + "/make-install.log")
        let status = make.wait(timeout: 450)
        if status == nil { make.kill() }
        XCTAssertEqual(status, 0, make.log)
        guard status == 0 else { return }
        print("make install took \(Int(Date().timeIntervalSince(started))) s")

        // Every interface description of the bus API, whatever dbus/ holds.
        let interfaces = try FileManager.default.contentsOfDirectory(atPath: Self.packageDirectory + "/dbus")
            .filter { $0.hasSuffix(".xml") }
        XCTAssertTrue(interfaces.contains("org.example.PeerVoice.xml"), "\(interfaces)")
        let files = [
            "usr/bin/peervoiced", "usr/bin/peervoicectl", "usr/bin/peervoice",
            "usr/share/applications/org.example.PeerVoice.App.desktop",
            "usr/share/icons/hicolor/scalable/apps/org.example.PeerVoice.App.svg",
            "usr/share/locale/de/LC_MESSAGES/peervoice.mo",
            "usr/share/dbus-1/services/org.example.PeerVoice.service",
            "usr/lib/systemd/user/peervoiced.service",
            "usr/share/applications/peervoiced.desktop",
            "etc/xdg/autostart/peervoiced.desktop",
            "usr/share/bash-completion/completions/peervoicectl",
            "usr/share/man/man8/peervoiced.8", "usr/share/man/man1/peervoicectl.1", "usr/share/man/man1/peervoice.1",
        ] + interfaces.map { "usr/share/dbus-1/interfaces/" + $0 }
        let installed = Set((FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? [])
            .filter { !FileManager.default.isDirectory(root + "/" + $0) })
        XCTAssertEqual(installed, Set(files))
        for binary in ["usr/bin/peervoiced", "usr/bin/peervoicectl", "usr/bin/peervoice"] {
            XCTAssertTrue(FileManager.default.isExecutableFile(atPath: root + "/" + binary), binary)
        }
        func read(_ path: String) -> String { (try? String(contentsOfFile: root + "/" + path, encoding: .utf8)) ?? "" }
        XCTAssertTrue(read("usr/share/dbus-1/services/org.example.PeerVoice.service").contains("\nExec=/usr/bin/peervoiced\n"))
        XCTAssertTrue(read("usr/lib/systemd/user/peervoiced.service").contains("\nExecStart=/usr/bin/peervoiced\n"))
        for desktop in ["usr/share/applications/peervoiced.desktop", "etc/xdg/autostart/peervoiced.desktop"] {
            let text = read(desktop)
            XCTAssertTrue(text.contains("\n[Desktop Entry]\n"), text)
            XCTAssertTrue(text.contains("\nExec=/usr/bin/peervoiced\n"), text)
            XCTAssertTrue(text.contains("\nType=Application\n"), text)
            XCTAssertFalse(text.contains("@bindir@"), text)
        }
        let app = read("usr/share/applications/org.example.PeerVoice.App.desktop")
        XCTAssertTrue(app.contains("\nExec=/usr/bin/peervoice\n"), app)
        XCTAssertTrue(app.contains("\nIcon=org.example.PeerVoice.App\n"), app)
        // help2man's pages: each program's --help (an option of each) under a SYNOPSIS.
        for (page, program, option) in [("usr/share/man/man8/peervoiced.8", "peervoiced", "\\-\\-listen"),
                                         ("usr/share/man/man1/peervoicectl.1", "peervoicectl", "discover")] {
            let text = read(page)
            XCTAssertTrue(text.contains(".TH \(program.uppercased())") && text.contains(".SH SYNOPSIS"), "\(page): \(text.prefix(300))")
            XCTAssertTrue(text.contains(option), "\(page) holds \(program) --help: \(text.prefix(2_000))")
        }
        XCTAssertEqual(read("usr/share/bash-completion/completions/peervoicectl"),
                       try String(contentsOfFile: Self.packageDirectory + "/completion/peervoicectl.bash", encoding: .utf8))
        for interface in interfaces {
            XCTAssertEqual(read("usr/share/dbus-1/interfaces/" + interface),
                           try String(contentsOfFile: Self.packageDirectory + "/dbus/" + interface, encoding: .utf8))
        }
        let version = try ChildProcess(root + "/usr/bin/peervoicectl", ["--version"], logPath: directory.path + "/installed.log")
        XCTAssertEqual(version.wait(timeout: 10), 0)
        XCTAssertEqual(version.log, "peervoicectl 0.1.0\n")

        let uninstall = try ChildProcess("make", ["-C", Self.packageDirectory, "uninstall", "DESTDIR=\(root)", "PREFIX=/usr"],
                                         logPath: directory.path + "/make-uninstall.log")
        XCTAssertEqual(uninstall.wait(timeout: 60), 0, uninstall.log)
        let left = (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? [])
            .filter { !FileManager.default.isDirectory(root + "/" + $0) }
        XCTAssertEqual(left, [], "uninstall leaves files behind")
    }

    /// A private session bus whose only activatable service is org.example.PeerVoice running
    /// `exec`; with `exec` nil nothing is activatable (not even a PeerVoice installed on this machine).
    private func privateBus(activating exec: String?, in directory: TemporaryDirectory) throws -> PrivateBus {
        let services = directory.path + "/services"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        if let exec {
            try """
                [D-BUS Service]
                Name=org.example.PeerVoice
                Exec=\(exec)

                """.write(toFile: services + "/org.example.PeerVoice.service", atomically: true, encoding: .utf8)
        }
        let bus = try PrivateBus(in: directory, activatingFrom: [services])
        cleanups.append { bus.stop() }
        return bus
    }

    private static func isAlive(_ pid: pid_t) -> Bool {
        guard Glibc.kill(pid, 0) == 0 else { return false }
        // A zombie waiting for dbus-daemon to reap it has ended too.
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        return !(stat.split(separator: ")").last?.hasPrefix(" Z") ?? true)
    }

    func testBusActivationStartsTheServiceOnTheFirstCall() throws {
        let state = directory.path + "/activated-state"
        let bus = try privateBus(activating: "\(Binaries.peervoiced) --state-dir \(state) --name activated", in: directory)
        let client = try APIClient(address: bus.address)
        XCTAssertFalse(client.nameHasOwner())

        // A monitor does not start the service, and sees it once it is there.
        let monitor = try startMonitor(bus: bus.address, name: "monitor")
        XCTAssertTrue(monitor.log.contains("(not running yet)"), monitor.log)
        XCTAssertFalse(client.nameHasOwner(), "monitor started the service")

        let status = try ctl(["status"], bus: bus.address)
        XCTAssertEqual(status.status, 0, "\(status)")
        XCTAssertEqual(Self.fields(status.output)["Version"], "0.1.0", status.output)
        XCTAssertTrue(client.nameHasOwner())

        let pid = pid_t(try XCTUnwrap(try client.connection.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            method: "GetConnectionUnixProcessID", arguments: Variant(tuple: [Variant(APIClient.name)]))[0].uint32))
        cleanups.append { if Self.isAlive(pid) { Glibc.kill(pid, SIGKILL) } }
        let commandLine = ((try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? "")
            .replacingOccurrences(of: "\0", with: " ")
        XCTAssertTrue(commandLine.contains(state), "pid \(pid) is '\(commandLine)'")
        XCTAssertTrue(FileManager.default.fileExists(atPath: state), "the activated daemon uses the test's state dir")

        let mute = try ctl(["mute", "on"], bus: bus.address)
        XCTAssertEqual(mute.output, "muted\n")
        XCTAssertTrue(eventually(timeout: 3) { monitor.log.contains(" MuteChanged muted=true\n") }, monitor.log)

        Glibc.kill(pid, SIGTERM)
        XCTAssertTrue(eventually(timeout: 10) { !Self.isAlive(pid) }, "activated peervoiced (pid \(pid)) did not exit")
        XCTAssertTrue(eventually(timeout: 5) { !client.nameHasOwner() })
        monitor.signal(SIGINT)
        XCTAssertEqual(monitor.wait(timeout: 5), 0, monitor.log)
    }

    func testActivationThatFailsExitsThree() throws {
        let bus = try privateBus(activating: "/bin/false", in: directory)
        let run = try ctl(["status"], bus: bus.address)
        XCTAssertEqual(run.status, 3, "\(run)")
        XCTAssertTrue(run.output.hasPrefix("peervoicectl: the session bus could not start the PeerVoice service: "), "\(run)")
        XCTAssertTrue(run.output.contains("systemctl --user start peervoiced"), "\(run)")
    }
}

private extension FileManager {
    func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}
