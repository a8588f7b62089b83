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
        screenshot(app, "app-transfer", in: alpha)

        let reply = Data("an answer, as a file".utf8)
        try reply.write(to: URL(fileURLWithPath: files.path + "/answer.txt"))
        let watch = TransferWatch(bravo.client)
        sendWithTheFileChooser(app, files.path + "/answer.txt")
        let incoming = try XCTUnwrap(watch.waitForIncoming(timeout: 20), "the file chooser sent nothing: \(app.log)")
        app.ui("wait", "You: answer.txt")
        app.ui("wait-label", "Waiting for the peer to accept")
        try watch.call("Accept", on: incoming)
        XCTAssertEqual(watch.waitForState(incoming, ["complete", "failed", "cancelled", "declined"]), "complete")
        app.ui("wait-label", "Sent", timeout: 30)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: files.path + "/bravo-downloads/answer.txt")), reply)
        app.assertEveryControlNamed("after two transfers")
    }

    /// Send files… → Files… and GTK's own file chooser, typed as a person does: Ctrl+L, the path, Return.
    private func sendWithTheFileChooser(_ app: AppSession, _ path: String, file: StaticString = #filePath, line: UInt = #line) {
        app.ui("click", "Send files…", file: file, line: line)
        app.ui("click", "Files…", file: file, line: line)
        app.focusWindow(named: "Send files", file: file, line: line)
        // GTK's dialog (no portal here), once drawn; its location field is named after its class only.
        app.ui("wait-label", "Other Locations", file: file, line: line)
        app.keys("ctrl+l", file: file, line: line)
        app.ui("wait", "GtkFileChooserEntry", file: file, line: line)
        app.type(path, file: file, line: line)
        XCTAssertTrue(eventually(timeout: 10) { app.ui("field", "GtkFileChooserEntry") == path },
                      "typed: \(app.ui("field", "GtkFileChooserEntry") ?? "")", file: file, line: line)
        app.keys("Return", file: file, line: line)
    }

    /// Decline, Cancel and Retry from the conversation: bravo's offer declined here writes
    /// nothing; a file under way (over a slowed relay) cancelled here stops at both ends and its
    /// part file goes; a file sent from here that changed before bravo took it fails, and Retry
    /// sends it again as it is now; a file dragged from another program onto the conversation
    /// is sent.
    func testAnOfferIsDeclinedAFileIsCancelledMidwayAndAFailedSendIsRetried() throws {
        let files = try TemporaryDirectory("peervoice-app-transfer-actions")
        defer { files.remove() }
        let downloads = files.path + "/alpha-downloads"
        let alpha = try peer("alpha", arguments: ["--download-dir", downloads])
        let bravo = try peer("bravo", arguments: ["--download-dir", files.path + "/bravo-downloads"])
        let relay = try Relay(targetPort: bravo.port)
        defer { relay.stop() }
        XCTAssertEqual(try alpha.pair(with: bravo, via: relay.address).connect.get()[0].string, bravo.id)
        let here = TransferWatch(alpha.client), there = TransferWatch(bravo.client)
        let finished: Set<String> = ["complete", "failed", "cancelled", "declined"]
        func downloaded() -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: downloads)) ?? [] }
        let app = try session(on: alpha)
        app.ui("select-row", "bravo")

        try Data("not wanted".utf8).write(to: URL(fileURLWithPath: files.path + "/unwanted.txt"))
        let declined = try there.send([files.path + "/unwanted.txt"], to: alpha.id)
        app.ui("click", "Decline unwanted.txt")
        XCTAssertEqual(there.waitForState(declined, finished), "declined")
        app.ui("wait-gone", "Accept unwanted.txt")
        XCTAssertEqual(app.ui("row-description", "bravo: unwanted.txt"), "10 bytes, Declined: declined by the receiver")
        XCTAssertEqual(downloaded(), [], "a declined offer writes nothing")

        // 20 ms per read on the way: about 1-3 MB/s, so the 16 MiB are under way for seconds.
        relay.delay(0.02)
        let known = Set(try here.objects().keys)
        try XCTUnwrap(FileHandle(forReadingAtPath: "/dev/urandom")).readData(ofLength: 16 << 20)
            .write(to: URL(fileURLWithPath: files.path + "/big.bin"))
        let cancelled = try there.send([files.path + "/big.bin"], to: alpha.id)
        app.ui("click", "Accept big.bin")
        let incoming = try XCTUnwrap(here.waitForIncoming(except: known))
        XCTAssertTrue(here.waitForTransferred(incoming, atLeast: 64 << 10), here.state(incoming))
        app.ui("wait-label", "Receiving")
        // The progress bar moves while the bytes come.
        let progress = Double(app.ui("value", "Progress of big.bin") ?? "") ?? -1
        XCTAssertTrue(eventually(timeout: 10) { (Double(app.ui("value", "Progress of big.bin") ?? "") ?? -1) > progress },
                      "the bar stayed at \(progress)")
        app.ui("click", "Cancel big.bin")
        XCTAssertEqual(there.waitForState(cancelled, finished), "cancelled")
        XCTAssertEqual(here.waitForState(incoming, finished), "cancelled")
        XCTAssertLessThan(here.transferred(incoming), 16 << 20, "it stopped in the middle")
        app.ui("wait-gone", "Cancel big.bin")
        XCTAssertEqual(app.ui("row-description", "bravo: big.bin"), "16.8\u{A0}MB, Cancelled: cancelled by the receiver")
        XCTAssertTrue(eventually(timeout: 10) { downloaded().isEmpty }, "the part file is removed: \(downloaded())")
        relay.delay(0)

        let draft = files.path + "/draft.txt"
        try Data("first draft".utf8).write(to: URL(fileURLWithPath: draft))
        let offeredBefore = Set(try there.objects().keys)
        sendWithTheFileChooser(app, draft)
        let first = try XCTUnwrap(there.waitForIncoming(except: offeredBefore), "the file chooser sent nothing: \(app.log)")
        app.ui("wait", "You: draft.txt")
        // Edited after it was offered: taking it now fails at the sender.
        try Data("second draft, longer".utf8).write(to: URL(fileURLWithPath: draft))
        try there.call("Accept", on: first)
        XCTAssertEqual(there.waitForState(first, finished), "failed")
        app.ui("click", "Send draft.txt again")
        let second = try XCTUnwrap(there.waitForIncoming(except: offeredBefore.union([first])), "Retry sent nothing: \(app.log)")
        try there.call("Accept", on: second)
        XCTAssertEqual(there.waitForState(second, finished), "complete")
        XCTAssertEqual(try String(contentsOfFile: files.path + "/bravo-downloads/draft.txt", encoding: .utf8), "second draft, longer")
        app.ui("wait-label", "Sent")

        // Files dragged from another program onto the conversation are sent.
        try Data("dropped here".utf8).write(to: URL(fileURLWithPath: files.path + "/dropped.txt"))
        let offeredBeforeDrop = Set(try there.objects().keys)
        try app.dragFiles([files.path + "/dropped.txt"], onto: "Conversation")
        let dropped = try XCTUnwrap(there.waitForIncoming(except: offeredBeforeDrop), "the drop sent nothing: \(app.log)")
        app.ui("wait", "You: dropped.txt")
        try there.call("Accept", on: dropped)
        XCTAssertEqual(there.waitForState(dropped, finished), "complete")
        app.ui("wait-gone", "Cancel dropped.txt")
        app.assertEveryControlNamed("after a declined, a cancelled, a failed and a retried transfer")
    }
}
