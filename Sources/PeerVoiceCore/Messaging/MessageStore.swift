import Foundation

/// The durable message store: each peer's outbox, the duplicate marks of what it sent us, and
/// the history of both directions.
///
/// Promise: every change is written (one write(2), no user-space buffer) before the call that
/// made it returns, so a kill -9 loses nothing written; and it is on the disk (synced) once
/// `writesDurable` reaches the `writesMade` the call left (or, for what concerns one peer,
/// `writesDurable(peer:)` its `lastWrite(peer:)`), so a power loss loses nothing durable. Whoever confirms something (a `Send` reply, an ACK to the peer, an event) waits for
/// that (`TextDelivery` does); a queued message is not even offered for sending (`pending`)
/// before. With `.everyWrite` each call syncs before it returns; with `.batched` the caller
/// syncs batches of writes on another thread (`takeSyncBatch`, `finishSync`): group commit.
///
/// Files, in `directory` (mode 0700; files 0600): one append-only journal per peer,
/// `<hex of the peer id's UTF-8>.pvj`, and `forgotten-peers.pvt`, what removed peers leave
/// behind so a returning key is safe: the last sequence number we gave one (our numbering never
/// restarts) and the duplicate marks of what it sent us (its resends are not stored twice). See
/// `MessageJournal.swift` for the format.
///
/// Used from one thread only (the GLib main loop); not `Sendable`.
public final class MessageStore {
    /// When writes are synced.
    public enum SyncMode: Sendable {
        /// Before the call that wrote returns: a sync per change (tests, tools).
        case everyWrite
        /// In batches the caller runs off this thread (`takeSyncBatch`, `finishSync`).
        case batched
    }

    /// The directory holding the journals.
    public let directory: String
    public let limits: MessageStoreLimits
    public let syncMode: SyncMode
    private let storage: any Storage
    private let warn: (String) -> Void
    /// Journal appends so far, numbered from 1: a caller notes the number after its change and
    /// waits until `writesDurable` reaches it.
    public private(set) var writesMade: UInt64 = 0
    /// Every write up to this number is on the disk.
    public private(set) var writesDurable: UInt64 = 0
    /// Peers whose journals were appended to since the last sync batch was taken.
    private var unsynced = Set<String>()
    /// The batch being synced, if any: only one at a time, so they finish in order.
    private var syncing: MessageStoreSyncBatch?
    /// The highest batch that finished: durable as soon as no journal waits for a rewrite.
    private var pendingThrough: UInt64 = 0
    /// The last rewrite of a journal failed: no batch is taken for it alone until
    /// `retryFailedRewrites` or new writes.
    private var rewritesFailing = false
    private var peers: [String: MessageStorePeer] = [:]
    /// Removed peers' last sequence numbers, restored if they come back.
    private var forgottenSeqs: [String: UInt64] = [:]
    /// Removed peers' duplicate marks, per sender instance, restored if they come back.
    private var forgottenMarks: [String: ForgottenMarks] = [:]
    private var tombstones: MessageJournalFile?
    private var tombstoneRecords = 0

    /// Peer ids longer than this (UTF-8 bytes) are refused: the hex file name must fit in 255.
    static let maxPeerIDBytes = 120
    static let journalSuffix = ".pvj"
    static let tombstoneName = "forgotten-peers.pvt"
    /// A tombstone name no peer id or address can have: the store-wide floor of `raiseSequenceFloor(to:)`.
    static let floorName = "*floor"

    /// Opens (creating if needed) the store in `directory` and replays its journals. A torn or
    /// corrupt journal tail, as a crash leaves, is cut off and reported through `onWarning`.
    /// `onWarning` receives human-readable notes for the log (never message text); it is called
    /// synchronously, also from `init`.
    public init(
        directory: String,
        limits: MessageStoreLimits = MessageStoreLimits(),
        storage: any Storage = FileStorage(),
        syncMode: SyncMode = .everyWrite,
        onWarning: @escaping (String) -> Void = { _ in }
    ) throws {
        self.directory = directory
        self.limits = limits
        self.storage = storage
        self.syncMode = syncMode
        self.warn = onWarning

        if storage.exists(directory) {
            guard storage.isDirectory(directory) else {
                throw MessageStoreError.io(StorageError(.other, operation: "use", path: directory, reason: "it is not a directory"))
            }
            // Message text is private: keep the directory owner-only even if it was created wider.
            do {
                try storage.restrictToOwner(directory)
            } catch {
                onWarning("cannot restrict \(directory) to mode 0700: \(error.reason)")
            }
        } else {
            do { try storage.makeDirectory(directory) } catch { throw MessageStoreError.io(error) }
        }

        try loadTombstones()

        let names: [String]
        do { names = try storage.list(directory) } catch { throw MessageStoreError.io(error) }
        // A journal may exist only as `.compact` after a crash in the middle of a rewrite.
        var stems = Set<String>()
        for var name in names {
            if name.hasSuffix(".compact") { name.removeLast(".compact".count) }
            guard name.hasSuffix(Self.journalSuffix) else { continue }
            name.removeLast(Self.journalSuffix.count)
            stems.insert(name)
        }
        for stem in stems.sorted() {
            guard let peer = Self.peerID(fromFileStem: stem),
                let loaded = try MessageJournalFile.load(storage: storage, path: journalPath(peer), warn: onWarning)
            else { continue }
            let state = replay(loaded, peer: peer)
            // Covers a crash while a returning peer's journal was being created, before its
            // first record (which carries the continued numbering and marks) was written.
            state.lastSeq = max(state.lastSeq, forgottenSeqs[peer] ?? 0)
            restoreForgottenMarks(into: state)
            peers[peer] = state
            // A journal a crash kept from being compacted is compacted now.
            let snapshot = state.snapshot(historyLimit: limits.historyPerPeer)
            loaded.file.setBaseline(UInt64(MessageJournalFile.magic.count + snapshot.count))
            if loaded.file.wantsCompaction(slack: limits.compactionSlackBytes) {
                do {
                    try loaded.file.rewrite(records: snapshot)
                } catch {
                    onWarning("cannot compact the journal of \(peer): \(error)")
                    loaded.file.postponeCompaction()
                }
            }
        }
    }

    // MARK: Queries

    /// Peers with at least one queued (unacknowledged, unfailed) message, sorted.
    public var peersWithPendingMessages: [String] {
        peers.values.filter { $0.queuedCount > 0 }.map(\.peer).sorted()
    }

    /// Peers that have a journal (any message either way since they were last forgotten), sorted.
    public var knownPeers: [String] {
        peers.keys.sorted()
    }

