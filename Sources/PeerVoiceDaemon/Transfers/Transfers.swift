import GIO
import PeerVoiceBus
import Glibc
import PeerVoiceCore

/// File transfers (issue 30; docs/PROTOCOL.md §15): every transfer of this run and the ended
/// incoming ones kept to answer a re-offer, their records on disk (`TransferStore`), the streams
/// that carry them, and the links that may carry them.
///
/// Transfers ride app channels like any app's data: the sender opens one `stream`-mode stream to
/// the channel `TransferWire.channel` per attempt (`Channels.openStream`), and this component is
/// the registered handler of that channel on the receiving side. Each stream runs on a thread of
/// its own (`TransferSender`, `TransferReceiver`: file reads, writes, hashing and `fsync` never
/// touch the main loop); the disk work the main loop asks for (scanning what `SendFiles` names,
/// saving records, the free space, clearing partial data) goes to one thread, `peervoice-files`.
/// Main loop only, apart from what it hands to those threads.
final class Transfers: ChannelHandler, LinkComponent {
    /// How often `Transferred` is shown while data flows (at most 4 times a second).
    static let progressInterval: Duration = .milliseconds(250)
    /// How long an outgoing transfer waits before opening a stream again on a link that stayed up.
    static let retryDelay: Duration = .seconds(5)
    /// How often a record the disk refused is written again.
    static let saveRetryDelay: Duration = .milliseconds(500)
    /// Offers one peer may have waiting for an answer here; more are refused.
    static let maxWaitingOffersPerPeer = 16
    /// Transfer streams one peer may run to us at once (each has a thread).
    static let maxIncomingStreamsPerPeer = 8

    /// One stream's thread as the main loop knows it.
    private final class StreamEntry {
        let handle: TransferStreamHandle
        let peer: PeerID
        let direction: TransferDirection
        /// The transfer it carries: outgoing from the start, incoming once its OFFER came.
        var transferID: TransferID?
        /// The hash of its files: its link's (``ContentHashes``).
        let hashing: any ContentHashing

        init(handle: TransferStreamHandle, peer: PeerID, direction: TransferDirection, hashing: any ContentHashing) {
            self.handle = handle
            self.peer = peer
            self.direction = direction
            self.hashing = hashing
        }
    }

    let downloadFolder: String
    private let store: TransferStore
    private let channels: Channels
    private let hashes: ContentHashes
    private let clock: WallClock
    private let disk = SerialThread(name: "peervoice-files")
    private var transfers: [TransferID: Transfer] = [:]
    private var numbered: [Int: Transfer] = [:]
    private var nextNumber = 1
    private var nextSerial = 1
    private var streams: [Int: StreamEntry] = [:]
    private var threads: [Int: NamedThread] = [:]
    /// The terms of each open link (whether it carries transfers).
    private var links: [PeerID: LinkProtocol] = [:]
    private var progressTimer: EventSource?
    /// Transfers whose last record the disk refused (full, read-only), and the timer that writes
    /// them again.
    private var unsaved: Set<TransferID> = []
    private var saveRetry: EventSource?

    /// Shows a transfer's object (exports it, or signals what changed).
    var show: (TransferObjectSnapshot) -> Void = { _ in }
    /// A peer's name for people ("" when it has none).
    var peerName: (PeerID) -> String = { _ in "" }
    /// A transfer waits for a link to `peer` (the service dials it).
    var wantsLink: (PeerID) -> Void = { _ in }
    /// An incoming transfer waits for its person's answer: a notification asks.
    var offered: (TransferOffer) -> Void = { _ in }
    /// The offer with that number is no longer waiting (answered, or ended by the sender).
    var offerSettled: (Int) -> Void = { _ in }
    /// Calls back once what was shown so far is written to the bus (true), or cannot be (false).
    var eventsWritten: (@escaping (Bool) -> Void) -> Void = { $0(true) }

