import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// Desktop integration against stand-ins that speak the real interfaces: notifications through
/// python-dbusmock's `notification_daemon` template (Notify arguments, Accept in a pairing
/// notification reaching ConfirmPairing, `--no-notify`), and global hotkeys through a dbusmock
/// template of the xdg-desktop-portal GlobalShortcuts portal (session, binding, and every
/// shortcut's Activated/Deactivated reaching Mute).
final class DesktopTests: XCTestCase {
    private static let notifications = "org.freedesktop.Notifications"
    private static let notificationsPath = "/org/freedesktop/Notifications"
    private static let portal = "org.freedesktop.portal.Desktop"
    private static let portalPath = "/org/freedesktop/portal/desktop"
    private static let shortcutsInterface = "org.freedesktop.portal.GlobalShortcuts"
    private static let portalMissing = "global hotkeys need the xdg-desktop-portal GlobalShortcuts portal"

    private var peers: [TestPeer] = []
    private var mocks: [DBusMock] = []
    private var directory: TemporaryDirectory?
    private var bus: PrivateBus?
    private var daemons: [Daemon] = []

    override func tearDown() {
        let failedTest = (testRun?.totalFailureCount ?? 0) > 0
        for daemon in daemons {
            if failedTest { print("----- peervoiced log -----\n\(daemon.process.log.suffix(6_000))") }
            daemon.process.kill()
        }
        for peer in peers {
            if failedTest { print("----- log of \(peer.name) (\(peer.id)) -----\n\(peer.log.suffix(6_000))") }
        }
        mocks.forEach { $0.stop() }
        peers.forEach { $0.shutdown() }
        bus?.stop()
        directory?.remove()
        mocks = []
        peers = []
        daemons = []
    }

    /// dbusmock's notification daemon, with the capabilities GNOME Shell, Plasma and dunst
    /// announce (`actions` among them), or the template's default ones (no `actions`).
    private func notificationDaemon(for peer: TestPeer, actions: Bool = true) throws -> DBusMock {
        let mock = try DBusMock(template: "notification_daemon",
                                parameters: actions ? #"{"capabilities": "actions body body-markup persistence"}"# : nil,
                                busName: Self.notifications, path: Self.notificationsPath,
                                bus: peer.bus, client: peer.client, in: peer.directory, name: "notification-daemon")
        mocks.append(mock)
        return mock
    }

    /// Dispatches the main context until `mock` has `count` calls of `method`; those calls.
    /// (The mock is asked between main context iterations; a timer wakes the context to ask again.)
    private func waitForCalls(_ mock: DBusMock, _ method: String, count: Int, timeout: Double = 10) -> [[Variant]] {
        var calls: [[Variant]] = []
        let tick = Timer.every(.milliseconds(20)) { true }
        defer { tick.cancel() }
        eventually(timeout: timeout) {
            calls = mock.calls(method)
            return calls.count >= count
        }
        return calls
    }

    // MARK: Notifications

