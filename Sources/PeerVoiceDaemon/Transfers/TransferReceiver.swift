import GIO
import Glibc
import PeerVoiceCore
import Synchronization

/// The receiver's thread for one stream (`peervoice-recv`): reads the OFFER and reports it; once
/// the person accepted (`accept` command), resumes from what is durably on disk, writes each
/// file into its hidden part, hashes it, and when a file is whole and its hash is the sender's,
/// flushes it; when every file of a top-level item is in, moves the item into place under a free
/// name. Its position saver (`peervoice-sync`) flushes the data and records how far it reached
/// every 4 MiB or 250 ms, so a `kill -9` resumes from there; a stream that simply ends records
/// everything that arrived.
final class TransferReceiver: TransferStreamSide {
    static let offerTimeout: Duration = .seconds(30)
    static let saveEveryBytes: UInt64 = 4 << 20
    static let saveEvery: Duration = .milliseconds(250)

    /// Whether a save is under way on the saver (one at a time: a slow disk never queues them up).
    private final class SaveState: Sendable {
        let busy = Atomic<Bool>(false)
    }

    private let connection: TransferConnection
    private let handle: TransferStreamHandle
    private let report: @Sendable (TransferStreamEvent) -> Void
    private var session: IncomingTransferSession
    private let hashing: any ContentHashing
    private var manifest: TransferManifest?
    private var plan: IncomingPlan?
    private var progress = TransferProgress()
    private var current: OpenFile?
    private var currentIndex = -1
    private var saver: SerialThread?
    private let saveState = SaveState()
    private var unsaved: UInt64 = 0
    private var lastSave = ContinuousClock.now
    private let offerDeadline = ContinuousClock.now + TransferReceiver.offerTimeout
    /// A final word was reported (complete, aborted, failed): no more data is taken.
    private(set) var isDone = false

    init(end: StreamPipe.End, hashing: any ContentHashing, handle: TransferStreamHandle, report: @escaping @Sendable (TransferStreamEvent) -> Void) {
        connection = TransferConnection(end: end, mailbox: handle.mailbox)
        self.hashing = hashing
        self.handle = handle
        self.report = report
        session = IncomingTransferSession(hashing: hashing)
    }

    func run() {
        let end = connection.run(self)
        saveWhatArrived()
        saver?.finish()
        report(.ended(reason: end.reason, clean: end.clean))
    }

    /// Until the OFFER, the thread looks at the clock every second.
    var idleTimeout: Duration? { manifest == nil ? .seconds(1) : nil }

    func expired() -> String? {
        manifest == nil && ContinuousClock.now >= offerDeadline ? "no offer came within \(Self.offerTimeout)" : nil
    }

    /// The sender sends; the receiver only answers.
    func produce() {}

    // MARK: Messages

    func drainMessages() {
        while !isDone {
            do throws(TransferMessageError) {
                guard let message = try connection.decoder.next() else { return }
                try handle(message)
            } catch {
                return fail("the sender broke the transfer protocol: \(error)")
            }
        }
    }

    private func handle(_ message: TransferMessage) throws(TransferMessageError) {
        let step: IncomingTransferSession.Step
        do {
            step = try session.received(message)
        } catch {
            return fail("\(error)")
        }
        do throws {
            switch step {
            case .offered(let id, let offered):
                manifest = offered
                report(.offered(id, offered))
            case .write(let index, let offset, let bytes):
                let file = try open(index, at: offset)
                try bytes.withUnsafeBytes { try file.write($0, at: offset) }
                received(UInt64(bytes.count))
            case .skip(let index, let offset, let length):
                _ = try open(index, at: offset)
                received(length)
            case .fileVerified(let index):
                try finish(index)
            case .aborted(let code, let reason):
                isDone = true
                report(.aborted(code, reason: reason))
            }
        } catch {
            fail(Self.savingFailure(error, folder: plan?.folder ?? "the download folder"))
        }
    }

    /// Why saving failed, naming the disk that refused: the state directory (the record of how
    /// far the transfer came) or the download folder.
    private static func savingFailure(_ error: any Error, folder: String) -> String {
        (error as? TransferStoreError)?.description ?? "cannot save into \(folder): \(error)"
    }

