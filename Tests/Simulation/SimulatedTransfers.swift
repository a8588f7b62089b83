import PeerVoiceCore
import SeededRandom

/// The file transfers of one simulated service: the simulation's model of the daemon's
/// `Transfers` component around the core's `TransferLifecycle`, with the core's `TransferStore`
/// keeping the records on the simulated disk (`/state/transfers`), and the same streams, one per attempt, on the
/// links' app channels (`SimulatedTransferStream`). Its person answers offers (accepts most,
/// declines some, ignores a few until the healing) and may cancel.
final class SimulatedTransfers {
    final class Transfer {
        let id: TransferID
        let peer: PeerID
        let manifest: TransferManifest
        var record: TransferRecord
        var stream: SimulatedTransferStream?
        var nextStream: SimulatedTransferStream?
        var opening = false
        var retry: Scheduler.Timer?
        var asked = false
        var discardPending = false
        var placed: [String: String] = [:]
        /// Its record says how it ended (or, outgoing, is gone): only then is the end shown
        /// (`Transfer.endRecorded` in the daemon; simulation seed 272).
        var endRecorded: Bool
        /// Incoming, ended: what goes to the sender (COMPLETE or ABORT, and the stream's close)
        /// once the record says how it ended (`Transfer.heldForTheRecord`; seeds 2461, 2993).
        var heldForTheRecord: (tell: TransferMessage?, close: Bool)?

        init(id: TransferID, peer: PeerID, manifest: TransferManifest, record: TransferRecord) {
            self.id = id
            self.peer = peer
            self.manifest = manifest
            self.record = record
            endRecorded = record.lifecycle.state.isFinished
        }

        var direction: TransferDirection { record.lifecycle.direction }
        var state: TransferState { record.lifecycle.state }
    }

    static let retryDelay: Duration = .seconds(5)
    static let saveRetryDelay: Duration = .milliseconds(500)
    static let maxIncomingStreamsPerPeer = 8
    static let maxWaitingOffersPerPeer = 16

    private unowned let service: SimulatedService
    private let scheduler: Scheduler
    private let history: History
    private let store: TransferStore
    private var random: SplitMix64
    private(set) var transfers: [TransferID: Transfer] = [:]
    private var links: [PeerID: SimulatedChannels] = [:]
    private var nextSerial = 1
    private var streams: [Int: SimulatedTransferStream] = [:]
    private var unsaved: Set<TransferID> = []
    private var saveRetry: Scheduler.Timer?
    /// Whether the person answers offers (the workload turns it on for everyone in the healing).
    var acceptsEverything = false

    init(service: SimulatedService, store: TransferStore, scheduler: Scheduler, history: History, seed: UInt64) {
        self.service = service
        self.store = store
        self.scheduler = scheduler
        self.history = history
        random = SplitMix64(seed: seed)
        for var record in store.loadAll(nowMs: scheduler.wallClockMs).records {
            guard let id = record.id, let peer = PeerID(record.peer), let manifest = try? record.manifest() else { continue }
            _ = record.lifecycle.handle(.streamClosed)
            let finished = record.lifecycle.state.isFinished
            if finished && record.endShown == true && record.lifecycle.direction == .outgoing && !record.lifecycle.owesPeerAbort {
                store.remove(record.idHex)
                continue
            }
            let transfer = Transfer(id: id, peer: peer, manifest: manifest, record: record)
            if transfer.direction == .incoming, !finished, let progress = store.progress(of: record.idHex) {
                transfer.placed = progress.placed
            }
            transfers[id] = transfer
            history.note("\(service.peer.name): transfer \(id.hex.prefix(6)) back \(record.lifecycle.state.rawValue) after the restart")
            if !finished { history.transferReloaded(id, at: service.peer, direction: transfer.direction, state: transfer.state) }
        }
    }

    private var name: String { service.peer.name }

    /// Transfers in a fixed order (a run must not depend on hashing).
    private static func byHex(_ a: TransferID, _ b: TransferID) -> Bool { a.hex < b.hex }

    // MARK: Sending

