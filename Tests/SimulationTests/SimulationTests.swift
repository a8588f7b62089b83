import PeerVoiceCore
import PeerVoiceSimulation
import XCTest

/// The deterministic simulation in `swift test`: the seeds that found defects (each named after
/// its seed, with the shrunk schedule that reproduced it and the whole seed), a few more, and
/// replay. `make simulate` runs hundreds of seeds from an optimised build (docs/RELIABILITY.md).
final class SimulationTests: XCTestCase {
    /// Runs `seed`, whole or only the schedule steps `keep`, and fails with its violations and log.
    private func assertRunsClean(_ seed: UInt64, keeping keep: Set<Int>? = nil, signalsWrittenAtOnce: Bool = false,
                                 file: StaticString = #filePath, line: UInt = #line) {
        let outcome = Simulation(seed: seed).run(keeping: keep, signalsWrittenAtOnce: signalsWrittenAtOnce)
        XCTAssertFalse(outcome.failed, "seed \(seed): \(outcome.violations.first ?? "")\nreplay: make simulate SEED=\(seed)\n"
                       + outcome.log.suffix(40).joined(separator: "\n"), file: file, line: line)
        XCTAssertGreaterThan(outcome.accepted, 0, "seed \(seed) sent nothing: it tests nothing", file: file, line: line)
    }

    /// A message stored, then the machine lost power before noting it was announced: it was
    /// never announced (its sender's resend was dropped as a duplicate).
    func testSeed20AMessageThatOutlivedAPowerLossIsAnnounced() { assertRunsClean(20) }

    func testSeed141AMessageThatOutlivedAPowerLossIsAnnounced() { assertRunsClean(141) }

    /// The disk full, an ACK came, MessageDelivered was announced though only memory knew it;
    /// a power loss, the message went out again and was reported delivered twice.
    func testSeed154DeliveredIsAnnouncedOnlyOnceTheFullDiskRecordedIt() {
        assertRunsClean(154, keeping: [3, 75, 97, 140, 146, 147, 159])
        assertRunsClean(154)
    }

    /// As 154 with a kill -9: the message was reported failed (expired) after delivered.
    func testSeed282DeliveredIsAnnouncedOnlyOnceTheFullDiskRecordedIt() {
        assertRunsClean(282, keeping: [42, 82, 83, 88, 89, 121, 124])
        assertRunsClean(282)
    }

    /// A message sent to a peer whose pairing was pending, then a power loss: the unpaired peer
    /// was not remembered, and the message sat queued for a week. Send now refuses such a peer.
    func testSeed201SendWaitsForThePairing() {
        assertRunsClean(201, keeping: [33, 34, 35, 37, 38, 39, 47, 92, 104, 115, 150, 177, 188])
        assertRunsClean(201)
    }

    /// The machine lost power after storing a message but before noting it was announced; it
    /// was announced again at the restart (allowed), the note could not be written (read-only)
    /// and a kill -9 made it announced a third time. The simulation had counted only power
    /// losses as losing state; a kill while memory holds what the disk refused loses it too.
    func testSeed440AKillWhileTheDiskRefusedTheNoteMayAnnounceAgain() {
        assertRunsClean(440, keeping: [0, 6, 7, 10, 13, 39, 43])
    }

    /// The machine stopped in a compaction that `receive` ran after writing a message and the
    /// note that it was announced, before the announcement: after the restart the message was
    /// stored and noted, never announced, and its sender's resend was acknowledged as a duplicate.
    /// A receive now compacts before it writes.
    func testSeed202NothingComesBetweenStoringAMessageAndAnnouncingIt() {
        assertRunsClean(202, keeping: [6, 35, 36, 37, 38, 39, 40, 46, 47, 48, 49, 50, 51, 66, 67])
        assertRunsClean(202)
    }

