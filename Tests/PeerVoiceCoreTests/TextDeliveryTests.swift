import Foundation
import PeerVoiceCore
import XCTest

/// Text delivery with the store syncing in batches (the daemon's group commit): nothing is
/// confirmed before the store's writes are on the disk — no TEXT sent, no ACK, no event.
final class TextDeliveryTests: XCTestCase {
    private final class Link {}

    private var directory = ""
    private var sent: [(link: Link, frame: Frame)] = []
    private var events: [ServiceEvent] = []
    /// What waits for the events emitted so far to reach the user (the daemon: the bus write).
    private var waitingForAnnouncements: [() -> Void] = []
    private let peer = PeerID("pv:aaaaaaaaaaaaaaaaaaaaaaaaaa")!
    private let instance = InstanceID(hex: String(repeating: "b2", count: 16))!
    private let other = PeerID("pv:cccccccccccccccccccccccccc")!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("TextDeliveryTests-\(UUID().uuidString)").path
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func makeDelivery(_ store: MessageStore, nowMs: UInt64 = 1_000) -> TextDelivery<Link> {
        TextDelivery(store: store, now: { .now }, nowMs: { nowMs },
                     transmit: { [unowned self] link, frame in sent.append((link, frame)) },
                     drop: { _, _ in XCTFail("no link is dropped here") },
                     emit: { [unowned self] in events.append($0) },
                     whenAnnounced: { [unowned self] in waitingForAnnouncements.append($0) })
    }

    /// On `disk`: a delivery with a link open to `peer` and a message queued for it, not synced.
    private func deliveryWithAMessageQueued(on disk: FullDisk) throws -> (MessageStore, TextDelivery<Link>) {
        let store = try MessageStore(directory: directory, storage: disk, syncMode: .batched)
        let delivery = makeDelivery(store)
        delivery.linkOpened(Link(), to: peer)
        try delivery.enqueue("m", id: String(format: "%032x", 1), for: peer, nowMs: 1)
        return (store, delivery)
    }

    /// The events emitted so far reached the user.
    private func announcementsWritten() {
        let waiting = waitingForAnnouncements
        waitingForAnnouncements = []
        waiting.forEach { $0() }
    }

    /// Runs the sync the store has due, as the daemon's sync thread would.
    private func sync(_ store: MessageStore, _ delivery: TextDelivery<Link>) {
        guard let batch = store.takeSyncBatch() else { return XCTFail("no sync was due") }
        store.finishSync(batch, error: batch.run())
        delivery.durabilityAdvanced()
    }

    private var texts: [UInt64] { sent.compactMap { if case .text(let t) = $0.frame { t.seq } else { nil } } }
    private var acks: [UInt64] { sent.compactMap { if case .ack(let seq) = $0.frame { seq } else { nil } } }

    func testASentMessageGoesOutAndIsConfirmedOnlyOnceOnTheDisk() throws {
        let store = try MessageStore(directory: directory, syncMode: .batched)
        let delivery = makeDelivery(store)
        let link = Link()
        delivery.linkOpened(link, to: peer)
        var accepted: [String] = []
        for n in 1...3 {
            try delivery.enqueue("m\(n)", id: String(format: "%032x", n), for: peer, nowMs: 1)
            delivery.whenDurable { accepted.append("m\(n)") }
        }
        XCTAssertEqual(texts, [], "a TEXT went out before its record was synced")
        XCTAssertEqual(accepted, [], "Send was answered before its record was synced")

        sync(store, delivery)  // one sync for the three: group commit
        XCTAssertEqual(texts, [1, 2, 3])
        XCTAssertEqual(accepted, ["m1", "m2", "m3"])
        XCTAssertNil(store.takeSyncBatch(), "nothing left to sync")

        delivery.acknowledged(upTo: 3, from: peer)
        XCTAssertEqual(events, [], "MessageDelivered before the acknowledgement was synced")
        sync(store, delivery)
        XCTAssertEqual(events, (1...3).map { .messageDelivered(peer, messageID: String(format: "%032x", $0)) })
    }