    /// `SendFiles`: the record first (refused if the disk refuses it), then a stream once the
    /// link carries one.
    func send(_ files: [(name: String, bytes: [UInt8])], to peer: PeerID, id: TransferID, bytesPerSecond: Double) {
        let manifest = try! TransferManifest(entries: files.map { .file(try! TransferPath($0.name), size: UInt64($0.bytes.count)) })
        let record = TransferRecord(id: id, peer: peer.description, createdMs: scheduler.wallClockMs, direction: .outgoing, manifest: manifest)
        // Known to the history first: a machine that stops inside the save may keep the record,
        // and the transfer runs after the restart though SendFiles never answered.
        history.transferSent(id, from: service.peer, to: peer, files: files, bytesPerSecond: bytesPerSecond)
        do throws(TransferStoreError) {
            try store.save(record)
        } catch {
            return history.transferRefused(id, by: service.peer, error)
        }
        let transfer = Transfer(id: id, peer: peer, manifest: manifest, record: record)
        transfers[id] = transfer
        if links[peer] == nil { service.wantsLink(peer) }
        startOutgoing(transfer)
    }

    /// Whether anything waits for a link to `peer` (as `Transfers.needsLink`).
    func needsLink(to peer: PeerID) -> Bool {
        transfers.values.contains { transfer in
            guard transfer.peer == peer else { return false }
            if transfer.direction == .outgoing { return !transfer.state.isFinished || transfer.record.lifecycle.owesPeerAbort }
            return transfer.record.lifecycle.accepted && !transfer.state.isFinished
        }
    }

    private func startOutgoing(_ transfer: Transfer) {
        guard transfer.direction == .outgoing, transfer.stream == nil, !transfer.opening, transfer.retry == nil,
              !transfer.state.isFinished || transfer.record.lifecycle.owesPeerAbort, let channels = links[transfer.peer] else { return }
        let stream = newStream(peer: transfer.peer, direction: .outgoing, channels: channels)
        stream.transferID = transfer.id
        transfer.opening = true
        let files = history.transferFiles(transfer.id)
        guard stream.send(transfer.id, manifest: transfer.manifest, files: files.bytes, bytesPerSecond: files.bytesPerSecond) else {
            streams[stream.serial] = nil
            transfer.opening = false
            return retryLater(transfer)
        }
    }

    private func retryLater(_ transfer: Transfer) {
        guard links[transfer.peer] != nil, transfer.retry == nil else { return }
        transfer.retry = scheduler.after(Self.retryDelay) { [weak self, weak transfer] in
            guard let self, let transfer else { return }
            service.perform {
                transfer.retry = nil
                startOutgoing(transfer)
            }
        }
    }

    // MARK: Streams

    /// The peer opens a stream to the transfers' channel (the daemon's `newStream` handler).
    func takeStream(_ id: StreamID, from peer: PeerID, on channels: SimulatedChannels) -> SimulatedTransferStream? {
        let running = streams.values.filter { $0.peer == peer && $0.direction == .incoming }.count
        guard running < Self.maxIncomingStreamsPerPeer else { return nil }
        let stream = newStream(peer: peer, direction: .incoming, channels: channels)
        stream.streamID = id
        return stream
    }

    private func newStream(peer: PeerID, direction: TransferDirection, channels: SimulatedChannels) -> SimulatedTransferStream {
        let stream = SimulatedTransferStream(serial: nextSerial, peer: peer, direction: direction, channels: channels,
                                             scheduler: scheduler, disk: service.peer.disk) { [weak self] stream, event in
            // The stream's thread reports on the main loop: a later event.
            guard let self else { return }
            scheduler.after(.zero) { [weak self] in
                guard let self else { return }
                service.perform { self.streamEvent(stream, event) }
            }
        }
        nextSerial += 1
        streams[stream.serial] = stream
        return stream
    }

    private func streamEvent(_ stream: SimulatedTransferStream, _ event: SimulatedTransferStream.Event) {
        guard streams[stream.serial] === stream else { return }
        switch event {
        case .ended(let reason, let clean):
            return streamEnded(stream, reason: reason, clean: clean)
        case .offered(let id, let manifest):
            return offered(stream, id: id, manifest: manifest)
        case .opened:
            guard let id = stream.transferID, let transfer = transfers[id] else { return stream.abandon() }
            transfer.opening = false
            return runSender(transfer, stream)
        default:
            break
        }
        guard let id = stream.transferID, let transfer = transfers[id], transfer.stream === stream else {
            if case .failed(let reason) = event, stream.transferID == nil { refuse(stream, reason: reason) }
            return
        }
        switch event {
        case .accepted:
            handle(transfer, .peerAccepted)
        case .placed(let name, let savedAs):
            transfer.placed[name] = savedAs
        case .completed:
            handle(transfer, .completed)
        case .aborted(let code, let reason):
            handle(transfer, .peerAborted(code, reason: reason))
        case .failed(let reason):
            // Nothing corrupts what a link carries (a link whose records were lost or reordered
            // ends: `LinkRecordOpener`): a transfer that finds its bytes wrong is a defect.
            if !reason.hasPrefix("cannot ") { history.violation("\(name): transfer \(id.hex.prefix(6)) failed: \(reason)") }
            handle(transfer, .failed(by: .local, reason: reason))
        case .offered, .ended, .opened:
            break
        }
    }

