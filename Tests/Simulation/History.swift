import PeerVoiceCore

/// Everything the simulated peers said to their users, checked as it happens against what
/// PeerVoice promises (README, docs/PROTOCOL.md §7.3 and §8):
///
/// - a message is announced (`MessageReceived`) by the peer it was sent to, from the peer that
///   sent it, with its id, and each sender's messages first in the order `Send` took them; again
///   (same id) only after a crash that came before the receiver noted the announcement written
///   (a kill -9) or lost that note (a power loss, or a kill while memory held what the disk
///   refused), never once the note is on the disk;
/// - `MessageDelivered` only for a message the receiver stored, never with `MessageFailed`; it
///   and `MessageFailed` again (same id) only after a crash that came before the sender noted
///   the signal written (a kill -9) or lost that note;
/// - a link opened by people (not two pinned keys) only after both people accepted that link's
///   code, and both were shown the same code;
/// - at the end (`finish`), every message `Send` accepted was announced by its receiver or
///   reported failed, and its sender reported it delivered or failed, unless the sender was
///   reinstalled (the person threw it away).
///
/// The first violation ends the run.
public final class History {
    public private(set) var violations: [String] = []
    /// What happened, in order (the last lines are printed with a violation).
    public private(set) var log: [String] = []
    private let scheduler: Scheduler
    private var linkCounter = 0

    private struct Message {
        let sender: PeerID
        let receiver: PeerID
        /// Position among the messages `sender` queued for `receiver`.
        let order: Int
        var accepted = false
        /// Stored by its receiver (its announcement emitted, perhaps not yet written to the bus).
        var stored = false
        var received = 0
        var delivered = 0
        var failed = 0
        /// Its sender was reinstalled: nobody can deliver or fail it any more.
        var abandoned = false
        /// The receiver's losses of state when it last announced the message.
        var stateLossesAtAnnouncement = 0
        /// The receiver was killed after it last announced the message, before its note that
        /// the signal was written: the restart announces it again.
        var killedBeforeNote = false
        /// The sender's losses of state when it last reported the message delivered or failed.
        var stateLossesAtOutcome = 0
        /// The sender was killed after it last reported the outcome, before its note that the
        /// signal was written: the restart reports it again.
        var outcomeKilledBeforeNote = false
    }

    /// Per peer id, its crashes that lost state so far: a power loss (what was not synced), or a
    /// kill while memory held changes the disk had refused (full, read-only).
    private var stateLosses: [PeerID: Int] = [:]

    private var messages: [String: Message] = [:]
    private var messageOrder: [String] = []
    private var queuedCount: [String: Int] = [:]
    private var lastReceivedOrder: [String: Int] = [:]
    /// Per link (its handshake hash), the code each side's person was shown and what each answered.
    private var prompts: [[UInt8]: [PeerID: (code: String, accepted: Bool?)]] = [:]
    public private(set) var accepted = 0
    public private(set) var received = 0
    /// Transfers `SendFiles` took, and those whose receiver reported them complete.
    public private(set) var transfersSent = 0
    public private(set) var transfersCompleted = 0
    /// Bytes of the transfers reported complete by their receivers.
    public private(set) var bytesCompleted: UInt64 = 0

    private struct TransferTrack {
        let sender: PeerID
        let receiver: PeerID
        let names: [String]
        let bytes: [[UInt8]]
        let bytesPerSecond: Double
        /// Per side (`id/direction`), the end it reported and its state losses then.
        var ends: [String: (state: TransferState, losses: Int)] = [:]
        /// The sides whose record of the end is on the disk.
        var endsSaved: Set<String> = []
        /// The receiver found every file in place and said COMPLETE (its end shows once recorded).
        var receiverCompleted = false
        /// The sides killed after they showed the end, before they noted it shown: shown again.
        var killedBeforeEndNoted: Set<String> = []
        /// `SendFiles` answered with an error (a record the stopped disk kept may run anyway).
        var refused = false
    }

    private var transfers: [TransferID: TransferTrack] = [:]
    /// App streams by key: what was written, to whom, and whether its end was seen.
    private var appStreams: [Int: (receiver: PeerID, bytes: [UInt8], ended: Bool)] = [:]
    public private(set) var appStreamsOpened = 0
    public private(set) var appStreamsWhole = 0
    public private(set) var linksOpened = 0
    public private(set) var pairings = 0

    /// Keep every line of the log (a replay), not only the last few hundred.
    private let keepsFullLog: Bool

