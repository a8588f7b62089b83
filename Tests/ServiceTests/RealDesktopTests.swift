import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// The desktop services PeerVoice talks to, the real programs rather than stand-ins (DesktopTests
/// has those), each in a private X server: GNOME's notification-daemon showing PeerVoice's popups,
/// its Accept button clicked with the X pointer as a person would (AT-SPI only says where it is);
/// the GlobalShortcuts portal with KDE's backend, its keys pressed with xdotool.
final class RealDesktopTests: XCTestCase {
    private static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    private static let popupReader = repository + "/tests/desktop/popup.py"

    private let peers = StartedPeers()
    private var display: VirtualDisplay?
    private var processes: [ChildProcess] = []

    override func tearDown() {
        let failed = (testRun?.totalFailureCount ?? 0) > 0
        for process in processes {
            if failed { print("----- \(process.executable) -----\n\(process.log.suffix(3_000))") }
            process.signal(SIGTERM)
            if process.wait(timeout: 5) == nil { process.kill() }
        }
        display?.stop()
        peers.shutdown(printingLogs: failed)
        processes = []
    }

    /// A dials B. A's pairing prompt pops up on A's screen from the real notification server with
    /// the code and Accept/Reject; the pointer clicks Accept; B's person confirms with
    /// ConfirmPairing; they connect. B's message then pops up on A's screen, under B's name.
    func testARealNotificationServerShowsThePromptAndItsAcceptButtonPairs() throws {
        let a = try peers.make("alice")
        let b = try peers.make("bob")
        let display = try VirtualDisplay(in: a.directory)
        self.display = display
        try display.startAccessibilityBus(on: a.bus, client: a.client, in: a.directory)
        let environment = ["DISPLAY": display.name, "DBUS_SESSION_BUS_ADDRESS": a.bus.address]
        let server = try ChildProcess("/usr/lib/notification-daemon/notification-daemon", [], environment: environment,
                                      logPath: a.directory.path + "/notification-daemon.log")
        processes.append(server)
        XCTAssertTrue(eventually(timeout: 10) { a.client.nameHasOwner("org.freedesktop.Notifications") }, server.log)
        let capabilities = try runCommand("gdbus", ["call", "--session", "-d", "org.freedesktop.Notifications",
                                                    "-o", "/org/freedesktop/Notifications",
                                                    "-m", "org.freedesktop.Notifications.GetCapabilities"],
                                          environment: environment, in: a.directory)
        XCTAssertTrue(capabilities.contains("'actions'"), "the server draws no action buttons: \(capabilities)")

        let markA = a.mark, markB = b.mark
        let connect = a.client.callAsync("Connect", [Variant(b.address)], timeout: 60)
        let prompt = try XCTUnwrap(a.pairingRequest(for: b.id, after: markA, timeout: 15), a.log)
        XCTAssertNotNil(b.pairingRequest(for: a.id, after: markB, timeout: 15), b.log)
        let code = prompt.string(2)
        let shown = try popup(["shows", "Pair with bob?"], environment)
        XCTAssertTrue(shown.contains("Compare the code \(code) with the other screen"), shown)
        try click(try popup(["button", "Accept"], environment), environment)
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        XCTAssertTrue(eventually(timeout: 20) { connect.isDone }, a.log)
        XCTAssertNoThrow(try XCTUnwrap(connect.result, "no Connect reply").get(), a.log)
        XCTAssertNotNil(a.waitForState("connected", of: b.id, after: markA, timeout: 10), a.log)
        XCTAssertTrue(a.log.contains("pairing with \(b.id) accepted in its notification"), a.log)

        let markMessage = a.mark
        try b.client.call("Send", [Variant(a.id), Variant("dinner at eight")])
        XCTAssertNotNil(a.client.waitForSignalIndex("MessageReceived", after: markMessage, timeout: 10), a.log)
        let message = try popup(["shows", "Message from bob"], environment)
        XCTAssertTrue(message.contains("dinner at eight"), message)
    }

