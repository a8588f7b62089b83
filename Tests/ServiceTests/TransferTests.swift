import Foundation
import GIO
import Glibc
import PeerVoiceCore
import TestHarness
import XCTest

/// File transfers between two real peervoiced processes on private buses, linked over TCP on
/// 127.0.0.1 (through a `Relay` where the link is to be cut), each saving into a download folder
/// of its own: what a person sees on the transfer objects, and what lands on disk.
final class TransferTests: XCTestCase {
    private static let invalidArgument = "org.example.PeerVoice.Error.InvalidArgument"
    private static let finished: Set<String> = ["complete", "failed", "cancelled", "declined"]

    private let started = StartedPeers()
    private var directory: TemporaryDirectory!
    private var relays: [Relay] = []

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("peervoice-transfers")
    }

    override func tearDown() {
        relays.forEach { $0.stop() }
        relays = []
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
        directory?.remove()
    }

    // MARK: Helpers

    private func path(_ name: String) -> String { directory.path + "/" + name }

    /// The download folder of the peer named `name`.
    private func inbox(_ name: String) -> String { path("\(name)-downloads") }

    private func peer(_ name: String, port: UInt16 = 0, extra: [String] = []) throws -> TestPeer {
        try started.make(name, port: port, arguments: ["--verbose", "--no-auto-voice", "--download-dir", inbox(name)] + extra)
    }

    /// Two paired, connected peers (A dialled B, through `relay` when given).
    private func connectedPair(via relay: Relay? = nil, bPort: UInt16 = 0) throws -> (a: TestPeer, b: TestPeer) {
        let a = try peer("alpha")
        let b = try peer("bravo", port: bPort)
        let pairing = a.pair(with: b, via: relay?.address)
        XCTAssertEqual(try pairing.connect.get()[0].string, b.id)
        XCTAssertNotNil(b.waitForState("connected", of: a.id), b.log)
        return (a, b)
    }

    private func run(_ command: String) throws {
        let process = try ChildProcess("/bin/sh", ["-c", command], logPath: path("shell-\(UUID().uuidString.prefix(8)).log"))
        XCTAssertEqual(process.wait(timeout: 120), 0, "\(command): \(process.log)")
    }

    /// Every regular file below `root` (but those named `skipping`): relative path → SHA-256, and
    /// the folders (empty ones too).
    private func tree(_ root: String, skipping: String = "") throws -> [String: String] {
        let process = try ChildProcess("/bin/sh", ["-c", "cd '\(root)' && find . -mindepth 1 -type d -printf 'folder %P\\n' && find . -type f ! -name '\(skipping)' -print0 | sort -z | xargs -0 -r sha256sum"],
                                       logPath: path("tree-\(UUID().uuidString.prefix(8)).log"))
        XCTAssertEqual(process.wait(timeout: 120), 0, process.log)
        var entries: [String: String] = [:]
        for line in process.log.split(separator: "\n") {
            if line.hasPrefix("folder ") {
                entries[String(line.dropFirst(7))] = "folder"
            } else {
                let hash = String(line.prefix(64))
                entries[String(line.dropFirst(66).dropFirst(2))] = hash
            }
        }
        return entries
    }

    /// A folder tree with unicode names, an empty file, an empty folder and a symbolic link.
    private func makeTree(_ root: String, seed: Int) throws {
        try run("""
            set -e
            mkdir -p '\(root)/Фото 2024/café/leer' '\(root)/日本語'
            head -c \(300_000 + seed) /dev/urandom > '\(root)/Фото 2024/plage ☀.jpg'
            head -c \(70_000 + seed) /dev/urandom > '\(root)/Фото 2024/café/crème brûlée.txt'
            : > '\(root)/日本語/空.txt'
            printf 'ünïcödé %d' \(seed) > '\(root)/ok 👍.md'
            ln -s /etc/passwd '\(root)/Фото 2024/link'
            """)
    }

    // MARK: Both ways

    /// A 200 MiB file and a folder tree with unicode names go from A to B and from B to A at
    /// once; what lands is what was sent (SHA-256 of every file), the link was skipped.
    func testABigFileAndAUnicodeFolderTreeGoBothWaysAndArriveWhole() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        for (name, seed) in [("alpha", 1), ("bravo", 2)] {
            try run("mkdir -p '\(path(name))' && head -c \(200 << 20) /dev/urandom > '\(path(name))/big \(name).bin'")
            try makeTree(path(name) + "/Tree of \(name)", seed: seed)
        }
        let started = Date()
        let outAB = try watchA.send([path("alpha/big alpha.bin"), path("alpha/Tree of alpha")], to: b.id)
        let outBA = try watchB.send([path("bravo/big bravo.bin"), path("bravo/Tree of bravo")], to: a.id)
        XCTAssertEqual(watchA.state(outAB), "waiting", "until B's person answers")
        XCTAssertEqual(watchA.property(outAB, "Skipped")?.strings, ["Tree of alpha/Фото 2024/link (a symbolic link)"])
        let inAB = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        let inBA = try XCTUnwrap(watchA.waitForIncoming(), a.log)
        XCTAssertEqual(watchB.property(inAB, "Peer")?.string, a.id)
        XCTAssertEqual(watchB.property(inAB, "Size")?.uint64, watchA.property(outAB, "Size")?.uint64)
        XCTAssertEqual(watchB.property(inAB, "Files")?.children.count, 5, "the big file and the tree's four files")
        XCTAssertEqual(watchB.property(inAB, "Destination")?.string, inbox("bravo"), "two items: the folder they go in")
        XCTAssertFalse(FileManager.default.fileExists(atPath: inbox("bravo")), "nothing written before Accept")
        try watchB.call("Accept", on: inAB)
        try watchA.call("Accept", on: inBA)
        for (watch, path) in [(watchA, outAB), (watchB, inAB), (watchB, outBA), (watchA, inBA)] {
            XCTAssertEqual(watch.waitForState(path, Self.finished, timeout: 300), "complete", "\(path): \(watch.property(path, "Error")?.string ?? "")")
        }
        print("200 MiB and a tree each way at once: \(String(format: "%.1f", Date().timeIntervalSince(started))) s (debug build)")
        for side in [a, b] {
            XCTAssertTrue(side.log.contains("accepted; files hashed with SHA-256"), "two version-10 sides: SHA-256 (PROTOCOL.md §15.1)")
        }
        XCTAssertEqual(try tree(inbox("bravo")), try tree(path("alpha")).filter { !$0.key.hasSuffix("/link") })
        XCTAssertEqual(try tree(inbox("alpha")), try tree(path("bravo")).filter { !$0.key.hasSuffix("/link") })
        XCTAssertEqual(watchA.transferred(outAB), watchA.property(outAB, "Size")?.uint64)
        // Progress was shown while it ran, at most 4 times a second.
        let progress = watchB.changes.filter { $0.path == inAB && $0.properties["Transferred"] != nil }
        XCTAssertGreaterThan(progress.count, 2)
        // Seen from a client, delivery on a loaded machine bunches signals the service spaced out
        // (9 once arrived within one second at load 20): judged as the median gap and the rate over the
        // whole run, not gap by gap or second by second.
        let flowing = progress.filter { $0.properties["State"] == nil }.map(\.at)
        let gaps = zip(flowing, flowing.dropFirst()).map { $1.timeIntervalSince($0) }.sorted()
        XCTAssertGreaterThan(gaps.isEmpty ? 1 : gaps[gaps.count / 2], 0.2, "PropertiesChanged for Transferred at most 4 times a second: \(gaps)")
        // A second's slack: the first signal may arrive late, shortening the span seen.
        let span = (flowing.last ?? started).timeIntervalSince(flowing.first ?? started)
        print("Transferred shown \(flowing.count) times in \(String(format: "%.2f", span)) s")
        XCTAssertLessThanOrEqual(Double(flowing.count), 4 * (span + 1), "PropertiesChanged for Transferred at most 4 times a second over the run")
    }

    /// `peervoicectl send-file` follows its transfer to the end: without a terminal, a line for
    /// each state and each tenth, then exit 0 with what went how fast; a declined one exits 1
    /// saying so, and Ctrl-C cancels the transfer at both ends.
    func testPeervoicectlSendFileFollowsItsTransferToTheEnd() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(100 << 20) /dev/urandom > '\(path("film.bin"))'")
        func sendFile(_ name: String) throws -> ChildProcess {
            try ChildProcess(Binaries.directory + "/peervoicectl", ["send-file", b.id, path("film.bin")],
                             environment: ["DBUS_SESSION_BUS_ADDRESS": a.bus.address], logPath: path("\(name).log"))
        }
        let sent = try sendFile("send-file")
        let first = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        XCTAssertTrue(eventually(timeout: 10) { sent.log.contains("1 file (105 MB) for bravo (\(b.id)): waiting for it to accept") }, sent.log)
        try watchB.call("Accept", on: first)
        XCTAssertEqual(sent.wait(timeout: 120), 0, sent.log)
        XCTAssertTrue(sent.log.contains("sending 1 file (105 MB) to bravo (\(b.id))"), sent.log)
        XCTAssertNotNil(sent.log.range(of: #"\n[1-9]0%: [0-9.]+ MB of 105 MB"#, options: .regularExpression), "a line per tenth: \(sent.log)")
        XCTAssertTrue(sent.log.contains("complete: 1 file (105 MB) in "), sent.log)
        XCTAssertEqual(try tree(inbox("bravo"))["film.bin"], try tree(directory.path)["film.bin"])

        let declined = try sendFile("declined")
        let second = try XCTUnwrap(watchB.waitForIncoming(except: [first]), b.log)
        try watchB.call("Decline", on: second)
        XCTAssertEqual(declined.wait(timeout: 30), 1, declined.log)
        XCTAssertTrue(declined.log.contains("peervoicectl: the transfer was declined: declined by the receiver"), declined.log)

        let interrupted = try sendFile("interrupted")
        let third = try XCTUnwrap(watchB.waitForIncoming(except: [first, second]), b.log)
        XCTAssertTrue(eventually(timeout: 10) { interrupted.log.contains("waiting for it to accept") }, interrupted.log)
        interrupted.signal(SIGINT)
        XCTAssertEqual(interrupted.wait(timeout: 30), 130, interrupted.log)
        XCTAssertEqual(watchB.waitForState(third, Self.finished), "cancelled", b.log)
        let outgoing = try watchA.objects().keys.sorted { $0.count == $1.count ? $0 < $1 : $0.count < $1.count }.last ?? ""
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished), "cancelled", a.log)
    }

    // MARK: Answers and ends

    func testADeclinedOfferWritesNothingAndBothSidesSaySo() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("printf 'secret plans' > '\(path("plans.txt"))'")
        let outgoing = try watchA.send([path("plans.txt")], to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        XCTAssertEqual(watchB.property(incoming, "Destination")?.string, inbox("bravo") + "/plans.txt")
        XCTAssertEqual(watchB.property(incoming, "Files")?.children.map { "\($0[0].string!) \($0[1].uint64!)" }, ["plans.txt 12"])
        try watchB.call("Decline", on: incoming)
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished), "declined")
        XCTAssertEqual(watchB.state(incoming), "declined")
        XCTAssertEqual(watchA.property(outgoing, "Error")?.string, "declined by the receiver")
        XCTAssertFalse(FileManager.default.fileExists(atPath: inbox("bravo")), "nothing was written")
        // An answer is final; Accept is for the receiver only.
        XCTAssertThrowsError(try watchB.call("Accept", on: incoming)) { XCTAssertEqual(($0 as? BusError)?.name, Self.invalidArgument) }
        XCTAssertThrowsError(try watchB.call("Cancel", on: incoming)) { XCTAssertEqual(($0 as? BusError)?.name, Self.invalidArgument) }
        let second = try watchA.send([path("plans.txt")], to: b.id)
        XCTAssertThrowsError(try watchA.call("Accept", on: second)) { XCTAssertEqual(($0 as? BusError)?.name, Self.invalidArgument) }
        // Finished transfers stay listed.
        XCTAssertEqual(try watchA.objects()[outgoing]?.lookup("State")?.string, "declined")
    }

    /// Cancel in the middle, at the receiver and then at the sender: both sides show it, and the
    /// receiver's partial data is gone.
    func testCancellingMidwayAtEitherEndRemovesThePartialData() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(200 << 20) /dev/urandom > '\(path("big.bin"))'")
        for (canceller, reason) in [("receiver", "cancelled by the receiver"), ("sender", "cancelled by the sender")] {
            let known = Set(try watchB.objects().keys)
            let outgoing = try watchA.send([path("big.bin")], to: b.id)
            let incoming = try XCTUnwrap(watchB.waitForIncoming(except: known), b.log)
            try watchB.call("Accept", on: incoming)
            XCTAssertTrue(watchB.waitForTransferred(incoming, atLeast: 16 << 20), "\(canceller): \(watchB.state(incoming))")
            let parts = try FileManager.default.contentsOfDirectory(atPath: inbox("bravo"))
            XCTAssertEqual(parts.count, 1, "the hidden part file grows")
            XCTAssertTrue(parts.allSatisfy { $0.hasPrefix(".big.bin.") && $0.hasSuffix(".part") }, "\(parts)")
            if canceller == "receiver" { try watchB.call("Cancel", on: incoming) } else { try watchA.call("Cancel", on: outgoing) }
            XCTAssertEqual(watchA.waitForState(outgoing, Self.finished), "cancelled", canceller)
            XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "cancelled", canceller)
            XCTAssertEqual(watchA.property(outgoing, "Error")?.string, reason)
            XCTAssertEqual(watchB.property(incoming, "Error")?.string, reason)
            XCTAssertTrue(eventually(timeout: 10) { (try? FileManager.default.contentsOfDirectory(atPath: self.inbox("bravo")))?.isEmpty == true },
                          "\(canceller): the part file is removed: \((try? FileManager.default.contentsOfDirectory(atPath: inbox("bravo"))) ?? [])")
            XCTAssertLessThan(watchA.transferred(outgoing), 200 << 20, "it stopped in the middle")
        }
    }

    // MARK: Faults

    func testAFileThatChangesOnTheSenderMidwayFailsRatherThanArriveHalfNew() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(200 << 20) /dev/urandom > '\(path("draft.bin"))'")
        let outgoing = try watchA.send([path("draft.bin")], to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        try watchB.call("Accept", on: incoming)
        XCTAssertTrue(watchA.waitForTransferred(outgoing, atLeast: 16 << 20))
        // Someone edits the end of the file (same size) while its beginning is on its way.
        try run("printf 'edited' | dd of='\(path("draft.bin"))' bs=1 seek=\((200 << 20) - 100) conv=notrunc status=none")
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished, timeout: 60), "failed")
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "failed")
        let error = watchA.property(outgoing, "Error")?.string ?? ""
        XCTAssertTrue(error.contains("draft.bin changed while it was sent"), error)
        XCTAssertEqual(watchB.property(incoming, "Error")?.string, error, "the receiver is told why")
        XCTAssertTrue(eventually(timeout: 10) { (try? FileManager.default.contentsOfDirectory(atPath: self.inbox("bravo")))?.isEmpty == true },
                      "nothing lands, no part is left")
    }

    /// An 8 MiB tmpfs as B's download folder: a 20 MiB file is refused at Accept, before any byte.
    func testNotEnoughSpaceIsRefusedAtAcceptBeforeAnyByte() throws {
        try FileManager.default.createDirectory(atPath: inbox("bravo"), withIntermediateDirectories: true)
        try run("mount -t tmpfs -o size=8m peervoice-test '\(inbox("bravo"))'")
        defer { _ = try? run("umount '\(inbox("bravo"))'") }
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(20 << 20) /dev/urandom > '\(path("video.bin"))'")
        let outgoing = try watchA.send([path("video.bin")], to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        XCTAssertThrowsError(try watchB.call("Accept", on: incoming)) { error in
            XCTAssertEqual((error as? BusError)?.name, "org.example.PeerVoice.Error.Failed")
            XCTAssertEqual((error as? BusError)?.message, "needs 21 MB, 8.4 MB free on \(self.inbox("bravo"))")
        }
        XCTAssertEqual(watchB.state(incoming), "failed")
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished), "failed")
        XCTAssertEqual(watchA.property(outgoing, "Error")?.string, "needs 21 MB, 8.4 MB free on \(inbox("bravo"))")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: inbox("bravo")), [], "not a byte written")
    }

    /// A transfer to a peer that is away waits, and starts by itself once the peer is back.
    func testATransferToAPeerThatIsAwayStartsWhenItComesBack() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client)
        let mark = a.mark
        XCTAssertEqual(b.stop(), 0)
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: mark))
        try run("head -c 3000000 /dev/urandom > '\(path("later.bin"))'")
        let outgoing = try watchA.send([path("later.bin")], to: b.id)
        dispatchEvents(for: 1)
        XCTAssertEqual(watchA.state(outgoing), "waiting")
        try b.restart()
        let watchB = TransferWatch(b.client)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(timeout: 30), "A redials B and offers it: \(a.log.suffix(2_000))")
        try watchB.call("Accept", on: incoming)
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished), "complete")
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "complete")
        XCTAssertEqual(try tree(inbox("bravo")), try tree(path("")).filter { $0.key == "later.bin" })
    }

    // MARK: Sizes and places

    /// A sparse file just past 4 GiB (data at its start and beyond 4 GiB, a hole between), an
    /// empty file and an empty folder, saved in the download folder the desktop names (B has no
    /// --download-dir: XDG_DOWNLOAD_DIR in its user-dirs.dirs): the same bytes, still sparse.
    func testASparseFilePastFourGiBAndEmptyOnesLandInTheDesktopsDownloadFolder() throws {
        let home = path("home")
        try FileManager.default.createDirectory(atPath: home + "/.config", withIntermediateDirectories: true)
        try #"XDG_DOWNLOAD_DIR="$HOME/Téléchargements""#.write(toFile: home + "/.config/user-dirs.dirs", atomically: true, encoding: .utf8)
        let a = try peer("alpha")
        let b = try started.make("bravo", arguments: ["--verbose", "--no-auto-voice"], environment: ["HOME": home, "XDG_CONFIG_HOME": home + "/.config"])
        XCTAssertEqual(try a.pair(with: b).connect.get()[0].string, b.id)
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        let size: UInt64 = (4 << 30) + (3 << 20)
        try run("""
            set -e; mkdir -p '\(path("out/empty folder"))'; cd '\(path("out"))'
            truncate -s \(size) sparse.img
            head -c 1048576 /dev/urandom | dd of=sparse.img conv=notrunc status=none
            head -c 1048576 /dev/urandom | dd of=sparse.img bs=1M seek=4097 conv=notrunc status=none
            : > empty.txt
            """)
        let started = Date()
        let outgoing = try watchA.send(["sparse.img", "empty.txt", "empty folder"].map { path("out/" + $0) }, to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        XCTAssertEqual(watchB.property(incoming, "Destination")?.string, home + "/Téléchargements")
        XCTAssertEqual(watchB.property(incoming, "Size")?.uint64, size)
        try watchB.call("Accept", on: incoming)
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished, timeout: 120), "complete", a.log.suffix(2_000).description)
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "complete")
        print("a sparse file of \(size) bytes: \(String(format: "%.1f", Date().timeIntervalSince(started))) s (debug build)")
        XCTAssertEqual(watchB.transferred(incoming), size)
        let received = home + "/Téléchargements"
        XCTAssertEqual(try tree(received, skipping: "sparse.img"), try tree(path("out"), skipping: "sparse.img"))
        try assertSparseFilesEqual(path("out/sparse.img"), received + "/sparse.img")
        let allocated = try ChildProcess("/usr/bin/du", ["-k", home + "/Téléchargements/sparse.img"], logPath: path("du.log"))
        XCTAssertEqual(allocated.wait(timeout: 10), 0)
        XCTAssertLessThan(Int(allocated.log.split(separator: "\t").first ?? "") ?? .max, 64 << 10, "the hole stayed a hole: \(allocated.log)")
    }

    // MARK: Resuming

    /// The offsets the sender resumed from, as its log says ("resuming from file F at byte N").
    private func resumedAt(_ log: String) -> [UInt64] {
        log.components(separatedBy: "resuming from file ").dropFirst().compactMap { rest in
            rest.components(separatedBy: " at byte ").dropFirst().first?.split(separator: " ").first.flatMap { UInt64($0) }
        }
    }

    /// The `Transferred` a transfer object showed when it became active again after a pause.
    private func transferredOnResume(_ watch: TransferWatch, _ path: String) -> UInt64? {
        let states = watch.changes.filter { $0.path == path && $0.properties["State"] != nil }
        guard let paused = states.firstIndex(where: { $0.properties["State"]?.string == "paused" }) else { return nil }
        return states[paused...].first { $0.properties["State"]?.string == "active" }?.properties["Transferred"]?.uint64
    }

    /// A dials B through a relay, which goes away mid-transfer; B redials A at A's own address
    /// (another route) and the transfer resumes from the last byte B holds, not from zero.
    func testACutLinkResumesOverAnotherRouteFromTheLastByteHeld() throws {
        let relay = try Relay(targetPort: try freeTCPPort())
        relay.stop()
        let bPort = relay.targetPort
        let path1 = try Relay(targetPort: bPort)
        relays.append(path1)
        let (a, b) = try connectedPair(via: path1, bPort: bPort)
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(200 << 20) /dev/urandom > '\(path("film.bin"))'")
        let outgoing = try watchA.send([path("film.bin")], to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        try watchB.call("Accept", on: incoming)
        XCTAssertTrue(watchB.waitForTransferred(incoming, atLeast: 32 << 20))
        let markA = a.mark
        path1.stop()
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markA, timeout: 10))
        XCTAssertEqual(watchA.waitForState(outgoing, ["paused"], timeout: 10), "paused")
        let sentBeforeCut = watchA.transferred(outgoing)
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished, timeout: 120), "complete", a.log.suffix(3_000).description)
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "complete")
        XCTAssertTrue(a.log.contains("connected (incoming over ip"), "B dialled A directly: a new route")
        let resumed = try XCTUnwrap(resumedAt(a.log).first, "A resumed: \(a.log.suffix(2_000))")
        XCTAssertGreaterThanOrEqual(resumed, 32 << 20, "from what B held, not from zero")
        XCTAssertEqual(transferredOnResume(watchA, outgoing), resumed, "A's object showed it too")
        print("cut at \(sentBeforeCut) bytes sent; resumed from \(resumed): \(Int64(sentBeforeCut) - Int64(resumed)) bytes sent twice")
        XCTAssertEqual(try tree(inbox("bravo")), try tree(path("")).filter { $0.key == "film.bin" })
    }

    /// `kill -9` of the receiver, then (on a second transfer) of the sender, in the middle: the
    /// killed one comes back with the transfer listed, and it resumes from the last byte the
    /// receiver had written durably.
    func testKillingEitherDaemonMidwayResumesFromTheLastDurableByte() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(200 << 20) /dev/urandom > '\(path("disk.img"))'")
        for (round, victim) in [b, a].enumerated() {
            let known = Set(try watchB.objects().keys)
            let outgoing = try watchA.send([path("disk.img")], to: b.id)
            let incoming = try XCTUnwrap(watchB.waitForIncoming(except: known), b.log)
            try watchB.call("Accept", on: incoming)
            XCTAssertTrue(watchB.waitForTransferred(incoming, atLeast: 48 << 20))
            victim.kill()
            try victim.restart()
            // The transfer is listed again on the side that restarted, under a new object.
            let watch = victim === a ? watchA : watchB
            let direction = victim === a ? "outgoing" : "incoming"
            var path = ""
            XCTAssertTrue(eventually(timeout: 15) {
                path = (try? watch.objects())?.first { $0.value.lookup("Direction")?.string == direction
                    && $0.value.lookup("Size")?.uint64 == 200 << 20 && $0.value.lookup("State")?.string != "complete" }?.key ?? ""
                return !path.isEmpty
            }, "\(victim.name) lists the transfer after its restart")
            let (sender, receiver) = victim === a ? (path, incoming) : (outgoing, path)
            XCTAssertEqual(watchA.waitForState(sender, Self.finished, timeout: 120), "complete", "round \(round): \(a.log.suffix(3_000))")
            XCTAssertEqual(watchB.waitForState(receiver, Self.finished, timeout: 30), "complete", "round \(round)")
            let resumed = resumedAt(a.log)
            XCTAssertEqual(resumed.count, round + 1, "one resumption per kill")
            XCTAssertGreaterThan(resumed.last ?? 0, 0, "\(victim.name) killed: resumed from a durable byte, not from zero")
            print("kill -9 of \(victim.name) at 48+ MiB: resumed from byte \(resumed.last ?? 0)")
            XCTAssertEqual(try tree(inbox("bravo"))[round == 0 ? "disk.img" : "disk (1).img"], try tree(self.path("")).filter { $0.key == "disk.img" }.values.first,
                           "round \(round): the same bytes, under a free name the second time")
        }
    }

    /// Simulation seeds 272, 858 and 1649: an end was shown before its record was written, so a
    /// kill -9 in between brought the old record back and the transfer ended again, differently.
    /// B declines while its state directory is read-only: neither B's object nor A hears of the
    /// end until B's record says so (A forgets a transfer its receiver ended: seeds 2461, 2993),
    /// when the directory is writable again, within a retry of 0.5 s. (A full disk is no test of
    /// it: the old record goes and its space takes the new one.)
    func testSeed272_AnEndShowsOnlyOnceItsRecordIsWritten() throws {
        let (a, b) = try connectedPair()
        try b.moveStateOntoTmpfs(megabytes: 4)
        defer { b.unmountState() }
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try Data("declined while the disk is read-only".utf8).write(to: URL(fileURLWithPath: path("note.txt")))
        let outgoing = try watchA.send([path("note.txt")], to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        try run("mount -o remount,ro '\(b.daemon.stateDirectory)'")
        try watchB.call("Decline", on: incoming)
        dispatchEvents(for: 1.0)
        XCTAssertEqual(watchB.state(incoming), "waiting", "B showed an end its disk had not recorded: \(b.log.suffix(1_500))")
        XCTAssertEqual(watchA.state(outgoing), "waiting", "A heard of an end B had not recorded")
        try run("mount -o remount,rw '\(b.daemon.stateDirectory)'")
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished, timeout: 5), "declined", b.log.suffix(2_000).description)
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished, timeout: 5), "declined", a.log)
    }

    /// Campaign seed 12's window for a transfer's end: the sender's `PropertiesChanged` saying
    /// `declined` emitted, the sender killed before GDBus wrote it. Its record went with the end,
    /// so the restarted sender listed nothing, and its person never learned how the transfer
    /// ended. A's dbus-daemon is stopped and its socket filled (B's 12 texts of 60 KB: A's
    /// `MessageReceived`) while B declines; A is killed. After the restart A shows the end.
    func testSeed12_AnEndWhoseSignalAKillCaughtUnwrittenIsShownAfterTheRestart() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try Data("declined while A's bus holds still".utf8).write(to: URL(fileURLWithPath: path("note.txt")))
        let outgoing = try watchA.send([path("note.txt")], to: b.id)
        let id = try XCTUnwrap(watchA.property(outgoing, "Id")?.string)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)

        a.bus.signal(SIGSTOP)
        var busHeld = true
        defer { if busHeld { a.bus.signal(SIGCONT) } }
        for i in 0..<12 { _ = try b.client.call("Send", [Variant(a.id), Variant("\(i) " + String(repeating: "ü", count: 30_000))]) }
        try watchB.call("Decline", on: incoming)
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished, timeout: 10), "declined", b.log.suffix(1_500).description)
        dispatchEvents(for: 1)  // A heard it, recorded the end and emitted it
        a.kill()
        a.bus.signal(SIGCONT)
        busHeld = false
        dispatchEvents(for: 0.5)
        let seenBeforeTheKill = watchA.changes.filter { $0.path == outgoing }.compactMap { $0.properties["State"]?.string }
        XCTAssertFalse(seenBeforeTheKill.contains("declined"), "the end was written before the kill: this tests nothing")

        try a.restart()
        let shown = eventually(timeout: 10) {
            (try? watchA.objects().values.contains { $0.lookup("Id")?.string == id && $0.lookup("State")?.string == "declined" }) ?? false
        }
        XCTAssertTrue(shown, "the restarted A does not show how the transfer ended: \((try? watchA.objects()) ?? [:])")
        // Shown once written: the next start lists it no more.
        dispatchEvents(for: 0.5)
        XCTAssertEqual(a.stop(), 0)
        try a.restart()
        XCTAssertFalse(try watchA.objects().values.contains { $0.lookup("Id")?.string == id }, "shown again after it was noted shown")
    }

    /// Simulation seeds 119 and 134: A removed B while its offer waited at B, unanswered, and
    /// no stream ran (B was stopped), so B never heard; paired again, B's person could accept it
    /// and it waited for good. A sender owes its ABORT until a stream carried it to a clean end,
    /// also after RemovePeer: A's first stream on the new link tells B (OFFER, then ABORT).
    func testSeeds119And134_AnOfferWhoseSenderRemovedThePeerFailsAtTheReceiverOncePairedAgain() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client)
        try Data("left waiting".utf8).write(to: URL(fileURLWithPath: path("note.txt")))
        let outgoing = try watchA.send([path("note.txt")], to: b.id)
        let offered = try XCTUnwrap(TransferWatch(b.client).waitForIncoming(), b.log)
        let id = try XCTUnwrap(TransferWatch(b.client).property(offered, "Id")?.string)
        XCTAssertEqual(b.stop(), 0, "B did not stop on SIGTERM")
        try a.client.call("RemovePeer", [Variant(b.id)])
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished), "failed", a.log)
        XCTAssertEqual(watchA.property(outgoing, "Error")?.string, "the peer was removed")

        try b.restart()
        let watchB = TransferWatch(b.client)
        var found: String?
        eventually(timeout: 10) {
            found = (try? watchB.objects())?.first { $0.value.lookup("Id")?.string == id }?.key
            return found != nil
        }
        let incoming = try XCTUnwrap(found, "B lost the offer: \(b.log)")
        XCTAssertEqual(watchB.state(incoming), "waiting", "B heard of the removal before the new pairing")
        XCTAssertNoThrow(try a.pair(with: b).connect.get(), a.log)
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "failed", b.log.suffix(3_000).description)
        XCTAssertEqual(watchB.property(incoming, "Error")?.string, "the peer was removed")
        XCTAssertThrowsError(try watchB.call("Accept", on: incoming)) { XCTAssertEqual(($0 as? BusError)?.name, Self.invalidArgument) }
        XCTAssertEqual(watchA.state(outgoing), "failed")
    }

    /// Chaos seed 3 (`make chaos FIRST=3`): the receiver's state directory filled up while a
    /// transfer ran, so the transfer failed at both ends but the receiver could not record that;
    /// the space came back, then a `kill -9`, and the old record brought the transfer back
    /// `paused`, waiting forever for a sender that had forgotten it. A refused record is written
    /// again once the disk takes it: after the restart it is still failed (or not listed).
    func testSeed3_AFailureTheFullDiskRefusedIsRecordedOnceSpaceReturns() throws {
        let run = try failATransferByFillingTheReceiversStateDirectory()
        defer { run.b.unmountState() }
        XCTAssertEqual(run.watchA.waitForState(run.outgoing, Self.finished), "failed", run.a.log)
        try run.b.freeState()
        dispatchEvents(for: 1.5)
        run.b.kill()
        try run.b.restart()
        try assertNotBack(run)
    }

    /// Chaos seed 9: as seed 3, but the `kill -9` came while the state directory was still full,
    /// so the failure could never be written: the record that said "accepted" must not bring the
    /// transfer back (it goes: unlinking needs no space).
    func testSeed9_AFailureTheFullDiskRefusedDoesNotComeBackAfterAKillWhileStillFull() throws {
        let run = try failATransferByFillingTheReceiversStateDirectory()
        defer { run.b.unmountState() }
        // What the ended transfer's progress file gave back is taken too, before the record's
        // next try (0.5 s): the failure is never written.
        try run.b.fillState()
        run.b.kill()
        XCTAssertEqual(run.watchA.waitForState(run.outgoing, Self.finished), "failed", run.a.log)
        try run.b.freeState()
        try run.b.restart()
        try assertNotBack(run)
    }

    /// A 200 MiB transfer from A to B (B's state directory on a 4 MiB tmpfs), accepted, under
    /// way, then failed at B by filling B's state directory. The caller unmounts it.
    private func failATransferByFillingTheReceiversStateDirectory() throws -> FullDiskRun {
        let (a, b) = try connectedPair()
        // B restarts on its tmpfs; SendFiles brings the link up again.
        try b.moveStateOntoTmpfs(megabytes: 4)
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(200 << 20) /dev/urandom > '\(path("big.bin"))'")
        let outgoing = try watchA.send([path("big.bin")], to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        let id = try XCTUnwrap(watchB.property(incoming, "Id")?.string)
        try watchB.call("Accept", on: incoming)
        XCTAssertTrue(watchB.waitForTransferred(incoming, atLeast: 1 << 20), b.log)
        // Loopback moves 200 MiB in about a second, so A holds still (SIGSTOP) while B's disk
        // fills: otherwise the transfer can finish before the fill (CI, stop 42).
        do {
            a.daemon.process.signal(SIGSTOP)
            defer { a.daemon.process.signal(SIGCONT) }
            try b.fillState()
        }
        XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "failed", b.log)
        let error = watchB.property(incoming, "Error")?.string ?? ""
        XCTAssertTrue(error.contains(b.daemon.stateDirectory), "the error does not name the disk that is full: \(error)")
        return FullDiskRun(a: a, b: b, watchA: watchA, watchB: watchB, outgoing: outgoing, id: id)
    }

    private struct FullDiskRun {
        let a: TestPeer, b: TestPeer
        let watchA: TransferWatch, watchB: TransferWatch
        let outgoing: String
        let id: String
    }

    /// After B's restart, the failed transfer is failed or gone, not back under way.
    private func assertNotBack(_ run: FullDiskRun) throws {
        let states = try run.watchB.objects().values.filter { $0.lookup("Id")?.string == run.id }.compactMap { $0.lookup("State")?.string }
        XCTAssertTrue(states.allSatisfy { Self.finished.contains($0) }, "the failed transfer came back as \(states): \(run.b.log.suffix(3_000))")
    }

    /// Compares two files by their data extents (`SEEK_DATA`/`SEEK_HOLE`): what lies outside both
    /// files' data reads as zeros in both, so only the data is read (hashing 4 GiB of holes twice
    /// took a minute here).
    private func assertSparseFilesEqual(_ first: String, _ second: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let script = """
            import os, sys
            def extents(fd, size):
                offset = 0
                while offset < size:
                    try: start = os.lseek(fd, offset, os.SEEK_DATA)
                    except OSError: return
                    end = os.lseek(fd, start, os.SEEK_HOLE)
                    yield start, end
                    offset = end
            fds = [os.open(path, os.O_RDONLY) for path in sys.argv[1:3]]
            sizes = [os.fstat(fd).st_size for fd in fds]
            if sizes[0] != sizes[1]: sys.exit("sizes %d and %d" % tuple(sizes))
            for fd in fds:
                for start, end in extents(fd, sizes[0]):
                    while start < end:
                        step = min(end - start, 1 << 20)
                        if os.pread(fds[0], step, start) != os.pread(fds[1], step, start): sys.exit("bytes differ at %d" % start)
                        start += step
            print("equal")
            """
        let process = try ChildProcess("/usr/bin/python3", ["-c", script, first, second], logPath: path("sparse-compare.log"))
        XCTAssertEqual(process.wait(timeout: 60), 0, process.log, file: file, line: line)
        XCTAssertEqual(process.log, "equal\n", file: file, line: line)
    }

    /// B is killed mid-transfer and a byte it had written is changed before it restarts: the
    /// transfer resumes, and the file fails its hash rather than land with that byte.
    func testACorruptedPartFileFailsItsHashInsteadOfLanding() throws {
        let (a, b) = try connectedPair()
        let watchA = TransferWatch(a.client), watchB = TransferWatch(b.client)
        try run("head -c \(200 << 20) /dev/urandom > '\(path("archive.bin"))'")
        let outgoing = try watchA.send([path("archive.bin")], to: b.id)
        let incoming = try XCTUnwrap(watchB.waitForIncoming(), b.log)
        try watchB.call("Accept", on: incoming)
        XCTAssertTrue(watchB.waitForTransferred(incoming, atLeast: 48 << 20))
        b.kill()
        let part = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: inbox("bravo")).first { $0.hasSuffix(".part") })
        try run("printf 'X' | dd of='\(inbox("bravo"))/\(part)' bs=1 seek=1000000 conv=notrunc status=none")
        try b.restart()
        XCTAssertEqual(watchA.waitForState(outgoing, Self.finished, timeout: 120), "failed", a.log.suffix(2_000).description)
        XCTAssertEqual(watchA.property(outgoing, "Error")?.string,
                       "file 1 arrived different from what was sent (its SHA-256 hash does not match)", "two version-10 sides hash with SHA-256")
        XCTAssertGreaterThan(resumedAt(a.log).first ?? 0, 0, "it resumed rather than start again")
        XCTAssertTrue(eventually(timeout: 10) { (try? FileManager.default.contentsOfDirectory(atPath: self.inbox("bravo")))?.isEmpty == true },
                      "nothing lands, the part is removed")
    }

    // MARK: A hostile peer

    /// One transfer stream from a hand-driven peer to B: OPEN, then whatever bytes it likes in
    /// DATA frames; B's answers decoded as transfer messages.
    private final class FakeTransferStream {
        let link: SecureLink
        let id: StreamID
        private var decoder = TransferMessageDecoder()

        init(link: SecureLink, id: StreamID) throws {
            self.link = link
            self.id = id
            try link.send(body: ChannelFrame.open(id, mode: .stream, window: 1 << 20, datagramPort: 0,
                                                  channel: try ChannelName(TransferWire.channel)).encodedBody())
            // Frames of earlier streams may still come first.
            while true {
                let frame = try link.nextChannelFrame()
                if case .accept(id, _, _) = frame { break }
                if frame == nil || frame?.stream == id { throw HarnessError("B did not take the stream: \(String(describing: frame))") }
            }
        }

        func send(_ bytes: [UInt8]) throws {
            for start in stride(from: 0, to: bytes.count, by: 60_000) {
                try link.send(body: ChannelFrame.data(id, endOfMessage: false, sentAtUs: 0,
                                                      payload: Array(bytes[start..<min(bytes.count, start + 60_000)])).encodedBody())
            }
        }

        /// Ends this side's direction, as a sender does once the receiver has said its last word.
        func finish() throws { try link.send(body: ChannelFrame.close(id).encodedBody()) }

        /// B's next transfer message on this stream.
        func next(timeout: Double = 10) throws -> TransferMessage? {
            let deadline = Date().addingTimeInterval(timeout)
            while true {
                if let message = try decoder.next() { return message }
                guard let frame = try link.nextChannelFrame(timeout: max(0, deadline.timeIntervalSinceNow)) else { return nil }
                if case .data(id, _, _, let payload) = frame { decoder.append(payload) }
            }
        }
    }

    /// An OFFER as raw bytes, whatever its entries say (kind, path bytes, size).
    private static func rawOffer(_ entries: [(kind: UInt8, path: [UInt8], size: UInt64)], count: UInt32? = nil) -> [UInt8] {
        func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }
        var body: [UInt8] = [TransferMessageType.offer.rawValue] + TransferID.random().bytes + bigEndian(count ?? UInt32(entries.count))
        for entry in entries {
            body += [entry.kind] + bigEndian(UInt16(entry.path.count)) + entry.path + bigEndian(entry.size)
        }
        return Wire.lengthPrefixed(body)
    }

    private static func file(_ path: String, _ size: UInt64 = 10) -> (kind: UInt8, path: [UInt8], size: UInt64) { (0, Array(path.utf8), size) }

    /// Everything in the test's folder but the daemons' state and logs: what a peer could have written.
    private func visibleFiles() throws -> [String] {
        try FileManager.default.subpathsOfDirectory(atPath: directory.path).filter { !$0.contains("-state") && !$0.hasSuffix(".log") }.sorted()
    }

    /// Offers with names no receiver may take, a million files, sizes that overflow: each is
    /// refused with ABORT failed saying why, no transfer is listed, nothing is written anywhere.
    func testHostileOffersAreRefusedAndWriteNothing() throws {
        let b = try peer("bravo")
        let watchB = TransferWatch(b.client)
        let (link, malloryID) = try SecureLink.pairedFake(with: b, capabilities: [.text, .channels, .transfers])
        defer { link.close() }
        let before = try visibleFiles()
        let cases: [(name: String, offer: [UInt8], refusal: String)] = [
            ("..", Self.rawOffer([Self.file("../escape.txt")]), "entry 1 has the name \"..\""),
            ("an absolute path", Self.rawOffer([Self.file("/etc/passwd")]), "entry 1 has an absolute path"),
            ("climbing out of a folder", Self.rawOffer([(1, Array("a".utf8), 0), Self.file("a/../../x")]), "entry 2 has the name \"..\""),
            ("NUL in a name", Self.rawOffer([Self.file("a\u{0}b")]), "a NUL character in a name"),
            ("an escape sequence", Self.rawOffer([Self.file("\u{1b}[31mred")]), "a control character (U+001B)"),
            ("a newline", Self.rawOffer([Self.file("two\nlines")]), "a control character (U+000A)"),
            ("a name over 255 bytes", Self.rawOffer([Self.file(String(repeating: "n", count: 256))]), "a name of 256 bytes"),
            ("a right-to-left override", Self.rawOffer([Self.file("photo\u{202E}gpj.exe")]), "a text-direction control (U+202E)"),
            ("bytes that are not UTF-8", Self.rawOffer([(0, [0x66, 0xFF], 10)]), "a name that is not UTF-8"),
            ("an empty name", Self.rawOffer([Self.file("a//b")]), "an empty name"),
            ("a million files", Self.rawOffer([], count: 1_000_000), "1000000 files and folders (at most 100000)"),
            ("sizes past 2^64", Self.rawOffer([Self.file("a", 1 << 63), Self.file("b", 1 << 63)]), "sizes that add up to more than 2^64 bytes"),
            ("a file inside a file", Self.rawOffer([Self.file("a"), Self.file("a/b")]), "entry 2 lies inside a file"),
            ("a name twice", Self.rawOffer([Self.file("a"), Self.file("a")]), "entry 2 is listed twice"),
            ("a 2 GiB message", [0x7F, 0xFF, 0xFF, 0xFF, 0x01], "a message of 2147483647 bytes"),
        ]
        for (index, (name, offer, refusal)) in cases.enumerated() {
            let stream = try FakeTransferStream(link: link, id: StreamID(rawValue: UInt32(2 * index + 1)))
            try stream.send(offer)
            guard case .abort(.failed, let reason) = try stream.next() else { return XCTFail("\(name): no ABORT failed: \(b.log.suffix(1_000))") }
            XCTAssertTrue(reason.hasPrefix("refused: ") && reason.contains(refusal), "\(name): \(reason)")
            try stream.finish()
            XCTAssertTrue(b.log.contains("refused an offer from \(malloryID)"), name)
        }
        XCTAssertEqual(try watchB.objects().count, 0, "no offer was listed")
        XCTAssertEqual(try visibleFiles(), before, "nothing was written")
    }

    /// Once accepted, a sender that sends more bytes than it announced, ends a file early, or
    /// whose bytes do not hash to what it says, fails the transfer; the partial data goes.
    func testASenderThatBreaksItsOwnOfferFailsAndLeavesNothing() throws {
        let b = try peer("bravo")
        let watchB = TransferWatch(b.client)
        let (link, _) = try SecureLink.pairedFake(with: b, capabilities: [.text, .channels, .transfers])
        defer { link.close() }
        let before = try visibleFiles()
        let ten = Array("0123456789".utf8)
        let cases: [(name: String, data: [UInt8], refusal: String)] = [
            ("more bytes than announced", TransferMessage.data(ten[...] + ten[...]).encoded(), "more bytes for file 1 than the 10 it announced"),
            ("a file that ends early", TransferMessage.data(ten[0..<5]).encoded() + TransferMessage.fileEnd(fileIndex: 0, hash: [UInt8](repeating: 0, count: 32)).encoded(),
             "file 1 ended after 5 of the 10 bytes it announced"),
            ("a wrong hash", TransferMessage.data(ten[...]).encoded() + TransferMessage.fileEnd(fileIndex: 0, hash: [UInt8](repeating: 0, count: 32)).encoded(),
             "file 1 arrived different from what was sent"),
        ]
        for (index, (name, data, refusal)) in cases.enumerated() {
            let known = Set(try watchB.objects().keys)
            let stream = try FakeTransferStream(link: link, id: StreamID(rawValue: UInt32(2 * index + 1)))
            try stream.send(TransferMessage.offer(.random(), try TransferManifest(entries: [.file(try TransferPath("note.txt"), size: 10)])).encoded())
            let incoming = try XCTUnwrap(watchB.waitForIncoming(except: known), name)
            try watchB.call("Accept", on: incoming)
            XCTAssertEqual(try stream.next(), .accept(.start), name)
            try stream.send(data)
            guard case .abort(.failed, let reason) = try stream.next() else { return XCTFail("\(name): no ABORT failed: \(b.log.suffix(1_000))") }
            XCTAssertTrue(reason.contains(refusal), "\(name): \(reason)")
            try stream.finish()
            XCTAssertEqual(watchB.waitForState(incoming, Self.finished), "failed", name)
            XCTAssertEqual(watchB.property(incoming, "Error")?.string, reason, name)
            XCTAssertTrue(eventually(timeout: 5) { (try? FileManager.default.contentsOfDirectory(atPath: self.inbox("bravo")))?.isEmpty == true },
                          "\(name): the part is removed")
        }
        XCTAssertEqual(try visibleFiles(), before + [inbox("bravo").dropFirst(directory.path.count + 1).description], "only the (empty) download folder")
    }
}

