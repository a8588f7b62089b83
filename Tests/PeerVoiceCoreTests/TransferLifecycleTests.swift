import Foundation
import PeerVoiceCore
import XCTest

/// A transfer's state across streams and restarts (docs/PROTOCOL.md §15.5), as tables: events in
/// order, and after each the state shown, what goes to the peer, and what happens to the stream
/// and to partial data.
final class TransferLifecycleTests: XCTestCase {
    private typealias Event = TransferLifecycle.Event

    /// One line per event: `state | tell | close | discard | accept`.
    private func run(_ direction: TransferDirection, _ events: [Event], from start: TransferLifecycle? = nil) -> [String] {
        var lifecycle = start ?? TransferLifecycle(direction: direction)
        return events.map { event in
            let reaction = lifecycle.handle(event)
            var line = lifecycle.state.rawValue
            if let tell = reaction.tell {
                switch tell {
                case .abort(let code, let reason): line += " tell ABORT \(code) \(reason)"
                default: line += " tell \(tell.type)"
                }
            }
            if reaction.sendAccept { line += " ACCEPT" }
            if reaction.closeStream { line += " close" }
            if reaction.discardPartial { line += " discard" }
            return line
        }
    }

    func testIncomingWaitsForItsPersonThenRunsAndPausesWithItsStreams() {
        XCTAssertEqual(run(.incoming, [.streamOpened, .streamClosed, .streamOpened, .personAccepted, .streamClosed, .streamOpened,
                                       .completed, .streamOpened]),
                       ["waiting", "waiting", "waiting", "active ACCEPT", "paused", "active ACCEPT",
                        "complete tell COMPLETE close", "complete tell COMPLETE close"])
    }

    func testAPersonWhoAcceptsWhileTheLinkIsDownGetsItResumedLater() {
        XCTAssertEqual(run(.incoming, [.streamOpened, .streamClosed, .personAccepted, .streamOpened]),
                       ["waiting", "waiting", "paused", "active ACCEPT"])
    }

    func testDecliningAnswersNowOrAtTheNextOffer() {
        XCTAssertEqual(run(.incoming, [.streamOpened, .personDeclined, .streamClosed, .streamOpened]),
                       ["waiting", "declined tell ABORT declined declined by the receiver close", "declined",
                        "declined tell ABORT declined declined by the receiver close"])
        XCTAssertEqual(run(.incoming, [.personDeclined, .personAccepted]), ["declined", "declined"], "an answer is final")
    }

    func testCancellingAtTheReceiverDiscardsThePartAndAnswersEveryReoffer() {
        XCTAssertEqual(run(.incoming, [.streamOpened, .personAccepted, .cancelled(by: .local, reason: "cancelled here"), .streamOpened]),
                       ["waiting", "active ACCEPT", "cancelled tell ABORT cancelled cancelled here close discard",
                        "cancelled tell ABORT cancelled cancelled here close"])
        XCTAssertEqual(run(.incoming, [.streamOpened, .personAccepted, .streamClosed, .cancelled(by: .local, reason: "x")]),
                       ["waiting", "active ACCEPT", "paused", "cancelled close discard"])
    }