    init(scheduler: Scheduler, keepsFullLog: Bool) {
        self.scheduler = scheduler
        self.keepsFullLog = keepsFullLog
    }

    public var hasFailed: Bool { !violations.isEmpty }

    func nextLinkID() -> Int {
        linkCounter += 1
        return linkCounter
    }

    func note(_ line: String) {
        log.append("\(Self.time(scheduler.now)) \(line)")
        if !keepsFullLog && log.count > 400 { log.removeFirst(100) }
    }

    func violation(_ what: String) {
        note("VIOLATION: \(what)")
        violations.append("\(Self.time(scheduler.now)): \(what)")
    }

    static func time(_ duration: Duration) -> String {
        let ms = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        return "t=\(ms / 1000).\(String(format: "%03d", ms % 1000))s"
    }

    // MARK: Messages

    func enqueued(_ messageID: String, from sender: SimulatedPeer, to receiver: PeerID) {
        let key = "\(sender.id)>\(receiver)"
        let order = queuedCount[key, default: 0]
        queuedCount[key] = order + 1
        guard messages[messageID] == nil else { return violation("message id \(messageID) queued twice") }
        messages[messageID] = Message(sender: sender.id, receiver: receiver, order: order)
        messageOrder.append(messageID)
    }

    func accepted(_ messageID: String, by sender: SimulatedPeer) {
        guard messages[messageID] != nil else { return violation("\(sender.name): Send accepted \(messageID), never queued") }
        messages[messageID]!.accepted = true
        accepted += 1
        note("\(sender.name): Send accepted \(messageID.prefix(8))")
    }

    func sendRefused(by sender: SimulatedPeer, _ error: ServiceError) {
        note("\(sender.name): Send refused: \(error.message)")
    }

    func event(_ event: ServiceEvent, at peer: SimulatedPeer) {
        switch event {
        case .messageReceived(let from, let messageID, _):
            received += 1
            note("\(peer.name): MessageReceived \(messageID.prefix(8)) from \(from.base32.prefix(6))")
            guard var message = messages[messageID] else {
                return violation("\(peer.name) announced \(messageID), which nobody queued")
            }
            // Announced once written, so a power loss that lost the record before its sync makes
            // the sender's resend announced again (same id), and so does a crash that lost the
            // note that it was announced, or came before it; never without such a crash between.
            if message.received > 0 && stateLosses[peer.id, default: 0] == message.stateLossesAtAnnouncement
                && !message.killedBeforeNote {
                violation("\(peer.name) announced \(messageID) again (a duplicate), its announcement noted written before")
            }
            message.stateLossesAtAnnouncement = stateLosses[peer.id, default: 0]
            message.killedBeforeNote = false
            if message.receiver != peer.id || message.sender != from {
                violation("\(messageID) from \(message.sender) for \(message.receiver) was announced by \(peer.id) as from \(from)")
            }
            let pair = "\(from)>\(peer.id)"
            if message.received == 0, let last = lastReceivedOrder[pair], last >= message.order {
                violation("\(peer.name) announced \(messageID) (queued #\(message.order)) after #\(last) from the same sender: out of order")
            }
            lastReceivedOrder[pair] = max(lastReceivedOrder[pair] ?? -1, message.order)
            message.received += 1
            messages[messageID] = message
        case .messageDelivered(let to, let messageID):
            note("\(peer.name): MessageDelivered \(messageID.prefix(8))")
            guard var message = messages[messageID], message.sender == peer.id, message.receiver == to else {
                return violation("\(peer.name) reported \(messageID) delivered to \(to), which it never queued for it")
            }
            if !message.stored { violation("\(peer.name) reported \(messageID) delivered, but \(to) never stored it") }
            if message.delivered > 0 && !repeatAllowed(message, at: peer) {
                violation("\(peer.name) reported \(messageID) delivered twice, its report noted written before")
            }
            if message.failed > 0 { violation("\(peer.name) reported \(messageID) delivered after reporting it failed") }
            message.delivered += 1
            noteOutcome(&message, at: peer)
            messages[messageID] = message
        case .messageFailed(_, let messageID, let reason):
            note("\(peer.name): MessageFailed \(messageID.prefix(8)) (\(reason))")
            guard var message = messages[messageID], message.sender == peer.id else {
                return violation("\(peer.name) reported \(messageID) failed, which it never queued")
            }
            if message.delivered > 0 { violation("\(peer.name) reported \(messageID) failed after reporting it delivered") }
            // A RemovePeer a crash interrupted reports its failures again (same ids) when it is
            // finished at the next start.
            if message.failed > 0 && !repeatAllowed(message, at: peer) {
                violation("\(peer.name) reported \(messageID) failed twice, its report noted written before")
            }
            message.failed += 1
            noteOutcome(&message, at: peer)
            messages[messageID] = message
        default:
            break
        }
    }