    /// The number of the last write to `peer`'s journal: what a change to it waits for.
    public func lastWrite(peer: String) -> UInt64 { peers[peer]?.lastWrite ?? 0 }

    /// Every write to `peer`'s journal up to this number is on the disk (everything, for a peer
    /// with no journal). Ahead of `writesDurable` while another journal awaits a rewrite the disk
    /// refuses: what concerns only this peer (a `Send`'s reply, its TEXTs, ACKs, deliveries)
    /// need not wait for that.
    public func writesDurable(peer: String) -> UInt64 { peers[peer]?.durableThrough ?? .max }

    /// The peer's queued messages that are durable, oldest (lowest seq) first: what to send on
    /// (re)connection. (A message not yet on the disk is never sent: were it lost in a crash after
    /// the peer stored it, its seq would be given again to another message, which the peer would
    /// drop as a duplicate.)
    public func pending(peer: String) -> [OutgoingMessage] {
        guard let state = peers[peer] else { return [] }
        return state.outbox[state.outboxHead...].filter { $0.status == .queued && $0.write <= state.durableThrough }.map {
            OutgoingMessage(seq: $0.seq, id: $0.id, sentAtMs: $0.timeMs, text: $0.text)
        }
    }

    /// Durable queued messages with a seq above `seq`, oldest first, at most `limit` of them: what
    /// a sender streams next, without copying the whole outbox each time.
    public func pending(peer: String, after seq: UInt64, limit: Int) -> [OutgoingMessage] {
        guard let state = peers[peer], limit > 0 else { return [] }
        var result: [OutgoingMessage] = []
        var index = state.firstOutboxIndex(atLeast: seq &+ 1)
        while index < state.outbox.count, result.count < limit {
            let entry = state.outbox[index]
            // Queued entries are in write order: the first one not yet durable ends the durable ones.
            if entry.status == .queued && entry.write > state.durableThrough { break }
            if entry.status == .queued {
                result.append(OutgoingMessage(seq: entry.seq, id: entry.id, sentAtMs: entry.timeMs, text: entry.text))
            }
            index += 1
        }
        return result
    }

    /// Whether any message waits for the peer.
    public func hasPending(peer: String) -> Bool { (peers[peer]?.queuedCount ?? 0) > 0 }

    /// The newest `max` messages exchanged with the peer (at most `limits.historyPerPeer`),
    /// oldest first, both directions, with their current status.
    public func history(peer: String, max: Int) -> [StoredMessage] {
        guard let state = peers[peer], max > 0 else { return [] }
        let count = Swift.max(0, min(max, limits.historyPerPeer, state.history.count))
        return state.history.suffix(count).map {
            StoredMessage(id: $0.id, status: $0.status, timeMs: $0.timeMs, text: $0.text, seq: $0.seq)
        }
    }

    // MARK: Sending

    /// Accepts a message for the peer: assigns the next per-peer sequence number (from 1, never
    /// reused for that peer, even after `forget`) and writes it to the journal before returning
    /// (durable once `writesDurable` reaches `writesMade`). Throws `outboxFull` at a limit,
    /// `invalidArgument` for a malformed peer or id, `io` if the disk refused (full, read-only);
    /// in every throwing case nothing was stored.
    public func enqueue(peer: String, id: String, text: String, nowMs: UInt64) throws -> OutgoingMessage {
        try Self.checkPeer(peer)
        try Self.checkShort(id, what: "message id")
        let textBytes = text.utf8.count
        let queuedCount = peers[peer]?.queuedCount ?? 0
        let queuedBytes = peers[peer]?.queuedBytes ?? 0
        if queuedCount >= limits.maxQueuedPerPeer {
            throw MessageStoreError.outboxFull(peer: peer, limit: "\(limits.maxQueuedPerPeer) messages")
        }
        if textBytes > limits.maxQueuedBytesPerPeer - queuedBytes {
            throw MessageStoreError.outboxFull(peer: peer, limit: "\(limits.maxQueuedBytesPerPeer) bytes of text")
        }
        // A journal whose rewrite the disk refuses holds every later write back from
        // `writesDurable`: a message accepted now would leave `Send` unanswered until space
        // returned, and be delivered after the caller gave up (chaos seed 31). Try that rewrite
        // again first; while the disk refuses it, it refuses this message too.
        if let refused = rewriteUnsaved() { throw refused }
        let state = try stateCreatingJournal(peer: peer)
        let seq = state.lastSeq + 1
        try persistBeforeChange(
            state, MessageJournalRecord.outgoing(status: .queued, seq: seq, timeMs: nowMs, id: id, text: text))
        state.addOutgoing(status: .queued, seq: seq, timeMs: nowMs, id: id, text: text, historyLimit: limits.historyPerPeer,
                          write: writesMade)
        compactIfDue(state)
        return OutgoingMessage(seq: seq, id: id, sentAtMs: nowMs, text: text)
    }

    /// The peer has every message up to `seq`. Returns the ids that became delivered, oldest
    /// first (the caller emits `MessageDelivered` for each, then `noteOutcomesAnnounced` once the
    /// signals reached the user); repeated or stale acknowledgements return nothing. Failed
    /// messages stay failed. An acknowledgement beyond the last sequence number we assigned is
    /// clamped, so it can never swallow messages not yet sent.
    public func acknowledge(peer: String, upTo seq: UInt64) -> [String] {
        guard let state = peers[peer] else { return [] }
        if seq > state.lastSeq {
            warn("\(peer) acknowledged sequence number \(seq) but only \(state.lastSeq) were sent; ignoring the excess")
        }
        let upTo = min(seq, state.lastSeq)
        guard upTo > state.ackedUpTo else { return [] }
        let delivered = state.acknowledge(upTo: upTo)
        persistAfterChange(state, MessageJournalRecord.acknowledged(upTo: upTo))
        compactIfDue(state)
        return delivered.map(\.id)
    }

