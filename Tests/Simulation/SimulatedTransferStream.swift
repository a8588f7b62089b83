import PeerVoiceCore

/// A stand-in for BLAKE2b-256, as `DeterministicCrypto` is for the link's cryptography: fast and
/// the same on every run, and any changed byte changes the hash. Each 8-byte word goes through
/// `h = (h ^ word) &* odd` (a bijection of `h` for every word, so changing any one word of a file
/// changes every state after it), then the length is mixed in and the state spread to 32 bytes.
struct SimulatedContentHashing: ContentHashing {
    func makeHasher() -> any ContentHasher { Hasher() }

    struct Hasher: ContentHasher {
        private var state: UInt64 = 0x243F_6A88_85A3_08D3
        private var word: UInt64 = 0
        private var wordBytes = 0
        private var length: UInt64 = 0
        private static let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15 | 1

        mutating func update(_ bytes: UnsafeRawBufferPointer) {
            var index = 0
            length &+= UInt64(bytes.count)
            while wordBytes != 0 && index < bytes.count {
                push(bytes[index])
                index += 1
            }
            while index + 8 <= bytes.count {
                state = (state ^ bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)) &* Self.multiplier
                index += 8
            }
            while index < bytes.count {
                push(bytes[index])
                index += 1
            }
        }

        private mutating func push(_ byte: UInt8) {
            word |= UInt64(byte) << (8 * UInt64(wordBytes))
            wordBytes += 1
            if wordBytes == 8 {
                state = (state ^ word) &* Self.multiplier
                word = 0
                wordBytes = 0
            }
        }

        mutating func finish() -> [UInt8] {
            var lane = (state ^ word ^ (UInt64(wordBytes) << 59)) &* Self.multiplier ^ length
            var out: [UInt8] = []
            out.reserveCapacity(TransferWire.hashBytes)
            for _ in 0..<4 {
                lane = (lane ^ (lane >> 31)) &* 0x7FB5_D329_728E_A185
                lane = (lane ^ (lane >> 27)) &* 0x81DA_DEF4_BC2D_D44D
                withUnsafeBytes(of: (lane ^ (lane >> 33)).littleEndian) { out.append(contentsOf: $0) }
            }
            return out
        }
    }
}

/// One transfer stream on a link's channel `TransferWire.channel`, either side: the simulation's
/// model of the daemon's `TransferSender` and `TransferReceiver` threads around the core's
/// `OutgoingTransferSession` and `IncomingTransferSession`. What a thread reports reaches
/// `SimulatedTransfers` as a later event (the daemon's hop to the main loop).
///
/// The sender reads the person's files from memory (they are not on the simulated state disk)
/// at a rate drawn per transfer, so that faults land in the middle. The receiver writes each
/// file into its hidden part under `/downloads` on the simulated disk, syncs it and records its
/// position (`<id>.progress`) every 256 KiB or 250 ms and when the stream ends, and after a
/// restart resumes from what the progress file and the part hold, as `TransferReceiver` does.
final class SimulatedTransferStream: SimulatedChannelStream {
    enum Event {
        case opened
        case offered(TransferID, TransferManifest)
        case accepted(TransferPosition)
        case placed(name: String, savedAs: String)
        case completed
        case aborted(TransferAbort, reason: String)
        case failed(String)
        case ended(reason: String, clean: Bool)
    }

    static let downloads = "/downloads"
    static let chunkBytes = 64 * 1024
    static let saveEveryBytes: UInt64 = 256 * 1024
    static let saveEvery: Duration = .milliseconds(250)
    static let closeTimeout: Duration = .seconds(5)

    let serial: Int
    let peer: PeerID
    let direction: TransferDirection
    let channels: SimulatedChannels
    var streamID: StreamID?
    var transferID: TransferID?
    private let scheduler: Scheduler
    private let disk: SimulatedDisk
    private let report: (SimulatedTransferStream, Event) -> Void
    private var decoder = TransferMessageDecoder()
    private(set) var isDone = false
    private(set) var isOver = false
    private var closeTimer: Scheduler.Timer?