    /// A sender reports an outcome again only after it lost state, or was killed before noting
    /// its report written.
    private func repeatAllowed(_ message: Message, at peer: SimulatedPeer) -> Bool {
        message.outcomeKilledBeforeNote || stateLosses[peer.id, default: 0] != message.stateLossesAtOutcome
    }

    private func noteOutcome(_ message: inout Message, at peer: SimulatedPeer) {
        message.stateLossesAtOutcome = stateLosses[peer.id, default: 0]
        message.outcomeKilledBeforeNote = false
    }

    func removed(_ id: PeerID, by peer: SimulatedPeer) { note("\(peer.name): RemovePeer \(id.base32.prefix(6))") }

    func reinstalled(_ peer: SimulatedPeer) {
        let old = peer.id
        for key in messageOrder where messages[key]!.sender == old { messages[key]!.abandoned = true }
        note("\(peer.name) reinstalled (was \(old.base32.prefix(6)))")
    }

    func lostState(_ peer: SimulatedPeer) { stateLosses[peer.id, default: 0] += 1 }

    /// The receiver `MessageReceived` came from stored it and emitted the signal (the bus writes it later).
    func stored(_ messageID: String) { messages[messageID]?.stored = true }

    /// `peer` was killed (-9) with these messages' announcements, these outcomes' reports and
    /// these transfers' ends not noted written.
    func killed(_ peer: SimulatedPeer, announcementsNotNoted messageIDs: [String], outcomesNotNoted outcomeIDs: [String],
                transferEndsNotNoted: [(id: TransferID, direction: TransferDirection)]) {
        for end in transferEndsNotNoted { transfers[end.id]?.killedBeforeEndNoted.insert("\(peer.id)/\(end.direction.rawValue)") }
        for id in messageIDs where messages[id]?.received ?? 0 > 0 { messages[id]!.killedBeforeNote = true }
        for id in outcomeIDs where messages[id].map({ $0.delivered + $0.failed > 0 }) ?? false {
            messages[id]!.outcomeKilledBeforeNote = true
        }
    }

    func started(_ peer: SimulatedPeer) { note("\(peer.name) started as \(peer.id.base32.prefix(6))") }
    func stopped(_ peer: SimulatedPeer) { note("\(peer.name) stopped") }

    // MARK: Transfers

    func transferSent(_ id: TransferID, from sender: SimulatedPeer, to receiver: PeerID, files: [(name: String, bytes: [UInt8])],
                      bytesPerSecond: Double) {
        guard transfers[id] == nil else { return violation("transfer id \(id.hex) taken twice") }
        transfers[id] = TransferTrack(sender: sender.id, receiver: receiver, names: files.map(\.name), bytes: files.map(\.bytes),
                                      bytesPerSecond: bytesPerSecond)
        transfersSent += 1
        note("\(sender.name): SendFiles \(id.hex.prefix(6)) to \(receiver.base32.prefix(6)): \(files.map(\.bytes.count)) bytes at \(Int(bytesPerSecond)) B/s")
    }

    func transferRefused(_ id: TransferID, by sender: SimulatedPeer, _ error: TransferStoreError) {
        transfersSent -= 1
        transfers[id]?.refused = true
        note("\(sender.name): SendFiles \(id.hex.prefix(6)) refused: \(error)")
    }

    /// The sender's files (the person's, on a disk the simulation does not crash).
    func transferFiles(_ id: TransferID) -> (bytes: [[UInt8]], bytesPerSecond: Double) {
        let track = transfers[id]!
        return (track.bytes, track.bytesPerSecond)
    }

    /// The receiver completed the transfer (and tells its sender): exactly the sender's bytes in
    /// place under each top-level name.
    func transferCompletedAtReceiver(_ id: TransferID, at peer: SimulatedPeer, placed: [String: [UInt8]?]) {
        guard var track = transfers[id] else { return violation("\(peer.name) completed transfer \(id.hex), which nobody sent") }
        for (index, name) in track.names.enumerated() {
            guard let held = placed[name] ?? nil else {
                violation("\(peer.name) completed transfer \(id.hex.prefix(8)) without \(name) in place")
                continue
            }
            if held != track.bytes[index] {
                violation("\(peer.name) completed transfer \(id.hex.prefix(8)), but \(name) holds \(held.count) bytes that are not the sender's \(track.bytes[index].count)")
            }
        }
        track.receiverCompleted = true
        transfers[id] = track
    }

