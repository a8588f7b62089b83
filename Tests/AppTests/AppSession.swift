import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// A headless desktop for the app under test: a private X server (Xvfb), the accessibility bus
/// on the app's session bus, and the app itself (`peervoice` built next to the tests), driven
/// through AT-SPI (tests/app/atspi.py) and synthetic X input (xdotool) as a person would.
final class AppSession {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    static let driver = repository + "/tests/app/atspi.py"

    private let display: VirtualDisplay
    private(set) var app: ChildProcess
    private let directory: TemporaryDirectory
    private let environment: [String: String]
    /// The window's accessible tree went into a failure message already.
    private var treeShown = false

    /// Starts Xvfb, the AT-SPI bus launcher on `bus` and the app with `environment` added (e.g. LANG).
    init(bus: PrivateBus, client: APIClient, in directory: TemporaryDirectory, environment: [String: String] = [:]) throws {
        self.directory = directory
        display = try VirtualDisplay(in: directory)
        do {
            try display.startAccessibilityBus(on: bus, client: client, in: directory)
        } catch {
            display.stop()
            throw error
        }
        // The app keeps its own preferences under XDG_CONFIG_HOME: a fresh one per session.
        let desktop = ["DISPLAY": display.name, "DBUS_SESSION_BUS_ADDRESS": bus.address, "GDK_BACKEND": "x11",
                       "GSK_RENDERER": "cairo", "GSETTINGS_BACKEND": "memory", "XDG_CONFIG_HOME": directory.path + "/config"]
        self.environment = desktop.merging(environment) { $1 }
        app = try ChildProcess(Binaries.directory + "/peervoice", [], environment: self.environment,
                               logPath: directory.path + "/peervoice.log")
    }

    func stop() {
        app.signal(SIGTERM)
        if app.wait(timeout: 5) == nil { app.kill() }
        display.stop()
    }

    /// What the app printed (its stdout and stderr).
    var log: String { app.log }

    // MARK: Driving

    /// Runs one AT-SPI command (see tests/app/atspi.py); its stdout without the newline, or a
    /// test failure naming what the window lacked.
    @discardableResult
    func ui(_ arguments: String..., timeout: Double = 15, file: StaticString = #filePath, line: UInt = #line) -> String? {
        ui(arguments, timeout: timeout, file: file, line: line)
    }

    @discardableResult
    func ui(_ arguments: [String], timeout: Double = 15, file: StaticString = #filePath, line: UInt = #line) -> String? {
        let result = Self.run("/usr/bin/python3", [Self.driver] + arguments,
                              environment: environment.merging(["ATSPI_TIMEOUT": "\(timeout)"]) { $1 })
        guard result.status == 0 else {
            // What the window showed, the first time a command fails: later failures follow from it.
            let window = treeShown ? "" : "\nthe window, as a screen reader saw it then:\n" + Self.run("/usr/bin/python3", [Self.driver, "tree"], environment: environment).output
                + "\nthe X server (\(display.name)) said:\n" + display.log
            treeShown = true
            XCTFail("atspi.py \(arguments.joined(separator: " ")): \(result.error)\napp log:\n\(log)\(window)", file: file, line: line)
            return nil
        }
        return result.output.trimmingCharacters(in: .newlines)
    }

    /// The position of the control `name` (of `role`, when given) within the window: its centre.
    func centre(of name: String, role: String? = nil, file: StaticString = #filePath, line: UInt = #line) -> (x: Int, y: Int)? {
        let arguments = ["extents", name] + (role.map { [$0] } ?? [])
        guard let extents = ui(arguments, file: file, line: line)?.split(separator: " ").compactMap({ Int($0) }),
              extents.count == 4 else { return nil }
        return (extents[0] + extents[2] / 2, extents[1] + extents[3] / 2)
    }

    /// Keys pressed on the keyboard, as a person types them (`ctrl+f`, `Return`, or text with
    /// `type`): the focused window gets them, nothing else is touched.
    func keys(_ keys: String..., file: StaticString = #filePath, line: UInt = #line) {
        for key in keys { xdotool("key", "--clearmodifiers", key, file: file, line: line) }
    }

    func type(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
        xdotool("type", "--delay", "20", text, file: file, line: line)
    }

    /// Every control a person can use has an accessible name of its own (tests/app/atspi.py
    /// `unnamed`: none, GTK's class name, or one name said twice fail).
    func assertEveryControlNamed(_ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let unnamed = ui("unnamed", file: file, line: line)
        XCTAssertEqual(unnamed, "", "controls without a name \(what):\n\(unnamed ?? "")", file: file, line: line)
    }