    func testASenderThatCancelsOfflineOwesTheReceiverAnAbort() {
        var lifecycle = TransferLifecycle(direction: .outgoing)
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .streamClosed, .cancelled(by: .local, reason: "stop"),
                                       .streamOpened, .peerTold, .streamOpened]),
                       ["waiting", "active", "paused", "cancelled close", "cancelled tell ABORT cancelled stop close", "cancelled",
                        "cancelled close"])
        _ = lifecycle.handle(.cancelled(by: .local, reason: "stop"))
        XCTAssertTrue(lifecycle.owesPeerAbort)
        _ = lifecycle.handle(.peerTold)
        XCTAssertFalse(lifecycle.owesPeerAbort)
    }

    /// An ABORT sent on a stream that then broke may never have arrived: the sender owes it until
    /// a stream that carried it ended cleanly. So does a sender that removed the peer (the
    /// link goes with it): a receiver paired again hears it with the next OFFER instead of
    /// waiting for good (simulation seeds 119 and 134).
    func testSeeds119And134ASenderOwesItsAbortUntilAStreamCarriedItToTheEnd() {
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .failed(by: .local, reason: "the peer was removed"), .streamClosed,
                                       .streamOpened, .streamClosed, .streamOpened, .peerTold, .streamOpened]),
                       ["waiting", "active", "failed tell ABORT failed the peer was removed close", "failed",
                        "failed tell ABORT failed the peer was removed close", "failed",
                        "failed tell ABORT failed the peer was removed close", "failed", "failed close"])
        var lifecycle = TransferLifecycle(direction: .outgoing)
        _ = lifecycle.handle(.streamOpened)
        _ = lifecycle.handle(.cancelled(by: .local, reason: "stop"))
        XCTAssertTrue(lifecycle.owesPeerAbort, "an ABORT on a stream that may break is owed")
        _ = lifecycle.handle(.peerTold)
        XCTAssertFalse(lifecycle.owesPeerAbort)
        var ended = TransferLifecycle(direction: .outgoing)
        _ = ended.handle(.streamOpened)
        _ = ended.handle(.failed(by: .peer, reason: "no space"))
        XCTAssertFalse(ended.owesPeerAbort, "the receiver ended it: nothing to tell")
    }

    func testAResumedSenderIsActiveOnlyOnceTheReceiverSaysFromWhere() {
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .streamClosed, .streamOpened, .peerAccepted, .completed]),
                       ["waiting", "active", "paused", "paused", "active", "complete close"])
    }

    func testASenderEndsWhatThePeerEnds() {
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerDeclined(reason: "declined by bravo")]), ["waiting", "declined close"])
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .failed(by: .peer, reason: "no space")]), ["waiting", "active", "failed close"])
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .failed(by: .local, reason: "a.txt changed")]),
                       ["waiting", "active", "failed tell ABORT failed a.txt changed close"])
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .completed]), ["waiting", "active", "complete close"])
        // The peer's ABORT, by its code.
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAborted(.declined, reason: "no")]), ["waiting", "declined close"])
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .peerAborted(.cancelled, reason: "stop")]),
                       ["waiting", "active", "cancelled close"])
        XCTAssertEqual(run(.outgoing, [.streamOpened, .peerAccepted, .peerAborted(.failed, reason: "no space")]),
                       ["waiting", "active", "failed close"])
    }

    func testAReceiverThatFailsToldTheSenderAndDropsItsPart() {
        XCTAssertEqual(run(.incoming, [.streamOpened, .personAccepted, .failed(by: .local, reason: "hash")]),
                       ["waiting", "active ACCEPT", "failed tell ABORT failed hash close discard"])
        XCTAssertEqual(run(.incoming, [.streamOpened, .personAccepted, .cancelled(by: .peer, reason: "sender cancelled")]),
                       ["waiting", "active ACCEPT", "cancelled close discard"])
    }

    func testTheLifecycleSurvivesARestartWithoutItsStream() throws {
        var lifecycle = TransferLifecycle(direction: .incoming)
        _ = lifecycle.handle(.streamOpened)
        _ = lifecycle.handle(.personAccepted)
        let restored = try JSONDecoder().decode(TransferLifecycle.self, from: JSONEncoder().encode(lifecycle))
        XCTAssertEqual(restored.state, .active)
        XCTAssertTrue(restored.accepted)
        XCTAssertFalse(restored.streamOpen, "no stream runs after a restart")
        XCTAssertEqual(run(.incoming, [.streamClosed, .streamOpened], from: restored), ["paused", "active ACCEPT"])
    }

    func testFinishedStatesAreTheFinishedOnes() {
        XCTAssertEqual(TransferState.allCases.filter(\.isFinished), [.complete, .failed, .cancelled, .declined])
    }
}

/// Where a receiver saves (docs/PROTOCOL.md §15.2, §15.5) and what it keeps on disk.
final class TransferDestinationTests: XCTestCase {
    func testAFreeNameNeverTakesAnExistingOne() {
        let taken: Set<String> = ["photo.jpg", "photo (1).jpg", "Photos", "backup.tar.gz", ".bashrc", "README", "a.b c"]
        let cases: [(String, String)] = [
            ("new.txt", "new.txt"),
            ("photo.jpg", "photo (2).jpg"),
            ("Photos", "Photos (1)"),
            ("backup.tar.gz", "backup (1).tar.gz"),
            (".bashrc", ".bashrc (1)"),
            ("README", "README (1)"),
            ("a.b c", "a.b c (1)"),
        ]
        for (name, expected) in cases {
            XCTAssertEqual(DestinationNames.freeName(for: name, isTaken: taken.contains), expected, name)
        }
        let long = String(repeating: "é", count: 125) + ".jpeg"
        let free = DestinationNames.freeName(for: long) { $0 == long }
        XCTAssertLessThanOrEqual(free.utf8.count, 255)
        XCTAssertTrue(free.hasSuffix(" (1).jpeg"), free)
        XCTAssertNoThrow(try TransferPath.check(name: free))
    }