    private func fail(_ reason: String) {
        guard !isDone else { return }
        isDone = true
        session.refuse()
        report(.failed(reason))
    }

    // MARK: Accepting

    /// The person accepted: part folders made, the durable position checked against what is on
    /// disk, the current file's bytes hashed again, ACCEPT sent.
    func accept(_ plan: IncomingPlan) {
        guard let manifest, !isDone, self.plan == nil else { return }
        self.plan = plan
        saver = SerialThread(name: "peervoice-sync")
        do throws {
            try TransferFolder.make(plan.folder)
            progress = plan.store.progress(of: plan.idHex) ?? TransferProgress()
            try finishInterruptedPlacing()
            for name in manifest.topLevelNames where progress.placed[name] == nil && isFolderItem(name) {
                try TransferFolder.make(partPath(name))
                for entry in manifest.entries(under: name) where entry.kind == .folder && entry.path.components.count > 1 {
                    try TransferFolder.make(path(of: entry.path))
                }
            }
            var hasher = hashing.makeHasher()
            let position = try resumePosition(hashing: &hasher)
            progress.position = position
            connection.queue(session.accept(from: position, hasher: hasher))
            handle.transferred.store(manifest.bytes(before: position), ordering: .relaxed)
            for (name, savedAs) in progress.placed { report(.placed(name: name, savedAs: savedAs)) }
            try placeReadyItems()
            try plan.store.saveProgress(progress, of: plan.idHex)
            if session.hasEverything { complete() }
        } catch {
            fail(Self.savingFailure(error, folder: plan.folder))
        }
    }

    /// Where data resumes: the durable position, moved back to the first file whose part is not
    /// on disk whole (someone removed it), and within the current file to what its part holds.
    /// Hashes what the current file's part holds before it (a corrupted part then fails its hash).
    private func resumePosition(hashing hasher: inout any ContentHasher) throws -> TransferPosition {
        let files = manifest!.files
        var position = progress.position
        if !manifest!.contains(position) { position = .start }
        for index in 0..<position.fileIndex where progress.placed[files[index].path.topLevel] == nil {
            var info = stat()
            if lstat(path(of: files[index].path), &info) != 0 || UInt64(info.st_size) != files[index].size {
                position = TransferPosition(fileIndex: index, offset: 0)
                break
            }
        }
        while position.fileIndex < files.count && progress.placed[files[position.fileIndex].path.topLevel] != nil {
            position = TransferPosition(fileIndex: position.fileIndex + 1, offset: 0)
        }
        guard position.fileIndex < files.count, position.offset > 0 else { return position }
        let file = try OpenFile.part(path(of: files[position.fileIndex].path))
        let held = min(position.offset, try file.size)
        try file.truncate(to: held)
        guard try file.hash(upTo: held, into: &hasher) else { return TransferPosition(fileIndex: position.fileIndex, offset: 0) }
        current = file
        currentIndex = position.fileIndex
        return TransferPosition(fileIndex: position.fileIndex, offset: held)
    }

    // MARK: Receiving

    /// The part of the file at `index`, opened for writing from `offset` (a file begun afresh
    /// loses whatever an earlier attempt left in its part, so no old byte hides in a hole).
    private func open(_ index: Int, at offset: UInt64) throws -> OpenFile {
        if index == currentIndex, let current { return current }
        let file = try OpenFile.part(path(of: manifest!.files[index].path))
        if offset == 0 { try file.truncate(to: 0) }
        current = file
        currentIndex = index
        return file
    }

    private func received(_ count: UInt64) {
        handle.transferred.add(count, ordering: .relaxed)
        unsaved += count
        guard unsaved >= Self.saveEveryBytes || ContinuousClock.now - lastSave >= Self.saveEvery,
              let current, let plan, let saver, !saveState.busy.exchange(true, ordering: .acquiring) else { return }
        unsaved = 0
        lastSave = .now
        var snapshot = progress
        snapshot.position = session.position
        let saved = snapshot
        let state = saveState
        saver.run {
            do {
                try current.syncData()
                try plan.store.saveProgress(saved, of: plan.idHex)
            } catch {
                Log.warning("transfer \(plan.idHex): could not record how far it came: \(error)")
            }
            state.busy.store(false, ordering: .releasing)
        }
    }