    /// A dials B. A's pairing prompt is a notification with Accept/Reject; A accepts in it (the
    /// server's ActionInvoked), B with ConfirmPairing; they connect. A message B sends becomes a
    /// notification on A. B runs with --no-notify: its notification server hears nothing.
    func testPairingAndMessageNotificationsAcceptedThroughTheNotification() throws {
        let a = try TestPeer(name: "alice")
        peers.append(a)
        let b = try TestPeer(name: "bob", arguments: ["--verbose", "--no-notify"])
        peers.append(b)
        let notifyA = try notificationDaemon(for: a)
        let notifyB = try notificationDaemon(for: b)
        let markA = a.mark, markB = b.mark

        let connect = a.client.callAsync("Connect", [Variant(b.address)], timeout: 30)
        let promptA = try XCTUnwrap(a.pairingRequest(for: b.id, after: markA, timeout: 15), a.log)
        let promptB = try XCTUnwrap(b.pairingRequest(for: a.id, after: markB, timeout: 15), b.log)
        let code = promptA.string(2)
        XCTAssertTrue(Pairing.isPasskey(code), "passkey '\(code)'")
        XCTAssertEqual(promptB.string(2), code)

        // Notify(app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout).
        let pairingCall = try XCTUnwrap(waitForCalls(notifyA, "Notify", count: 1).first, a.log)
        XCTAssertEqual(pairingCall.count, 8)
        XCTAssertEqual(pairingCall[0].string, "PeerVoice")
        XCTAssertEqual(pairingCall[1].uint32, 0)
        XCTAssertEqual(pairingCall[3].string, "Pair with bob?")
        XCTAssertEqual(pairingCall[4].string, "Compare the code \(code) with the other screen")
        XCTAssertEqual(pairingCall[5].strings, ["accept", "Accept", "reject", "Reject"])
        XCTAssertEqual(pairingCall[6].lookup("desktop-entry")?.string, "peervoiced")
        XCTAssertEqual(pairingCall[6].lookup("urgency"), Variant(parsing: "byte 2"))
        XCTAssertEqual(pairingCall[7], Variant(Int32(-1)))

        // The template numbers notifications from 1: the first Notify got id 1. An action on
        // someone else's notification, and one that is not ours, change nothing.
        try notifyA.emit(Self.notifications, "ActionInvoked", "us", [Variant(UInt32(77)), Variant("accept")])
        try notifyA.emit(Self.notifications, "ActionInvoked", "us", [Variant(UInt32(1)), Variant("default")])
        dispatchEvents(for: 0.3)
        XCTAssertEqual(a.states(of: b.id, after: markA).last, "pairing")
        try notifyA.emit(Self.notifications, "ActionInvoked", "us", [Variant(UInt32(1)), Variant("accept")])
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        eventually(timeout: 15) { connect.isDone }
        XCTAssertNoThrow(try XCTUnwrap(connect.result, "no Connect reply").get(), a.log)
        XCTAssertNotNil(a.waitForState("connected", of: b.id, after: markA, timeout: 10), a.log)
        XCTAssertNotNil(b.waitForState("connected", of: a.id, after: markB, timeout: 10), b.log)
        XCTAssertTrue(a.log.contains("pairing with \(b.id) accepted in its notification"), a.log)
        // Answered in the notification: the server closes it, nothing to withdraw.
        XCTAssertEqual(notifyA.calls("CloseNotification").count, 0)

        // A message: its text is the body, escaped because the server reads body markup.
        let markMessage = a.mark
        try b.client.call("Send", [Variant(a.id), Variant("dinner <b>now</b> & then")])
        XCTAssertNotNil(a.client.waitForSignalIndex("MessageReceived", after: markMessage, timeout: 10), a.log)
        let messageCall = try XCTUnwrap(waitForCalls(notifyA, "Notify", count: 2).dropFirst().first, a.log)
        XCTAssertEqual(messageCall[0].string, "PeerVoice")
        XCTAssertEqual(messageCall[3].string, "Message from bob")
        XCTAssertEqual(messageCall[4].string, "dinner &lt;b&gt;now&lt;/b&gt; &amp; then")
        XCTAssertEqual(messageCall[5].strings, [])
        XCTAssertEqual(messageCall[6].lookup("category")?.string, "im.received")
        XCTAssertFalse(a.log.contains("dinner"), "message text in the log")

        // B, with --no-notify, got a pairing request and a message but sent no notification.
        let markB2 = b.mark
        try a.client.call("Send", [Variant(b.id), Variant("coming")])
        XCTAssertNotNil(b.client.waitForSignalIndex("MessageReceived", after: markB2, timeout: 10), b.log)
        dispatchEvents(for: 0.5)
        XCTAssertEqual(notifyB.calls("Notify").count, 0)
        XCTAssertEqual(notifyB.calls("GetCapabilities").count, 0)
        XCTAssertEqual(waitForCalls(notifyA, "Notify", count: 2).count, 2, "one notification per event")

        // Neither bus has a portal: each daemon said once where hotkeys come from.
        XCTAssertEqual(a.log.components(separatedBy: Self.portalMissing).count - 1, 1, a.log)
        XCTAssertEqual(b.log.components(separatedBy: Self.portalMissing).count - 1, 1, b.log)
    }