    func testAPartNameIsHiddenBesideItsItemAndNamesTheTransfer() throws {
        let id = TransferID(hex: "0123456789abcdef0123456789abcdef")!
        XCTAssertEqual(DestinationNames.partName(for: "photo.jpg", id: id), ".photo.jpg.0123456789abcdef.part")
        let long = DestinationNames.partName(for: String(repeating: "x", count: 255), id: id)
        XCTAssertEqual(long.utf8.count, 255)
        XCTAssertNoThrow(try TransferPath.check(name: long))
    }
}

final class TransferStoreTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "transfer-store-\(UUID().uuidString)"
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    func testRecordsAndPositionsReadBackAndEndedOnesAgeOut() throws {
        let store = try TransferStore(directory: directory)
        let manifest = try TransferManifest(entries: [.folder(try TransferPath("Ferien")), .file(try TransferPath("Ferien/Strand.jpg"), size: 5)])
        var record = TransferRecord(id: .random(), peer: "pv:abc", createdMs: 1_000, direction: .incoming, manifest: manifest)
        record.folder = "/home/x/Downloads"
        _ = record.lifecycle.handle(.personAccepted)
        try store.save(record)
        var progress = TransferProgress(position: TransferPosition(fileIndex: 0, offset: 3))
        progress.placed = ["notes.txt": "notes (1).txt"]
        try store.saveProgress(progress, of: record.idHex)
        var ended = TransferRecord(id: .random(), peer: "pv:abc", createdMs: 1_000, direction: .incoming, manifest: manifest)
        _ = ended.lifecycle.handle(.personDeclined)
        try store.save(ended)
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: directory + "/broken.json"))

        let (records, warnings) = store.loadAll(nowMs: 2_000)
        XCTAssertEqual(records.count, 2)
        XCTAssertEqual(records.first { $0.idHex == record.idHex }, record)
        XCTAssertEqual(try records.first { $0.idHex == record.idHex }?.manifest(), manifest)
        XCTAssertEqual(store.progress(of: record.idHex), progress)
        XCTAssertEqual(warnings.count, 1, "the broken file is reported and set aside")
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory + "/broken.json.unreadable"))

        let later = store.loadAll(nowMs: 1_000 + TransferStore.keepFinishedMs + 1).records
        XCTAssertEqual(later.map(\.idHex), [record.idHex], "the declined one aged out; the running one stays")
        store.remove(record.idHex)
        XCTAssertNil(store.progress(of: record.idHex))
        XCTAssertTrue(store.loadAll(nowMs: 2_000).records.isEmpty)
    }
}

/// The download folder as the desktop names it.
final class DownloadFolderTests: XCTestCase {
    func testTheOverrideThenTheUserDirsThenDownloads() {
        let userDirs = """
            # This file is written by xdg-user-dirs-update
            XDG_DESKTOP_DIR="$HOME/Desktop"
            XDG_DOWNLOAD_DIR="$HOME/Téléchargements"
            """
        XCTAssertEqual(DownloadFolder.path(override: "/srv/in", userDirs: userDirs, home: "/home/a"), "/srv/in")
        XCTAssertEqual(DownloadFolder.path(override: nil, userDirs: userDirs, home: "/home/a"), "/home/a/Téléchargements")
        XCTAssertEqual(DownloadFolder.path(override: nil, userDirs: nil, home: "/home/a"), "/home/a/Downloads")
    }

    func testUserDirsLinesAsXdgUserDirsWritesThem() {
        let cases: [(String, String?)] = [
            (#"XDG_DOWNLOAD_DIR="/data/in box""#, "/data/in box"),
            (#"  XDG_DOWNLOAD_DIR = "$HOME/a \"b\"""#, #"/home/a/a "b""#),
            (#"XDG_DOWNLOAD_DIR="$HOME/""#, nil),
            (#"XDG_DOWNLOAD_DIR="$HOME""#, nil),
            (#"XDG_DOWNLOAD_DIR="$HOMEX/y""#, nil),
            (#"XDG_DOWNLOAD_DIR=relative"#, nil),
            (#"XDG_DOWNLOAD_DIR="unclosed"#, nil),
            (#"# XDG_DOWNLOAD_DIR="/commented""#, nil),
            (#"XDG_DOWNLOAD_DIRS="/other""#, nil),
        ]
        for (line, expected) in cases {
            XCTAssertEqual(DownloadFolder.path(override: nil, userDirs: line, home: "/home/a"), expected ?? "/home/a/Downloads", line)
        }
    }
}