    /// Loads the transfers of earlier runs: unfinished ones get objects again (paused, or
    /// waiting), and so do ended ones whose end never reached the bus; ended incoming ones are
    /// kept, without objects once shown, to answer a re-offer.
    init(store: TransferStore, links peerLinks: PeerLinks, channels: Channels, hashes: ContentHashes, clock: WallClock,
         downloadFolder: String) {
        self.store = store
        self.clock = clock
        self.channels = channels
        self.hashes = hashes
        self.downloadFolder = downloadFolder
        do {
            try channels.register(try ChannelName(TransferWire.channel), handler: self)
        } catch {
            Log.error("transfers: cannot register \(TransferWire.channel): \(error)")
        }
        peerLinks.register(self)
        load()
    }

    private func load() {
        let (records, warnings) = store.loadAll(nowMs: clock.nowMs())
        warnings.forEach { Log.warning("transfers: \($0)") }
        for var record in records {
            guard let id = record.id, let peer = PeerID(record.peer), let manifest = try? record.manifest() else {
                Log.warning("transfers: the record \(record.idHex).json does not describe a transfer: ignored")
                continue
            }
            // No stream survived the restart.
            _ = record.lifecycle.handle(.streamClosed)
            let finished = record.lifecycle.state.isFinished
            let endUnshown = finished && record.endShown == false
            if finished && !endUnshown && record.lifecycle.direction == .outgoing && !record.lifecycle.owesPeerAbort {
                store.remove(record.idHex)
                continue
            }
            let transfer = Transfer(number: finished && !endUnshown ? nil : takeNumber(), id: id, peer: peer, manifest: manifest,
                                    record: record)
            if transfer.direction == .incoming, !finished, let progress = store.progress(of: record.idHex),
               manifest.contains(progress.position) {
                transfer.placed = progress.placed
                transfer.transferredAtRest = manifest.bytes(before: progress.position)
            }
            add(transfer)
        }
        if !transfers.isEmpty { Log.info("transfers: \(numbered.count) unfinished from the last run") }
    }

    /// Shows every listed transfer (once the objects can be exported): an end the last run did
    /// not get onto the bus is shown now, and noted shown once written.
    func publishAll() {
        for number in numbered.keys.sorted() {
            let transfer = numbered[number]!
            publish(transfer, withProgress: true)
            if transfer.record.endShown == false { noteEndShownOnceWritten(transfer) }
        }
    }

    /// Ends every stream (the receivers record how far they came) and the disk thread.
    func shutdown() {
        progressTimer = nil
        saveRetry = nil
        for entry in streams.values { entry.handle.post(.abandon) }
        for thread in threads.values { thread.join() }
        threads = [:]
        disk.finish()
    }

    // MARK: Sending

    /// `SendFiles`: scans `paths` (on the disk thread), records the transfer and completes with
    /// its object path; it starts now if the link carries it, else when the link comes up.
    func send(_ paths: [String], to peer: PeerID, completion: @escaping (Result<String, ServiceError>) -> Void) {
        guard !paths.isEmpty else { return completion(.failure(.invalidArgument("no paths: name at least one file or folder"))) }
        if let relative = paths.first(where: { !$0.hasPrefix("/") }) {
            return completion(.failure(.invalidArgument("\(relative) is not an absolute path (it starts with /)")))
        }
        let store = store
        let peerText = peer.description
        let clock = clock
        onDisk({ () -> Result<TransferRecord, ServiceError> in
            do throws(ServiceError) {
                let scan = try SourceScan.scan(paths)
                let manifest: TransferManifest
                do {
                    manifest = try TransferManifest(entries: scan.entries)
                } catch {
                    throw .invalidArgument("cannot send these: \(error)")
                }
                var record = TransferRecord(id: .random(), peer: peerText, createdMs: clock.nowMs(), direction: .outgoing, manifest: manifest)
                record.sources = scan.sources
                record.identities = scan.identities
                record.skipped = scan.skipped
                do {
                    try store.save(record)
                } catch {
                    throw .failed("\(error)")
                }
                return .success(record)
            } catch {
                return .failure(error)
            }
        }) { [weak self] result in
            guard let self else { return }
            switch result {
            case .failure(let error):
                completion(.failure(error))
            case .success(let record):
                guard let id = record.id, let manifest = try? record.manifest() else {
                    return completion(.failure(.failed("the transfer's record does not read back")))
                }
                let transfer = Transfer(number: takeNumber(), id: id, peer: peer, manifest: manifest, record: record)
                add(transfer)
                publish(transfer, withProgress: true)
                Log.info("\(transfer.logName): \(manifest.files.count) files, \(ByteCount.text(manifest.totalBytes)) for \(peer)"
                         + (record.skipped.isEmpty ? "" : "; \(record.skipped.count) skipped"))
                completion(.success(TransferObjects.path(transfer.number!)))
                if links[peer] == nil { wantsLink(peer) }
                startOutgoing(transfer)
            }
        }
    }