    // The sender's side.
    private var outgoing: OutgoingTransferSession?
    private var files: [[UInt8]] = []
    private var bytesPerSecond = 1.0
    private var hasher: (any ContentHasher)?
    private var hashedFile = -1
    private var produceTimer: Scheduler.Timer?

    // The receiver's side.
    private var incoming = IncomingTransferSession(hashing: SimulatedContentHashing())
    private var manifest: TransferManifest?
    private var store: TransferStore?
    private var progress = TransferProgress()
    private var part: (any StorageFile)?
    private var partIndex = -1
    private var unsaved: UInt64 = 0
    private var lastSave: Duration

    init(serial: Int, peer: PeerID, direction: TransferDirection, channels: SimulatedChannels, scheduler: Scheduler,
         disk: SimulatedDisk, report: @escaping (SimulatedTransferStream, Event) -> Void) {
        self.serial = serial
        self.peer = peer
        self.direction = direction
        self.channels = channels
        self.scheduler = scheduler
        self.disk = disk
        self.report = report
        lastSave = scheduler.now
    }

    /// The sender's stream: opens it and, once accepted, sends the OFFER.
    func send(_ id: TransferID, manifest: TransferManifest, files: [[UInt8]], bytesPerSecond: Double) -> Bool {
        outgoing = OutgoingTransferSession(id: id, manifest: manifest)
        transferID = id
        self.files = files
        self.bytesPerSecond = bytesPerSecond
        streamID = channels.open(try! ChannelName(TransferWire.channel), for: self)
        return streamID != nil
    }

    // MARK: The main loop's commands

    func post(_ message: TransferMessage) {
        guard !isOver, let streamID else { return }
        channels.write(streamID, message.encoded())
    }

    /// Ends our direction once everything queued went; the stream ends when the peer ends its
    /// own, or after 5 s.
    func close() {
        guard !isOver, let streamID, closeTimer == nil else { return }
        channels.close(streamID)
        closeTimer = scheduler.after(Self.closeTimeout) { [weak self] in
            guard let self, !isOver, let streamID = self.streamID else { return }
            channels.reset(streamID)
            end("closed", clean: false)
        }
    }

    /// The service stops, or a newer stream takes the transfer: reset at once.
    func abandon() {
        guard !isOver, let streamID else { return }
        channels.reset(streamID)
        end("abandoned", clean: false)
    }

    // MARK: SimulatedChannelStream

    func channelAccepted() {
        report(self, .opened)
    }

    /// The sender's first message, once the main loop took the stream (`runSender`).
    func sendOffer() {
        post(outgoing!.offer)
    }

    func channelReceived(_ bytes: [UInt8]) {
        decoder.append(bytes)
        while !isDone && !isOver {
            let message: TransferMessage
            do {
                guard let next = try decoder.next() else { return }
                message = next
            } catch {
                return fail("the other side broke the transfer protocol: \(error)")
            }
            if outgoing != nil { senderReceived(message) } else { receiverReceived(message) }
        }
    }

    func channelDrained() {
        guard outgoing != nil else { return }
        scheduleProduce(after: .zero)
    }

    func channelEnded(clean: Bool, reason: String) {
        end(reason, clean: clean)
    }

    private func end(_ reason: String, clean: Bool) {
        guard !isOver else { return }
        isOver = true
        closeTimer?.cancel()
        produceTimer?.cancel()
        saveWhatArrived()
        part?.close()
        part = nil
        report(self, .ended(reason: reason, clean: clean))
    }

    private func fail(_ reason: String) {
        guard !isDone else { return }
        isDone = true
        incoming.refuse()
        report(self, .failed(reason))
    }

    // MARK: Sending

    private func senderReceived(_ message: TransferMessage) {
        let step: OutgoingTransferSession.Step
        do {
            step = try outgoing!.received(message)
        } catch {
            return fail("the receiver broke the transfer protocol: \(error)")
        }
        switch step {
        case .accepted(let position):
            report(self, .accepted(position))
            scheduleProduce(after: .zero)
        case .completed:
            isDone = true
            report(self, .completed)
        case .aborted(let code, let reason):
            isDone = true
            report(self, .aborted(code, reason: reason))
        }
    }

