import Foundation
import XCTest

import PeerVoiceCore

/// Reopening a store on the same directory while the first instance is still alive simulates a
/// kill -9 and restart: nothing is flushed or closed in between, so these tests also show every
/// accepted message already reached the OS.
final class MessageStoreTests: XCTestCase {
    private var directory = ""
    private let peer = "ip:127.0.0.1:47800"
    private let instanceA = String(repeating: "a1", count: 16)
    private let instanceB = String(repeating: "b2", count: 16)

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("MessageStoreTests-\(UUID().uuidString)").path
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: Helpers

    private func open(_ limits: MessageStoreLimits = MessageStoreLimits(), warnings: UnsafeWarnings? = nil) throws -> MessageStore {
        try MessageStore(directory: directory, limits: limits, onWarning: { warnings?.lines.append($0) })
    }

    private func id(_ n: Int) -> String { String(format: "%032x", n) }

    private func hex(_ s: String) -> String { s.utf8.map { String(format: "%02x", $0) }.joined() }

    private func journalPath(_ peer: String) -> String { directory + "/" + hex(peer) + ".pvj" }

    private func mode(_ path: String) throws -> Int {
        let value = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]
        if let n = value as? NSNumber { return n.intValue & 0o777 }
        return (value as? Int ?? -1) & 0o777
    }

    private func fileSize(_ path: String) throws -> Int {
        try Data(contentsOf: URL(fileURLWithPath: path)).count
    }

    private func appendToFile(_ path: String, _ bytes: [UInt8]) throws {
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try h.seekToEnd()
        try h.write(contentsOf: Data(bytes))
        try h.close()
    }

    private func truncateFile(_ path: String, by n: Int) throws {
        let size = try fileSize(path)
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try h.truncate(atOffset: UInt64(size - n))
        try h.close()
    }

    private func statuses(_ store: MessageStore, _ peer: String) -> [MessageStatus] {
        store.history(peer: peer, max: 10_000).map(\.status)
    }

    // MARK: Tests

    func testEnqueueAcknowledgeAndHistory() throws {
        let store = try open()
        let m1 = try store.enqueue(peer: peer, id: id(1), text: "one", nowMs: 1000)
        let m2 = try store.enqueue(peer: peer, id: id(2), text: "two", nowMs: 1001)
        let m3 = try store.enqueue(peer: peer, id: id(3), text: "three", nowMs: 1002)
        XCTAssertEqual([m1.seq, m2.seq, m3.seq], [1, 2, 3])
        XCTAssertEqual(store.pending(peer: peer), [m1, m2, m3])
        XCTAssertEqual(store.peersWithPendingMessages, [peer])

        XCTAssertEqual(store.acknowledge(peer: peer, upTo: 2), [id(1), id(2)])
        XCTAssertEqual(store.acknowledge(peer: peer, upTo: 2), [], "acknowledgement is idempotent")
        XCTAssertEqual(store.acknowledge(peer: peer, upTo: 1), [], "a stale acknowledgement changes nothing")
        XCTAssertEqual(store.pending(peer: peer), [m3])

        XCTAssertTrue(try store.receive(
            peer: peer, senderInstance: instanceA, seq: 1, id: id(100), text: "hi back", sentAtMs: 900, nowMs: 1003))

        let history = store.history(peer: peer, max: 10)
        XCTAssertEqual(history.map(\.id), [id(1), id(2), id(3), id(100)])
        XCTAssertEqual(history.map(\.status), [.delivered, .delivered, .queued, .received])
        XCTAssertEqual(history.map(\.timeMs), [1000, 1001, 1002, 1003])
        XCTAssertEqual(history.map(\.seq), [1, 2, 3, 1])
        XCTAssertEqual(history.last?.text, "hi back")
        XCTAssertEqual(store.history(peer: peer, max: 2).map(\.id), [id(3), id(100)], "newest max, oldest first")
        XCTAssertEqual(store.history(peer: "ip:10.0.0.9:1", max: 10), [])

        XCTAssertEqual(store.acknowledge(peer: peer, upTo: 3), [id(3)])
        XCTAssertEqual(store.peersWithPendingMessages, [])
        XCTAssertEqual(store.knownPeers, [peer])
    }

    func testSequenceContinuesAfterReopen() throws {
        do {
            let store = try open()
            _ = try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 1)
            _ = try store.enqueue(peer: peer, id: id(2), text: "b", nowMs: 2)
            XCTAssertEqual(store.acknowledge(peer: peer, upTo: 2).count, 2)
        }
        let store = try open()
        XCTAssertEqual(store.pending(peer: peer), [])
        XCTAssertEqual(try store.enqueue(peer: peer, id: id(3), text: "c", nowMs: 3).seq, 3)
        XCTAssertEqual(statuses(store, peer), [.delivered, .delivered, .queued])
    }

    func testPendingSurvivesReopen() throws {
        let first = try open()
        _ = try first.enqueue(peer: peer, id: id(1), text: "a", nowMs: 10)
        let m2 = try first.enqueue(peer: peer, id: id(2), text: "b", nowMs: 20)
        let m3 = try first.enqueue(peer: peer, id: id(3), text: "c", nowMs: 30)
        _ = first.acknowledge(peer: peer, upTo: 1)

        let second = try open()  // `first` is still alive: as after kill -9
        XCTAssertEqual(second.pending(peer: peer), [m2, m3])
        XCTAssertEqual(second.peersWithPendingMessages, [peer])
        XCTAssertEqual(statuses(second, peer), [.delivered, .queued, .queued])
        XCTAssertEqual(second.acknowledge(peer: peer, upTo: 3), [id(2), id(3)])
    }

    func testDuplicateDetectedAfterReopen() throws {
        let first = try open()
        XCTAssertTrue(try first.receive(peer: peer, senderInstance: instanceA, seq: 1, id: id(1), text: "x", sentAtMs: 1, nowMs: 1))
        XCTAssertTrue(try first.receive(peer: peer, senderInstance: instanceA, seq: 2, id: id(2), text: "y", sentAtMs: 2, nowMs: 2))
        XCTAssertFalse(try first.receive(peer: peer, senderInstance: instanceA, seq: 2, id: id(2), text: "y", sentAtMs: 2, nowMs: 3))

        let second = try open()
        XCTAssertFalse(try second.receive(peer: peer, senderInstance: instanceA, seq: 2, id: id(2), text: "y", sentAtMs: 2, nowMs: 4))
        XCTAssertFalse(try second.receive(peer: peer, senderInstance: instanceA, seq: 1, id: id(1), text: "x", sentAtMs: 1, nowMs: 4))
        XCTAssertTrue(try second.receive(peer: peer, senderInstance: instanceA, seq: 3, id: id(3), text: "z", sentAtMs: 3, nowMs: 5))
        // A new sender instance (the peer's store was reset) numbers from 1 again.
        XCTAssertTrue(try second.receive(peer: peer, senderInstance: instanceB, seq: 1, id: id(4), text: "w", sentAtMs: 4, nowMs: 6))
        XCTAssertEqual(second.history(peer: peer, max: 10).map(\.id), [id(1), id(2), id(3), id(4)])
        XCTAssertEqual(statuses(second, peer), [.received, .received, .received, .received])
    }

    func testHighWaterMarkSurvivesCompaction() throws {
        let limits = MessageStoreLimits(historyPerPeer: 3, compactionSlackBytes: 0)
        let store = try open(limits)
        for seq in 1...20 {
            XCTAssertTrue(try store.receive(
                peer: peer, senderInstance: instanceA, seq: UInt64(seq), id: id(seq), text: "old message \(seq)",
                sentAtMs: 1, nowMs: 1))
        }
        // Announced: until then the journal keeps them, whatever the history limit.
        store.noteAnnounced(peer: peer, through: id(20))
        for n in 1...200 {
            _ = try store.enqueue(peer: peer, id: id(1000 + n), text: "outgoing \(n)", nowMs: 2)
            _ = store.acknowledge(peer: peer, upTo: UInt64(n))
            store.noteOutcomesAnnounced(peer: peer, through: id(1000 + n))
        }
        // Compaction happened: the early messages are gone from the file.
        let contents = try Data(contentsOf: URL(fileURLWithPath: journalPath(peer)))
        XCTAssertNil(contents.range(of: Data("old message 1".utf8)))
        XCTAssertLessThan(contents.count, 2_000)
        XCTAssertEqual(store.history(peer: peer, max: 100).map(\.id), [id(1198), id(1199), id(1200)])

        let reopened = try open(limits)
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: instanceA, seq: 1, id: id(1), text: "old message 1", sentAtMs: 1, nowMs: 3))
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: instanceA, seq: 20, id: id(20), text: "old message 20", sentAtMs: 1, nowMs: 3))
        XCTAssertTrue(try reopened.receive(peer: peer, senderInstance: instanceA, seq: 21, id: id(21), text: "new", sentAtMs: 1, nowMs: 3))
        XCTAssertEqual(try reopened.enqueue(peer: peer, id: id(2000), text: "next", nowMs: 4).seq, 201)
        XCTAssertEqual(statuses(reopened, peer), [.delivered, .received, .queued])
    }

    func testPendingMessagesSurviveCompactionBeyondHistoryWindow() throws {
        let limits = MessageStoreLimits(historyPerPeer: 2, compactionSlackBytes: 0)
        let store = try open(limits)
        var expected: [OutgoingMessage] = []
        for n in 1...50 {
            expected.append(try store.enqueue(peer: peer, id: id(n), text: "queued \(n)", nowMs: UInt64(n)))
            XCTAssertTrue(try store.receive(
                peer: peer, senderInstance: instanceA, seq: UInt64(n), id: id(500 + n), text: "in \(n)", sentAtMs: 0, nowMs: UInt64(n)))
        }
        XCTAssertEqual(store.pending(peer: peer), expected)
        let reopened = try open(limits)
        XCTAssertEqual(reopened.pending(peer: peer), expected)
        XCTAssertEqual(reopened.history(peer: peer, max: 10).map(\.id), [id(50), id(550)])
        XCTAssertEqual(reopened.acknowledge(peer: peer, upTo: 50), (1...50).map(id))
    }

    func testOutboxFull() throws {
        let store = try open(MessageStoreLimits(maxQueuedPerPeer: 2, maxQueuedBytesPerPeer: 10))
        _ = try store.enqueue(peer: peer, id: id(1), text: "1234", nowMs: 0)
        _ = try store.enqueue(peer: peer, id: id(2), text: "5678", nowMs: 0)
        XCTAssertThrowsError(try store.enqueue(peer: peer, id: id(3), text: "secret", nowMs: 0)) { error in
            guard case MessageStoreError.outboxFull(let p, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(p, peer)
            XCTAssertFalse("\(error)".contains("secret"), "error descriptions never contain message text")
        }
        _ = store.acknowledge(peer: peer, upTo: 1)
        XCTAssertThrowsError(try store.enqueue(peer: peer, id: id(3), text: "secret-text", nowMs: 0)) { error in
            guard case MessageStoreError.outboxFull = error else { return XCTFail("\(error)") }
            XCTAssertFalse("\(error)".contains("secret"))
        }
        XCTAssertEqual(try store.enqueue(peer: peer, id: id(3), text: "abcdef", nowMs: 0).seq, 3)
        XCTAssertEqual(store.pending(peer: peer).map(\.id), [id(2), id(3)])
        // A refused message left no trace.
        XCTAssertEqual(try open().pending(peer: peer).map(\.seq), [2, 3])
    }

    func testExpiryFailsOldQueuedMessages() throws {
        let store = try open(MessageStoreLimits(expiryMs: 1000))
        _ = try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 0)
        _ = try store.enqueue(peer: peer, id: id(2), text: "b", nowMs: 500)
        _ = try store.enqueue(peer: peer, id: id(3), text: "c", nowMs: 600)
        _ = store.acknowledge(peer: peer, upTo: 1)
        XCTAssertTrue(store.expire(nowMs: 1499).isEmpty)
        let expired = store.expire(nowMs: 1500)
        XCTAssertEqual(expired.map(\.peer), [peer])
        XCTAssertEqual(expired.map(\.id), [id(2)])
        XCTAssertTrue(store.expire(nowMs: 1500).isEmpty, "a failure is reported once")
        XCTAssertEqual(statuses(store, peer), [.delivered, .failed, .queued])
        XCTAssertEqual(store.pending(peer: peer).map(\.id), [id(3)])

        let reopened = try open(MessageStoreLimits(expiryMs: 1000))
        XCTAssertEqual(statuses(reopened, peer), [.delivered, .failed, .queued])
        XCTAssertEqual(reopened.pending(peer: peer).map(\.id), [id(3)])
        // A cumulative acknowledgement covering a failed message leaves it failed.
        XCTAssertEqual(reopened.acknowledge(peer: peer, upTo: 3), [id(3)])
        XCTAssertEqual(statuses(reopened, peer), [.delivered, .failed, .delivered])
    }

    /// After a clock step back a later message can look older: it fails only with those queued
    /// before it, so outcomes keep the order of sequence numbers (`noteOutcomesAnnounced`).
    func testExpiryGoesInTheOrderMessagesWereQueued() throws {
        let store = try open(MessageStoreLimits(expiryMs: 1000))
        _ = try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 1000)
        _ = try store.enqueue(peer: peer, id: id(2), text: "b", nowMs: 0)  // the clock stepped back
        XCTAssertTrue(store.expire(nowMs: 1500).isEmpty, "the second failed before the first")
        XCTAssertEqual(store.expire(nowMs: 2000).map(\.id), [id(1), id(2)])
    }

    /// `MessageDelivered` and `MessageFailed` a kill -9 kept from the bus (campaign seed 12's
    /// window): the store lists every outcome not noted announced at the next start, in order,
    /// and none once noted, also past a compaction that dropped them from the history window.
    func testOutcomesNotNotedAnnouncedAreListedAtTheNextStartAndNotedOnesNever() throws {
        let limits = MessageStoreLimits(expiryMs: 1000, historyPerPeer: 2, compactionSlackBytes: 0)
        let store = try open(limits)
        for n in 1...4 { _ = try store.enqueue(peer: peer, id: id(n), text: "m\(n)", nowMs: UInt64(n)) }
        XCTAssertEqual(store.acknowledge(peer: peer, upTo: 2), [id(1), id(2)])
        XCTAssertEqual(store.expire(nowMs: 1003).map(\.id), [id(3)])
        func listed(_ store: MessageStore) -> [String] {
            store.unannouncedOutcomes().map { "\($0.message.id.suffix(1)) \($0.message.status)" }
        }
        XCTAssertEqual(listed(store), ["1 delivered", "2 delivered", "3 failed"])
        XCTAssertEqual(listed(try open(limits)), ["1 delivered", "2 delivered", "3 failed"], "a kill -9 now")

        store.noteOutcomesAnnounced(peer: peer, through: id(2))
        XCTAssertEqual(listed(try open(limits)), ["3 failed"])

        // Compactions (slack 0) while 3 waits: the history window (2) moves past it.
        for n in 5...40 {
            _ = try store.receive(peer: peer, senderInstance: instanceA, seq: UInt64(n), id: id(100 + n), text: "in",
                                  sentAtMs: 0, nowMs: 5)
            store.noteAnnounced(peer: peer, through: id(100 + n))
        }
        XCTAssertFalse(store.history(peer: peer, max: 100).map(\.id).contains(id(3)))
        let reopened = try open(limits)
        XCTAssertEqual(listed(reopened), ["3 failed"])
        XCTAssertEqual(reopened.pending(peer: peer).map(\.id), [id(4)])
        store.noteOutcomesAnnounced(peer: peer, through: id(3))
        XCTAssertEqual(listed(try open(limits)), [])

        // Noted by the restarted store: the same.
        let restarted = try open(limits)
        XCTAssertEqual(restarted.acknowledge(peer: peer, upTo: 4), [id(4)])
        XCTAssertEqual(listed(try open(limits)), ["4 delivered"])
        restarted.noteOutcomesAnnounced(peer: peer, through: id(4))
        XCTAssertEqual(listed(try open(limits)), [])
    }

    func testForgetFailsQueuedMessagesAndDeletesFiles() throws {
        let other = "AA:BB:CC:DD:EE:FF"
        let store = try open()
        _ = try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 0)
        _ = try store.enqueue(peer: peer, id: id(2), text: "b", nowMs: 0)
        _ = try store.enqueue(peer: peer, id: id(3), text: "c", nowMs: 0)
        _ = store.acknowledge(peer: peer, upTo: 1)
        _ = try store.enqueue(peer: other, id: id(9), text: "keep", nowMs: 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: journalPath(peer)))

        XCTAssertEqual(try store.forget(peer: peer), [id(2), id(3)])
        XCTAssertFalse(FileManager.default.fileExists(atPath: journalPath(peer)))
        XCTAssertFalse(FileManager.default.fileExists(atPath: journalPath(peer) + ".compact"))
        XCTAssertEqual(store.knownPeers, [other])
        XCTAssertEqual(store.pending(peer: peer), [])
        XCTAssertEqual(store.history(peer: peer, max: 10), [])
        XCTAssertEqual(try store.forget(peer: peer), [])

        let reopened = try open()
        XCTAssertEqual(reopened.knownPeers, [other])
        XCTAssertEqual(reopened.pending(peer: other).map(\.id), [id(9)])
        // Numbering never restarts for a peer: its receiver may still remember seq 3.
        XCTAssertEqual(try reopened.enqueue(peer: peer, id: id(4), text: "again", nowMs: 0).seq, 4)
        XCTAssertEqual(try open().enqueue(peer: peer, id: id(5), text: "again", nowMs: 0).seq, 5)

        // Removed again, then a crash right after its new journal was created, before the first
        // record: the numbering still continues.
        let store3 = try open()
        XCTAssertEqual(try store3.forget(peer: peer), [id(4), id(5)])
        try Data("PVJRNL01".utf8).write(to: URL(fileURLWithPath: journalPath(peer)))
        let store4 = try open()
        XCTAssertEqual(store4.knownPeers, [other, peer])
        XCTAssertEqual(try store4.enqueue(peer: peer, id: id(6), text: "again", nowMs: 0).seq, 6)
    }

    /// Simulation seeds 2414 and 10904: the machine stopped inside RemovePeer after the journal
    /// was deleted and before its queued messages were reported failed; they were lost without a
    /// word. Now the journal notes the removal first, and a store opened after a crash in the
    /// middle lists the peer, whose removal (and failures) the service runs again.
    func testARemovalACrashInterruptedIsListedWithItsFailuresAtTheNextStart() throws {
        let store = try open()
        _ = try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 0)
        _ = try store.enqueue(peer: peer, id: id(2), text: "b", nowMs: 0)
        _ = store.acknowledge(peer: peer, upTo: 1)
        XCTAssertEqual(try store.beginForgetting(peer: peer), [id(2)])
        XCTAssertEqual(store.pending(peer: peer), [], "failed: not sent any more")
        // The crash: finishForgetting never ran.

        let reopened = try open()
        XCTAssertEqual(reopened.interruptedRemovals, [peer])
        XCTAssertEqual(try reopened.beginForgetting(peer: peer), [id(2)], "reported again, same id")
        try reopened.finishForgetting(peer: peer)
        XCTAssertEqual(reopened.interruptedRemovals, [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: journalPath(peer)))
        XCTAssertEqual(try open().knownPeers, [])
        XCTAssertEqual(try open().enqueue(peer: peer, id: id(3), text: "again", nowMs: 0).seq, 3, "numbering continues")
    }

    /// Issue 37: the peer's messages 1-3 were stored (and maybe never acknowledged: the ACK was
    /// lost, or the link closed first), then it was removed and paired again. Its resend of 1-3
    /// is a duplicate, across restarts and a second removal too; 4 is new.
    func testARemovedPeersResendIsNotStoredAgain() throws {
        let store = try open()
        for seq in 1...3 {
            XCTAssertTrue(try store.receive(peer: peer, senderInstance: instanceA, seq: UInt64(seq), id: id(seq), text: "m",
                                            sentAtMs: 0, nowMs: 0))
        }
        _ = try store.forget(peer: peer)
        XCTAssertEqual(store.knownPeers, [])

        XCTAssertFalse(try store.receive(peer: peer, senderInstance: instanceA, seq: 3, id: id(33), text: "m", sentAtMs: 0, nowMs: 0),
                       "a resend after RemovePeer was stored again")
        XCTAssertEqual(store.knownPeers, [], "a duplicate made a journal")
        let reopened = try open()
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: instanceA, seq: 2, id: id(2), text: "m", sentAtMs: 0, nowMs: 0))
        // Another instance of the same key (its store was reset) starts afresh.
        XCTAssertTrue(try reopened.receive(peer: peer, senderInstance: instanceB, seq: 1, id: id(41), text: "b", sentAtMs: 0, nowMs: 0))
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: instanceA, seq: 3, id: id(3), text: "m", sentAtMs: 0, nowMs: 0),
                       "the returning peer's journal lost the marks it had when removed")
        XCTAssertTrue(try reopened.receive(peer: peer, senderInstance: instanceA, seq: 4, id: id(4), text: "m", sentAtMs: 0, nowMs: 0))
        XCTAssertEqual(reopened.history(peer: peer, max: 10).map(\.id), [id(41), id(4)])

        // Removed a second time: both instances' marks are kept, the latest seqs.
        _ = try reopened.forget(peer: peer)
        let again = try open()
        XCTAssertFalse(try again.receive(peer: peer, senderInstance: instanceA, seq: 4, id: id(4), text: "m", sentAtMs: 0, nowMs: 0))
        XCTAssertFalse(try again.receive(peer: peer, senderInstance: instanceB, seq: 1, id: id(41), text: "b", sentAtMs: 0, nowMs: 0))

        // A crash right after the returning peer's journal was created, before its first record:
        // the marks still hold.
        try Data("PVJRNL01".utf8).write(to: URL(fileURLWithPath: journalPath(peer)))
        let afterCrash = try open()
        XCTAssertFalse(try afterCrash.receive(peer: peer, senderInstance: instanceA, seq: 4, id: id(4), text: "m", sentAtMs: 0, nowMs: 0))
        XCTAssertTrue(try afterCrash.receive(peer: peer, senderInstance: instanceA, seq: 5, id: id(5), text: "m", sentAtMs: 0, nowMs: 0))
    }

    /// Many removals rewrite `forgotten-peers.pvt`; the marks survive the rewrite, at most
    /// `maxSenderInstancesPerPeer` per peer.
    func testForgottenMarksSurviveTheTombstoneRewriteAndAreCapped() throws {
        let limits = MessageStoreLimits(maxSenderInstancesPerPeer: 2)
        let store = try open(limits)
        for round in 1...80 {
            for instance in ["i1", "i2", "i3"] {
                XCTAssertTrue(try store.receive(peer: peer, senderInstance: instance, seq: UInt64(round), id: id(round), text: "m",
                                                sentAtMs: 0, nowMs: 0), "round \(round) \(instance)")
            }
            _ = try store.forget(peer: peer)
        }
        let tombstones = directory + "/forgotten-peers.pvt"
        // One peer: its seq record and two marks, far fewer than 80 removals wrote.
        XCTAssertLessThan(try fileSize(tombstones), 4_000)
        let reopened = try open(limits)
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: "i3", seq: 80, id: id(1), text: "m", sentAtMs: 0, nowMs: 0))
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: "i2", seq: 80, id: id(1), text: "m", sentAtMs: 0, nowMs: 0))
        XCTAssertTrue(try reopened.receive(peer: peer, senderInstance: "i1", seq: 80, id: id(1), text: "m", sentAtMs: 0, nowMs: 0),
                      "the least recently used instance is the one let go")
    }

    func testTornTailIsCutOffAndEarlierRecordsSurvive() throws {
        let first = try open()
        let m1 = try first.enqueue(peer: peer, id: id(1), text: "one", nowMs: 1)
        let m2 = try first.enqueue(peer: peer, id: id(2), text: "two", nowMs: 2)
        let goodSize = try fileSize(journalPath(peer))
        _ = try first.enqueue(peer: peer, id: id(3), text: "three, torn by the crash", nowMs: 3)
        try truncateFile(journalPath(peer), by: 5)

        let warnings = UnsafeWarnings()
        let second = try open(warnings: warnings)
        XCTAssertEqual(second.pending(peer: peer), [m1, m2])
        XCTAssertEqual(try fileSize(journalPath(peer)), goodSize, "the torn record is truncated away")
        XCTAssertEqual(warnings.lines.count, 1)
        XCTAssertFalse(warnings.lines.joined().contains("torn by"), "warnings never contain message text")
        let m3 = try second.enqueue(peer: peer, id: id(3), text: "three again", nowMs: 4)
        XCTAssertEqual(m3.seq, 3)

        // Garbage after the last record (a torn length prefix, random bytes).
        try appendToFile(journalPath(peer), [0x20, 0x00, 0x00, 0x00, 0xDE, 0xAD, 0xBE, 0xEF, 1, 2, 3])
        let third = try open()
        XCTAssertEqual(third.pending(peer: peer), [m1, m2, m3])
        _ = try third.enqueue(peer: peer, id: id(4), text: "four", nowMs: 5)
        XCTAssertEqual(try open().pending(peer: peer).map(\.seq), [1, 2, 3, 4])

        // A whole-length last record with a bad checksum is dropped too.
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: journalPath(peer))))
        bytes[bytes.count - 2] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: journalPath(peer)))
        XCTAssertEqual(try open().pending(peer: peer).map(\.seq), [1, 2, 3])
    }

    func testTornAcknowledgementLeavesMessageQueued() throws {
        let first = try open()
        _ = try first.enqueue(peer: peer, id: id(1), text: "a", nowMs: 1)
        XCTAssertEqual(first.acknowledge(peer: peer, upTo: 1), [id(1)])
        try truncateFile(journalPath(peer), by: 1)
        let second = try open()
        XCTAssertEqual(second.pending(peer: peer).map(\.id), [id(1)], "resent rather than lost")
        XCTAssertEqual(second.acknowledge(peer: peer, upTo: 1), [id(1)])
    }

    func testInterruptedRewriteIsRecovered() throws {
        let first = try open()
        let m1 = try first.enqueue(peer: peer, id: id(1), text: "a", nowMs: 1)
        let path = journalPath(peer)
        // Crash after the journal was removed, before `.compact` was renamed.
        try FileManager.default.moveItem(atPath: path, toPath: path + ".compact")
        let second = try open()
        XCTAssertEqual(second.pending(peer: peer), [m1])
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".compact"))

        // Crash while `.compact` was being written: the journal is still there and wins.
        try Data("PVJRNL01 partial".utf8).write(to: URL(fileURLWithPath: path + ".compact"))
        let third = try open()
        XCTAssertEqual(third.pending(peer: peer), [m1])
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".compact"))
    }

    func testForeignFileDoesNotStopTheStore() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data("not a journal at all".utf8).write(to: URL(fileURLWithPath: journalPath(peer)))
        try Data("notes".utf8).write(to: URL(fileURLWithPath: directory + "/README"))
        let warnings = UnsafeWarnings()
        let store = try open(warnings: warnings)
        XCTAssertEqual(store.knownPeers, [])
        XCTAssertEqual(warnings.lines.count, 1)
        XCTAssertEqual(try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 0).seq, 1)
        XCTAssertEqual(try open().pending(peer: peer).map(\.id), [id(1)])
    }

    func testUnicodeTextRoundTrips() throws {
        let texts = [
            "emoji 👋🏽🇫🇷👨‍👩‍👧",
            "中文，日本語、한국어",
            "line one\nline two\r\nline three\n",
            "nul\u{0}inside\u{0}",
            "\u{FEFF}bom and \u{200D} joiners",
            String(repeating: "é", count: 32_768),  // 65536 bytes of UTF-8
        ]
        let first = try open()
        for (n, text) in texts.enumerated() {
            _ = try first.enqueue(peer: peer, id: id(n), text: text, nowMs: UInt64(n))
            XCTAssertTrue(try first.receive(
                peer: peer, senderInstance: instanceA, seq: UInt64(n + 1), id: id(100 + n), text: text,
                sentAtMs: 0, nowMs: UInt64(n)))
        }
        for store in [first, try open()] {
            XCTAssertEqual(store.pending(peer: peer).map(\.text), texts)
            let history = store.history(peer: peer, max: 100)
            XCTAssertEqual(history.filter { $0.status == .received }.map(\.text), texts)
            XCTAssertEqual(history.filter { $0.status == .queued }.map(\.text), texts)
        }
    }

    func testPeerIDsWithSpecialCharacters() throws {
        let peers = ["ip:[::1]:47800", "AA:BB:CC:DD:EE:FF", "ip:[fe80::1%eth0]:1", "ip:127.0.0.1:47800", "ü/../x"]
        let first = try open()
        for (n, p) in peers.enumerated() {
            _ = try first.enqueue(peer: p, id: id(n), text: p, nowMs: 0)
        }
        let second = try open()
        XCTAssertEqual(second.knownPeers, peers.sorted())
        for p in peers { XCTAssertEqual(second.pending(peer: p).map(\.text), [p]) }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        XCTAssertTrue(names.allSatisfy { $0.allSatisfy { $0.isHexDigit || $0 == "." || $0.isLetter } })
    }

    func testFileModes() throws {
        // A pre-existing, wider directory is tightened.
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let limits = MessageStoreLimits(historyPerPeer: 1, compactionSlackBytes: 0)
        let store = try open(limits)
        XCTAssertEqual(try mode(directory), 0o700)
        _ = try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 0)
        XCTAssertEqual(try mode(journalPath(peer)), 0o600)
        for n in 2...40 {  // through several compactions
            _ = try store.enqueue(peer: peer, id: id(n), text: "b", nowMs: 0)
            _ = store.acknowledge(peer: peer, upTo: UInt64(n))
        }
        XCTAssertEqual(try mode(journalPath(peer)), 0o600)
        _ = try store.forget(peer: peer)
        XCTAssertEqual(try mode(directory + "/forgotten-peers.pvt"), 0o600)

        let fresh = directory + "/nested/store"
        _ = try MessageStore(directory: fresh)
        XCTAssertEqual(try mode(fresh), 0o700)
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name != "nested" {
            XCTAssertEqual(try mode(directory + "/" + name), 0o600, name)
        }
    }

    func testAcknowledgementBeyondLastSequenceIsClamped() throws {
        let store = try open()
        _ = try store.enqueue(peer: peer, id: id(1), text: "a", nowMs: 0)
        XCTAssertEqual(store.acknowledge(peer: peer, upTo: 99), [id(1)])
        let m2 = try store.enqueue(peer: peer, id: id(2), text: "b", nowMs: 0)
        XCTAssertEqual(m2.seq, 2)
        XCTAssertEqual(store.pending(peer: peer), [m2], "a bogus acknowledgement cannot swallow later messages")
        XCTAssertEqual(try open().pending(peer: peer), [m2])
        XCTAssertEqual(store.acknowledge(peer: "ip:10.9.9.9:1", upTo: 5), [])
    }

    func testInvalidArguments() throws {
        let store = try open()
        XCTAssertThrowsError(try store.receive(peer: peer, senderInstance: instanceA, seq: 0, id: id(1), text: "a", sentAtMs: 0, nowMs: 0))
        XCTAssertThrowsError(try store.enqueue(peer: "", id: id(1), text: "a", nowMs: 0))
        XCTAssertThrowsError(try store.enqueue(peer: String(repeating: "p", count: 121), id: id(1), text: "a", nowMs: 0))
        XCTAssertThrowsError(try store.enqueue(peer: peer, id: "", text: "a", nowMs: 0))
        XCTAssertThrowsError(try store.receive(peer: peer, senderInstance: "", seq: 1, id: id(1), text: "a", sentAtMs: 0, nowMs: 0))
        XCTAssertEqual(store.knownPeers, [])
    }

    func testSenderInstancesAreCapped() throws {
        let limits = MessageStoreLimits(maxSenderInstancesPerPeer: 2)
        let store = try open(limits)
        for (n, instance) in ["i1", "i2", "i3"].enumerated() {
            XCTAssertTrue(try store.receive(peer: peer, senderInstance: instance, seq: 5, id: id(n), text: "x", sentAtMs: 0, nowMs: 0))
        }
        let reopened = try open(limits)
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: "i3", seq: 5, id: id(9), text: "x", sentAtMs: 0, nowMs: 0))
        XCTAssertFalse(try reopened.receive(peer: peer, senderInstance: "i2", seq: 5, id: id(9), text: "x", sentAtMs: 0, nowMs: 0))
        // The least recently used instance was evicted.
        XCTAssertTrue(try reopened.receive(peer: peer, senderInstance: "i1", seq: 5, id: id(9), text: "x", sentAtMs: 0, nowMs: 0))
    }
}