    /// Whether anything waits for a link to `peer`: an outgoing transfer not yet over (or whose
    /// receiver must still hear that it is), or an incoming one accepted and not yet whole.
    func needsLink(to peer: PeerID) -> Bool {
        transfers.values.contains { transfer in
            guard transfer.peer == peer else { return false }
            if transfer.direction == .outgoing { return !transfer.state.isFinished || transfer.lifecycle.owesPeerAbort }
            return transfer.lifecycle.accepted && !transfer.state.isFinished
        }
    }

    /// Opens a stream for an outgoing transfer when its peer's link can carry it (and none runs).
    private func startOutgoing(_ transfer: Transfer) {
        guard transfer.direction == .outgoing, transfer.stream == nil, !transfer.opening, transfer.retry == nil,
              !transfer.state.isFinished || transfer.lifecycle.owesPeerAbort, let negotiated = links[transfer.peer] else { return }
        let name = peerName(transfer.peer)
        let who = name.isEmpty ? transfer.peer.description : name
        if let whyOff = Self.whyOff(on: negotiated, who: who) {
            return handle(transfer, .failed(by: .local, reason: whyOff))
        }
        transfer.opening = true
        channels.openPipeStream(to: transfer.peer, channel: try! ChannelName(TransferWire.channel),
                                endedAbruptly: { _ in }) { [weak self, weak transfer] result in
            // The stream's own thread notices an abrupt end; nothing to do here.
            guard let self, let transfer else {
                if case .success(let end) = result { end.close() }
                return
            }
            transfer.opening = false
            switch result {
            case .success(let end):
                runSender(transfer, end: end)
            case .failure(let error):
                Log.info("\(transfer.logName): no stream to \(transfer.peer): \(error.message)")
                retryLater(transfer)
            }
        }
    }

    private func retryLater(_ transfer: Transfer) {
        guard links[transfer.peer] != nil, transfer.retry == nil else { return }
        transfer.retry = Timer.after(Self.retryDelay) { [weak self, weak transfer] in
            guard let self, let transfer else { return }
            transfer.retry = nil
            startOutgoing(transfer)
        }
    }

    private func runSender(_ transfer: Transfer, end: StreamPipe.End) {
        // Cancelled meanwhile with nothing to tell: the receiver never hears of it.
        guard !transfer.state.isFinished || transfer.lifecycle.owesPeerAbort else {
            end.close()
            return
        }
        let entry = newStream(peer: transfer.peer, direction: .outgoing, transferred: transfer.transferred)
        entry.transferID = transfer.id
        transfer.stream = entry.handle
        if !transfer.record.offered {
            transfer.record.offered = true
            save(transfer)
        }
        let files = transfer.manifest.files
        let fileSources = zip(transfer.manifest.entries, transfer.record.sources).filter { $0.0.kind == .file }.map(\.1)
        let plan = TransferSender.Plan(id: transfer.id, manifest: transfer.manifest, sources: fileSources,
                                       identities: transfer.record.identities,
                                       followLinks: files.map { $0.path.components.count == 1 },
                                       hashing: entry.hashing)
        let (streamHandle, report) = (entry.handle, reporter(entry.handle.serial))
        threads[streamHandle.serial] = NamedThread(name: "peervoice-send") {
            TransferSender(end: end, plan: plan, handle: streamHandle, report: report).run()
        }
        handle(transfer, .streamOpened)
    }