    /// Fails the queued messages older than `limits.expiryMs` at `nowMs`, in the order they were
    /// queued: one waits for those before it (after a clock step back, a later message can look
    /// older), so outcomes come in sequence order (`noteOutcomesAnnounced`). Returns them per
    /// peer (peers sorted), oldest first; the caller emits `MessageFailed` for each, then
    /// `noteOutcomesAnnounced` once the signals reached the user.
    public func expire(nowMs: UInt64) -> [(peer: String, id: String)] {
        var result: [(peer: String, id: String)] = []
        for peer in peers.keys.sorted() {
            guard let state = peers[peer], state.queuedCount > 0 else { continue }
            var expired: [MessageStoreEntry] = []
            for entry in state.outbox[state.outboxHead...] where entry.status == .queued {
                guard nowMs >= entry.timeMs, nowMs - entry.timeMs >= limits.expiryMs else { break }
                expired.append(entry)
            }
            guard !expired.isEmpty else { continue }
            var records: [UInt8] = []
            for entry in expired {
                state.markFailed(entry)
                state.unannouncedOutcomes.append(entry)
                records += MessageJournalRecord.failed(seq: entry.seq)
            }
            state.tidyOutbox()
            // All of the peer's failures in one write.
            persistAfterChange(state, records)
            compactIfDue(state)
            result += expired.map { (peer: peer, id: $0.id) }
        }
        return result
    }

    /// Removes the peer (`RemovePeer`) at once: `beginForgetting`, then `finishForgetting`.
    public func forget(peer: String) throws -> [String] {
        let failed = try beginForgetting(peer: peer)
        try finishForgetting(peer: peer)
        return failed
    }

    /// Begins removing the peer (`RemovePeer`): its journal notes the removal (synced), its
    /// queued messages fail, and its last sequence number and duplicate marks are kept in
    /// `forgotten-peers.pvt`, so if the same key comes back our numbering continues and what it
    /// sent before (stored, perhaps not acknowledged) is not stored again. Returns the ids of the
    /// messages that failed (the caller reports them, forgets the peer elsewhere, then calls
    /// `finishForgetting`). A crash before the end leaves the note: the peer is listed in
    /// `interruptedRemovals` at the next start, and its messages again (a crash that deleted
    /// the journal before they were reported lost the reports: simulation seeds 2414, 10904).
    /// Throws `io` (changing nothing) if the note cannot be written.
    public func beginForgetting(peer: String) throws -> [String] {
        guard let state = peers[peer] else { return [] }
        // The tombstone first: harmless for a peer that stays (a later removal rewrites it).
        let marks = state.sendersByAge.map { (instance: $0.instance, seq: $0.mark.seq) }
        if state.lastSeq > 0 || !marks.isEmpty { try recordForgotten(peer: peer, lastSeq: state.lastSeq, marks: marks) }
        if !state.removing {
            try persistBeforeChange(state, MessageJournalRecord.removing())
            try state.journal.sync()
            state.removing = true
        }
        // Nothing failed before the note is on the disk (simulation seed 19: a full disk refused
        // the tombstone after the failures, and they were never reported).
        let queued = state.outbox[state.outboxHead...].filter { $0.status == .queued }
        for entry in queued { state.markFailed(entry) }
        state.tidyOutbox()
        return queued.map(\.id)
    }

    /// Deletes the journal of a peer `beginForgetting` began to remove, durably (nothing if the
    /// removal was finished meanwhile, and the peer perhaps back).
    public func finishForgetting(peer: String) throws {
        guard let state = peers[peer], state.removing else { return }
        try state.journal.remove()
        peers[peer] = nil
        unsynced.remove(peer)
    }

    /// Peers whose removal a crash interrupted (`beginForgetting` without `finishForgetting`),
    /// sorted: the caller removes them again.
    public var interruptedRemovals: [String] { peers.values.filter(\.removing).map(\.peer).sorted() }

    /// Migration (protocol version 3 named peers by address): the journals of `sources` become
    /// the one journal of `target`, written whole before the sources are deleted. The send counter
    /// continues above the largest of theirs, their queued messages are renumbered above it in the
    /// order they were accepted, the histories interleave by time and the duplicate marks merge by
    /// maximum. If `target` already has a journal, an interrupted run wrote it: the sources are
    /// only deleted. Throws `io`; a rerun finishes the job.
    public func merge(_ sources: [String], into target: String) throws {
        try Self.checkPeer(target)
        let present = sources.filter { $0 != target && peers[$0] != nil }
        if peers[target] == nil, !present.isEmpty {
            let states = present.map { peers[$0]! }
            let merged = MessageStorePeer(peer: target, journal: MessageJournalFile(storage: storage, path: journalPath(target)))
            let base = states.map(\.lastSeq).max() ?? 0
            merged.lastSeq = base
            merged.ackedUpTo = base
            var next = base
            // Queued messages older than the history window are only in the outbox; the rest are in both.
            let entries = states.enumerated().flatMap { index, state in
                (state.history + state.outbox[state.outboxHead...].filter { $0.status == .queued })
                    .map { (entry: $0, source: index) }
            }
            var seen = Set<ObjectIdentifier>()
            let ordered = entries.filter { seen.insert(ObjectIdentifier($0.entry)).inserted }
                .sorted { ($0.entry.timeMs, $0.source, $0.entry.ordinal) < ($1.entry.timeMs, $1.source, $1.entry.ordinal) }
            for (entry, _) in ordered {
                if !entry.outgoing {
                    merged.addReceived(instance: "", seq: entry.seq, sentAtMs: entry.peerTimeMs, receivedAtMs: entry.timeMs,
                                       id: entry.id, text: entry.text, limits: limits)
                } else if entry.status == .queued {
                    next += 1
                    merged.addOutgoing(status: .queued, seq: next, timeMs: entry.timeMs, id: entry.id, text: entry.text,
                                       historyLimit: limits.historyPerPeer)
                } else {
                    merged.addOutgoing(status: entry.status, seq: entry.seq, timeMs: entry.timeMs, id: entry.id,
                                       text: entry.text, historyLimit: limits.historyPerPeer)
                }
            }
            merged.lastSeq = next
            merged.unannounced = []  // announced when they came, under the old names
            merged.outcomesAnnounced(through: merged.lastSeq)
            for state in states {
                for (instance, mark) in state.senders {
                    merged.noteSender(instance: instance, seq: mark.seq, cap: limits.maxSenderInstancesPerPeer)
                }
            }
            try merged.journal.rewrite(records: merged.snapshot(historyLimit: limits.historyPerPeer))
            peers[target] = merged
        }
        for source in present {
            try peers[source]!.journal.remove()
            peers[source] = nil
        }
    }

    /// Migration: every sequence number assigned from now on, to any peer, is above `seq`. Keeps
    /// numbering from restarting toward a peer removed under a name the migration cannot map
    /// (its receiver may still hold a duplicate mark for it).
    public func raiseSequenceFloor(to seq: UInt64) throws {
        guard seq > (forgottenSeqs[Self.floorName] ?? 0) else { return }
        try recordForgotten(peer: Self.floorName, lastSeq: seq, marks: [])
    }