    /// Chaos seed 12 in the simulation, once it modelled the bus (GDBus writes a signal a moment
    /// after the emit; a kill in between loses it): a message stored and noted announced, its
    /// `MessageReceived` lost to a kill -9, never announced after the restart (7 of seeds
    /// 201-913 without the fix). The note now waits until the signal is written.
    func testSeed235AMessageWhoseSignalAKillCaughtUnwrittenIsAnnouncedAgain() {
        assertRunsClean(235, keeping: [0, 1, 2, 3, 7, 8, 25, 26, 27, 28, 29, 30, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42,
                                       51, 52, 53, 54, 55, 61, 62, 64, 65, 66, 67, 68, 69, 76, 77, 78, 80, 81, 82, 83, 84, 85,
                                       86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 97, 98, 99, 100, 101, 103, 104, 186])
        assertRunsClean(235)
    }

    /// The machine stopped inside RemovePeer after the journal was deleted, before the queued
    /// messages were reported failed: neither delivered nor reported. The journal now notes the
    /// removal first and the next start finishes it.
    func testSeed2414ARemovalACrashInterruptedIsFinishedAtStart() {
        assertRunsClean(2414, keeping: [0, 6, 30, 35, 36, 45, 50, 108])
        assertRunsClean(2414)
    }

    func testSeed10904ARemovalACrashInterruptedIsFinishedAtStart() { assertRunsClean(10904) }

    /// The disk full in the middle of RemovePeer: the messages were failed in memory, the
    /// tombstone refused, the failures never reported. Nothing fails before the note is written.
    func testSeed19ARemovalTheDiskRefusesChangesNothing() {
        assertRunsClean(19, keeping: [0, 45, 46, 53, 54, 58, 69])
    }

    /// A RemovePeer the full disk stopped after its failures were reported, then a kill: the
    /// next start finished the removal and reported them again (same ids), as designed; the
    /// simulation had counted that kill as losing nothing.
    func testSeed18558AKillDuringAnUnfinishedRemovalMayReportItsFailuresAgain() {
        assertRunsClean(18558, keeping: [1, 3, 5, 15, 28, 139, 162, 218])
        assertRunsClean(14284, keeping: [0, 1, 2, 56, 67, 90, 98, 142])
    }

    /// A power loss kept the message directory but not the state directory's own name (never
    /// synced in its parent): the files synced inside vanished with it (instance, peers.json).
    /// `Storage.makeDirectory` now syncs the parent of each directory it creates.
    func testSeed625TheStateDirectorySurvivesAPowerLoss() {
        assertRunsClean(625, keeping: [1, 3, 4, 5, 7, 76, 78, 90, 136, 143, 177])
        assertRunsClean(625)
    }

    func testSeed1991TheStateDirectorySurvivesAPowerLoss() {
        assertRunsClean(1991, keeping: [0, 1, 2, 10, 15, 32, 43, 47, 100, 102, 103, 104, 105, 106, 107])
        assertRunsClean(1991)
    }

    /// A dial to a moved peer's advertised address timed out in a partition; the failure
    /// dropped the candidate route, and the advertisement, still current, was not announced
    /// again: the queued messages were never sent. A failed dial now keeps the candidate.
    func testSeed1402AFailedDialKeepsTheAdvertisedRoute() {
        assertRunsClean(1402, keeping: [1, 2, 10, 17, 31, 33, 42, 43, 45, 46])
        assertRunsClean(1402)
    }

    /// The storage contract the seeds above rely on: a directory made, a file synced in it, then
    /// a power loss keeps both (what the simulated disk keeps is what a real one must).
    func testADirectoryMadeAndAFileSyncedInItSurviveAPowerLoss() throws {
        for seed in UInt64(1)...50 {
            let disk = SimulatedDisk(seed: seed)
            try disk.makeDirectory("/state/messages")
            let id = try InstanceFile.loadOrCreate(at: "/state/instance", storage: disk,
                                                   make: { InstanceID(hex: String(repeating: "a1", count: 16))! })
            disk.crash()
            XCTAssertTrue(disk.isDirectory("/state/messages"), "seed \(seed)")
            XCTAssertEqual(try InstanceFile.loadOrCreate(at: "/state/instance", storage: disk, make: { XCTFail(); return id }), id)
        }
    }

    /// More seeds (PEERVOICE_SIMULATION_SEEDS, 20 by default in this unoptimised build).
    func testSeedsRunWithoutViolation() {
        let count = Int(ProcessInfo.processInfo.environment["PEERVOICE_SIMULATION_SEEDS"] ?? "") ?? 20
        for seed in UInt64(1)...UInt64(count) { assertRunsClean(seed) }
    }