    // MARK: Receiving (ChannelHandler)

    /// Each stream runs on a thread of its own, which reads and writes the pipe's end.
    var streamEnds: StreamEndKind { .pipe }

    func newStream(_ stream: IncomingStream, answer: @escaping (RefuseReason?) -> Void) {
        let running = streams.values.filter { $0.peer == stream.peer && $0.direction == .incoming }.count
        guard running < Self.maxIncomingStreamsPerPeer else {
            Log.info("transfers: \(stream.peer) already runs \(running) transfer streams: one more refused")
            stream.end.close()
            return answer(.tooManyStreams)
        }
        answer(nil)
        let entry = newStream(peer: stream.peer, direction: .incoming, transferred: 0)
        let (end, hashing, handle, report) = (stream.end.pipe, entry.hashing, entry.handle, reporter(entry.handle.serial))
        threads[handle.serial] = NamedThread(name: "peervoice-recv") {
            TransferReceiver(end: end, hashing: hashing, handle: handle, report: report).run()
        }
    }

    func streamEnded(_ stream: IncomingStream, reason: String) {
        // The stream's thread sees the reset itself and reports it.
    }

    // MARK: Stream events

    /// A stream with `peer` on its link now: its files are hashed as the link's terms say.
    private func newStream(peer: PeerID, direction: TransferDirection, transferred: UInt64) -> StreamEntry {
        let entry = StreamEntry(handle: TransferStreamHandle(serial: nextSerial, transferred: transferred), peer: peer, direction: direction,
                                hashing: hashes.hashing(on: links[peer]))
        nextSerial += 1
        streams[entry.handle.serial] = entry
        return entry
    }

    /// How a stream's thread reports: on the main loop, to this component, by the stream's serial.
    private func reporter(_ serial: Int) -> @Sendable (TransferStreamEvent) -> Void {
        let transfers = MainContextReference(self)
        return { event in
            runOnMainContext { transfers.object?.streamEvent(serial, event) }
        }
    }

    private func streamEvent(_ serial: Int, _ event: TransferStreamEvent) {
        guard let entry = streams[serial] else { return }
        switch event {
        case .ended(let reason, let clean):
            return streamEnded(entry, reason: reason, clean: clean)
        case .offered(let id, let manifest):
            return offered(entry, id: id, manifest: manifest)
        default:
            break
        }
        guard let id = entry.transferID, let transfer = transfers[id], transfer.stream === entry.handle else {
            // A stream whose OFFER was not taken: only its failure matters (a broken offer).
            if case .failed(let reason) = event, entry.transferID == nil { refuse(entry, reason: reason) }
            return
        }
        switch event {
        case .accepted(let position):
            let resumed = position == .start ? "" : ", resuming from \(position) (\(transfer.manifest.bytes(before: position)) of \(transfer.manifest.totalBytes) bytes)"
            Log.info("\(transfer.logName): \(transfer.peer) accepted\(resumed); files hashed with \(entry.hashing.algorithm)")
            handle(transfer, .peerAccepted)
        case .placed(let name, let savedAs):
            transfer.placed[name] = savedAs
            publish(transfer)
        case .completed:
            handle(transfer, .completed)
        case .aborted(let code, let reason):
            handle(transfer, .peerAborted(code, reason: reason))
        case .failed(let reason):
            handle(transfer, .failed(by: .local, reason: reason))
        case .offered, .ended:
            break
        }
    }

    /// A stream that carries no transfer ends with ABORT failed saying why.
    private func refuse(_ entry: StreamEntry, reason: String) {
        Log.info("transfers: refused an offer from \(entry.peer): \(reason)")
        entry.handle.post(.send(.abort(.failed, reason: "refused: \(reason)")))
        entry.handle.post(.close)
    }