    /// "Reject" in the notification refuses the pairing (Connect fails with Rejected); the other
    /// side's notification, answered there with ConfirmPairing, is withdrawn when it stops pairing.
    func testRejectInTheNotificationAndWithdrawalWhenAnsweredElsewhere() throws {
        let a = try TestPeer(name: "alice")
        peers.append(a)
        let b = try TestPeer(name: "bob")
        peers.append(b)
        let notifyA = try notificationDaemon(for: a)
        let notifyB = try notificationDaemon(for: b, actions: false)
        let markA = a.mark, markB = b.mark

        let connect = a.client.callAsync("Connect", [Variant(b.address)], timeout: 30)
        XCTAssertNotNil(a.pairingRequest(for: b.id, after: markA, timeout: 15), a.log)
        XCTAssertNotNil(b.pairingRequest(for: a.id, after: markB, timeout: 15), b.log)
        let promptA = try XCTUnwrap(waitForCalls(notifyA, "Notify", count: 1).first, a.log)
        let promptB = try XCTUnwrap(waitForCalls(notifyB, "Notify", count: 1).first, b.log)
        XCTAssertEqual(promptA[3].string, "Pair with bob?")
        XCTAssertEqual(promptB[3].string, "Pair with alice?")
        XCTAssertEqual(promptB[5].strings, ["accept", "Accept", "reject", "Reject"])
        // A server without buttons (no "actions" capability): the body says how to answer.
        XCTAssertEqual(promptA[4].string?.contains("peervoicectl"), false)
        XCTAssertEqual(promptB[4].string?.hasSuffix("\nAnswer with: peervoicectl confirm \(a.id) yes|no"), true, promptB[4].description)

        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        try notifyA.emit(Self.notifications, "ActionInvoked", "us", [Variant(UInt32(1)), Variant("reject")])
        eventually(timeout: 15) { connect.isDone }
        guard case .failure(let error)? = connect.result else {
            return XCTFail("Connect did not fail: \(String(describing: connect.result)) \(a.log)")
        }
        XCTAssertEqual(error.name, "org.example.PeerVoice.Error.Rejected", a.log)
        XCTAssertTrue(a.log.contains("pairing with \(b.id) refused in its notification"), a.log)
        // B's prompt, answered with ConfirmPairing, ended when the link was refused: withdrawn.
        // CloseNotification(u id); the template declares it with an 'i' and records it so.
        let closed = try XCTUnwrap(waitForCalls(notifyB, "CloseNotification", count: 1).first?.first, b.log)
        XCTAssertTrue([Variant(UInt32(1)), Variant(Int32(1))].contains(closed), closed.description)
        XCTAssertEqual(notifyA.calls("CloseNotification").count, 0)
    }