    private func scheduleProduce(after delay: Duration) {
        guard produceTimer == nil, !isDone, !isOver, closeTimer == nil else { return }
        produceTimer = scheduler.after(delay) { [weak self] in
            guard let self else { return }
            produceTimer = nil
            produce()
        }
    }

    /// Queues the next message (a chunk or a file's end) once what went before has gone.
    private func produce() {
        guard !isDone, !isOver, closeTimer == nil, let streamID, channels.pendingBytes(streamID) == 0, var session = outgoing else { return }
        switch session.next {
        case .wait:
            return
        case .send(let index, let offset, let maxBytes):
            prepareHasher(index, upTo: Int(offset))
            let count = Int(min(maxBytes, UInt64(Self.chunkBytes)))
            let chunk = files[index][Int(offset)..<(Int(offset) + count)]
            hasher!.update(chunk)
            session.sent(UInt64(count))
            outgoing = session
            post(.data(chunk))
            scheduleProduce(after: .seconds(Double(count) / bytesPerSecond))
        case .endFile(let index):
            prepareHasher(index, upTo: files[index].count)
            post(.fileEnd(fileIndex: index, hash: hasher!.finish()))
            session.endedFile()
            outgoing = session
            hasher = nil
            hashedFile = -1
            scheduleProduce(after: .zero)
        }
    }

    /// The hasher of the file at `index`, having hashed what lies before `offset` (a resumed file).
    private func prepareHasher(_ index: Int, upTo offset: Int) {
        guard hashedFile != index else { return }
        var fresh = SimulatedContentHashing().makeHasher()
        fresh.update(files[index][0..<offset])
        hasher = fresh
        hashedFile = index
    }

    // MARK: Receiving

    private func receiverReceived(_ message: TransferMessage) {
        let step: IncomingTransferSession.Step
        do {
            step = try incoming.received(message)
        } catch {
            return fail("\(error)")
        }
        do {
            switch step {
            case .offered(let id, let offered):
                manifest = offered
                report(self, .offered(id, offered))
            case .write(let index, let offset, let bytes):
                try openPart(index, at: offset).append(Array(bytes))
                try received(UInt64(bytes.count))
            case .skip(let index, let offset, let length):
                try openPart(index, at: offset).truncate(to: offset + length)
                try received(length)
            case .fileVerified(let index):
                try finish(index)
            case .aborted(let code, let reason):
                isDone = true
                report(self, .aborted(code, reason: reason))
            }
        } catch {
            fail(Self.savingFailure(error))
        }
    }

    /// As `TransferReceiver.savingFailure`: names the disk that refused.
    private static func savingFailure(_ error: any Error) -> String {
        (error as? TransferStoreError)?.description ?? "cannot save into \(downloads): \(error)"
    }

    /// The person accepted: the durable position checked against the part on disk, the current
    /// file's bytes hashed again, ACCEPT sent (`TransferReceiver.accept`).
    func accept(store: TransferStore) {
        guard let manifest, !isDone, !isOver, self.store == nil else { return }
        self.store = store
        let idHex = transferID!.hex
        do {
            try disk.makeDirectory(Self.downloads)
            progress = store.progress(of: idHex) ?? TransferProgress()
            try finishInterruptedPlacing()
            var hasher = SimulatedContentHashing().makeHasher()
            let position = try resumePosition(manifest, hashing: &hasher)
            progress.position = position
            post(incoming.accept(from: position, hasher: hasher))
            for (name, savedAs) in progress.placed.sorted(by: { $0.key < $1.key }) { report(self, .placed(name: name, savedAs: savedAs)) }
            try placeReadyItems()
            try store.saveProgress(progress, of: idHex)
            if incoming.hasEverything { complete() }
        } catch {
            fail(Self.savingFailure(error))
        }
    }