    private func offered(_ entry: StreamEntry, id: TransferID, manifest: TransferManifest) {
        if let transfer = transfers[id] {
            guard transfer.peer == entry.peer, transfer.direction == .incoming, transfer.manifest == manifest else {
                return refuse(entry, reason: "its id is that of another transfer")
            }
            entry.transferID = id
            if let old = transfer.stream {
                // The old stream's thread ends first (it may be writing the part files).
                if let waiting = transfer.nextStream { waiting.post(.abandon) }
                transfer.nextStream = entry.handle
                old.post(.abandon)
                return
            }
            return attach(entry.handle, to: transfer)
        }
        let waiting = transfers.values.filter { $0.peer == entry.peer && $0.direction == .incoming && $0.state == .waiting }.count
        guard waiting < Self.maxWaitingOffersPerPeer else {
            return refuse(entry, reason: "\(waiting) offers from this computer wait for an answer already")
        }
        entry.transferID = id
        var record = TransferRecord(id: id, peer: entry.peer.description, createdMs: clock.nowMs(), direction: .incoming, manifest: manifest)
        record.folder = downloadFolder
        let transfer = Transfer(number: takeNumber(), id: id, peer: entry.peer, manifest: manifest, record: record)
        add(transfer)
        Log.info("\(transfer.logName): \(entry.peer) offers \(manifest.files.count) files, \(ByteCount.text(manifest.totalBytes))")
        attach(entry.handle, to: transfer)
    }

    /// `handle` carries `transfer` from now on.
    private func attach(_ handle: TransferStreamHandle, to transfer: Transfer) {
        transfer.stream = handle
        self.handle(transfer, .streamOpened)
        if transfer.direction == .incoming, transfer.state == .waiting, !transfer.asked, let number = transfer.number {
            transfer.asked = true
            offered(TransferOffer(number: number, path: TransferObjects.path(number), peer: transfer.peer, peerName: peerName(transfer.peer),
                                  fileCount: transfer.manifest.files.count, bytes: transfer.manifest.totalBytes,
                                  firstName: transfer.manifest.topLevelNames.first ?? ""))
        }
    }

    private func streamEnded(_ entry: StreamEntry, reason: String, clean: Bool) {
        streams[entry.handle.serial] = nil
        threads[entry.handle.serial] = nil
        guard let id = entry.transferID, let transfer = transfers[id] else {
            Log.debug("transfers: a stream from \(entry.peer) ended before an offer was taken: \(reason)")
            return
        }
        if transfer.nextStream === entry.handle {
            transfer.nextStream = nil
            return
        }
        guard transfer.stream === entry.handle else { return }
        transfer.transferredAtRest = entry.handle.transferred.load(ordering: .relaxed)
        transfer.stream = nil
        Log.info("\(transfer.logName): stream ended (\(reason))")
        if clean && transfer.state.isFinished && transfer.lifecycle.owesPeerAbort {
            handle(transfer, .peerTold)
        }
        handle(transfer, .streamClosed)
        if let next = transfer.nextStream {
            transfer.nextStream = nil
            return attach(next, to: transfer)
        }
        cleanUpIfIdle(transfer)
        if transfer.direction == .outgoing { retryLater(transfer) }
    }

    // MARK: Links

    /// Our HELLO offers transfers (they need channels too, which `Channels` offers) and the
    /// file hashes beyond BLAKE2b-256 we have.
    var offeredCapabilities: Capabilities { TransferWire.capability.union(hashes.capabilities) }

    /// Why a link at `negotiated` cannot carry transfers, for a person (`who` names the peer);
    /// nil when it can. They need channels too.
    static func whyOff(on negotiated: LinkProtocol, who: String) -> String? {
        negotiated.whyOff(TransferWire.capability, who: who) ?? negotiated.whyOff(.channels, who: who)
    }

    func linkOpened(_ link: PeerLink, to peer: Peer) {
        guard let negotiated = link.negotiated else { return }
        links[peer.id] = negotiated
        for transfer in transfers.values where transfer.peer == peer.id {
            transfer.retry = nil
            startOutgoing(transfer)
        }
    }

    func linkClosed(_ link: PeerLink, of peer: Peer, reason: String) {
        links[peer.id] = nil
    }