    /// A side reported how a transfer ended: at most once per side (again only after it lost
    /// state), never two different ends, `complete` at the sender only after the receiver
    /// completed it. (The two sides may end
    /// differently when each ended it before hearing from the other: a receiver declines while the
    /// link is down, then the sender removes the peer.)
    func transferEnded(_ id: TransferID, at peer: SimulatedPeer, direction: TransferDirection, state: TransferState) {
        note("\(peer.name): transfer \(id.hex.prefix(6)) ended \(state.rawValue) (\(direction.rawValue))")
        guard var track = transfers[id] else { return violation("\(peer.name) reported transfer \(id.hex) \(state.rawValue), which nobody sent") }
        let side = "\(peer.id)/\(direction.rawValue)"
        let losses = stateLosses[peer.id, default: 0]
        if let earlier = track.ends[side] {
            if earlier.state != state {
                violation("\(peer.name) reported transfer \(id.hex.prefix(8)) \(state.rawValue) after reporting it \(earlier.state.rawValue)")
            } else if earlier.losses == losses && !track.killedBeforeEndNoted.contains(side) {
                violation("\(peer.name) reported transfer \(id.hex.prefix(8)) \(state.rawValue) twice, its end noted shown before")
            }
        }
        if state == .complete && direction == .outgoing && !track.receiverCompleted {
            violation("\(peer.name) reported transfer \(id.hex.prefix(8)) complete before its receiver completed it")
        }
        if state == .complete && direction == .incoming {
            if !track.receiverCompleted { violation("\(peer.name) reported transfer \(id.hex.prefix(8)) complete, which it never completed") }
            if track.ends[side] == nil {
                transfersCompleted += 1
                bytesCompleted += UInt64(track.bytes.reduce(0) { $0 + $1.count })
            }
        }
        track.ends[side] = (state, losses)
        track.killedBeforeEndNoted.remove(side)
        transfers[id] = track
    }

    /// A side's record of how the transfer ended is on the disk (synced, renamed, the folder synced).
    func transferEndSaved(_ id: TransferID, at peer: SimulatedPeer, direction: TransferDirection) {
        transfers[id]?.endsSaved.insert("\(peer.id)/\(direction.rawValue)")
    }

    /// A restarted side found the transfer unfinished in its record: never after its end was on the disk.
    func transferReloaded(_ id: TransferID, at peer: SimulatedPeer, direction: TransferDirection, state: TransferState) {
        guard let track = transfers[id], track.endsSaved.contains("\(peer.id)/\(direction.rawValue)") else { return }
        violation("\(peer.name): transfer \(id.hex.prefix(8)) came back \(state.rawValue) after a restart, though the record of its end was on the disk")
    }

    // MARK: App streams

    func appStreamOpened(_ key: Int, from sender: SimulatedPeer, to receiver: PeerID, bytes: [UInt8]) {
        appStreams[key] = (receiver, bytes, false)
        appStreamsOpened += 1
        note("\(sender.name): app stream \(key) opened to \(receiver.base32.prefix(6)) (\(bytes.count) bytes)")
    }

    /// A listening app's stream ended: a clean end only with every byte written, in order, once;
    /// a reset with a prefix of them.
    func appStreamEnded(_ received: [UInt8], at peer: SimulatedPeer, clean: Bool) {
        guard received.count >= 8 else {
            if clean { violation("\(peer.name): an app stream ended cleanly with \(received.count) bytes, not even its key") }
            return
        }
        let key = received.withUnsafeBytes { Int(littleEndian: $0.loadUnaligned(as: Int.self)) }
        guard let stream = appStreams[key] else {
            return violation("\(peer.name): an app stream nobody opened (key \(key), \(received.count) bytes, \(clean ? "clean" : "reset"), starts \(Array(received.prefix(12))))")
        }
        note("\(peer.name): app stream \(key) ended \(clean ? "cleanly" : "abruptly") after \(received.count) of \(stream.bytes.count) bytes")
        if stream.ended { violation("\(peer.name): app stream \(key) arrived twice") }
        appStreams[key]!.ended = true
        if stream.receiver != peer.id { violation("\(peer.name): app stream \(key) for \(stream.receiver) arrived here") }
        let intact = clean ? received == stream.bytes : received.count <= stream.bytes.count && stream.bytes.starts(with: received)
        if intact {
            if clean { appStreamsWhole += 1 }
        } else {
            violation("\(peer.name): app stream \(key) ended \(clean ? "cleanly" : "abruptly") with \(received.count) bytes that are not "
                      + "\(clean ? "" : "a prefix of ")the \(stream.bytes.count) written")
        }
    }