    /// Files offered to B are a notification naming the peer, the count and the size, with
    /// Accept/Decline: Accept in it starts the transfer; an offer the sender cancels before an
    /// answer is withdrawn; Decline in it declines.
    func testAnOfferOfFilesIsANotificationThatAcceptsAndIsWithdrawnWhenCancelled() throws {
        let directory = try TemporaryDirectory("peervoice-offers")
        self.directory = directory
        let a = try TestPeer(name: "alice", arguments: ["--verbose", "--no-notify", "--no-auto-voice"])
        peers.append(a)
        let b = try TestPeer(name: "bob", arguments: ["--verbose", "--no-auto-voice", "--download-dir", directory.path + "/in"])
        peers.append(b)
        XCTAssertNoThrow(try a.pair(with: b).connect.get())
        let notifyB = try notificationDaemon(for: b)
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        for name in ["a.txt", "b.txt"] {
            try Data(repeating: 0x61, count: 1_500).write(to: URL(fileURLWithPath: directory.path + "/" + name))
        }
        let outgoing = try watchA.send([directory.path + "/a.txt", directory.path + "/b.txt"], to: b.id)
        let offer = try XCTUnwrap(waitForCalls(notifyB, "Notify", count: 1).last, b.log)
        XCTAssertEqual(offer[3].string, "Receive files from alice?")
        XCTAssertEqual(offer[4].string, "2 files, 3.0 kB")
        XCTAssertEqual(offer[5].strings, ["accept", "Accept", "decline", "Decline"])
        try notifyB.emit(Self.notifications, "ActionInvoked", "us", [Variant(UInt32(1)), Variant("accept")])
        XCTAssertEqual(watchA.waitForState(outgoing, ["complete", "failed"]), "complete", b.log)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/in").sorted(), ["a.txt", "b.txt"])

        // Cancelled by the sender while it waits: the notification goes.
        let second = try watchA.send([directory.path + "/a.txt"], to: b.id)
        let single = try XCTUnwrap(waitForCalls(notifyB, "Notify", count: 2).last, b.log)
        XCTAssertEqual(single[4].string, "a.txt (1.5 kB)")
        try watchA.call("Cancel", on: second)
        let closed = try XCTUnwrap(waitForCalls(notifyB, "CloseNotification", count: 1).first?.first, b.log)
        XCTAssertTrue([Variant(UInt32(2)), Variant(Int32(2))].contains(closed), closed.description)

        // Declined in the notification.
        let third = try watchA.send([directory.path + "/b.txt"], to: b.id)
        XCTAssertEqual(waitForCalls(notifyB, "Notify", count: 3).count, 3, b.log)
        try notifyB.emit(Self.notifications, "ActionInvoked", "us", [Variant(UInt32(3)), Variant("decline")])
        XCTAssertEqual(watchA.waitForState(third, ["declined", "failed"]), "declined")
        XCTAssertEqual(try watchB.objects().values.compactMap { $0.lookup("State")?.string }.sorted(), ["cancelled", "complete", "declined"])
    }