    /// Announced once written (a crash that keeps the unsynced record must not leave it
    /// unannounced: simulation seed 20), acknowledged only once synced.
    func testAReceivedMessageIsAnnouncedOnceWrittenAndAcknowledgedOnlyOnceOnTheDisk() throws {
        let store = try MessageStore(directory: directory, syncMode: .batched)
        let delivery = makeDelivery(store)
        let link = Link()
        delivery.linkOpened(link, to: peer)
        let id = MessageID.random()
        delivery.received(try TextFrame(seq: 1, previousSeq: 0, messageID: id, sentAtMs: 5, text: "hi"), from: peer,
                          senderInstance: instance)
        delivery.inputDrained(from: peer)
        XCTAssertEqual(events, [.messageReceived(peer, messageID: id.hex, text: "hi")])
        XCTAssertEqual(acks, [], "ACK before the message was synced")

        // While that sync runs, a resend of 1 arrives: a duplicate, acknowledged only after the sync too.
        let batch = try XCTUnwrap(store.takeSyncBatch())
        delivery.received(try TextFrame(seq: 1, previousSeq: 0, messageID: id, sentAtMs: 5, text: "hi"), from: peer,
                          senderInstance: instance)
        delivery.inputDrained(from: peer)
        store.finishSync(batch, error: batch.run())
        delivery.durabilityAdvanced()
        XCTAssertEqual(events, [.messageReceived(peer, messageID: id.hex, text: "hi")])
        XCTAssertEqual(acks, [1, 1])
        XCTAssertEqual(delivery.waitingForDisk, 0)
    }

    /// Chaos seed 12: bravo was killed (-9) about 0.1 s after it stored alpha's message and
    /// emitted `MessageReceived`; GDBus writes a signal from its worker thread, and the kill came
    /// before that write. The store had noted the message announced in the write that stored it,
    /// so the restarted bravo never announced it: stored, acknowledged, never seen. Now the note
    /// waits until the signal is written, and a restart before it announces the message again,
    /// same id; after the note, never again.
    func testSeed12_AMessageWhoseSignalWasNotWrittenBeforeAKillIsAnnouncedAgainWithTheSameID() throws {
        let store = try MessageStore(directory: directory, syncMode: .batched)
        let delivery = makeDelivery(store)
        delivery.linkOpened(Link(), to: peer)
        let first = MessageID.random(), second = MessageID.random()
        delivery.received(try TextFrame(seq: 1, previousSeq: 0, messageID: first, sentAtMs: 5, text: "one"), from: peer,
                          senderInstance: instance)
        delivery.inputDrained(from: peer)
        sync(store, delivery)
        XCTAssertEqual(acks, [1], "acknowledged once on the disk, whether or not the signal was written")

        // Killed before the signal was written: the journal as the kill leaves it.
        let afterKill = try MessageStore(directory: directory, syncMode: .batched)
        XCTAssertEqual(afterKill.unannounced().map(\.message.id), [first.hex], "the restart would not announce it")
        let restarted = makeDelivery(afterKill)
        events = []
        restarted.announceUnannounced()
        XCTAssertEqual(events, [.messageReceived(peer, messageID: first.hex, text: "one")], "announced again, same id")
        waitingForAnnouncements.removeLast()  // that life ends here; the first one goes on

        // The first life's signal is written now, with a second message's still on its way.
        delivery.received(try TextFrame(seq: 2, previousSeq: 1, messageID: second, sentAtMs: 6, text: "two"), from: peer,
                          senderInstance: instance)
        let secondsNote = try XCTUnwrap(waitingForAnnouncements.popLast())
        announcementsWritten()
        XCTAssertEqual(try MessageStore(directory: directory).unannounced().map(\.message.id), [second.hex],
                       "noted the first announced only with the second, or the second with the first")
        secondsNote()
        XCTAssertEqual(try MessageStore(directory: directory).unannounced().map(\.message.id), [],
                       "both signals written, yet a restart would announce them again")
    }