    /// `peer` was removed: its transfers cannot go on. An outgoing one still owes the receiver
    /// its ABORT: if the peer is paired again, the next stream tells it, rather than leave a
    /// receiver waiting for good (simulation seeds 119, 134); the record goes after
    /// `TransferStore.keepFinishedMs` otherwise.
    func peerRemoved(_ peer: PeerID) {
        for transfer in transfers.values where transfer.peer == peer && !transfer.state.isFinished {
            handle(transfer, .failed(by: .local, reason: "the peer was removed"))
        }
    }

    // MARK: The person's answers

    /// `Accept`, `Decline` or `Cancel` on the object `number`.
    func perform(_ method: String, on number: Int, completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard let transfer = numbered[number] else {
            return completion(.failure(.invalidArgument("transfer \(number) is not known")))
        }
        switch method {
        case "Accept": accept(transfer, completion: completion)
        case "Decline", "Cancel":
            do throws(ServiceError) {
                try method == "Decline" ? decline(transfer) : cancel(transfer)
                afterTheRecord { completion(.success(())) }
            } catch {
                completion(.failure(error))
            }
        default: completion(.failure(.failed("\(method) is declared but not implemented")))
        }
    }

    private func requireWaitingIncoming(_ transfer: Transfer, _ what: String) throws(ServiceError) {
        guard transfer.direction == .incoming else { throw .invalidArgument("only the receiver \(what) a transfer") }
        guard transfer.state == .waiting else { throw .invalidArgument("the transfer is \(transfer.state.rawValue), not waiting for an answer") }
    }

    /// Checks the folder and its free space on the disk thread first: with too little the call
    /// and the transfer fail before any byte is written.
    private func accept(_ transfer: Transfer, completion: @escaping (Result<Void, ServiceError>) -> Void) {
        do throws(ServiceError) {
            try requireWaitingIncoming(transfer, "accepts")
        } catch {
            return completion(.failure(error))
        }
        let folder = transfer.record.folder
        let needed = transfer.manifest.totalBytes
        onDisk({ () -> String? in
            do throws(SystemError) {
                try TransferFolder.make(folder)
                let free = try TransferFolder.freeSpace(at: folder)
                guard free.bytes >= needed else {
                    return "needs \(ByteCount.text(needed)), \(ByteCount.text(free.bytes)) free on \(free.mountPoint)"
                }
                return nil
            } catch {
                return "cannot save into \(folder): \(error)"
            }
        }) { [weak self, weak transfer] problem in
            guard let self, let transfer else { return }
            guard transfer.state == .waiting else {
                return completion(.failure(.invalidArgument("the transfer is \(transfer.state.rawValue), not waiting for an answer")))
            }
            if let problem {
                Log.info("\(transfer.logName): cannot accept: \(problem)")
                handle(transfer, .failed(by: .local, reason: problem))
                return afterTheRecord { completion(.failure(.failed(problem))) }
            }
            Log.info("\(transfer.logName): accepted")
            handle(transfer, .personAccepted)
            completion(.success(()))
        }
    }

    private func decline(_ transfer: Transfer) throws(ServiceError) {
        try requireWaitingIncoming(transfer, "declines")
        Log.info("\(transfer.logName): declined")
        handle(transfer, .personDeclined)
    }

    private func cancel(_ transfer: Transfer) throws(ServiceError) {
        guard !transfer.state.isFinished else { throw .invalidArgument("the transfer is \(transfer.state.rawValue) already") }
        Log.info("\(transfer.logName): cancelled here")
        transfer.retry = nil
        handle(transfer, .cancelled(by: .local, reason: transfer.direction == .outgoing ? "cancelled by the sender" : "cancelled by the receiver"))
        // A receiver that never got the offer has nothing to be told.
        if transfer.lifecycle.owesPeerAbort && !transfer.record.offered { handle(transfer, .peerTold) }
        if transfer.lifecycle.owesPeerAbort { startOutgoing(transfer) }
    }

    // MARK: State