    private func runSender(_ transfer: Transfer, _ stream: SimulatedTransferStream) {
        guard !transfer.state.isFinished || transfer.record.lifecycle.owesPeerAbort, transfer.stream == nil else {
            return stream.abandon()
        }
        transfer.stream = stream
        stream.sendOffer()
        if !transfer.record.offered {
            transfer.record.offered = true
            save(transfer)
        }
        handle(transfer, .streamOpened)
    }

    private func refuse(_ stream: SimulatedTransferStream, reason: String) {
        stream.post(.abort(.failed, reason: "refused: \(reason)"))
        stream.close()
    }

    private func offered(_ stream: SimulatedTransferStream, id: TransferID, manifest: TransferManifest) {
        if let transfer = transfers[id] {
            guard transfer.peer == stream.peer, transfer.direction == .incoming, transfer.manifest == manifest else {
                history.violation("\(name): an offer reused the id of another transfer")
                return refuse(stream, reason: "its id is that of another transfer")
            }
            stream.transferID = id
            if let old = transfer.stream {
                transfer.nextStream?.abandon()
                transfer.nextStream = stream
                old.abandon()
                return
            }
            return attach(stream, to: transfer)
        }
        let waiting = transfers.values.filter { $0.peer == stream.peer && $0.direction == .incoming && $0.state == .waiting }.count
        guard waiting < Self.maxWaitingOffersPerPeer else { return refuse(stream, reason: "too many offers wait") }
        stream.transferID = id
        var record = TransferRecord(id: id, peer: stream.peer.description, createdMs: scheduler.wallClockMs, direction: .incoming, manifest: manifest)
        record.folder = SimulatedTransferStream.downloads
        let transfer = Transfer(id: id, peer: stream.peer, manifest: manifest, record: record)
        transfers[id] = transfer
        history.note("\(name): transfer \(id.hex.prefix(6)) offered by \(stream.peer.base32.prefix(6)) (\(manifest.totalBytes) bytes)")
        attach(stream, to: transfer)
    }

    private func attach(_ stream: SimulatedTransferStream, to transfer: Transfer) {
        transfer.stream = stream
        handle(transfer, .streamOpened)
        if transfer.direction == .incoming, transfer.state == .waiting, !transfer.asked {
            transfer.asked = true
            ask(about: transfer)
        }
    }

    private func streamEnded(_ stream: SimulatedTransferStream, reason: String, clean: Bool) {
        streams[stream.serial] = nil
        guard let id = stream.transferID, let transfer = transfers[id] else { return }
        if transfer.nextStream === stream {
            transfer.nextStream = nil
            return
        }
        if transfer.direction == .outgoing && transfer.stream == nil && transfer.opening {
            // Refused, or the link went before the stream was accepted.
            transfer.opening = false
            return retryLater(transfer)
        }
        guard transfer.stream === stream else { return }
        transfer.stream = nil
        if clean && transfer.state.isFinished && transfer.record.lifecycle.owesPeerAbort { handle(transfer, .peerTold) }
        handle(transfer, .streamClosed)
        if let next = transfer.nextStream {
            transfer.nextStream = nil
            return attach(next, to: transfer)
        }
        cleanUpIfIdle(transfer)
        if transfer.direction == .outgoing { retryLater(transfer) }
    }

    // MARK: Links

    func linkOpened(to peer: PeerID, channels: SimulatedChannels) {
        links[peer] = channels
        for id in transfers.keys.sorted(by: Self.byHex) where transfers[id]!.peer == peer {
            transfers[id]!.retry?.cancel()
            transfers[id]!.retry = nil
            startOutgoing(transfers[id]!)
        }
    }

    func linkClosed(to peer: PeerID, channels: SimulatedChannels) {
        if links[peer] === channels { links[peer] = nil }
    }

