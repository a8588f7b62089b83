import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// File transfers in the peer's conversation: offers, progress and the files on disk.
extension AppTests {
    /// bravo offers alpha a file: alpha's conversation shows it as a row with Accept among the
    /// bubbles; Accept (through AT-SPI) takes it, the row reaches Received with every byte, and
    /// the file is in alpha's download folder with the bytes bravo sent. Then alpha sends a file
    /// with Send files… → Files… and GTK's own file chooser (typed as a person does: Ctrl+L, the
    /// path, Return): bravo is offered it, accepts, and the row says Sent.
    func testAFileOfferIsAcceptedInTheChatAndAFileIsSentWithTheFileChooser() throws {
        let files = try TemporaryDirectory("peervoice-app-files")
        defer { files.remove() }
        let alpha = try peer("alpha", arguments: ["--download-dir", files.path + "/alpha-downloads"])
        let bravo = try peer("bravo", arguments: ["--download-dir", files.path + "/bravo-downloads"])
        XCTAssertEqual(try alpha.pair(with: bravo).connect.get()[0].string, bravo.id)
        let offered = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) })
        try offered.write(to: URL(fileURLWithPath: files.path + "/holiday.bin"))
        try bravo.client.call("Send", [Variant(alpha.id), Variant("a file for you")])
        try bravo.client.call("SendFiles", [Variant(alpha.id), Variant(array: [Variant(files.path + "/holiday.bin")], elementType: "s"),
                                            Variant(dictionary: [])])

        // The desktop's default application for what alpha receives: a handler of our own under
        // XDG_DATA_HOME, which notes what it was given.
        let opened = files.path + "/opened"
        let handler = files.path + "/data/applications"
        try FileManager.default.createDirectory(atPath: handler, withIntermediateDirectories: true)
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" >> \(opened)\n".write(toFile: files.path + "/record-open", atomically: true, encoding: .utf8)
        chmod(files.path + "/record-open", 0o755)
        try "[Desktop Entry]\nType=Application\nName=Record\nExec=\(files.path)/record-open %f\nMimeType=application/octet-stream;inode/directory;\n"
            .write(toFile: handler + "/peervoice-test-record.desktop", atomically: true, encoding: .utf8)
        try "[Default Applications]\napplication/octet-stream=peervoice-test-record.desktop\ninode/directory=peervoice-test-record.desktop\n"
            .write(toFile: handler + "/mimeapps.list", atomically: true, encoding: .utf8)
        let app = try session(on: alpha, environment: ["XDG_DATA_HOME": files.path + "/data"])
        app.ui("select-row", "bravo")
        app.ui("wait", "Accept holiday.bin")
        XCTAssertEqual(app.ui("conversation"), "bravo: a file for you\nbravo: holiday.bin", "the offer after the message sent before it")
        // GLib writes sizes with a no-break space (g_format_size).
        XCTAssertEqual(app.ui("row-description", "bravo: holiday.bin"), "3.0\u{A0}MB, Offered to you")
        app.assertEveryControlNamed("with a file offered")
        screenshot(app, "app-transfer-offer", in: alpha)
        app.ui("click", "Accept holiday.bin")
        app.ui("wait-label", "Received", timeout: 60)
        XCTAssertEqual(app.ui("row-description", "bravo: holiday.bin"), "3.0\u{A0}MB, Received")
        app.ui("wait-gone", "Cancel holiday.bin")
        let received = files.path + "/alpha-downloads/holiday.bin"
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: received)), offered, "the file on disk is not the one sent")

        // What was received: Open starts the default application with it; Show in folder asks the
        // file manager to show it, and without one on the bus opens its folder.
        func openedPaths() -> [String] { ((try? String(contentsOfFile: opened, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
        app.ui("click", "Open holiday.bin")
        XCTAssertTrue(eventually(timeout: 10) { openedPaths() == [received] }, "opened: \(openedPaths()) \(app.log)")
        app.ui("click", "Show holiday.bin in its folder")
        XCTAssertTrue(eventually(timeout: 10) { openedPaths() == [received, files.path + "/alpha-downloads"] },
                      "with no file manager the folder opens: \(openedPaths()) \(app.log)")
        let fileManager = try FileManagerStandIn(bus: alpha.bus, client: alpha.client, in: files)
        defer { fileManager.stop() }
        app.ui("click", "Show holiday.bin in its folder")
        XCTAssertTrue(eventually(timeout: 10) { fileManager.shownItems == [["file://" + received]] }, "\(fileManager.shownItems)")
        XCTAssertEqual(openedPaths().count, 2, "nothing else opened")

        let reply = Data("an answer, as a file".utf8)
        try reply.write(to: URL(fileURLWithPath: files.path + "/answer.txt"))
        let watch = TransferWatch(bravo.client)
        app.ui("click", "Send files…")
        app.ui("click", "Files…")
        app.focusWindow(named: "Send files")
        // GTK's dialog (no portal here), once drawn; its location field is named after its class only.
        app.ui("wait-label", "Other Locations")
        app.keys("ctrl+l")
        app.ui("wait", "GtkFileChooserEntry")
        app.type(files.path + "/answer.txt")
        XCTAssertTrue(eventually(timeout: 10) { app.ui("field", "GtkFileChooserEntry") == files.path + "/answer.txt" },
                      "typed: \(app.ui("field", "GtkFileChooserEntry") ?? "")")
        app.keys("Return")
        let incoming = try XCTUnwrap(watch.waitForIncoming(timeout: 20), "the file chooser sent nothing: \(app.log)")
        app.ui("wait", "You: answer.txt")
        app.ui("wait-label", "Waiting for the peer to accept")
        try watch.call("Accept", on: incoming)
        XCTAssertEqual(watch.waitForState(incoming, ["complete", "failed", "cancelled", "declined"]), "complete")
        app.ui("wait-label", "Sent", timeout: 30)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: files.path + "/bravo-downloads/answer.txt")), reply)
        app.assertEveryControlNamed("after two transfers")
    }
}
