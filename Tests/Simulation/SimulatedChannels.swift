import PeerVoiceCore

/// What one stream of `SimulatedChannels` tells the side that uses it (the daemon's stream
/// threads and `ChannelHandler`s).
protocol SimulatedChannelStream: AnyObject {
    /// Our OPEN was accepted: bytes may go.
    func channelAccepted()
    /// Bytes from the peer, in order (the app takes them at once: their credit goes back).
    func channelReceived(_ bytes: [UInt8])
    /// Everything written so far went out: write more.
    func channelDrained()
    /// The stream is over: `clean` when the peer closed its direction after its last byte,
    /// else a reset, a refusal or the link's end. Nothing more comes.
    func channelEnded(clean: Bool, reason: String)
}

/// The app channels of one open link, the simulation's model of the daemon's `LinkChannels`:
/// the core's `ChannelMultiplexer` (stream numbers, phases, both directions' credit), its frames
/// sealed on the link. What a stream's user writes waits here until the peer's credit lets it go,
/// in DATA of at most `ChannelWire.maxDataBytes`; what arrives is handed over at once and its
/// credit given back (`delivered`), so a WINDOW follows every 64 KiB taken.
///
/// Checked as it runs (`History`): a frame the multiplexer calls a protocol error (no correct
/// peer sends one, and the record layer drops what the network corrupts), credit below zero, and
/// (by `World`'s bounds) bytes buffered beyond one window per stream.
final class SimulatedChannels {
    private struct Output {
        var bytes: [UInt8] = []
        var offset = 0
        var closeWhenSent = false
        var pending: Int { bytes.count - offset }
    }

    let link: SimulatedLink
    private var streams: ChannelMultiplexer
    private let scheduler: Scheduler
    private let history: History
    private let owner: String
    private var users: [StreamID: SimulatedChannelStream] = [:]
    private var outputs: [StreamID: Output] = [:]
    /// Who takes the peer's streams to a channel (nil: refused, no app registered it).
    var takeStream: (ChannelName, StreamID) -> SimulatedChannelStream? = { _, _ in nil }
    private(set) var isClosed = false
    /// How long an OPEN waits for the peer's answer (the daemon's `LinkChannels.openTimeout`).
    static let openTimeout: Duration = .seconds(15)
    private var opening: [StreamID: Scheduler.Timer] = [:]

    init(link: SimulatedLink, scheduler: Scheduler, history: History, owner: String) {
        self.link = link
        streams = ChannelMultiplexer(isInitiator: link.isOutgoing)
        self.scheduler = scheduler
        self.history = history
        self.owner = owner
    }

    private var nowUs: UInt32 { UInt32(truncatingIfNeeded: scheduler.now.components.seconds * 1_000_000 + scheduler.now.components.attoseconds / 1_000_000_000_000) }

    // MARK: What this side does

    /// Opens a stream to the peer's `channel`; nil when the link carries as many as it takes.
    func open(_ channel: ChannelName, for user: SimulatedChannelStream) -> StreamID? {
        guard !isClosed, let (id, frame) = streams.open(channel, mode: .stream) else { return nil }
        users[id] = user
        outputs[id] = Output()
        opening[id] = scheduler.after(Self.openTimeout) { [weak self] in
            guard let self, opening.removeValue(forKey: id) != nil, let user = users.removeValue(forKey: id) else { return }
            outputs[id] = nil
            if let frame = streams.reset(id, reason: .unspecified) { link.send(frame) }
            user.channelEnded(clean: false, reason: "the peer did not answer the stream within \(Self.openTimeout)")
        }
        link.send(frame)
        return id
    }

    /// Queues `bytes` on `id`; they go as the peer's credit allows.
    func write(_ id: StreamID, _ bytes: [UInt8]) {
        guard outputs[id] != nil else { return }
        outputs[id]!.bytes += bytes
        pump(id)
    }

    /// Bytes written on `id` that wait for credit.
    func pendingBytes(_ id: StreamID) -> Int { outputs[id]?.pending ?? 0 }

    /// Ends our direction once everything written went.
    func close(_ id: StreamID) {
        guard outputs[id] != nil else { return }
        outputs[id]!.closeWhenSent = true
        pump(id)
    }