    /// Seed 12's window on the sender's side: a kill -9 before GDBus wrote `MessageDelivered`
    /// or `MessageFailed` lost the signal, and nothing said it again. Now each is noted once
    /// written, and a restart before that reports it again, same id; after the note, never.
    func testADeliveredOrFailedSignalNotWrittenBeforeAKillIsReportedAgainWithTheSameID() throws {
        let limits = MessageStoreLimits(expiryMs: 1000)
        let store = try MessageStore(directory: directory, limits: limits, syncMode: .batched)
        let delivery = makeDelivery(store)  // its clock says 1,000 ms
        delivery.linkOpened(Link(), to: peer)
        let ids = (1...3).map { String(format: "%032x", $0) }
        try delivery.enqueue("one", id: ids[0], for: peer, nowMs: 0)
        try delivery.enqueue("two", id: ids[1], for: peer, nowMs: 500)
        sync(store, delivery)
        delivery.acknowledged(upTo: 1, from: peer)
        delivery.expire()  // the second is 500 ms old: it stays
        sync(store, delivery)
        XCTAssertEqual(events, [.messageDelivered(peer, messageID: ids[0])])

        // Killed before the signal was written: the journal as the kill leaves it.
        func restart() throws -> [ServiceEvent] {
            let restarted = makeDelivery(try MessageStore(directory: directory, limits: limits, syncMode: .batched))
            let before = (events.count, waitingForAnnouncements.count)
            restarted.announceUnannounced()
            defer {
                events.removeLast(events.count - before.0)  // that life ends here; the first one goes on
                waitingForAnnouncements.removeLast(waitingForAnnouncements.count - before.1)
            }
            return Array(events[before.0...])
        }
        XCTAssertEqual(try restart(), [.messageDelivered(peer, messageID: ids[0])], "reported again, same id")

        announcementsWritten()
        XCTAssertEqual(try restart(), [], "written and noted, yet reported again")

        // A failure (the second expired) and a delivery whose writes to the bus are still on their way.
        try delivery.enqueue("three", id: ids[2], for: peer, nowMs: 1000)
        sync(store, delivery)
        let later = makeDelivery(store, nowMs: 1_600)  // the same store, its clock 600 ms later
        later.expire()
        sync(store, later)
        delivery.acknowledged(upTo: 3, from: peer)
        sync(store, delivery)
        let reason = "not delivered within 0 days"
        XCTAssertEqual(Array(events.suffix(2)), [.messageFailed(peer, messageID: ids[1], reason: reason),
                                                 .messageDelivered(peer, messageID: ids[2])])
        XCTAssertEqual(try restart(), [.messageFailed(peer, messageID: ids[1], reason: reason),
                                       .messageDelivered(peer, messageID: ids[2])])
        announcementsWritten()
        XCTAssertEqual(try restart(), [])
    }

    /// `RemovePeer`'s failures have the same window: the journal, which notes the removal, goes
    /// only once they were written, so a kill before that finishes the removal again at the next
    /// start, reporting them again. A peer back meanwhile gets a journal of its own.
    func testARemovalKeepsItsNoteUntilItsFailuresReachedTheUser() throws {
        let store = try MessageStore(directory: directory, syncMode: .batched)
        let delivery = makeDelivery(store)
        let id = String(format: "%032x", 1)
        try delivery.enqueue("one", id: id, for: peer, nowMs: 1)
        sync(store, delivery)
        var forgotten = 0
        XCTAssertEqual(try delivery.forget(peer) { forgotten += 1 }, 1)
        XCTAssertEqual(forgotten, 1)
        XCTAssertEqual(events, [.messageFailed(peer, messageID: id, reason: "the peer was removed")])
        XCTAssertEqual(try MessageStore(directory: directory).interruptedRemovals, [peer.description],
                       "a kill now would not report the failure again")

        announcementsWritten()
        XCTAssertEqual(try MessageStore(directory: directory).interruptedRemovals, [])
        XCTAssertEqual(try MessageStore(directory: directory).knownPeers, [], "the journal stayed")

        // Removed again, and back before the failure was written: its new message is kept.
        try delivery.enqueue("two", id: String(format: "%032x", 2), for: peer, nowMs: 2)
        sync(store, delivery)
        XCTAssertEqual(try delivery.forget(peer) {}, 1)
        try delivery.enqueue("three", id: String(format: "%032x", 3), for: peer, nowMs: 3)
        sync(store, delivery)
        announcementsWritten()
        let reopened = try MessageStore(directory: directory)
        XCTAssertEqual(reopened.interruptedRemovals, [])
        XCTAssertEqual(reopened.pending(peer: peer.description).map(\.seq), [3], "numbering goes on after a removal")
    }

    func testAnACKForALinkThatClosedMeanwhileIsNotSent() throws {
        let store = try MessageStore(directory: directory, syncMode: .batched)
        let delivery = makeDelivery(store)
        delivery.linkOpened(Link(), to: peer)
        delivery.received(try TextFrame(seq: 1, previousSeq: 0, messageID: .random(), sentAtMs: 5, text: "hi"), from: peer,
                          senderInstance: instance)
        delivery.inputDrained(from: peer)
        delivery.linkClosed(to: peer)
        sync(store, delivery)
        XCTAssertEqual(acks, [])
        XCTAssertEqual(events.count, 1, "the message itself is stored and announced")
    }