/// Collects warnings from the store's callback (tests run on one thread).
private final class UnsafeWarnings {
    var lines: [String] = []
}

extension MessageStoreTests {
    func testPendingAfterASeqStreamsTheRestInOrder() throws {
        let directory = NSTemporaryDirectory() + "pending-after-\(UInt64.random(in: 0...UInt64.max))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try MessageStore(directory: directory)
        XCTAssertFalse(store.hasPending(peer: "ip:10.0.0.1:1"))
        for index in 1...10 {
            _ = try store.enqueue(peer: "ip:10.0.0.1:1", id: String(format: "%032x", index), text: "m\(index)", nowMs: 1)
        }
        _ = store.acknowledge(peer: "ip:10.0.0.1:1", upTo: 3)
        XCTAssertTrue(store.hasPending(peer: "ip:10.0.0.1:1"))
        XCTAssertEqual(store.pending(peer: "ip:10.0.0.1:1", after: 0, limit: 2).map(\.seq), [4, 5])
        XCTAssertEqual(store.pending(peer: "ip:10.0.0.1:1", after: 7, limit: 100).map(\.seq), [8, 9, 10])
        XCTAssertEqual(store.pending(peer: "ip:10.0.0.1:1", after: 10, limit: 100), [])
        XCTAssertEqual(store.pending(peer: "ip:10.0.0.1:1", after: 0, limit: 100), store.pending(peer: "ip:10.0.0.1:1"))
    }
}