    /// The real GlobalShortcuts portal without a Plasma session: xdg-desktop-portal 1.16 with
    /// KDE's backend and kglobalaccel (the one backend Debian 12 has) on the service's bus, keys
    /// grabbed on a private X server. The service, started before the portal, binds its shortcuts
    /// when the portal appears; Ctrl+Alt+M pressed with xdotool toggles mute, Ctrl+Alt+H mutes
    /// while held.
    func testTheRealPortalBindsTheShortcutsAndTheKeysMute() throws {
        let a = try peers.make("alice")
        let display = try VirtualDisplay(in: a.directory)
        self.display = display
        let home = a.directory.path + "/home"
        try FileManager.default.createDirectory(atPath: home + "/.config", withIntermediateDirectories: true)
        let desktop = ["DISPLAY": display.name, "DBUS_SESSION_BUS_ADDRESS": a.bus.address, "HOME": home,
                       "XDG_CONFIG_HOME": home + "/.config", "XDG_CURRENT_DESKTOP": "KDE", "QT_QPA_PLATFORM": "xcb"]
        for (program, name) in [("/usr/bin/kglobalaccel5", "org.kde.kglobalaccel"),
                                ("/usr/lib/x86_64-linux-gnu/libexec/xdg-desktop-portal-kde", "org.freedesktop.impl.portal.desktop.kde"),
                                ("/usr/libexec/xdg-desktop-portal", "org.freedesktop.portal.Desktop")] {
            let process = try ChildProcess(program, [], environment: desktop,
                                           logPath: a.directory.path + "/" + URL(fileURLWithPath: program).lastPathComponent + ".log")
            processes.append(process)
            XCTAssertTrue(eventually(timeout: 15) { a.client.nameHasOwner(name) }, "\(program) did not own \(name): \(process.log)")
        }
        XCTAssertTrue(eventually(timeout: 15) { a.log.contains("global hotkeys bound through the desktop portal:") }, a.log)
        let bound = a.log.components(separatedBy: "global hotkeys bound through the desktop portal:").last ?? ""
        XCTAssertTrue(bound.contains("toggle-mute (Ctrl+Alt+M)") && bound.contains("hold-to-mute (Ctrl+Alt+H)"), a.log)
        XCTAssertEqual(try a.client.property("Muted").bool, false)

        func keys(_ arguments: [String], expect muted: Bool) throws {
            let mark = a.mark
            _ = try runCommand("xdotool", arguments, environment: desktop, in: a.directory)
            let changed = a.client.waitForSignalIndex("MuteChanged", after: mark, timeout: 5)
            XCTAssertEqual(changed.flatMap { a.client.signals[$0].arguments[0].bool }, muted, "xdotool \(arguments): \(a.log.suffix(2_000))")
        }
        try keys(["key", "ctrl+alt+m"], expect: true)
        try keys(["key", "ctrl+alt+m"], expect: false)
        try keys(["keydown", "ctrl+alt+h"], expect: true)
        try keys(["keyup", "ctrl+alt+h"], expect: false)
    }

    /// What tests/desktop/popup.py prints (labels, or a button's place), or a failure saying what
    /// the screen lacked.
    private func popup(_ arguments: [String], _ environment: [String: String]) throws -> String {
        try runCommand("/usr/bin/python3", [Self.popupReader] + arguments, environment: environment,
                       in: try XCTUnwrap(peers.all.first).directory, timeout: 20)
    }

    /// Moves the X pointer to "X Y" and presses and releases the left button there.
    private func click(_ place: String, _ environment: [String: String]) throws {
        let coordinates = place.split(whereSeparator: \.isWhitespace).map(String.init)
        XCTAssertEqual(coordinates.count, 2, place)
        _ = try runCommand("xdotool", ["mousemove", "--sync"] + coordinates + ["click", "1"], environment: environment,
                           in: try XCTUnwrap(peers.all.first).directory)
    }
}