    private func resumePosition(_ manifest: TransferManifest, hashing hasher: inout any ContentHasher) throws(StorageError) -> TransferPosition {
        let files = manifest.files
        var position = progress.position
        if !manifest.contains(position) { position = .start }
        for index in 0..<position.fileIndex where progress.placed[files[index].path.topLevel] == nil {
            if try disk.read(partPath(index))?.count != Int(files[index].size) {
                position = TransferPosition(fileIndex: index, offset: 0)
                break
            }
        }
        while position.fileIndex < files.count && progress.placed[files[position.fileIndex].path.topLevel] != nil {
            position = TransferPosition(fileIndex: position.fileIndex + 1, offset: 0)
        }
        guard position.fileIndex < files.count, position.offset > 0 else { return position }
        let held = try disk.read(partPath(position.fileIndex)).map { Array($0.prefix(Int(position.offset))) } ?? []
        hasher.update(held)
        return TransferPosition(fileIndex: position.fileIndex, offset: UInt64(held.count))
    }

    private func partPath(_ index: Int) -> String {
        Self.downloads + "/" + DestinationNames.partName(for: manifest!.files[index].path.topLevel, id: transferID!)
    }

    /// The part of the file at `index`, open for writing at `offset` (cut or extended to it: a
    /// file begun afresh loses what an earlier attempt left).
    private func openPart(_ index: Int, at offset: UInt64) throws(StorageError) -> any StorageFile {
        if index == partIndex, let part { return part }
        part?.close()
        part = nil
        let path = partPath(index)
        let file = disk.exists(path) ? try disk.openForAppending(path) : try disk.create(path)
        if try disk.read(path)?.count != Int(offset) { try file.truncate(to: offset) }
        part = file
        partIndex = index
        return file
    }

    private func received(_ count: UInt64) throws {
        unsaved += count
        guard unsaved >= Self.saveEveryBytes || scheduler.now - lastSave >= Self.saveEvery, let part, let store else { return }
        unsaved = 0
        lastSave = scheduler.now
        var snapshot = progress
        snapshot.position = incoming.position
        try part.sync()
        try store.saveProgress(snapshot, of: transferID!.hex)
    }

    private func finish(_ index: Int) throws {
        let file = try openPart(index, at: manifest!.files[index].size)
        try file.sync()
        file.close()
        part = nil
        partIndex = -1
        progress.position = TransferPosition(fileIndex: index + 1, offset: 0)
        unsaved = 0
        try placeReadyItems()
        try store!.saveProgress(progress, of: transferID!.hex)
        if incoming.hasEverything { complete() }
    }

    private func complete() {
        isDone = true
        report(self, .completed)
    }

    /// A stream that ends mid-file records what arrived, so the next one resumes from there.
    private func saveWhatArrived() {
        guard let store, !incoming.hasEverything, let part else { return }
        var snapshot = progress
        snapshot.position = incoming.position
        try? part.sync()
        try? store.saveProgress(snapshot, of: transferID!.hex)
    }

    /// Every file whose data is all in goes into place under a free name, recorded before the move.
    private func placeReadyItems() throws {
        guard let manifest, let store else { return }
        for name in manifest.topLevelNames where progress.placed[name] == nil {
            guard manifest.fileIndices(under: name).allSatisfy({ $0 < progress.position.fileIndex }) else { continue }
            let free = DestinationNames.freeName(for: name) { disk.exists(Self.downloads + "/" + $0) }
            progress.placing[name] = free
            try store.saveProgress(progress, of: transferID!.hex)
            try place(name, as: free)
            progress.placing[name] = nil
            progress.placed[name] = free
            report(self, .placed(name: name, savedAs: free))
        }
    }

    /// `TransferFolder.place`: an empty file takes the free name, the part is renamed over it,
    /// the folder is synced.
    private func place(_ name: String, as free: String) throws(StorageError) {
        let target = Self.downloads + "/" + free
        try disk.create(target).close()
        try disk.rename(Self.downloads + "/" + DestinationNames.partName(for: name, id: transferID!), to: target)
        try disk.syncDirectory(Self.downloads)
    }

    private func finishInterruptedPlacing() throws {
        for (name, target) in progress.placing.sorted(by: { $0.key < $1.key }) {
            if disk.exists(Self.downloads + "/" + DestinationNames.partName(for: name, id: transferID!)) {
                let free = DestinationNames.freeName(for: name) { disk.exists(Self.downloads + "/" + $0) }
                try place(name, as: free)
                progress.placed[name] = free
            } else {
                progress.placed[name] = target
            }
        }
        progress.placing = [:]
    }
}