    /// The highest sequence number assigned to any peer, removed ones included.
    public var highestSequenceEver: UInt64 {
        max(peers.values.map(\.lastSeq).max() ?? 0, forgottenSeqs.values.max() ?? 0)
    }

    // MARK: Receiving

    /// Stores a message from the peer, unless it is a duplicate: its `seq` is at or below the
    /// highest already stored from that sender instance. Returns true when new and stored (the
    /// caller emits `MessageReceived` at once and, once the signal has surely reached the bus,
    /// `noteAnnounced`: a machine that stops before that note is written announces it again when
    /// it starts, with the same id), false for a duplicate; either way the caller then
    /// acknowledges. Relies on each sender instance's messages arriving in sequence order (a
    /// stream transport). Throws `invalidArgument` (seq 0, malformed ids) or `io`; then nothing
    /// was stored and the caller must not acknowledge.
    public func receive(
        peer: String, senderInstance: String, seq: UInt64, id: String, text: String,
        sentAtMs: UInt64, nowMs: UInt64
    ) throws -> Bool {
        try Self.checkPeer(peer)
        try Self.checkShort(senderInstance, what: "sender instance")
        try Self.checkShort(id, what: "message id")
        guard seq > 0 else { throw MessageStoreError.invalidArgument("sequence number 0 (they start at 1)") }
        if let state = peers[peer] {
            if state.isDuplicate(instance: senderInstance, seq: seq) { return false }
        } else if let mark = forgottenMarks[peer]?.seq(of: senderInstance), seq <= mark {
            // Stored before the peer was removed (its ACK may never have reached it).
            return false
        }
        let state: MessageStorePeer
        do {
            state = try stateCreatingJournal(peer: peer)
            compactIfDue(state)
            try persistBeforeChange(
                state,
                MessageJournalRecord.received(
                    instance: senderInstance, seq: seq, sentAtMs: sentAtMs, receivedAtMs: nowMs, id: id, text: text))
        } catch MessageStoreError.io(let error) {
            warn("cannot store a message from \(peer): \(error); it stays with its sender, who sends it again")
            throw MessageStoreError.io(error)
        }
        state.addReceived(
            instance: senderInstance, seq: seq, sentAtMs: sentAtMs, receivedAtMs: nowMs, id: id, text: text,
            limits: limits)
        return true
    }

    /// The announcement of `messageID` from `peer` (`MessageReceived`), and every one before it,
    /// has reached the user (the signal is written to the bus): the journal says so (written,
    /// synced with the next batch), so none of them is announced again.
    public func noteAnnounced(peer: String, through messageID: String) {
        guard let state = peers[peer], let index = state.unannounced.firstIndex(where: { $0.id == messageID }) else { return }
        let all = index == state.unannounced.count - 1
        state.unannounced.removeFirst(index + 1)
        persistAfterChange(state, all ? MessageJournalRecord.announced() : MessageJournalRecord.announced(through: messageID))
    }

    /// Messages stored but, as far as the disk knows, never announced: the machine stopped (a
    /// kill -9, a power loss) before the note that their signal reached the bus was written or
    /// synced. Announce them (perhaps again: a message's id tells a repeat), then
    /// `noteAnnounced`. Per peer (sorted), oldest first.
    public func unannounced() -> [(peer: String, message: StoredMessage)] {
        peers.keys.sorted().flatMap { peer in
            peers[peer]!.unannounced.map {
                (peer, StoredMessage(id: $0.id, status: .received, timeMs: $0.timeMs, text: $0.text, seq: $0.seq))
            }
        }
    }

    /// The outcomes (`MessageDelivered`, `MessageFailed`) of the messages to `peer` up to
    /// `messageID` have reached the user (the signals are written to the bus): the journal says
    /// so, and none of them is announced again.
    public func noteOutcomesAnnounced(peer: String, through messageID: String) {
        guard let state = peers[peer], let entry = state.unannouncedOutcomes.first(where: { $0.id == messageID }) else { return }
        state.outcomesAnnounced(through: entry.seq)
        persistAfterChange(state, MessageJournalRecord.outcomesAnnounced(through: entry.seq))
    }

    /// Outgoing messages delivered or failed whose outcome, as far as the disk knows, never
    /// reached the user (a kill -9 between the emit and the bus write). Announce them (perhaps
    /// again, same id), then `noteOutcomesAnnounced`. Per peer (sorted), in sequence order.
    public func unannouncedOutcomes() -> [(peer: String, message: StoredMessage)] {
        peers.keys.sorted().flatMap { peer in
            peers[peer]!.unannouncedOutcomes.map {
                (peer, StoredMessage(id: $0.id, status: $0.status, timeMs: $0.timeMs, text: $0.text, seq: $0.seq))
            }
        }
    }

    // MARK: Persistence

    /// For changes the caller must not confirm unless stored (enqueue, receive): write first,
    /// then change memory. Throws, changing nothing, if the disk refuses.
    private func persistBeforeChange(_ state: MessageStorePeer, _ records: [UInt8]) throws {
        if state.unsaved {
            // Memory holds transitions an earlier failed write lost; store them first.
            try rewrite(state)
        }
        let before = state.journal.length
        try state.journal.append(records)
        do {
            try wrote(state)
        } catch {
            // Not synced, so not accepted: take it back, or a restart would find it.
            do { try state.journal.cutBack(to: before) } catch { state.unsaved = true }
            throw error
        }
    }

    /// Rewrites `state`'s journal from memory (synced: everything in it is durable).
    private func rewrite(_ state: MessageStorePeer) throws {
        try state.journal.rewrite(records: state.snapshot(historyLimit: limits.historyPerPeer))
        state.unsaved = false
        state.durableThrough = state.lastWrite
    }

    /// Counts a write to `state`'s journal; syncs it now in `.everyWrite` mode.
    private func wrote(_ state: MessageStorePeer) throws {
        writesMade += 1
        state.lastWrite = writesMade
        switch syncMode {
        case .everyWrite:
            try state.journal.sync()
            state.durableThrough = writesMade
            // Unless a change another journal could not record waits for its rewrite.
            if !peers.values.contains(where: \.unsaved) { writesDurable = writesMade }
        case .batched:
            unsynced.insert(state.peer)
        }
    }