    /// A transfer completed, then the receiver's machine stopped a few disk changes later: the
    /// rename of its record's last version (complete) was never synced in the folder, and the
    /// old one (active) came back paused, waiting for a sender long done. `TransferStore` now
    /// syncs the folder after each rename and removal.
    func testSeed1ACompletedTransferDoesNotComeBackPausedAfterAPowerLoss() {
        let shrunk = Simulation(seed: 1).run(keeping: [6, 90, 185, 187])
        XCTAssertFalse(shrunk.failed, shrunk.violations.first ?? "")
        XCTAssertEqual(shrunk.transfersCompleted, 2, "the shrunk seed completes its two transfers")
        assertRunsClean(1)
    }

    /// A transfer completed while the sender's state directory was read-only (32.9-39.0 s): its
    /// record could not be removed, and the store said nothing; the disk writable again, a kill -9
    /// at 85.9 s brought the ended transfer back, offered again. `TransferStore.remove` now says
    /// when the disk refused, and `Transfers` tries again every 0.5 s as for a refused save. (The
    /// whole schedule but its app streams: shrunk, it kept the disk read-only until the kill,
    /// which brings the record back with or without the fix.)
    func testSeed101AnEndedTransferTheDiskWouldNotForgetIsForgottenLater() {
        // Its schedule as it was found, before app streams and the bus's delay were simulated.
        let simulation = Simulation(seed: 101)
        let keep = Set(simulation.schedule.indices.filter {
            if case .openAppStream = simulation.schedule[$0].action { false } else { true }
        })
        assertRunsClean(101, keeping: keep, signalsWrittenAtOnce: true)
        XCTAssertGreaterThan(simulation.run(keeping: keep, signalsWrittenAtOnce: true).transfersCompleted, 0)
        assertRunsClean(101)
    }

    /// A link whose records were changed on the way went on with a hole in what it carried:
    /// transfers noticed (hash, framing) and failed, an app read a clean end after bytes that
    /// were not written (seed 141). A record that opens after a gap in the counters now ends the
    /// link (`LinkRecordOpener`), and the layers above start again on the next one.
    func testSeed22ALinkThatLostRecordsEndsInsteadOfCarryingAHole() {
        assertEndsLinksOverLostRecords(22)
    }

    func testSeed141AnAppStreamNeverEndsCleanlyWithAHole() {
        assertEndsLinksOverLostRecords(141)
    }

    /// The other seeds of `make test`'s 200 that found a hole (each counted apart as known open before).
    func testSeeds34To194TransferStreamsWithAHole() {
        for seed: UInt64 in [34, 53, 84, 86, 114, 119, 145, 187, 194] { assertRunsClean(seed) }
    }

    private func assertEndsLinksOverLostRecords(_ seed: UInt64, file: StaticString = #filePath, line: UInt = #line) {
        let outcome = Simulation(seed: seed).run(fullLog: true)
        XCTAssertFalse(outcome.failed, "seed \(seed): \(outcome.violations.first ?? "")", file: file, line: line)
        XCTAssertTrue(outcome.log.contains { $0.contains("closed: ") && $0.contains("lost or reordered on the way") },
                      "seed \(seed) no longer loses a record on an open link: it tests nothing", file: file, line: line)
    }

    /// A side showed a transfer's end before its record said so; its machine stopped in between
    /// and the old record brought the transfer back, to end again differently (seed 272: failed
    /// while the disk was read-only, then complete; seed 1649: failed by a RemovePeer the machine
    /// stopped inside, then complete after pairing again; 858 the same kind). An end now shows
    /// once its record is written (`Transfer.endRecorded`). (Seed 272 no longer reaches that
    /// state since links end at a lost record; 858 and 1649 did, with that change alone.)
    func testSeeds272_858_1649AnEndShowsOnlyOnceItsRecordIsWritten() {
        for seed: UInt64 in [272, 858, 1649] { assertRunsClean(seed) }
    }