    func testAFullDiskRefusesTheMessageWithWordsAPersonCanActOnAndKeepsWhatCameBefore() throws {
        let disk = FullDisk()
        let store = try MessageStore(directory: directory, storage: disk, syncMode: .batched)
        let delivery = makeDelivery(store)
        try delivery.enqueue("kept", id: String(format: "%032x", 1), for: peer, nowMs: 1)
        sync(store, delivery)
        disk.full = true
        XCTAssertThrowsError(try delivery.enqueue("lost", id: String(format: "%032x", 2), for: peer, nowMs: 1)) { error in
            guard case ServiceError.failed(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("not queued") && message.contains("is full") && message.contains("free some space"), message)
        }
        XCTAssertEqual(store.pending(peer: peer.description).map(\.text), ["kept"])
        disk.full = false
        try delivery.enqueue("after", id: String(format: "%032x", 3), for: peer, nowMs: 1)
        sync(store, delivery)
        let reopened = try MessageStore(directory: directory)
        XCTAssertEqual(reopened.pending(peer: peer.description).map(\.text), ["kept", "after"])
        XCTAssertEqual(reopened.pending(peer: peer.description).map(\.seq), [1, 2], "the refused message used no number")
    }

    func testAFailedSyncRewritesTheJournalBeforeAnythingCounts() throws {
        let disk = FullDisk()
        let store = try MessageStore(directory: directory, storage: disk, syncMode: .batched)
        let delivery = makeDelivery(store)
        var accepted = false
        try delivery.enqueue("m", id: String(format: "%032x", 1), for: peer, nowMs: 1)
        delivery.whenDurable { accepted = true }
        let batch = try XCTUnwrap(store.takeSyncBatch())
        store.finishSync(batch, error: StorageError(.other, operation: "sync", path: directory, reason: "Input/output error"))
        delivery.durabilityAdvanced()
        XCTAssertTrue(accepted, "the journal was rewritten from memory (synced), so the message is durable")
        XCTAssertEqual(try MessageStore(directory: directory).pending(peer: peer.description).map(\.text), ["m"])
    }

    /// Simulation seeds 154 and 282: an ACK that came while the disk was full was announced
    /// (`MessageDelivered`) though only memory knew it; after a restart the message was still
    /// queued, went out again and was reported delivered twice (or failed after delivered).
    func testAnACKTheFullDiskCannotRecordIsAnnouncedOnlyOnceTheJournalHasIt() throws {
        let disk = FullDisk()
        let store = try MessageStore(directory: directory, storage: disk, syncMode: .batched)
        let delivery = makeDelivery(store)
        delivery.linkOpened(Link(), to: peer)
        try delivery.enqueue("m", id: String(format: "%032x", 1), for: peer, nowMs: 1)
        sync(store, delivery)
        XCTAssertEqual(texts, [1])

        disk.full = true
        delivery.acknowledged(upTo: 1, from: peer)
        XCTAssertNil(store.takeSyncBatch(), "no busy loop of batches while the rewrite fails")
        store.retryFailedRewrites()
        sync(store, delivery)
        XCTAssertEqual(events, [], "MessageDelivered while the disk does not know it")
        XCTAssertEqual(try MessageStore(directory: directory).pending(peer: peer.description).map(\.text), ["m"],
                       "what a restart now would find: still queued")

        disk.full = false
        store.retryFailedRewrites()
        sync(store, delivery)
        XCTAssertEqual(events, [.messageDelivered(peer, messageID: String(format: "%032x", 1))])
        XCTAssertEqual(try MessageStore(directory: directory).pending(peer: peer.description).map(\.text), [])
    }

    /// Seed 31's other window: the rewrite starts failing after `Send`'s append, before its sync
    /// (an ACK from another peer arriving just as the disk fills). Durability was one count for
    /// the store, held back by any journal awaiting a rewrite, so the reply waited until space
    /// returned. Now it waits for its own journal only; the ACK's `MessageDelivered` still
    /// waits for the rewrite that records it.
    func testSeed31_ARewriteThatStartsFailingAfterASendsAppendHoldsBackOnlyItsOwnJournal() throws {
        let disk = FullDisk()
        let (store, delivery) = try deliveryWithAMessageQueued(on: disk)
        sync(store, delivery)

        var accepted = false
        try delivery.enqueue("n", id: String(format: "%032x", 2), for: other, nowMs: 2)
        delivery.whenDurable(for: other) { accepted = true }
        disk.full = true
        delivery.acknowledged(upTo: 1, from: peer)  // unrecorded: the journal awaits a rewrite
        sync(store, delivery)
        XCTAssertTrue(accepted, "Send's reply waited for another journal's rewrite")
        XCTAssertEqual(try MessageStore(directory: directory).pending(peer: other.description).map(\.text), ["n"])
        XCTAssertEqual(events, [], "MessageDelivered while the disk does not know it")

        disk.full = false
        store.retryFailedRewrites()
        sync(store, delivery)
        XCTAssertEqual(events, [.messageDelivered(peer, messageID: String(format: "%032x", 1))])
    }