    /// For facts that happened regardless of the disk (acknowledgements, failures): memory has
    /// changed already. On a write failure the journal is rewritten from memory, now or later
    /// (the next write or sync batch), so it catches up instead of diverging; until then the
    /// change counts as a write not yet durable, so nothing that depends on it is confirmed (a
    /// `MessageDelivered` announced while the disk was full came again after a restart:
    /// simulation seeds 154 and 282).
    private func persistAfterChange(_ state: MessageStorePeer, _ records: [UInt8]) {
        if !state.unsaved {
            do {
                try state.journal.append(records)
                try wrote(state)
                return
            } catch {
                warn("cannot record a status change for \(state.peer): \(error); will rewrite the journal")
                state.unsaved = true
            }
        }
        do {
            try rewrite(state)
            // A rewrite syncs: with a sync per write, nothing else can be waiting.
            if syncMode == .everyWrite && !peers.values.contains(where: \.unsaved) { writesDurable = writesMade }
        } catch {
            warn("cannot rewrite the journal of \(state.peer): \(error); will retry")
            writesMade += 1
            state.lastWrite = writesMade
            rewritesFailing = true
        }
    }

    // MARK: Syncing in batches

    /// The sync due now, if writes wait for one and none runs (group commit: what was written
    /// while a batch ran goes in the next). Run it anywhere (`run`), then `finishSync` here.
    public func takeSyncBatch() -> MessageStoreSyncBatch? {
        guard syncMode == .batched, syncing == nil, writesDurable < writesMade,
              !(rewritesFailing && unsynced.isEmpty) else { return nil }
        var handles: [any StorageSyncHandle] = []
        for peer in unsynced.sorted() {
            guard let state = peers[peer] else { continue }
            do {
                if let handle = try state.journal.syncHandle() {
                    handles.append(handle)
                } else {
                    state.unsaved = true  // closed after a failure: rewritten from memory instead
                }
            } catch {
                warn("cannot sync the journal of \(peer): \(error); will rewrite it")
                state.unsaved = true
            }
        }
        let batch = MessageStoreSyncBatch(through: writesMade, peers: unsynced.sorted(), handles: handles)
        unsynced = []
        syncing = batch
        return batch
    }

    /// The batch ran (`error`: how it failed). Writes up to its `through` are durable unless a
    /// journal could not be synced: after a failed sync the kernel may have dropped what it
    /// held, so that journal is rewritten from memory (which syncs) before anything counts.
    public func finishSync(_ batch: MessageStoreSyncBatch, error: StorageError?) {
        syncing = nil
        if let error {
            warn("\(error); rewriting the journals of that sync")
            for peer in batch.peers { peers[peer]?.unsaved = true }
        }
        // A journal that awaits a rewrite counts once rewritten (its synced writes are durable
        // indeed, but a change after them is in memory only).
        for peer in batch.peers {
            guard let state = peers[peer], !state.unsaved else { continue }
            state.durableThrough = max(state.durableThrough, min(batch.through, state.lastWrite))
        }
        pendingThrough = max(pendingThrough, batch.through)
        if rewriteUnsaved() == nil { writesDurable = max(writesDurable, pendingThrough) }
    }

    /// Whether a batch is being synced.
    public var isSyncing: Bool { syncing != nil }

    /// Whether memory holds changes the disk refused (full, read-only) and no journal has yet:
    /// a crash now loses them.
    public var holdsUnrecordedChanges: Bool { peers.values.contains(where: \.unsaved) }

    /// Lets the next `takeSyncBatch` try again the rewrites that failed (a full or read-only
    /// disk): the caller's timer calls this, so a failing disk is retried now and then rather
    /// than by a busy loop of empty batches.
    public func retryFailedRewrites() { rewritesFailing = false }

    /// Rewrites the journals whose disk contents cannot be trusted; nil if none is left, else
    /// the first refusal.
    private func rewriteUnsaved() -> (any Error)? {
        var refused: (any Error)?
        defer { rewritesFailing = refused != nil }
        for state in peers.values.filter(\.unsaved).sorted(by: { $0.peer < $1.peer }) {
            do {
                try rewrite(state)
            } catch {
                warn("cannot rewrite the journal of \(state.peer): \(error); will retry")
                refused = refused ?? error
            }
        }
        return refused
    }

    /// Compaction is amortised: a journal is rewritten only after it has doubled (plus slack)
    /// since its last rewrite, keeping pending messages, the history window, the next sequence
    /// number and the duplicate marks.
    private func compactIfDue(_ state: MessageStorePeer) {
        guard state.journal.wantsCompaction(slack: limits.compactionSlackBytes) else { return }
        do {
            try rewrite(state)
        } catch {
            warn("cannot compact the journal of \(state.peer): \(error)")
            state.journal.postponeCompaction()
        }
    }

    private func stateCreatingJournal(peer: String) throws -> MessageStorePeer {
        if let state = peers[peer] {
            guard state.removing else { return state }
            // Back while its removal waited to delete the journal (until its failures reached
            // the user): the removal is finished first.
            try finishForgetting(peer: peer)
        }
        // A peer removed earlier continues its numbering: its receiver may remember our
        // sequence numbers and would drop reused ones as duplicates.
        let start = max(forgottenSeqs[peer] ?? 0, forgottenSeqs[Self.floorName] ?? 0)
        let marks = forgottenMarks[peer]?.byAge ?? []
        let file = try MessageJournalFile.create(
            storage: storage, path: journalPath(peer),
            records: MessageJournalRecord.state(lastSeq: start, ackedUpTo: start)
                + marks.flatMap { MessageJournalRecord.watermark(instance: $0.instance, seq: $0.seq) }
                + MessageJournalRecord.announced() + MessageJournalRecord.outcomesAnnounced(through: start))
        let state = MessageStorePeer(peer: peer, journal: file)
        state.lastSeq = start
        state.ackedUpTo = start
        state.outcomesAnnouncedThrough = start
        // Created synced; a change waiting for an earlier journal of this peer waits no more.
        state.lastWrite = writesMade
        state.durableThrough = writesMade
        restoreForgottenMarks(into: state)
        peers[peer] = state
        return state
    }