    /// `RemovePeer`: its transfers cannot go on; an outgoing one still owes its ABORT (as `Transfers.peerRemoved`).
    func peerRemoved(_ peer: PeerID) {
        for id in transfers.keys.sorted(by: Self.byHex) {
            let transfer = transfers[id]!
            guard transfer.peer == peer, !transfer.state.isFinished else { continue }
            handle(transfer, .failed(by: .local, reason: "the peer was removed"))
        }
    }

    /// The service stops: every stream ends with it (the kernel resets them, or the machine is gone).
    func die() {
        saveRetry?.cancel()
        for transfer in transfers.values { transfer.retry?.cancel() }
    }

    // MARK: The person

    private func ask(about transfer: Transfer) {
        let roll = random.uniform()
        guard acceptsEverything || roll < 0.95 else { return }  // ignored (until the healing)
        let accept = acceptsEverything || roll < 0.85
        let delay = Duration.milliseconds(300) + .milliseconds(Int(random.next() % 7700))
        scheduler.after(delay) { [weak self, weak transfer] in
            guard let self, let transfer else { return }
            service.perform { self.answer(transfer, accept: accept) }
        }
    }

    private func answer(_ transfer: Transfer, accept: Bool) {
        guard transfer.direction == .incoming, transfer.state == .waiting, transfers[transfer.id] === transfer else { return }
        history.note("\(name): its person \(accept ? "accepts" : "declines") transfer \(transfer.id.hex.prefix(6))")
        handle(transfer, accept ? .personAccepted : .personDeclined)
    }

    /// The healing: every offer still waiting is accepted, as a person back at the computer would.
    func answerEverythingWaiting() {
        acceptsEverything = true
        for id in transfers.keys.sorted(by: Self.byHex) where transfers[id]!.state == .waiting && transfers[id]!.direction == .incoming {
            answer(transfers[id]!, accept: true)
        }
    }

    /// `Cancel` on a transfer not yet over, the `pick`-th in id order.
    func cancel(pick: UInt64) {
        let open = transfers.keys.sorted(by: Self.byHex).filter { !transfers[$0]!.state.isFinished }
        guard !open.isEmpty else { return }
        let transfer = transfers[open[Int(pick % UInt64(open.count))]]!
        history.note("\(name): its person cancels transfer \(transfer.id.hex.prefix(6))")
        transfer.retry?.cancel()
        transfer.retry = nil
        handle(transfer, .cancelled(by: .local, reason: transfer.direction == .outgoing ? "cancelled by the sender" : "cancelled by the receiver"))
        if transfer.record.lifecycle.owesPeerAbort && !transfer.record.offered { handle(transfer, .peerTold) }
        if transfer.record.lifecycle.owesPeerAbort { startOutgoing(transfer) }
    }

    // MARK: State

    /// `Transfers.handle`: the lifecycle's reaction done, then the record saved.
    private func handle(_ transfer: Transfer, _ event: TransferLifecycle.Event) {
        let before = transfer.state
        let reaction = transfer.record.lifecycle.handle(event)
        if transfer.direction == .incoming && transfer.state.isFinished {
            // The sender forgets a transfer whose receiver ended it: it hears of the end only
            // once the receiver's record says so, or a stop in between brings the transfer
            // back waiting at the receiver, for a sender that forgot it (seeds 2461, 2993).
            if reaction.tell != nil || reaction.closeStream { transfer.heldForTheRecord = (reaction.tell, reaction.closeStream) }
        } else {
            if let message = reaction.tell { transfer.stream?.post(message) }
            if reaction.closeStream { transfer.stream?.close() }
        }
        if reaction.sendAccept, let stream = transfer.stream { stream.accept(store: store) }
        if reaction.discardPartial { transfer.discardPending = true }
        let after = transfer.state
        if after != before {
            history.note("\(name): transfer \(transfer.id.hex.prefix(6)) \(before.rawValue) → \(after.rawValue)"
                         + (transfer.record.lifecycle.error.isEmpty ? "" : " (\(transfer.record.lifecycle.error))"))
            if after.isFinished {
                transfer.retry?.cancel()
                transfer.retry = nil
            }
            if after == .complete && transfer.direction == .incoming {
                history.transferCompletedAtReceiver(transfer.id, at: service.peer, placed: placedContents(transfer))
            }
            cleanUpIfIdle(transfer)
        }
        save(transfer)
    }

    /// The end shows once its record is written (as `Transfers.saved`).
    private func endRecorded(_ transfer: Transfer) {
        history.transferEndSaved(transfer.id, at: service.peer, direction: transfer.direction)
        guard !transfer.endRecorded else { return }
        transfer.endRecorded = true
        showEnd(transfer)
    }