    /// A client that registered with RegisterPromptHandler shows the prompts itself: no pairing
    /// notification while it is on the bus, and again once it has left. Every prompt comes as
    /// PairingPrompt (kind "confirm") just before PairingRequested, and ends, on both sides, with
    /// PairingSettled: refused by the other side, then accepted by both.
    func testAPromptHandlerSilencesPairingNotificationsUntilItLeavesTheBus() throws {
        let a = try TestPeer(name: "alice")
        peers.append(a)
        let b = try TestPeer(name: "bob", arguments: ["--verbose", "--no-notify"])
        peers.append(b)
        let notifyA = try notificationDaemon(for: a)
        let handler = try DBusConnection.connect(address: a.bus.address)
        try handler.call(destination: APIClient.name, path: APIClient.path, interface: APIClient.interface,
                         method: "RegisterPromptHandler", timeout: .seconds(5))

        var markA = a.mark, markB = b.mark
        let refused = a.client.callAsync("Connect", [Variant(b.address)], timeout: 30)
        let requested = try XCTUnwrap(a.client.waitForSignalIndex("PairingRequested", after: markA, timeout: 15), a.log)
        let prompt = a.client.signals[requested - 1]
        XCTAssertEqual(prompt.member, "PairingPrompt", "PairingPrompt comes right before PairingRequested")
        XCTAssertEqual((0..<4).map(prompt.string), [b.id, "bob", a.client.signals[requested].string(2), "confirm"])
        XCTAssertNotNil(b.pairingRequest(for: a.id, after: markB, timeout: 15), b.log)
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(false)])
        eventually(timeout: 15) { refused.isDone }
        XCTAssertNotNil(a.client.waitForSignalIndex("PairingSettled", after: markA, timeout: 10) {
            $0.string(0) == b.id && $0.arguments[1].bool == false
        }, "the other side's refusal settles A's prompt: \(a.log)")
        XCTAssertNotNil(b.client.waitForSignalIndex("PairingSettled", after: markB, timeout: 10) {
            $0.string(0) == a.id && $0.arguments[1].bool == false
        }, "ConfirmPairing(false) settles B's prompt")
        dispatchEvents(for: 0.3)
        XCTAssertEqual(notifyA.calls("Notify").count, 0, "a pairing notification while a prompt handler is on the bus")

        // The handler leaves the bus: prompts are notified again.
        handler.close()
        XCTAssertTrue(eventually(timeout: 10) { a.log.contains("left the bus: pairing prompts are notified again") }, a.log)
        markA = a.mark
        markB = b.mark
        let accepted = a.client.callAsync("Connect", [Variant(b.address)], timeout: 30)
        XCTAssertNotNil(a.pairingRequest(for: b.id, after: markA, timeout: 15), a.log)
        XCTAssertNotNil(b.pairingRequest(for: a.id, after: markB, timeout: 15), b.log)
        XCTAssertEqual(waitForCalls(notifyA, "Notify", count: 1).first?[3].string, "Pair with bob?")
        try a.client.call("ConfirmPairing", [Variant(b.id), Variant(true)])
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        eventually(timeout: 15) { accepted.isDone }
        XCTAssertNoThrow(try XCTUnwrap(accepted.result).get(), a.log)
        for (peer, other) in [(a, b), (b, a)] {
            XCTAssertNotNil(peer.client.waitForSignalIndex("PairingSettled", after: peer === a ? markA : markB, timeout: 10) {
                $0.string(0) == other.id && $0.arguments[1].bool == true
            }, "\(peer.name): no PairingSettled(\(other.id), true)")
        }
    }

    // MARK: Global hotkeys

    /// With the portal: a session, three shortcuts bound (with --push-to-talk, which starts
    /// muted), and each shortcut's press and release reaching Mute; then, without
    /// --push-to-talk, two shortcuts and an unmuted start.
    func testPortalShortcutsReachMute() throws {
        let directory = try TemporaryDirectory()
        self.directory = directory
        let bus = try PrivateBus(in: directory)
        self.bus = bus
        let client = try whenListening { try APIClient(address: bus.address) }
        let template = directory.path + "/portal_global_shortcuts.py"
        try Self.portalTemplate.write(toFile: template, atomically: true, encoding: .utf8)
        let portal = try DBusMock(template: template, busName: Self.portal, path: Self.portalPath,
                                  bus: bus, client: client, in: directory, name: "portal")
        mocks.append(portal)

        var daemon = try Daemon(bus: bus, in: directory, name: "ptt", arguments: ["--verbose", "--push-to-talk"])
        daemons.append(daemon)
        XCTAssertTrue(client.waitForService(timeout: 15), daemon.process.log)
        var session = try bound(portal, ["toggle-mute", "hold-to-mute", "hold-to-talk"], daemon: daemon)
        XCTAssertEqual(try client.property("Muted").bool, true, "--push-to-talk starts muted")
        XCTAssertNotNil(client.waitForSignal("MuteChanged") { $0.arguments[0].bool == true }, "no MuteChanged(true) at start")

        func press(_ shortcut: String, _ pressed: Bool = true, session: String, expect muted: Bool?) throws {
            let mark = client.signals.count
            try portal.emit(Self.shortcutsInterface, pressed ? "Activated" : "Deactivated", "osta{sv}",
                            [Variant(objectPath: session), Variant(shortcut), Variant(UInt64(1234)), Variant(dictionary: [])])
            if let muted {
                let changed = client.waitForSignalIndex("MuteChanged", after: mark, timeout: 5)
                XCTAssertEqual(changed.flatMap { client.signals[$0].arguments[0].bool }, muted,
                               "\(shortcut) \(pressed ? "pressed" : "released"): \(daemon.process.log.suffix(2_000))")
                XCTAssertEqual(try client.property("Muted").bool, muted)
            } else {
                dispatchEvents(for: 0.3)
                XCTAssertEqual(client.signals[mark...].filter { $0.member == "MuteChanged" }.count, 0,
                               "\(shortcut) \(pressed ? "pressed" : "released") changed Mute")
            }
        }

        try press("hold-to-talk", session: session, expect: false)
        try press("hold-to-talk", false, session: session, expect: true)
        try press("toggle-mute", session: session, expect: false)
        try press("toggle-mute", false, session: session, expect: nil)
        try press("toggle-mute", session: session, expect: true)
        try press("toggle-mute", session: session, expect: false)
        try press("hold-to-mute", session: session, expect: true)
        try press("hold-to-mute", false, session: session, expect: false)
        // Another application's session, and a shortcut we did not bind, do nothing.
        try press("toggle-mute", session: Self.portalPath + "/session/1_999/other", expect: nil)
        try press("unknown", session: session, expect: nil)
        XCTAssertFalse(daemon.process.log.contains(Self.portalMissing))

        // Without --push-to-talk: toggle and hold-to-mute only, and not muted at start.
        XCTAssertEqual(daemon.terminate(), 0)
        try portal.clearCalls()
        XCTAssertTrue(eventually(timeout: 10) { !client.nameHasOwner() })
        daemon = try Daemon(bus: bus, in: directory, name: "plain", arguments: ["--verbose"])
        daemons.append(daemon)
        XCTAssertTrue(client.waitForService(timeout: 15), daemon.process.log)
        session = try bound(portal, ["toggle-mute", "hold-to-mute"], daemon: daemon)
        XCTAssertEqual(try client.property("Muted").bool, false)
        try press("hold-to-talk", session: session, expect: nil)
        try press("hold-to-mute", session: session, expect: true)
        try press("hold-to-mute", false, session: session, expect: false)
        try press("toggle-mute", session: session, expect: true)
    }

    /// Waits for the daemon's CreateSession and BindShortcuts; checks their arguments and that
    /// `ids` were bound; returns the session handle.
    private func bound(_ portal: DBusMock, _ ids: [String], daemon: Daemon) throws -> String {
        let bind = try XCTUnwrap(waitForCalls(portal, "BindShortcuts", count: 1).first, daemon.process.log)
        let create = try XCTUnwrap(portal.calls("CreateSession").first)
        let options = create[0]
        let handleToken = try XCTUnwrap(options.lookup("handle_token")?.string)
        let sessionToken = try XCTUnwrap(options.lookup("session_handle_token")?.string)
        XCTAssertFalse(handleToken.isEmpty)
        XCTAssertTrue(sessionToken.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }, sessionToken)
        // BindShortcuts(o session_handle, a(sa{sv}) shortcuts, s parent_window, a{sv} options).
        XCTAssertEqual(bind.count, 4)
        let session = try XCTUnwrap(bind[0].string)
        XCTAssertEqual(bind[0].typeString, "o")
        XCTAssertTrue(session.hasPrefix(Self.portalPath + "/session/") && session.hasSuffix("/" + sessionToken), session)
        XCTAssertEqual(bind[1].children.map { $0[0].string ?? "" }, ids)
        XCTAssertTrue(bind[1].children.allSatisfy { !($0[1].lookup("description")?.string ?? "").isEmpty })
        XCTAssertEqual(bind[2].string, "")
        XCTAssertNotNil(bind[3].lookup("handle_token")?.string)
        // The daemon heard the Response with the bound shortcuts, which it logs.
        XCTAssertTrue(eventually(timeout: 5) { daemon.process.log.contains("global hotkeys bound through the desktop portal: toggle-mute (Ctrl+Alt+1)") },
                      daemon.process.log)
        return session
    }

    /// PrivateBus returns a moment before dbus-daemon listens: retry the first connection.
    private func whenListening<T>(_ body: () throws -> T) throws -> T {
        let deadline = Date().addingTimeInterval(10)
        while true {
            do { return try body() } catch {
                if Date() > deadline { throw error }
                usleep(20_000)
            }
        }
    }

    /// A python-dbusmock template standing in for xdg-desktop-portal's GlobalShortcuts (version 1).
    /// CreateSession and BindShortcuts answer on the Request path the real portal uses
    /// (/org/freedesktop/portal/desktop/request/SENDER/TOKEN, SENDER the caller's unique name
    /// without ':' and with '.' as '_', TOKEN its handle_token), emitting Response before the
    /// method returns: a client must subscribe before it calls. Every shortcut asked for is bound.
    private static let portalTemplate = #"""
        import dbus
        import dbus.service

        BUS_NAME = 'org.freedesktop.portal.Desktop'
        MAIN_OBJ = '/org/freedesktop/portal/desktop'
        MAIN_IFACE = 'org.freedesktop.portal.GlobalShortcuts'
        SYSTEM_BUS = False
        REQUEST_IFACE = 'org.freedesktop.portal.Request'
        SESSION_IFACE = 'org.freedesktop.portal.Session'


        def load(mock, parameters):
            mock.AddProperties(MAIN_IFACE, {'version': dbus.UInt32(1)})
            mock.sessions = {}
            mock.request_count = 0


        def _handle(mock, kind, sender, token):
            if not token:
                mock.request_count += 1
                token = f'mock{mock.request_count}'
            return dbus.ObjectPath(f'{MAIN_OBJ}/{kind}/{sender[1:].replace(".", "_")}/{token}')


        def _respond(mock, request, response, results):
            mock.AddObject(request, REQUEST_IFACE, {}, [('Close', '', '', '')])
            mock.EmitSignalDetailed(REQUEST_IFACE, 'Response', 'ua{sv}',
                                    [dbus.UInt32(response), dbus.Dictionary(results, signature='sv')],
                                    {'path': request})


        @dbus.service.method(MAIN_IFACE, in_signature='a{sv}', out_signature='o', sender_keyword='sender')
        def CreateSession(self, options, sender=None):
            request = _handle(self, 'request', sender, options.get('handle_token'))
            session = _handle(self, 'session', sender, options.get('session_handle_token'))
            self.sessions[str(session)] = sender
            self.AddObject(session, SESSION_IFACE, {}, [('Close', '', '', '')])
            # session_handle is an 's' in the results (a mistake the portal keeps for compatibility).
            _respond(self, request, 0, {'session_handle': dbus.String(session)})
            return request


        @dbus.service.method(MAIN_IFACE, in_signature='oa(sa{sv})sa{sv}', out_signature='o', sender_keyword='sender')
        def BindShortcuts(self, session, shortcuts, parent_window, options, sender=None):
            if self.sessions.get(str(session)) != sender:
                raise dbus.exceptions.DBusException(f'no session {session} for {sender}',
                                                    name='org.freedesktop.DBus.Error.InvalidArgs')
            request = _handle(self, 'request', sender, options.get('handle_token'))
            bound = [dbus.Struct((shortcut_id, dbus.Dictionary({'description': info.get('description', ''),
                                                               'trigger_description': f'Ctrl+Alt+{n}'}, signature='sv')))
                     for n, (shortcut_id, info) in enumerate(shortcuts, 1)]
            _respond(self, request, 0, {'shortcuts': dbus.Array(bound, signature='(sa{sv})')})
            return request
        """#
}