    private func replay(_ loaded: MessageJournalFile.Loaded, peer: String) -> MessageStorePeer {
        let state = MessageStorePeer(peer: peer, journal: loaded.file)
        var unknown = 0
        var malformed = 0
        var sawAnnouncedMarker = false
        var sawOutcomesMarker = false
        for body in loaded.bodies {
            do {
                var r = try MessageJournalReader(loaded.bytes, body: body)
                // Every field is read before anything is applied, so a bad record changes nothing.
                switch MessageJournalRecordType(rawValue: r.type) {
                case .state:
                    let lastSeq = try r.u64(), ackedUpTo = try r.u64()
                    state.lastSeq = max(state.lastSeq, lastSeq)
                    _ = state.acknowledge(upTo: ackedUpTo)
                case .watermark:
                    let instance = try r.str8(), seq = try r.u64()
                    state.noteSender(instance: instance, seq: seq, cap: limits.maxSenderInstancesPerPeer)
                case .outgoing:
                    let rawStatus = try r.u8(), seq = try r.u64(), timeMs = try r.u64()
                    let id = try r.str8(), text = try r.str32()
                    guard let status = MessageJournalOutgoingStatus(rawValue: rawStatus) else {
                        throw MessageJournalReader.Malformed()
                    }
                    let mapped: MessageStatus = switch status {
                    case .queued: .queued
                    case .delivered: .delivered
                    case .failed: .failed
                    }
                    let entry = state.addOutgoing(
                        status: mapped, seq: seq, timeMs: timeMs, id: id, text: text,
                        historyLimit: limits.historyPerPeer)
                    // Announced unless an `outcomesAnnounced` record after it says so.
                    if mapped != .queued { state.unannouncedOutcomes.append(entry) }
                case .acknowledged:
                    _ = state.acknowledge(upTo: try r.u64())
                case .failed:
                    if let entry = state.queuedEntry(seq: try r.u64()) {
                        state.markFailed(entry)
                        state.unannouncedOutcomes.append(entry)
                        state.tidyOutbox()
                    }
                case .outcomesAnnounced:
                    state.outcomesAnnounced(through: try r.u64())
                    sawOutcomesMarker = true
                case .received:
                    let instance = try r.str8(), seq = try r.u64(), sentAtMs = try r.u64()
                    let receivedAtMs = try r.u64(), id = try r.str8(), text = try r.str32()
                    state.addReceived(
                        instance: instance, seq: seq, sentAtMs: sentAtMs, receivedAtMs: receivedAtMs, id: id,
                        text: text, limits: limits)
                case .announced:
                    if r.isAtEnd {
                        state.unannounced = []
                    } else {
                        let messageID = try r.str8()
                        if let index = state.unannounced.firstIndex(where: { $0.id == messageID }) {
                            state.unannounced.removeFirst(index + 1)
                        }
                    }
                    sawAnnouncedMarker = true
                case .removing:
                    state.removing = true
                case .forgotten, .forgottenMark, nil:
                    // A newer format's record (its checksum is fine): skip rather than lose the rest.
                    unknown += 1
                }
            } catch {
                malformed += 1
            }
        }
        if unknown + malformed > 0 {
            warn("journal of \(peer): skipped \(unknown) unknown and \(malformed) malformed records")
        }
        // Journals written before `announced` records existed (every journal since has one from
        // its creation on): what they hold was announced when it came.
        if !sawAnnouncedMarker { state.unannounced = [] }
        // Likewise for outcomes, before `outcomesAnnounced` records.
        if !sawOutcomesMarker { state.outcomesAnnounced(through: state.lastSeq) }
        return state
    }

    private func loadTombstones() throws {
        guard let loaded = try MessageJournalFile.load(storage: storage, path: tombstonePath, warn: warn) else { return }
        for body in loaded.bodies {
            guard var r = try? MessageJournalReader(loaded.bytes, body: body) else { continue }
            switch MessageJournalRecordType(rawValue: r.type) {
            case .forgotten:
                guard let peer = try? r.str8(), let lastSeq = try? r.u64() else { continue }
                forgottenSeqs[peer] = max(forgottenSeqs[peer] ?? 0, lastSeq)
            case .forgottenMark:
                guard let peer = try? r.str8(), let instance = try? r.str8(), let seq = try? r.u64() else { continue }
                forgottenMarks[peer, default: ForgottenMarks()].note(instance: instance, seq: seq, cap: limits.maxSenderInstancesPerPeer)
            default:
                continue
            }
        }
        tombstones = loaded.file
        tombstoneRecords = loaded.bodies.count
    }

    /// Records what a removed peer leaves behind (`forget`), in one write. `marks`, oldest use
    /// first, are all of the peer's marks now (a peer removed again had its earlier ones restored).
    private func recordForgotten(peer: String, lastSeq: UInt64, marks: [(instance: String, seq: UInt64)]) throws {
        let records = MessageJournalRecord.forgotten(peer: peer, lastSeq: lastSeq)
            + marks.flatMap { MessageJournalRecord.forgottenMark(peer: peer, instance: $0.instance, seq: $0.seq) }
        if let file = tombstones {
            try file.append(records)
            try file.sync()
        } else {
            tombstones = try MessageJournalFile.create(storage: storage, path: tombstonePath, records: records)
        }
        forgottenSeqs[peer] = max(forgottenSeqs[peer] ?? 0, lastSeq)
        for mark in marks {
            forgottenMarks[peer, default: ForgottenMarks()].note(instance: mark.instance, seq: mark.seq,
                                                                 cap: limits.maxSenderInstancesPerPeer)
        }
        tombstoneRecords += 1 + marks.count
        // Records per RemovePeer; rewrite once most are superseded.
        let live = forgottenSeqs.count + forgottenMarks.values.reduce(0) { $0 + $1.byAge.count }
        if tombstoneRecords > 2 * live + 64, let file = tombstones {
            var records: [UInt8] = []
            for (peer, lastSeq) in forgottenSeqs.sorted(by: { $0.key < $1.key }) {
                records += MessageJournalRecord.forgotten(peer: peer, lastSeq: lastSeq)
            }
            for (peer, marks) in forgottenMarks.sorted(by: { $0.key < $1.key }) {
                for mark in marks.byAge {
                    records += MessageJournalRecord.forgottenMark(peer: peer, instance: mark.instance, seq: mark.seq)
                }
            }
            do {
                try file.rewrite(records: records)
                tombstoneRecords = live
            } catch {
                warn("cannot compact \(Self.tombstoneName): \(error)")
            }
        }
    }

    /// A removed peer that returns keeps its duplicate marks (the journal's own ones win where higher).
    private func restoreForgottenMarks(into state: MessageStorePeer) {
        for mark in forgottenMarks[state.peer]?.byAge ?? [] {
            state.noteSender(instance: mark.instance, seq: mark.seq, cap: limits.maxSenderInstancesPerPeer)
        }
    }

    // MARK: Names and validation

    private var tombstonePath: String { directory + "/" + Self.tombstoneName }

    private func journalPath(_ peer: String) -> String {
        directory + "/" + Self.fileStem(peer: peer) + Self.journalSuffix
    }