    /// The end's signal, noted shown in the record once written (as `Transfers.noteEndShownOnceWritten`).
    private func showEnd(_ transfer: Transfer) {
        let (id, direction, state) = (transfer.id, transfer.direction, transfer.state)
        service.tell { [history, service] in history.transferEnded(id, at: service.peer, direction: direction, state: state) }
        service.whenWrittenToTheBus { [weak self] in
            guard let self, let transfer = transfers[id], transfer.record.endShown == false else { return }
            transfer.record.endShown = true
            save(transfer)
        }
    }

    /// At start: the ends the last run did not get onto the bus (as `Transfers.publishAll`).
    func showEndsNotShown() {
        for id in transfers.keys.sorted(by: Self.byHex) where transfers[id]!.record.endShown == false {
            showEnd(transfers[id]!)
        }
    }

    /// Ended transfers whose end is not noted shown: a kill now shows them again at the next start.
    var endsNotNotedShown: [(id: TransferID, direction: TransferDirection)] {
        transfers.keys.sorted(by: Self.byHex).compactMap { id in
            let transfer = transfers[id]!
            return transfer.record.endShown == false ? (id, transfer.direction) : nil
        }
    }

    /// What the receiver's download folder holds under each file's saved name.
    private func placedContents(_ transfer: Transfer) -> [String: [UInt8]?] {
        var contents: [String: [UInt8]?] = [:]
        for name in transfer.manifest.topLevelNames {
            contents[name] = transfer.placed[name].flatMap { try? service.peer.disk.read(SimulatedTransferStream.downloads + "/" + $0) }
        }
        return contents
    }

    private func cleanUpIfIdle(_ transfer: Transfer) {
        guard transfer.direction == .incoming, transfer.state.isFinished, transfer.stream == nil else { return }
        if transfer.discardPending {
            transfer.discardPending = false
            let placed = Set(transfer.placed.keys).union(store.progress(of: transfer.id.hex).map { Set($0.placed.keys) } ?? [])
            for name in transfer.manifest.topLevelNames where !placed.contains(name) {
                try? service.peer.disk.remove(SimulatedTransferStream.downloads + "/" + DestinationNames.partName(for: name, id: transfer.id))
            }
        }
        store.removeProgress(transfer.id.hex)
    }

    private func save(_ transfer: Transfer) {
        if transfer.state.isFinished && transfer.record.endShown == nil { transfer.record.endShown = false }
        let forget = transfer.direction == .outgoing && transfer.state.isFinished && !transfer.record.lifecycle.owesPeerAbort
            && transfer.record.endShown == true
        if forget {
            guard store.remove(transfer.id.hex) else { return saveFailed(transfer) }
            unsaved.remove(transfer.id)
            return endRecorded(transfer)
        }
        do throws(TransferStoreError) {
            try store.save(transfer.record)
            unsaved.remove(transfer.id)
            if transfer.state.isFinished { endRecorded(transfer) }
            if let held = transfer.heldForTheRecord {
                transfer.heldForTheRecord = nil
                if let message = held.tell { transfer.stream?.post(message) }
                if held.close { transfer.stream?.close() }
            }
        } catch {
            saveFailed(transfer)
        }
    }

    /// As `Transfers.saved`: written again every 0.5 s; an ended incoming transfer has no record
    /// until one says how it ended (chaos seeds 3 and 9; simulation seed 778).
    private func saveFailed(_ transfer: Transfer) {
        unsaved.insert(transfer.id)
        if transfer.direction == .incoming, transfer.state.isFinished, !transfer.endRecorded { store.remove(transfer.id.hex) }
        guard saveRetry == nil else { return }
        saveRetry = scheduler.after(Self.saveRetryDelay) { [weak self] in
            guard let self else { return }
            service.perform {
                self.saveRetry = nil
                for id in self.unsaved.sorted(by: Self.byHex) {
                    if let transfer = self.transfers[id] { self.save(transfer) } else { self.unsaved.remove(id) }
                }
            }
        }
    }

    // MARK: Bounds and the end

    var streamCount: Int { streams.count }
    /// Records memory changed and the disk refused (a kill -9 loses them).
    var holdsUnsavedRecords: Bool { !unsaved.isEmpty }
    var unfinished: [Transfer] { transfers.keys.sorted(by: Self.byHex).map { transfers[$0]! }.filter { !$0.state.isFinished } }
}