    /// The peers at either end of a transfer.
    func transferEnds(_ id: TransferID) -> (sender: PeerID, receiver: PeerID)? {
        transfers[id].map { ($0.sender, $0.receiver) }
    }

    // MARK: Pairing

    func prompted(_ peer: SimulatedPeer, about other: PeerID, link: [UInt8], code: String) {
        note("\(peer.name): PairingRequested for \(other.base32.prefix(6)) code \(code)")
        prompts[link, default: [:]][peer.id] = (code, nil)
        let codes = Set(prompts[link]!.values.map(\.code))
        if codes.count > 1 { violation("the two sides of one link were shown different codes: \(codes.sorted())") }
    }

    func answered(_ peer: SimulatedPeer, link: [UInt8], accept: Bool) {
        note("\(peer.name): its person \(accept ? "accepted" : "refused")")
        guard let prompt = prompts[link]?[peer.id] else { return violation("\(peer.name) answered a prompt it never showed") }
        prompts[link]![peer.id] = (prompt.code, accept)
    }

    func linkOpened(_ peer: SimulatedPeer, to other: PeerID, link: [UInt8], byPeople: Bool) {
        linksOpened += 1
        note("\(peer.name): link to \(other.base32.prefix(6)) open\(byPeople ? " (both people accepted)" : "")")
        guard byPeople else { return }
        pairings += 1
        let answers = prompts[link] ?? [:]
        if answers[peer.id]?.accepted != true {
            violation("\(peer.name) opened a link to \(other) that its person did not accept")
        }
        if answers[other]?.accepted != true {
            violation("\(peer.name) opened a link to \(other) whose person was not asked or did not accept")
        }
    }

    func forgetPrompts() { prompts = [:] }

    // MARK: The end

    /// After the healed network had its time: every accepted message between two current keys
    /// was announced by its receiver or reported failed (none is stuck in an outbox).
    func checkStuck(currentPeers: Set<PeerID>) {
        let stuck = messageOrder.filter { key in
            let message = messages[key]!
            return message.accepted && !message.abandoned && message.received == 0 && message.failed == 0
                && currentPeers.contains(message.receiver) && currentPeers.contains(message.sender)
        }
        guard let first = stuck.first.map({ messages[$0]! }) else { return }
        violation("\(stuck.count) accepted messages were still undelivered after the network healed, e.g. \(stuck[0]) from \(first.sender) to \(first.receiver)")
    }

    /// Every accepted message was announced by its receiver or reported failed, and its sender
    /// told its user which; every transfer between two current keys showed its end at its sender.
    func finish(currentPeers: Set<PeerID>) {
        let endsUnseen = transfers.keys.sorted { $0.hex < $1.hex }.filter { id in
            let track = transfers[id]!
            return !track.refused && currentPeers.contains(track.sender) && currentPeers.contains(track.receiver)
                && track.ends["\(track.sender)/\(TransferDirection.outgoing.rawValue)"] == nil
        }
        if let id = endsUnseen.first {
            violation("\(endsUnseen.count) transfers never showed their end at their sender, e.g. \(id.hex)")
        }
        var lost: [String] = []
        var unreported: [String] = []
        for key in messageOrder {
            let message = messages[key]!
            guard message.accepted, !message.abandoned else { continue }
            if message.received == 0 && message.failed == 0 { lost.append(key) }
            if message.delivered == 0 && message.failed == 0 { unreported.append(key) }
        }
        if let key = lost.first, let first = messages[key] {
            violation("\(lost.count) accepted messages were neither delivered nor reported failed, e.g. \(key) from \(first.sender) to \(first.receiver)")
        }
        if let key = unreported.first, let first = messages[key] {
            violation("\(unreported.count) accepted messages were never reported delivered or failed by their sender, e.g. \(key) from \(first.sender) to \(first.receiver)")
        }
    }
}