    /// Chaos seed 31: `Send` to one peer while another peer's journal waited for a rewrite the
    /// full disk refused (an ACK it could not record) was accepted, but its reply waited for that
    /// rewrite: over 15 s, until space returned; the message was then delivered, after a caller
    /// that gave up could have sent it again. Now it is refused at once, keeping nothing.
    func testSeed31_ASendWhileAnotherJournalAwaitsARewriteTheDiskRefusesIsRefusedAtOnce() throws {
        let disk = FullDisk()
        let (store, delivery) = try deliveryWithAMessageQueued(on: disk)
        try delivery.enqueue("earlier", id: String(format: "%032x", 2), for: other, nowMs: 1)
        sync(store, delivery)

        disk.full = true
        delivery.acknowledged(upTo: 1, from: peer)  // unrecorded: the journal awaits a rewrite
        // Then room for an append into a journal's last block, none for a new file (the rewrite).
        disk.full = false
        disk.refusesNewFiles = true
        var accepted = false
        XCTAssertThrowsError(try delivery.enqueue("n", id: String(format: "%032x", 3), for: other, nowMs: 2)) {
            XCTAssertTrue("\($0)".contains("the disk holding"), "not the words a person can act on: \($0)")
        }
        XCTAssertEqual(try MessageStore(directory: directory).pending(peer: other.description).map(\.text), ["earlier"],
                       "the refused message was kept")

        disk.refusesNewFiles = false
        try delivery.enqueue("n", id: String(format: "%032x", 3), for: other, nowMs: 3)
        delivery.whenDurable { accepted = true }
        sync(store, delivery)
        XCTAssertTrue(accepted, "Send unanswered once the disk had room")
        XCTAssertEqual(events, [.messageDelivered(peer, messageID: String(format: "%032x", 1))])
    }
}

/// The real file system, except that appends fail with "No space left on device" while `full`,
/// and creating files while `refusesNewFiles`.
private final class FullDisk: Storage {
    private let real = FileStorage()
    var full = false
    /// Creating a file fails with "No space left on device" (appends still fit).
    var refusesNewFiles = false

    func read(_ path: String) throws(StorageError) -> [UInt8]? { try real.read(path) }
    func exists(_ path: String) -> Bool { real.exists(path) }
    func isDirectory(_ path: String) -> Bool { real.isDirectory(path) }
    func list(_ directory: String) throws(StorageError) -> [String] { try real.list(directory) }
    func makeDirectory(_ path: String) throws(StorageError) { try real.makeDirectory(path) }
    func restrictToOwner(_ path: String) throws(StorageError) { try real.restrictToOwner(path) }
    func create(_ path: String) throws(StorageError) -> any StorageFile {
        if refusesNewFiles { throw StorageError(.noSpace, operation: "create", path: path, reason: "No space left on device") }
        return File(try real.create(path), disk: self, path: path)
    }
    func openForAppending(_ path: String) throws(StorageError) -> any StorageFile {
        File(try real.openForAppending(path), disk: self, path: path)
    }
    func rename(_ from: String, to: String) throws(StorageError) { try real.rename(from, to: to) }
    func remove(_ path: String) throws(StorageError) { try real.remove(path) }
    func syncDirectory(_ path: String) throws(StorageError) { try real.syncDirectory(path) }

    private final class File: StorageFile {
        let file: any StorageFile
        unowned let disk: FullDisk
        let path: String

        init(_ file: any StorageFile, disk: FullDisk, path: String) {
            self.file = file
            self.disk = disk
            self.path = path
        }

        func append(_ bytes: [UInt8]) throws(StorageError) {
            if disk.full { throw StorageError(.noSpace, operation: "write", path: path, reason: "No space left on device") }
            try file.append(bytes)
        }
        func truncate(to length: UInt64) throws(StorageError) { try file.truncate(to: length) }
        func sync() throws(StorageError) { try file.sync() }
        func syncHandle() throws(StorageError) -> any StorageSyncHandle { try file.syncHandle() }
        func close() { file.close() }
    }
}