    /// Applies `event` to the transfer's lifecycle and does what it asks: tells the peer, closes
    /// the stream, sends ACCEPT, discards partial data; then saves and shows the transfer.
    private func handle(_ transfer: Transfer, _ event: TransferLifecycle.Event) {
        let before = transfer.state
        let reaction = transfer.lifecycle.handle(event)
        if transfer.direction == .incoming && transfer.state.isFinished {
            if reaction.tell != nil || reaction.closeStream { transfer.heldForTheRecord = (reaction.tell, reaction.closeStream) }
        } else {
            if let message = reaction.tell { transfer.stream?.post(.send(message)) }
            if reaction.closeStream { transfer.stream?.post(.close) }
        }
        if reaction.sendAccept, let stream = transfer.stream {
            stream.post(.accept(IncomingPlan(folder: transfer.record.folder, idHex: transfer.id.hex, id: transfer.id, store: store)))
        }
        if reaction.discardPartial { transfer.discardPending = true }
        let after = transfer.state
        if after != before {
            Log.info("\(transfer.logName): \(before.rawValue) → \(after.rawValue)" + (transfer.lifecycle.error.isEmpty ? "" : " (\(transfer.lifecycle.error))"))
            if before == .waiting, transfer.asked, let number = transfer.number { offerSettled(number) }
            if after.isFinished { transfer.retry = nil }
            cleanUpIfIdle(transfer)
        }
        save(transfer)
        publish(transfer, withProgress: after != before)
        updateProgressTimer()
    }

    /// An ended incoming transfer whose stream is over: its partial data goes (if it is to) and
    /// so does its progress file; the record stays to answer a re-offer.
    private func cleanUpIfIdle(_ transfer: Transfer) {
        guard transfer.direction == .incoming, transfer.state.isFinished, transfer.stream == nil else { return }
        let (store, idHex, id, folder, discard) = (store, transfer.id.hex, transfer.id, transfer.record.folder, transfer.discardPending)
        let names = transfer.manifest.topLevelNames
        let placedHere = Set(transfer.placed.keys)
        transfer.discardPending = false
        disk.run {
            if discard {
                let placed = placedHere.union(store.progress(of: idHex).map { Set($0.placed.keys) } ?? [])
                for name in names where !placed.contains(name) {
                    TransferFolder.remove(folder + "/" + DestinationNames.partName(for: name, id: id))
                }
            }
            store.removeProgress(idHex)
        }
    }

    /// Writes the record on the disk thread (an outgoing one that owes nothing more goes, once
    /// its end was shown).
    private func save(_ transfer: Transfer) {
        if transfer.state.isFinished && transfer.record.endShown == nil { transfer.record.endShown = false }
        let (store, record, id, ended) = (store, transfer.record, transfer.id, transfer.state.isFinished)
        let forget = transfer.direction == .outgoing && ended && !transfer.lifecycle.owesPeerAbort && record.endShown == true
        onDisk({ () -> String? in
            if forget {
                // A record left behind would bring the ended transfer back at the next start,
                // offered again (simulation seed 101): written again like a refused save.
                return store.remove(record.idHex) ? nil : "cannot remove the record \(record.idHex).json from \(store.directory)"
            }
            do {
                try store.save(record)
                return nil
            } catch {
                return "\(error)"
            }
        }, then: { [weak self] error in self?.saved(id, ended: ended, error: error) })
    }

