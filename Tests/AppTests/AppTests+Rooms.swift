import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// Mumble rooms in the window, against the real murmurd and a pymumble user (RoomTests' harness).
extension AppTests {
    /// Join a room… with a mumble:// address: the room is listed under Rooms, its page shows
    /// the user already in the channel, their text arrives as a bubble with their name, and
    /// what is typed here reaches them; Leave takes the room away. The server comes back with
    /// another certificate: joining again asks whether to trust it, showing the fingerprint the
    /// server presented (the room object's `ServerFingerprint`), and Trust and join joins.
    func testARoomJoinedInTheWindowShowsItsUsersAndTextGoesBothWays() throws {
        let directory = try TemporaryDirectory("peervoice-app-room")
        defer { directory.remove() }
        let server = try MumbleServer(in: directory)
        defer { server.stop() }
        // A SuperUser makes /Games and leaves; bob waits there.
        _ = try PyMumbleClient("SuperUser", server: server, in: directory, password: MumbleServer.superUserPassword,
                               channel: "Games", createChannel: true)
        let bob = try PyMumbleClient("bob", server: server, in: directory, channel: "Games")
        let ana = try peer("ana")
        let app = try session(on: ana)

        app.ui("click", "Join a room…")
        app.ui("set-text", "Room address", "mumble://ana@127.0.0.1:\(server.port)/Games")
        app.ui("click", "Join")
        let room = "127.0.0.1:\(server.port)/Games"
        app.ui("wait-row-in", "Rooms", room, timeout: 30)
        app.ui("wait-row-in", "Users in the room", "bob")
        XCTAssertEqual(app.ui("row-description", room), "connected · /Games · 1 other user")
        app.assertEveryControlNamed("in a room")

        bob.send("send hello from pymumble")
        app.ui("wait-row-in", "Room conversation", "bob: hello from pymumble")
        app.ui("set-text", "Message to the room", "hi bob, 2 < 3")
        app.ui("click", "Send to the room")
        XCTAssertTrue(eventually(timeout: 10) { bob.texts.contains { $0 == ("ana", "hi bob, 2 &lt; 3") } }, "bob read: \(bob.texts)")
        app.ui("wait-row-in", "Room conversation", "You: hi bob, 2 < 3")
        screenshot(app, "app-room", in: ana)

        app.ui("click", "Leave")
        app.ui("wait-gone", "Users in the room")
        XCTAssertTrue(eventually(timeout: 10) { bob.usersInChannel(timeout: 1) == [:] }, "ana is still in the channel for bob")

        let first = server.fingerprint
        server.stop()
        try server.start(freshCertificate: true)
        XCTAssertNotEqual(server.fingerprint, first)
        app.ui("click", "Join a room…")
        app.ui("set-text", "Room address", "mumble://ana@127.0.0.1:\(server.port)")
        app.ui("click", "Join")
        app.ui("wait-label", "The server's certificate changed", timeout: 30)
        XCTAssertEqual(app.ui("text", "Server fingerprint"), server.fingerprint)
        app.assertEveryControlNamed("asking about a changed certificate")
        // The refused room is not left behind.
        let root = "127.0.0.1:\(server.port)"
        app.ui("wait-gone", root)
        app.ui("click", "Trust and join")
        app.ui("wait-row-in", "Rooms", root, timeout: 30)
        XCTAssertEqual(app.ui("row-description", root), "connected · / · 0 other users")
    }
}