    /// The sender removed the peer while its offer waited at the receiver, which never heard;
    /// paired again, the receiver accepted and waited for good. A sender owes its ABORT until a
    /// stream carried it to a clean end, also after removing the peer (`TransferLifecycle`).
    /// (Seed 119 no longer reaches that state since links end at a lost record; with that change
    /// alone 73 and 134 did, and 530 and 910 in a longer run.)
    func testSeeds73_119_134AReceiverHearsThatItsSenderRemovedTheTransfer() {
        for seed: UInt64 in [73, 119, 134, 530, 910] { assertRunsClean(seed) }
    }

    /// A receiver removed its sender while an offer waited: the transfer failed there, recorded.
    /// Paired again (its disk full), the receiver could not write the record's next version and
    /// removed the record, as for an end not recorded yet (chaos seed 9); a power loss, and the
    /// sender's re-offer was asked anew and completed, after the person had been shown it
    /// failed. A record that already says how the transfer ended now stays. (Found once the
    /// simulation modelled `MessageDelivered`'s bus write, which moved the seed's timings.)
    func testSeed778AnEndedTransferKeepsTheRecordOfItsEndWhenTheDiskRefusesTheNext() {
        assertRunsClean(778, keeping: [0, 1, 2, 3, 4, 7, 17, 18, 19, 20, 21, 28, 30, 31, 32, 33, 34, 35, 36, 39, 40, 41, 42, 43,
                                       44, 45, 55, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 68, 72, 96, 97, 98, 101, 108, 112,
                                       113, 114, 132, 135, 142, 166, 176])
        assertRunsClean(778)
    }

    /// A receiver ended a transfer (declined it; failed it, its disk read-only) and told its
    /// sender at once, which forgot the transfer; the receiver's record was refused, then its
    /// machine stopped, and the transfer came back waiting, was accepted and waited for good
    /// (found once a receiver left paused counted as a violation). A receiver now sends its
    /// COMPLETE or ABORT only once its record of that end is written.
    func testSeeds2461_2993AReceiverTellsItsEndOnlyOnceItsRecordIsWritten() {
        for seed: UInt64 in [2461, 2993, 4760, 5323, 5809] { assertRunsClean(seed) }
        assertRunsClean(2461, keeping: [12, 58, 70, 208])
    }

    /// What the seed above relies on, on the store alone: a record replaced or removed, then a
    /// power loss (each seed keeps a different part of what was not synced) keeps the new
    /// version, or nothing.
    func testATransferRecordReplacedOrRemovedStaysSoAfterAPowerLoss() throws {
        let manifest = try TransferManifest(entries: [.file(try TransferPath("a.bin"), size: 10)])
        for seed in UInt64(1)...50 {
            let disk = SimulatedDisk(seed: seed)
            let store = try TransferStore(directory: "/state/transfers", storage: disk)
            var record = TransferRecord(id: TransferID(bytes: [UInt8](repeating: 7, count: 16))!, peer: "pv:x", createdMs: 1,
                                        direction: .incoming, manifest: manifest)
            try store.save(record)
            _ = record.lifecycle.handle(.completed)
            try store.save(record)
            var other = TransferRecord(id: TransferID(bytes: [UInt8](repeating: 8, count: 16))!, peer: "pv:x", createdMs: 1,
                                       direction: .outgoing, manifest: manifest)
            other.offered = true
            try store.save(other)
            store.remove(other.idHex)
            disk.crash()
            let records = store.loadAll(nowMs: 2).records
            XCTAssertEqual(records.map(\.idHex), [record.idHex], "seed \(seed)")
            XCTAssertEqual(records.first?.lifecycle.state, .complete, "seed \(seed)")
            // A removal the disk refuses says so (seed 101), and the record stays.
            disk.isReadOnly = true
            XCTAssertFalse(store.remove(record.idHex), "seed \(seed)")
            disk.isReadOnly = false
            XCTAssertEqual(store.loadAll(nowMs: 2).records.count, 1, "seed \(seed)")
            XCTAssertTrue(store.remove(record.idHex), "seed \(seed)")
            XCTAssertEqual(store.loadAll(nowMs: 2).records.count, 0, "seed \(seed)")
        }
    }

    func testASeedReplaysExactly() {
        let first = Simulation(seed: 7).run(), second = Simulation(seed: 7).run()
        XCTAssertEqual(first.events, second.events)
        XCTAssertEqual(first.log, second.log)
    }
}