    /// xdotool against the app's window (`WINDOW` in `arguments` is replaced by its id).
    func xdotool(_ arguments: String..., file: StaticString = #filePath, line: UInt = #line) {
        let window = Self.run("xdotool", ["search", "--onlyvisible", "--name", "^PeerVoice$"], environment: environment).output
            .split(separator: "\n").first.map(String.init) ?? ""
        XCTAssertFalse(window.isEmpty, "no visible PeerVoice window", file: file, line: line)
        let result = Self.run("xdotool", arguments.map { $0 == "WINDOW" ? window : $0 }, environment: environment)
        XCTAssertEqual(result.status, 0, "xdotool \(arguments): \(result.error)", file: file, line: line)
    }

    /// Gives the keyboard focus to the app's window titled `title` (a dialog: there is no window
    /// manager to do it).
    func focusWindow(named title: String, file: StaticString = #filePath, line: UInt = #line) {
        var window = ""
        XCTAssertTrue(eventually(timeout: 10) {
            window = Self.run("xdotool", ["search", "--onlyvisible", "--name", "^\(title)$"], environment: environment)
                .output.split(separator: "\n").first.map(String.init) ?? ""
            return !window.isEmpty
        }, "no window \(title)", file: file, line: line)
        let focus = Self.run("xdotool", ["windowfocus", "--sync", window], environment: environment)
        XCTAssertEqual(focus.status, 0, focus.error, file: file, line: line)
    }

    /// Opens another window (ImageMagick's `display`) and gives it the keyboard focus, as a person
    /// switching windows would; the window lasts until the returned process is stopped.
    func focusAnotherWindow(file: StaticString = #filePath, line: UInt = #line) throws -> ChildProcess {
        let other = try ChildProcess("display", ["-title", "other-window", "-size", "200x200", "xc:white"],
                                     environment: environment, logPath: directory.path + "/display.log")
        focusWindow(named: "other-window", file: file, line: line)
        return other
    }

    /// Drags `paths` from another program's window (tests/app/drag-source.py, GTK's drag
    /// source) with the pointer and lets go over the app's control `name`: XDND between two X
    /// clients, as a person drags files from a file manager.
    func dragFiles(_ paths: [String], onto name: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let source = try ChildProcess("/usr/bin/python3", [Self.repository + "/tests/app/drag-source.py"] + paths,
                                      environment: environment, logPath: directory.path + "/drag-source.log")
        defer {
            source.signal(SIGTERM)
            if source.wait(timeout: 5) == nil { source.kill() }
        }
        focusWindow(named: "drag-source", file: file, line: line)
        let window = Self.run("xdotool", ["search", "--onlyvisible", "--name", "^drag-source$"], environment: environment).output
            .split(separator: "\n").first.map(String.init) ?? ""
        // Beside the app's window (760 px wide at 0,0 without a window manager).
        Self.run("xdotool", ["windowmove", "--sync", window, "800", "600"], environment: environment)
        guard let target = centre(of: name, file: file, line: line) else { return }
        // Held over the target for 1.5 s, moving, before the release: XDND's position and status
        // messages go between three processes, and a busy machine needs the time.
        xdotool("mousemove", "--window", window, "100", "50", "mousedown", "1", "sleep", "0.2",
                "mousemove", "--window", window, "120", "60", "sleep", "0.2",
                "mousemove", "--window", "WINDOW", "\(target.x)", "\(target.y)", "sleep", "0.5",
                "mousemove", "--window", "WINDOW", "\(target.x + 4)", "\(target.y + 2)", "sleep", "0.5",
                "mousemove", "--window", "WINDOW", "\(target.x + 8)", "\(target.y + 4)", "sleep", "0.5", "mouseup", "1",
                file: file, line: line)
        XCTAssertTrue(eventually(timeout: 10) { source.log.contains("drag-end") }, "the drag did not end: \(source.log)", file: file, line: line)
        XCTAssertFalse(source.log.contains("drag-cancel"), "the drop on \(name) was refused: \(source.log)", file: file, line: line)
    }

    /// Saves the screen as a PNG (ImageMagick's `import`), trimmed to the windows on it. The
    /// app's other windows (a dialog, the preferences) are first centred over the main one, as
    /// a window manager places them; without one they sit in the corner.
    func screenshot(to path: String) -> Bool {
        let windows = Self.run("xdotool", ["search", "--onlyvisible", "--pid", "\(app.pid)"], environment: environment).output
            .split(separator: "\n").map(String.init)
        let main = Self.run("xdotool", ["search", "--onlyvisible", "--name", "^PeerVoice$"], environment: environment).output
            .split(separator: "\n").first.map(String.init)
        if let main, let frame = geometry(of: main) {
            for window in windows where window != main {
                guard let dialog = geometry(of: window) else { continue }
                Self.run("xdotool", ["windowmove", "--sync", window, "\(frame.x + (frame.width - dialog.width) / 2)",
                                     "\(frame.y + (frame.height - dialog.height) / 2)"], environment: environment)
            }
        }
        return Self.run("import", ["-window", "root", "-trim", "+repage", path], environment: environment).status == 0
    }