    /// The file at `index` arrived whole and verified: it goes to the disk, the items it
    /// completes go into place, and the new position is recorded.
    private func finish(_ index: Int) throws {
        let file = try open(index, at: 0)
        saver?.waitUntilIdle()
        try file.truncate(to: manifest!.files[index].size)
        try file.syncData()
        current = nil
        currentIndex = -1
        progress.position = TransferPosition(fileIndex: index + 1, offset: 0)
        unsaved = 0
        try placeReadyItems()
        try plan!.store.saveProgress(progress, of: plan!.idHex)
        if session.hasEverything { complete() }
    }

    private func complete() {
        isDone = true
        report(.completed)
    }

    /// After the stream ends mid-file, what arrived is flushed and recorded, so that the next
    /// stream resumes from the last byte received.
    private func saveWhatArrived() {
        guard let plan, !session.hasEverything, let current else { return }
        saver?.waitUntilIdle()
        var snapshot = progress
        snapshot.position = session.position
        do {
            try current.syncData()
            try plan.store.saveProgress(snapshot, of: plan.idHex)
        } catch {
            Log.warning("transfer \(plan.idHex): could not record how far it came: \(error)")
        }
    }

    // MARK: Placing

    /// Moves into place every top-level item whose files have all arrived (and any made only of
    /// folders). The name it will take is recorded first, so a crash mid-move finds it there.
    private func placeReadyItems() throws {
        guard let manifest, let plan else { return }
        for name in manifest.topLevelNames where progress.placed[name] == nil {
            guard manifest.fileIndices(under: name).allSatisfy({ $0 < progress.position.fileIndex }) else { continue }
            let folderItem = isFolderItem(name)
            if folderItem { try syncFolders(of: name) }
            progress.placing[name] = DestinationNames.freeName(for: name) { access(plan.folder + "/" + $0, F_OK) == 0 }
            try plan.store.saveProgress(progress, of: plan.idHex)
            let savedAs = try TransferFolder.place(partPath(name), isFolder: folderItem, in: plan.folder, as: name)
            progress.placing[name] = nil
            progress.placed[name] = savedAs
            report(.placed(name: name, savedAs: savedAs))
        }
    }

    /// A move that a crash interrupted: done if the part is gone, else done now.
    private func finishInterruptedPlacing() throws {
        guard let plan else { return }
        for (name, target) in progress.placing {
            if access(partPath(name), F_OK) == 0 {
                progress.placed[name] = try TransferFolder.place(partPath(name), isFolder: isFolderItem(name), in: plan.folder, as: name)
            } else {
                progress.placed[name] = target
            }
        }
        progress.placing = [:]
    }

    /// Flushes the entries of an item's folders, so that its files' names are on disk before it moves.
    private func syncFolders(of name: String) throws {
        try TransferFolder.sync(partPath(name))
        for entry in manifest!.entries(under: name) where entry.kind == .folder && entry.path.components.count > 1 {
            try TransferFolder.sync(path(of: entry.path))
        }
    }

    // MARK: Paths

    /// Whether the top-level item `name` is a folder (it has entries below it, or says so).
    private func isFolderItem(_ name: String) -> Bool {
        manifest!.entries(under: name).contains { $0.kind == .folder || $0.path.components.count > 1 }
    }

    /// Where the top-level item `name` grows until it is whole: hidden, beside where it will be.
    private func partPath(_ name: String) -> String {
        plan!.folder + "/" + DestinationNames.partName(for: name, id: plan!.id)
    }

    /// Where the entry at `path` is written: inside its item's part.
    private func path(of entry: TransferPath) -> String {
        ([partPath(entry.topLevel)] + entry.components.dropFirst()).joined(separator: "/")
    }
}