    /// Lowercase hex of the UTF-8: safe for any peer id (':' '[' ']' '%' '/'), and reversible.
    static func fileStem(peer: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(peer.utf8.count * 2)
        for b in peer.utf8 {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func peerID(fromFileStem stem: String) -> String? {
        let chars = Array(stem.utf8)
        guard !chars.isEmpty, chars.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = nibble(chars[i]), let lo = nibble(chars[i + 1]) else { return nil }
            bytes.append(hi << 4 | lo)
            i += 2
        }
        guard let peer = String(bytes: bytes, encoding: .utf8), fileStem(peer: peer) == stem else { return nil }
        return peer
    }

    private static func checkPeer(_ peer: String) throws {
        guard !peer.isEmpty, peer.utf8.count <= maxPeerIDBytes else {
            throw MessageStoreError.invalidArgument("peer id must be 1 to \(maxPeerIDBytes) bytes")
        }
    }

    private static func checkShort(_ value: String, what: String) throws {
        guard !value.isEmpty, value.utf8.count <= Int(UInt8.max) else {
            throw MessageStoreError.invalidArgument("\(what) must be 1 to 255 bytes")
        }
    }
}

/// One message in memory. A class so the history window and the outbox share it: an
/// acknowledgement updates the status both see.
final class MessageStoreEntry {
    /// Position in the peer's history, increasing; orders outbox entries against the window.
    let ordinal: UInt64
    let outgoing: Bool
    let id: String
    var status: MessageStatus
    /// Local time: accepted by `Send`, or received.
    let timeMs: UInt64
    /// For received messages, the sender's clock (kept for the journal).
    let peerTimeMs: UInt64
    let text: String
    let textBytes: Int
    let seq: UInt64
    /// The store's number of the write that recorded it (0: read from the disk).
    let write: UInt64

    init(ordinal: UInt64, outgoing: Bool, id: String, status: MessageStatus, timeMs: UInt64,
         peerTimeMs: UInt64, text: String, seq: UInt64, write: UInt64 = 0) {
        self.ordinal = ordinal
        self.outgoing = outgoing
        self.id = id
        self.status = status
        self.timeMs = timeMs
        self.peerTimeMs = peerTimeMs
        self.text = text
        self.textBytes = text.utf8.count
        self.seq = seq
        self.write = write
    }
}

/// Everything the store knows about one peer; mirrors its journal.
final class MessageStorePeer {
    struct SenderMark {
        var seq: UInt64
        var lastUse: UInt64
    }

    let peer: String
    let journal: MessageJournalFile
    /// Highest sequence number assigned to an outgoing message.
    var lastSeq: UInt64 = 0
    var ackedUpTo: UInt64 = 0
    /// Outgoing messages from `outboxHead` on, by seq. Entries that failed in the middle stay
    /// until `tidyOutbox` sweeps them, so failing one is O(1).
    var outbox: [MessageStoreEntry] = []
    var outboxHead = 0
    var queuedCount = 0
    var queuedBytes = 0
    /// Oldest first; trimmed to the history limit when it reaches about twice that (amortised),
    /// keeping every unannounced message (they wait for their note, milliseconds).
    var history: [MessageStoreEntry] = []
    /// Per sender instance: the highest seq stored (duplicate detection), and recency for the cap.
    var senders: [String: SenderMark] = [:]
    private var useCounter: UInt64 = 0
    private var nextOrdinal: UInt64 = 0
    /// Memory holds changes a failed write kept from the journal; rewrite before the next append.
    var unsaved = false
    /// The store's number of the last write to this journal, and the highest one known synced.
    var lastWrite: UInt64 = 0
    var durableThrough: UInt64 = 0
    /// Received messages the journal does not say were announced, oldest first (a suffix of the
    /// received ones in `history`): announced, their note not yet written, or not announced yet.
    var unannounced: [MessageStoreEntry] = []
    /// The outcome of every outgoing message up to this seq reached the user.
    var outcomesAnnouncedThrough: UInt64 = 0
    /// Outgoing messages delivered or failed after `outcomesAnnouncedThrough`, in sequence order
    /// (outcomes come in that order: acknowledgements are cumulative, expiry goes in order).
    var unannouncedOutcomes: [MessageStoreEntry] = []
    /// `RemovePeer` began (`beginForgetting`) and did not finish.
    var removing = false

    init(peer: String, journal: MessageJournalFile) {
        self.peer = peer
        self.journal = journal
    }

    private func appendHistory(_ entry: MessageStoreEntry, limit: Int) {
        history.append(entry)
        if history.count >= 2 * max(limit, 0) + 64 { trimHistory(to: limit) }
    }

    /// Keeps the newest `limit` entries, and every unannounced one: the journal must keep those
    /// until their announcement is noted, or a crash would never announce them.
    private func trimHistory(to limit: Int) {
        var drop = history.count - max(limit, 0)
        if let first = unannounced.first, let at = history.firstIndex(where: { $0 === first }) { drop = min(drop, at) }
        if drop > 0 { history.removeFirst(drop) }
    }

    @discardableResult
    func addOutgoing(status: MessageStatus, seq: UInt64, timeMs: UInt64, id: String, text: String, historyLimit: Int,
                     write: UInt64 = 0) -> MessageStoreEntry {
        let entry = MessageStoreEntry(
            ordinal: nextOrdinal, outgoing: true, id: id, status: status, timeMs: timeMs, peerTimeMs: timeMs,
            text: text, seq: seq, write: write)
        nextOrdinal += 1
        lastSeq = max(lastSeq, seq)
        appendHistory(entry, limit: historyLimit)
        if status == .queued {
            outbox.append(entry)
            queuedCount += 1
            queuedBytes += entry.textBytes
        }
        return entry
    }

    func acknowledge(upTo: UInt64) -> [MessageStoreEntry] {
        guard upTo > ackedUpTo else { return [] }
        ackedUpTo = upTo
        var delivered: [MessageStoreEntry] = []
        while outboxHead < outbox.count, outbox[outboxHead].seq <= upTo {
            let entry = outbox[outboxHead]
            outboxHead += 1
            guard entry.status == .queued else { continue }
            entry.status = .delivered
            queuedCount -= 1
            queuedBytes -= entry.textBytes
            delivered.append(entry)
        }
        tidyOutbox()
        unannouncedOutcomes += delivered
        return delivered
    }

    /// The outcomes up to `seq` reached the user.
    func outcomesAnnounced(through seq: UInt64) {
        outcomesAnnouncedThrough = max(outcomesAnnouncedThrough, seq)
        unannouncedOutcomes.removeAll { $0.seq <= outcomesAnnouncedThrough }
    }