    /// Where a window is and how large (`xdotool getwindowgeometry --shell`).
    private func geometry(of window: String) -> (x: Int, y: Int, width: Int, height: Int)? {
        let fields = Dictionary(Self.run("xdotool", ["getwindowgeometry", "--shell", window], environment: environment).output
            .split(separator: "\n").compactMap { line -> (String, Int)? in
                let parts = line.split(separator: "=", maxSplits: 1)
                return parts.count == 2 ? Int(parts[1]).map { (String(parts[0]), $0) } : nil
            }) { first, _ in first }
        guard let x = fields["X"], let y = fields["Y"], let width = fields["WIDTH"], let height = fields["HEIGHT"] else { return nil }
        return (x, y, width, height)
    }

    /// Runs a helper to its end with `environment` added to the tests' own.
    @discardableResult
    private static func run(_ executable: String, _ arguments: [String], environment: [String: String])
        -> (status: Int32, output: String, error: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : "/usr/bin/" + executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe(), error = Pipe()
        process.standardOutput = output
        process.standardError = error
        do { try process.run() } catch { return (127, "", "cannot run \(executable): \(error)") }
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: outputData, as: UTF8.self), String(decoding: errorData, as: UTF8.self))
    }
}

/// python-dbusmock's notification server on a private bus, asked which notifications it showed.
final class NotificationServer {
    private let process: ChildProcess
    private let client: APIClient

    init(bus: PrivateBus, client: APIClient, in directory: TemporaryDirectory) throws {
        self.client = client
        process = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", "--template", "notification_daemon"],
                                   environment: ["DBUS_SESSION_BUS_ADDRESS": bus.address],
                                   logPath: directory.path + "/notifications.log")
        guard eventually(timeout: 15, { !process.isRunning || client.nameHasOwner("org.freedesktop.Notifications") }),
              process.isRunning else {
            throw HarnessError("the notification mock did not start: \(process.log)")
        }
    }

    /// The summary of every notification shown so far.
    var summaries: [String] {
        guard let reply = try? client.connection.call(
            destination: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications",
            interface: "org.freedesktop.DBus.Mock", method: "GetMethodCalls",
            arguments: Variant(tuple: [Variant("Notify")]), timeout: .seconds(5)) else { return [] }
        return reply[0].children.map { call in call[1].children[3].unboxed?.string ?? "" }
    }

    func stop() {
        process.signal(SIGTERM)
        if process.wait(timeout: 5) == nil { process.kill() }
    }
}

/// A stand-in file manager on a private bus: python-dbusmock owning org.freedesktop.FileManager1
/// with the real interface's ShowItems(as uris, s startup_id), which records what it was asked
/// to show (no file manager can run without a desktop session here).
final class FileManagerStandIn {
    private static let name = "org.freedesktop.FileManager1"
    private static let path = "/org/freedesktop/FileManager1"
    private let process: ChildProcess
    private let client: APIClient

    init(bus: PrivateBus, client: APIClient, in directory: TemporaryDirectory) throws {
        self.client = client
        process = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", Self.name, Self.path, Self.name],
                                   environment: ["DBUS_SESSION_BUS_ADDRESS": bus.address], logPath: directory.path + "/file-manager.log")
        guard eventually(timeout: 15, { !process.isRunning || client.nameHasOwner(Self.name) }), process.isRunning else {
            throw HarnessError("the file manager stand-in did not start: \(process.log)")
        }
        _ = try client.connection.call(destination: Self.name, path: Self.path, interface: "org.freedesktop.DBus.Mock", method: "AddMethod",
                                       arguments: Variant(tuple: [Variant(Self.name), Variant("ShowItems"), Variant("ass"), Variant(""), Variant("")]),
                                       timeout: .seconds(5))
    }

    /// The URIs of each ShowItems call so far.
    var shownItems: [[String]] {
        guard let reply = try? client.connection.call(
            destination: Self.name, path: Self.path, interface: "org.freedesktop.DBus.Mock", method: "GetMethodCalls",
            arguments: Variant(tuple: [Variant("ShowItems")]), timeout: .seconds(5)) else { return [] }
        return reply[0].children.map { call in (call[1].children[0].unboxed?.children ?? []).compactMap(\.string) }
    }

    func stop() {
        process.signal(SIGTERM)
        if process.wait(timeout: 5) == nil { process.kill() }
    }
}