    /// A record the disk refused is written again every 500 ms until it is: else a restart
    /// brings back what the old record said (an incoming transfer that failed came back paused,
    /// waiting forever for a sender that had forgotten it: chaos seed 3). A record that says how
    /// the transfer ended, written, lets the end show.
    private func saved(_ id: TransferID, ended: Bool, error: String?) {
        guard let error else {
            unsaved.remove(id)
            guard ended, let transfer = transfers[id], transfer.state.isFinished else { return }
            if !transfer.endRecorded {
                transfer.endRecorded = true
                publish(transfer, withProgress: true)
                noteEndShownOnceWritten(transfer)
            }
            if let held = transfer.heldForTheRecord {
                transfer.heldForTheRecord = nil
                if let message = held.tell { transfer.stream?.post(.send(message)) }
                if held.close { transfer.stream?.post(.close) }
            }
            return
        }
        if unsaved.insert(id).inserted {
            Log.warning("transfers: the record of \(id.hex) is not saved (trying again every 0.5 s): \(error)")
        }
        // An incoming transfer that ended: until its record can say so, none is better than the
        // old one (unlinking needs no space), which would bring it back after a kill -9 waiting
        // for a sender that forgot it (chaos seed 9). A re-offer would then be asked anew. One
        // that says so already stays: without it, the sender's re-offer after a restart was
        // asked anew and completed, after the person had been shown it failed (simulation seed 778).
        if let transfer = transfers[id], transfer.direction == .incoming, transfer.state.isFinished, !transfer.endRecorded {
            let store = store
            disk.run { store.remove(id.hex) }
        }
        guard saveRetry == nil else { return }
        saveRetry = Timer.after(Self.saveRetryDelay) { [weak self] in
            guard let self else { return }
            saveRetry = nil
            for id in unsaved {
                if let transfer = transfers[id] { save(transfer) } else { unsaved.remove(id) }
            }
        }
    }

    /// GDBus writes the end's `PropertiesChanged` a moment after it is emitted, and a `kill -9` in
    /// between loses it (as campaign seed 12's `MessageReceived`): only once it is written does the
    /// record say the end was shown (and an outgoing one that owes nothing go). A restart before
    /// that shows the end again (`publishAll`).
    private func noteEndShownOnceWritten(_ transfer: Transfer) {
        let id = transfer.id
        eventsWritten { [weak self] written in
            guard written, let self, let transfer = transfers[id], transfer.record.endShown == false else { return }
            transfer.record.endShown = true
            save(transfer)
        }
    }

    /// Shows the transfer's object; `Transferred` is brought up to date only `withProgress`
    /// (at state changes and on the progress timer: at most 4 times a second otherwise). An end
    /// shows once its record is written (`Transfer.endRecorded`): until then the object shows
    /// what it showed before.
    private func publish(_ transfer: Transfer, withProgress: Bool = false) {
        guard transfer.number != nil, !transfer.state.isFinished || transfer.endRecorded else { return }
        if withProgress { transfer.shownTransferred = transfer.transferred }
        show(transfer.snapshot)
    }

    /// While data flows, `Transferred` is shown every `progressInterval`.
    private func updateProgressTimer() {
        let flowing = transfers.values.contains { $0.state == .active }
        if !flowing {
            progressTimer = nil
        } else if progressTimer == nil {
            progressTimer = Timer.every(Self.progressInterval) { [weak self] in
                guard let self else { return false }
                let active = numbered.values.filter { $0.state == .active }
                active.forEach { publish($0, withProgress: true) }
                if active.isEmpty { progressTimer = nil }
                return !active.isEmpty
            }
        }
    }

    // MARK: Helpers

    private func takeNumber() -> Int {
        defer { nextNumber += 1 }
        return nextNumber
    }

    private func add(_ transfer: Transfer) {
        transfers[transfer.id] = transfer
        if let number = transfer.number { numbered[number] = transfer }
    }

    /// `done` once the disk thread has written what is queued (a caller whose method ended a
    /// transfer is answered after the end shows, or after the write failed: then it shows later).
    private func afterTheRecord(_ done: @escaping () -> Void) {
        onDisk({ () }, then: { done() })
    }

    /// Runs `work` on the disk thread, then `done` with its result on the main loop.
    private func onDisk<Value: Sendable>(_ work: @escaping @Sendable () -> Value, then done: @escaping (Value) -> Void) {
        let done = MainContextBound(done)
        disk.run {
            let value = work()
            runOnMainContext { done.value(value) }
        }
    }
}

/// An incoming transfer waiting for its person, as a notification shows it.
struct TransferOffer {
    let number: Int
    /// Its object's path.
    let path: String
    let peer: PeerID
    let peerName: String
    let fileCount: Int
    let bytes: UInt64
    /// The first item's name (the notification names it when there is one).
    let firstName: String
}