    /// The queued outgoing message with this seq.
    func queuedEntry(seq: UInt64) -> MessageStoreEntry? {
        let index = firstOutboxIndex(atLeast: seq)
        guard index < outbox.count, outbox[index].seq == seq, outbox[index].status == .queued else { return nil }
        return outbox[index]
    }

    /// Index of the first outbox entry with a seq of at least `seq` (binary search: the outbox is
    /// ordered by seq).
    func firstOutboxIndex(atLeast seq: UInt64) -> Int {
        var low = outboxHead, high = outbox.count
        while low < high {
            let mid = (low + high) / 2
            if outbox[mid].seq < seq { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Call `tidyOutbox` after a batch.
    func markFailed(_ entry: MessageStoreEntry) {
        guard entry.status == .queued else { return }
        entry.status = .failed
        queuedCount -= 1
        queuedBytes -= entry.textBytes
    }

    /// Drops finished entries from the outbox, amortised O(1) per entry.
    func tidyOutbox() {
        while outboxHead < outbox.count, outbox[outboxHead].status != .queued { outboxHead += 1 }
        if outboxHead == outbox.count {
            outbox.removeAll(keepingCapacity: true)
            outboxHead = 0
        } else if outbox.count - outboxHead > 2 * queuedCount + 64 {
            outbox = outbox[outboxHead...].filter { $0.status == .queued }
            outboxHead = 0
        } else if outboxHead >= 1024, outboxHead * 2 >= outbox.count {
            outbox.removeFirst(outboxHead)
            outboxHead = 0
        }
    }

    /// The duplicate marks, least recently used first (the order that rebuilds the same cap).
    var sendersByAge: [(instance: String, mark: SenderMark)] {
        senders.sorted { $0.value.lastUse < $1.value.lastUse }.map { (instance: $0.key, mark: $0.value) }
    }

    func isDuplicate(instance: String, seq: UInt64) -> Bool {
        guard let mark = senders[instance] else { return false }
        return seq <= mark.seq
    }

    func noteSender(instance: String, seq: UInt64, cap: Int) {
        useCounter += 1
        if var mark = senders[instance] {
            mark.seq = max(mark.seq, seq)
            mark.lastUse = useCounter
            senders[instance] = mark
            return
        }
        senders[instance] = SenderMark(seq: seq, lastUse: useCounter)
        if senders.count > max(cap, 1), let oldest = senders.min(by: { $0.value.lastUse < $1.value.lastUse }) {
            senders[oldest.key] = nil
        }
    }

    func addReceived(
        instance: String, seq: UInt64, sentAtMs: UInt64, receivedAtMs: UInt64, id: String, text: String,
        limits: MessageStoreLimits
    ) {
        // An empty instance comes from a rewrite: history only, the mark is in a watermark record.
        if !instance.isEmpty { noteSender(instance: instance, seq: seq, cap: limits.maxSenderInstancesPerPeer) }
        let entry = MessageStoreEntry(
            ordinal: nextOrdinal, outgoing: false, id: id, status: .received, timeMs: receivedAtMs,
            peerTimeMs: sentAtMs, text: text, seq: seq)
        nextOrdinal += 1
        appendHistory(entry, limit: limits.historyPerPeer)
        unannounced.append(entry)
    }

    /// The journal's live contents (records, without the magic): state, duplicate marks, queued
    /// messages older than the history window, then the window. Trims the window in memory too.
    func snapshot(historyLimit: Int) -> [UInt8] {
        trimHistory(to: historyLimit)
        var out = MessageJournalRecord.state(lastSeq: lastSeq, ackedUpTo: ackedUpTo)
        for (instance, mark) in sendersByAge {
            out += MessageJournalRecord.watermark(instance: instance, seq: mark.seq)
        }
        let firstKept = history.first?.ordinal ?? .max
        // Older than the window, the outcomes not announced yet (they come before every queued
        // message), then the queued messages.
        for entry in unannouncedOutcomes where entry.ordinal < firstKept { out += record(entry) }
        for entry in outbox[outboxHead...] where entry.status == .queued && entry.ordinal < firstKept {
            out += record(entry)
        }
        // The unannounced received messages are the newest: the marker goes just before them.
        let firstUnannounced = unannounced.first
        for entry in history {
            if entry === firstUnannounced { out += MessageJournalRecord.announced() }
            out += record(entry)
        }
        if firstUnannounced == nil { out += MessageJournalRecord.announced() }
        out += MessageJournalRecord.outcomesAnnounced(through: outcomesAnnouncedThrough)
        if removing { out += MessageJournalRecord.removing() }
        return out
    }

    private func record(_ entry: MessageStoreEntry) -> [UInt8] {
        guard entry.outgoing else {
            return MessageJournalRecord.received(
                instance: "", seq: entry.seq, sentAtMs: entry.peerTimeMs, receivedAtMs: entry.timeMs,
                id: entry.id, text: entry.text)
        }
        let status: MessageJournalOutgoingStatus = switch entry.status {
        case .queued, .received: .queued
        case .delivered: .delivered
        case .failed: .failed
        }
        return MessageJournalRecord.outgoing(status: status, seq: entry.seq, timeMs: entry.timeMs, id: entry.id, text: entry.text)
    }
}

/// A removed peer's duplicate marks (`forgotten-peers.pvt`): per sender instance the highest seq
/// stored, least recently used first, at most `maxSenderInstancesPerPeer` of them.
struct ForgottenMarks {
    private(set) var byAge: [(instance: String, seq: UInt64)] = []

    func seq(of instance: String) -> UInt64? {
        byAge.first { $0.instance == instance }?.seq
    }

    /// Notes a mark as the most recently used; a mark only goes up.
    mutating func note(instance: String, seq: UInt64, cap: Int) {
        var seq = seq
        if let index = byAge.firstIndex(where: { $0.instance == instance }) {
            seq = max(seq, byAge[index].seq)
            byAge.remove(at: index)
        }
        byAge.append((instance: instance, seq: seq))
        if byAge.count > max(cap, 1) { byAge.removeFirst(byAge.count - max(cap, 1)) }
    }
}

/// Syncs of the journals written since the last batch (`MessageStore.takeSyncBatch`).
public struct MessageStoreSyncBatch: Sendable {
    /// Every write up to this number is durable once the batch ran without error.
    public let through: UInt64
    let peers: [String]
    let handles: [any StorageSyncHandle]

    /// Blocks until the batch's files are on the disk; the first failure, if any. Any thread.
    public func run() -> StorageError? {
        for handle in handles {
            do { try handle.sync() } catch { return error }
        }
        return nil
    }
}