    /// Ends the stream at once in both directions; its user hears nothing more.
    func reset(_ id: StreamID) {
        users[id] = nil
        outputs[id] = nil
        if let frame = streams.reset(id, reason: .appAborted) { link.send(frame) }
    }

    private func pump(_ id: StreamID) {
        guard var output = outputs[id] else { return }
        while output.pending > 0 {
            let credit = streams.sendCredit(id)
            if credit < 0 { history.violation("\(owner): \(id) has \(credit) bytes of credit (below zero)") }
            guard credit > 0 else { break }
            let count = min(credit, ChannelWire.maxDataBytes, output.pending)
            let payload = Array(output.bytes[output.offset..<(output.offset + count)])
            output.offset += count
            link.send(streams.data(id, payload: payload, endOfMessage: false, sentAtUs: nowUs))
        }
        if output.pending == 0 {
            output.bytes = []
            output.offset = 0
        }
        let closeNow = output.pending == 0 && output.closeWhenSent
        if closeNow { output.closeWhenSent = false }
        outputs[id] = output
        if closeNow, let frame = streams.close(id) { link.send(frame) }
        if output.pending == 0 && !closeNow, streams.sendCredit(id) > 0 { users[id]?.channelDrained() }
    }

    // MARK: What the peer sends

    func received(_ body: [UInt8]) {
        guard !isClosed else { return }
        let event: ChannelEvent?
        do {
            let frame = try ChannelFrame(body: body[...])
            let (meaning, reply) = try streams.receive(frame, nowUs: nowUs)
            if let reply { link.send(reply) }
            event = meaning
        } catch {
            history.violation("\(owner): a channel frame a correct peer never sends: \(error)")
            // As the daemon's link does with a frame it cannot take.
            link.close(goodbye: .protocolError, "protocol error: \(error)")
            return
        }
        guard let event else { return }
        switch event {
        case .openRequested(let id, let channel, _):
            guard let user = takeStream(channel, id) else {
                if let frame = streams.refuse(id, reason: .notRegistered) { link.send(frame) }
                return
            }
            users[id] = user
            outputs[id] = Output()
            if let frame = streams.accept(id) { link.send(frame) }
        case .accepted(let id):
            opening.removeValue(forKey: id)?.cancel()
            users[id]?.channelAccepted()
            pump(id)
        case .refused(let id, let reason):
            opening.removeValue(forKey: id)?.cancel()
            outputs[id] = nil
            users.removeValue(forKey: id)?.channelEnded(clean: false, reason: "refused: \(reason)")
        case .data(let id, let bytes, _):
            guard let user = users[id] else { return }
            if let window = streams.delivered(id, bytes: bytes.count) { link.send(window) }
            user.channelReceived(bytes)
        case .creditAvailable(let id):
            pump(id)
        case .endOfStream(let id):
            // The peer said all it had to say: our direction ends too (the daemon's stream
            // threads end the stream when they read end of file).
            outputs[id] = nil
            if let frame = streams.close(id) { link.send(frame) }
            users.removeValue(forKey: id)?.channelEnded(clean: true, reason: "the other side closed the stream")
        case .reset(let id, let reason):
            outputs[id] = nil
            users.removeValue(forKey: id)?.channelEnded(clean: false, reason: "reset by the peer (\(reason))")
        case .datagram, .feedback:
            break
        }
    }

    /// Everything of one read from the link was handled (FEEDBACK, as the daemon sends it).
    func inputDrained() {
        if !isClosed, let feedback = streams.takeFeedback() { link.send(feedback) }
    }

    /// The link is gone: every stream ends abruptly.
    func linkClosed(reason: String) {
        guard !isClosed else { return }
        isClosed = true
        let ended = users.keys.sorted().map { users[$0]! }
        opening.values.forEach { $0.cancel() }
        opening = [:]
        users = [:]
        outputs = [:]
        for user in ended { user.channelEnded(clean: false, reason: "the link closed (\(reason))") }
    }

    // MARK: Bounds

    /// Bytes received and not yet taken, all streams (at most one window each).
    var bufferedBytes: Int { streams.streamIDs.reduce(0) { $0 + streams.bufferedBytes(of: $1) } }
    var streamCount: Int { streams.streamCount }
    /// Bytes written and waiting for credit, all streams.
    var waitingBytes: Int { outputs.values.reduce(0) { $0 + $1.pending } }
    var limits: ChannelLimits { streams.limits }
}
