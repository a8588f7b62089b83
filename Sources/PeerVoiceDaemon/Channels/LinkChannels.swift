import GIO
import Glibc
import PeerVoiceCore

/// The channel streams of one open link (docs/PROTOCOL.md §13): the link's `ChannelMultiplexer`,
/// each stream's endpoint, and the scheduling of bulk data onto the link.
///
/// Data from the apps goes out one chunk per ready stream in turn, and only while the link can
/// take it without anything else waiting behind it: nothing queued in the service, the kernel
/// holding less than one chunk (Bluetooth, where voice rides the same channel), the delay-based
/// window allowing it (IP). The sending runs in a main-loop turn of its own, at most
/// `chunksPerTurn` chunks each, so bus calls and the other links are served in between.
final class LinkChannels {
    /// Chunks sent per turn of the main loop before it yields (64 KiB each over a fast link).
    static let chunksPerTurn = 16
    /// How often a Bluetooth link's kernel queue is looked at while data waits for it to drain.
    static let bluetoothPollInterval: Duration = .milliseconds(4)
    /// How long our OPEN may wait for the peer's answer (its app has `Channels.answerTimeout`).
    static let openTimeout: Duration = .seconds(15)

    let peer: PeerID
    let peerName: String
    private let link: ChannelLink
    private let handlers: (ChannelName) -> ChannelHandler?
    private var streams: ChannelMultiplexer
    private var rate = DelayBasedRateControl()
    private var endpoints: [StreamID: StreamEndpoint] = [:]
    /// Our OPENs waiting for an answer.
    private var opening: [StreamID: PendingOpen] = [:]
    /// Streams the peer opened whose owner has not answered: the service's end of each.
    private var offered: [StreamID: StreamIO] = [:]
    /// Streams with something to read from their app, in turn.
    private var readyQueue: [StreamID] = []
    /// The pending turn that sends (`schedulePump`).
    private var turnSource: EventSource?
    private var pollSource: EventSource?
    private var readBuffer = [UInt8](repeating: 0, count: ChannelWire.maxDataBytes)
    /// Where DATA is built and sealed: an app's bytes are read straight behind the header.
    private var sendBuffer = [UInt8](repeating: 0, count: SealedFrameLayout.bufferBytes(bodyBytes: ChannelWire.dataHeaderBytes + ChannelWire.maxDataBytes))
    private static let payloadOffset = SealedFrameLayout.bodyOffset + ChannelWire.dataHeaderBytes
    /// Datagrams dropped because the link was busy, for the log.
    private var droppedDatagrams = 0
    /// When the rate control's state was last logged (debug), at most every `rateLogIntervalUs`.
    private var lastRateLogUs: UInt64 = 0
    private static let rateLogIntervalUs: UInt64 = 2_000_000
    /// Over IP, the link's UDP path for datagram streams (made with the first one).
    private var udp: ChannelDatagramPath?
    private var closed = false

    private struct PendingOpen {
        let channel: ChannelName
        let mode: StreamMode
        let ends: StreamEndKind
        let endedAbruptly: (String) -> Void
        let completion: (Result<StreamOwnerEnd, ServiceError>) -> Void
        let timer: EventSource
    }

    init(link: ChannelLink, peer: PeerID, peerName: String, handlers: @escaping (ChannelName) -> ChannelHandler?) {
        self.link = link
        self.peer = peer
        self.peerName = peerName
        self.handlers = handlers
        streams = ChannelMultiplexer(isInitiator: link.isOutgoing)
        link.outputDrained = { [weak self] in self?.schedulePump() }
    }

    private var who: String { peerName.isEmpty ? peer.description : "\(peerName) (\(peer))" }

    // MARK: Opening

    /// Opens a stream to the peer's `channel`; `completion` gets this side's end, of the kind
    /// `ends` asks for (the caller owns it), once the peer's owner took it, or the reason it did not.
    func open(_ channel: ChannelName, mode: StreamMode, ends: StreamEndKind, endedAbruptly: @escaping (String) -> Void,
              completion: @escaping (Result<StreamOwnerEnd, ServiceError>) -> Void) {
        guard !closed else { return completion(.failure(.notConnected("the link to \(who) closed"))) }
        guard let (id, frame) = streams.open(channel, mode: mode, datagramPort: mode == .datagrams ? datagramPort() : 0) else {
            return completion(.failure(.notAvailable("the link to \(who) carries \(streams.limits.maxStreams) streams already: close one first")))
        }
        let timer = Timer.after(Self.openTimeout) { [weak self] in
            guard let self, let pending = opening.removeValue(forKey: id) else { return }
            send(streams.reset(id, reason: .unspecified))
            pending.completion(.failure(.rejected("\(who) did not answer the stream to \(channel) within \(Self.openTimeout)")))
        }
        opening[id] = PendingOpen(channel: channel, mode: mode, ends: ends, endedAbruptly: endedAbruptly, completion: completion, timer: timer)
        Log.debug("channels: opening \(id) (\(mode)) to \(channel) on \(who)")
        send(frame)
    }

    // MARK: The link

    /// A channel frame body from the peer (valid during the call only).
    /// - Throws: a `ChannelFrameError` or `ChannelProtocolError`: the link ends with a protocol error.
    func received(_ body: ArraySlice<UInt8>) throws {
        if body.first == ChannelFrameType.data.rawValue {
            // The bulk path: the payload goes to the app from where it was decrypted.
            let data = try ChannelDataFrame(body: body)
            guard try streams.receiveData(data.stream, endOfMessage: data.endOfMessage, sentAtUs: data.sentAtUs,
                                          payloadBytes: data.payload.count, nowUs: Self.clockUs()),
                  let endpoint = endpoints[data.stream] else { return }
            return deliver(data.payload, endOfMessage: data.endOfMessage, to: endpoint)
        }
        let frame = try ChannelFrame(body: body)
        let (event, reply) = try streams.receive(frame, nowUs: Self.clockUs())
        if let reply { send(reply) }
        guard let event else { return }
        handle(event)
    }

    /// Everything of one read from the link was handled: report what arrived (FEEDBACK).
    func inputDrained() {
        if let feedback = streams.takeFeedback() { send(feedback) }
    }

    /// The link is gone: every stream ends abruptly, every open fails.
    func linkClosed(reason: String) {
        guard !closed else { return }
        closed = true
        turnSource = nil
        pollSource = nil
        for (id, pending) in opening {
            pending.timer.cancel()
            pending.completion(.failure(.notConnected("the link to \(who) closed before it answered the stream to \(pending.channel)")))
            opening[id] = nil
        }
        for end in offered.values { end.abort() }
        offered = [:]
        udp = nil
        for endpoint in endpoints.values {
            endpoint.finish(abort: true)
            endpoint.endedAbruptly("the link to \(who) closed (\(reason))")
        }
        endpoints = [:]
        if droppedDatagrams > 0 { Log.info("channels: \(droppedDatagrams) datagrams for \(who) dropped while the link was busy") }
    }

    /// The service stops: each stream is reset so the peer's apps see an abrupt end at once.
    func resetAll(_ reason: ResetReason) {
        for id in Array(endpoints.keys) { resetStream(id, reason, tellOwner: "the service stopped") }
    }

    // MARK: Events

    private func handle(_ event: ChannelEvent) {
        switch event {
        case .openRequested(let id, let channel, let mode):
            offer(id, channel: channel, mode: mode)
        case .accepted(let id):
            accepted(id)
        case .refused(let id, let reason):
            guard let pending = opening.removeValue(forKey: id) else { return }
            pending.timer.cancel()
            Log.debug("channels: \(who) refused \(id) to \(pending.channel): \(reason)")
            pending.completion(.failure(.rejected(Self.refusal(reason, channel: pending.channel, on: who))))
        case .data(let id, let bytes, let endOfMessage):
            guard let endpoint = endpoints[id] else { return }
            deliver(bytes[...], endOfMessage: endOfMessage, to: endpoint)
        case .datagram(let id, let bytes):
            guard let endpoint = endpoints[id] else { return }
            // Dropped when the app's queue is full: datagrams never wait.
            _ = bytes.withUnsafeBytes { endpoint.end.write($0) }
        case .creditAvailable(let id):
            if let endpoint = endpoints[id], endpoint.readWatch == nil { enqueue(endpoint) }
        case .endOfStream(let id):
            guard let endpoint = endpoints[id] else { return }
            endpoint.peerFinished = true
            flush(endpoint)
        case .reset(let id, let reason):
            if let pending = opening.removeValue(forKey: id) {
                pending.timer.cancel()
                pending.completion(.failure(.rejected("\(who) ended the stream to \(pending.channel) before it opened")))
            }
            offered.removeValue(forKey: id)?.abort()
            guard let endpoint = endpoints.removeValue(forKey: id) else { return }
            Log.debug("channels: \(who) reset \(id): \(reason)")
            endpoint.finish(abort: true)
            endpoint.endedAbruptly("\(who) ended the stream abruptly: \(reason)")
        case .feedback(let receivedBytes, let delayUs):
            let nowUs = Self.monotonicUs()
            let transport = link.transportReport
            rate.feedback(receivedBytes: receivedBytes, delayUs: delayUs, nowUs: nowUs, transport: transport)
            if nowUs >= lastRateLogUs + Self.rateLogIntervalUs {
                lastRateLogUs = nowUs
                logRate(transport)
            }
            schedulePump()
        }
    }

    private func offer(_ id: StreamID, channel: ChannelName, mode: StreamMode) {
        guard let handler = handlers(channel) else {
            Log.debug("channels: \(who) opened \(id) to \(channel), which nobody registered")
            return send(streams.refuse(id, reason: .notRegistered))
        }
        // A component of the service takes byte streams only: a peer opening anything else to
        // one of its channels is refused, as an app refuses.
        guard handler.streamEnds == .socket || mode == .stream else {
            Log.debug("channels: \(who) opened \(id) to \(channel) as \(mode), which its owner does not take")
            return send(streams.refuse(id, reason: .appRefused))
        }
        let pair: (service: StreamIO, owner: StreamOwnerEnd)
        do {
            pair = try handler.streamEnds.makeEnds(mode: mode, windowBytes: streams.limits.maxStreamWindowBytes)
        } catch {
            Log.warning("channels: cannot make the ends of a stream from \(who): \(error)")
            return send(streams.refuse(id, reason: .appDidNotAnswer))
        }
        offered[id] = pair.service
        let stream = IncomingStream(peer: peer, peerName: peerName, channel: channel, mode: mode, id: id, end: pair.owner)
        handler.newStream(stream) { [weak self, weak handler] refusal in
            guard let self, let service = offered.removeValue(forKey: id) else { return }
            if let refusal {
                service.close()
                return send(streams.refuse(id, reason: refusal))
            }
            guard let frame = streams.accept(id, datagramPort: mode == .datagrams ? datagramPort() : 0) else {
                // The opener gave up meanwhile: the owner's end sees the stream end.
                return service.abort()
            }
            send(frame)
            Log.debug("channels: \(id) (\(mode)) from \(who) to \(channel) accepted")
            start(StreamEndpoint(id: id, channel: channel, end: service) { [weak handler] reason in
                handler?.streamEnded(stream, reason: reason)
            })
        }
    }

    private func accepted(_ id: StreamID) {
        guard let pending = opening.removeValue(forKey: id) else { return }
        pending.timer.cancel()
        let pair: (service: StreamIO, owner: StreamOwnerEnd)
        do {
            pair = try pending.ends.makeEnds(mode: pending.mode, windowBytes: streams.limits.maxStreamWindowBytes)
        } catch {
            send(streams.reset(id, reason: .unspecified))
            return pending.completion(.failure(.failed("cannot make the ends of the stream: \(error)")))
        }
        Log.debug("channels: \(who) accepted \(id) to \(pending.channel)")
        start(StreamEndpoint(id: id, channel: pending.channel, end: pair.service, endedAbruptly: pending.endedAbruptly))
        pending.completion(.success(pair.owner))
    }

    private func start(_ endpoint: StreamEndpoint) {
        endpoints[endpoint.id] = endpoint
        endpoint.takenWatch = endpoint.end.watchTaken { [weak self, weak endpoint] taken in
            guard let self, let endpoint, taken > 0 else { return }
            if let window = delivered(endpoint.id, bytes: taken) { send(window) }
            finishIfDone(endpoint)
        }
        if endpoint.mode == .datagrams {
            endpoint.readWatch = endpoint.end.watchReadable { [weak self, weak endpoint] in
                guard let self, let endpoint else { return false }
                return forwardDatagrams(endpoint)
            }
        } else {
            armRead(endpoint)
        }
    }

    // MARK: From the app to the peer

    private func armRead(_ endpoint: StreamEndpoint) {
        guard endpoint.readWatch == nil, !endpoint.appFinished else { return }
        endpoint.readWatch = endpoint.end.watchReadable { [weak self, weak endpoint] in
            guard let self, let endpoint else { return false }
            endpoint.readWatch = nil
            enqueue(endpoint)
            return false
        }
    }

    private func enqueue(_ endpoint: StreamEndpoint) {
        guard !endpoint.isQueued, !endpoint.appFinished else { return }
        endpoint.isQueued = true
        readyQueue.append(endpoint.id)
        schedulePump()
    }

    /// Bulk data may go now without waiting behind, or delaying, anything else on the link.
    private var linkHasRoom: Bool {
        guard link.pendingOutputBytes == 0 else { return false }
        switch link.transport {
        case .bluetooth: return (link.kernelQueuedOutputBytes ?? 0) < ChannelChunking.bluetoothChunkBytes
        case .ip: return rate.allows(chunkBytes)
        }
    }

    private var chunkBytes: Int {
        switch link.transport {
        case .bluetooth: ChannelChunking.bluetoothChunkBytes
        case .ip: rate.chunkBytes
        }
    }

    /// Sends from the ready streams in a main-loop turn of its own, soon. What gives the link room
    /// (the peer's FEEDBACK and WINDOW, drained output, an app's readable socket) comes many times
    /// per wake-up of the link: each sending its own `chunksPerTurn` at once left one wake-up
    /// unbounded (with 4 MiB windows, one wake-up's 1,722 frames sealed 873 chunks, 55 MiB, in
    /// 423 ms while the bus waited). Coalesced into one turn, the budget holds per turn.
    private func schedulePump() {
        guard !closed, turnSource == nil else { return }
        turnSource = Timer.after(.zero) { [weak self] in
            self?.turnSource = nil
            self?.pump()
        }
    }

    /// Sends one chunk from each ready stream in turn while the link has room, for at most
    /// `chunksPerTurn` chunks; then yields to the main loop.
    private func pump() {
        guard !closed, turnSource == nil else { return }
        var budget = Self.chunksPerTurn
        while budget > 0, !readyQueue.isEmpty, linkHasRoom {
            let id = readyQueue.removeFirst()
            guard let endpoint = endpoints[id] else { continue }
            endpoint.isQueued = false
            budget -= 1
            switch sendChunk(from: endpoint) {
            case .sent:
                endpoint.isQueued = true
                readyQueue.append(id)
            case .wouldBlock:
                armRead(endpoint)
            case .waitingForCredit, .done:
                break
            }
        }
        guard !readyQueue.isEmpty else { return }
        if budget == 0 {
            schedulePump()
        } else if link.pendingOutputBytes == 0, link.transport == .bluetooth, pollSource == nil {
            // The kernel still holds a chunk: look again shortly (it announces no such moment).
            pollSource = Timer.after(Self.bluetoothPollInterval) { [weak self] in
                self?.pollSource = nil
                self?.pump()
            }
        }
        // Otherwise the link's drained output or the peer's FEEDBACK calls pump again.
    }

    private enum SendOutcome {
        case sent, wouldBlock, waitingForCredit, done
    }

    private func sendChunk(from endpoint: StreamEndpoint) -> SendOutcome {
        let id = endpoint.id
        if endpoint.mode == .messages, let message = endpoint.outgoingMessage {
            return sendFragment(of: message, on: endpoint)
        }
        let credit = streams.sendCredit(id)
        guard credit > 0 else { return .waitingForCredit }
        let result: StreamReadResult
        if endpoint.mode == .messages {
            result = readBuffer.withUnsafeMutableBytes { endpoint.end.read(into: $0) }
        } else {
            let range = Self.payloadOffset..<(Self.payloadOffset + min(credit, chunkBytes))
            result = sendBuffer.withUnsafeMutableBytes { endpoint.end.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[range])) }
        }
        switch result {
        case .bytes(let count):
            if endpoint.mode == .messages {
                endpoint.outgoingMessage = Array(readBuffer[0..<count])
                endpoint.outgoingOffset = 0
                return sendFragment(of: endpoint.outgoingMessage!, on: endpoint)
            }
            sendData(id, payloadBytes: count, endOfMessage: false)
            return .sent
        case .wouldBlock:
            return .wouldBlock
        case .endOfFile:
            endpoint.appFinished = true
            send(streams.close(id))
            finishIfDone(endpoint)
            return .done
        case .tooLarge(let count):
            Log.info("channels: the app on \(id) to \(endpoint.channel) wrote a message of \(count) bytes, over \(ChannelWire.maxMessageBytes): the stream is reset")
            resetStream(id, .messageTooLarge, tellOwner: "the app wrote a message over \(ChannelWire.maxMessageBytes) bytes")
            return .done
        case .failed(let code):
            resetStream(id, .appAborted, tellOwner: "reading the app's socket failed: \(String(cString: strerror(code)))")
            return .done
        }
    }

    private func sendFragment(of message: [UInt8], on endpoint: StreamEndpoint) -> SendOutcome {
        let credit = streams.sendCredit(endpoint.id)
        guard credit > 0 else { return .waitingForCredit }
        let end = min(message.count, endpoint.outgoingOffset + min(credit, chunkBytes))
        let isLast = end == message.count
        sendBuffer.replaceSubrange(Self.payloadOffset..<(Self.payloadOffset + end - endpoint.outgoingOffset),
                                   with: message[endpoint.outgoingOffset..<end])
        sendData(endpoint.id, payloadBytes: end - endpoint.outgoingOffset, endOfMessage: isLast)
        endpoint.outgoingOffset = end
        if isLast { endpoint.outgoingMessage = nil }
        return .sent
    }

    /// Sends the DATA whose `payloadBytes` wait in `sendBuffer` at `payloadOffset`.
    private func sendData(_ id: StreamID, payloadBytes: Int, endOfMessage: Bool) {
        let header = streams.dataHeader(id, payloadBytes: payloadBytes, endOfMessage: endOfMessage, sentAtUs: Self.clockUs())
        sendBuffer.replaceSubrange(SealedFrameLayout.bodyOffset..<Self.payloadOffset, with: header)
        link.sendChannelFrameInPlace(&sendBuffer, bodyBytes: header.count + payloadBytes)
        rate.sent(payloadBytes, nowUs: Self.monotonicUs())
    }

    /// Reads every datagram waiting (a bounded number per turn) and sends each at once, or drops
    /// it when the link is busy: a datagram never waits behind anything.
    private func forwardDatagrams(_ endpoint: StreamEndpoint) -> Bool {
        for _ in 0..<64 {
            let result = readBuffer.withUnsafeMutableBytes {
                endpoint.end.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<ChannelWire.maxDatagramBytes]))
            }
            switch result {
            case .bytes(let count):
                guard let frame = streams.datagram(endpoint.id, payload: Array(readBuffer[0..<count])) else { continue }
                let port = streams.peerDatagramPort(of: endpoint.id)
                if port != 0, let udp {
                    if !udp.send(frame, toPort: port) { droppedDatagrams += 1 }
                } else if link.pendingOutputBytes == 0 {
                    send(frame)
                } else {
                    droppedDatagrams += 1
                }
            case .tooLarge(let count):
                Log.debug("channels: dropped a datagram of \(count) bytes on \(endpoint.id) (at most \(ChannelWire.maxDatagramBytes))")
            case .wouldBlock, .endOfFile:
                return true
            case .failed(let code):
                resetStream(endpoint.id, .appAborted, tellOwner: "reading the app's socket failed: \(String(cString: strerror(code)))")
                return false
            }
        }
        return true
    }

    /// The UDP port this side takes datagrams on, made on first use; 0 over Bluetooth or when no
    /// UDP socket can be had (the datagrams then ride the link).
    private func datagramPort() -> UInt16 {
        if let udp { return udp.port }
        guard let (local, remote) = link.ipEndpoints, let keys = link.result.map(ChannelDatagramKeys.init) else { return 0 }
        do {
            let path = try ChannelDatagramPath(local: local, remote: remote, keys: keys) { [weak self] frame in
                self?.receivedDatagram(frame)
            }
            udp = path
            Log.debug("channels: datagrams with \(who) over UDP, taken on port \(path.port)")
            return path.port
        } catch {
            Log.info("channels: no UDP socket for datagrams with \(who) (\(error)): they ride the link")
            return 0
        }
    }

    /// A CHANNEL_DATAGRAM that came over UDP: like one on the link, except that nothing wrong in it
    /// affects the link (it is dropped).
    private func receivedDatagram(_ frame: ChannelFrame) {
        guard case .datagram = frame, let (event, _) = try? streams.receive(frame, nowUs: Self.clockUs()), let event else { return }
        handle(event)
    }

    // MARK: From the peer to the app

    /// Bytes (or a message's fragment) for the app: written at once when nothing waits before
    /// them, kept (copied) only when the app's socket is full.
    private func deliver(_ payload: ArraySlice<UInt8>, endOfMessage: Bool, to endpoint: StreamEndpoint) {
        if endpoint.mode == .messages {
            endpoint.incomingMessage += payload
            guard endOfMessage else { return }
            endpoint.inbound.append(endpoint.incomingMessage)
            endpoint.incomingMessage = []
            return flush(endpoint)
        }
        guard endpoint.inbound.isEmpty else {
            endpoint.inbound.append(Array(payload))
            return
        }
        switch payload.withUnsafeBytes({ endpoint.end.write($0) }) {
        case .wrote(let count):
            if let window = delivered(endpoint.id, bytes: endpoint.end.creditable(afterWriting: count)) { send(window) }
            guard count < payload.count else { return }
            endpoint.inbound.append(Array(payload.dropFirst(count)))
            flush(endpoint)
        case .wouldBlock:
            endpoint.inbound.append(Array(payload))
            flush(endpoint)
        case .failed(let code):
            Log.debug("channels: the app's end of \(endpoint.id) failed (\(String(cString: strerror(code)))): the stream is reset")
            resetStream(endpoint.id, .appAborted, tellOwner: nil)
        }
    }

    /// Writes what waits for the app until its socket is full; gives the credit back.
    private func flush(_ endpoint: StreamEndpoint) {
        var taken = 0
        while let first = endpoint.inbound.first {
            let result = first.withUnsafeBytes { endpoint.end.write(UnsafeRawBufferPointer(rebasing: $0[endpoint.inboundOffset...])) }
            switch result {
            case .wrote(let count):
                taken += count
                if endpoint.mode == .stream && endpoint.inboundOffset + count < first.count {
                    endpoint.inboundOffset += count
                    continue
                }
                endpoint.inbound.removeFirst()
                endpoint.inboundOffset = 0
                continue
            case .wouldBlock:
                break
            case .failed(let code):
                Log.debug("channels: the app's end of \(endpoint.id) failed (\(String(cString: strerror(code)))): the stream is reset")
                resetStream(endpoint.id, .appAborted, tellOwner: nil)
                return
            }
            break
        }
        if taken > 0, let window = delivered(endpoint.id, bytes: endpoint.end.creditable(afterWriting: taken)) { send(window) }
        if endpoint.inbound.isEmpty {
            endpoint.writeWatch = nil
            if endpoint.peerFinished { endpoint.end.shutdownWrite() }
            finishIfDone(endpoint)
        } else if endpoint.writeWatch == nil {
            endpoint.writeWatch = endpoint.end.watchWritable { [weak self, weak endpoint] in
                guard let self, let endpoint else { return false }
                endpoint.writeWatch = nil
                flush(endpoint)
                return false
            }
        }
    }

    /// The multiplexer's `delivered`, with what its window's growth needs: the link's round trip
    /// (over IP, TCP's, read only when a window's growth is judged; Bluetooth's windows stay as
    /// they are).
    private func delivered(_ id: StreamID, bytes: Int) -> ChannelFrame? {
        streams.delivered(id, bytes: bytes, nowUs: Self.monotonicUs(), roundTripUs: link.transportReport?.smoothedRoundTripUs)
    }

    // MARK: Ending

    /// Both directions ended cleanly and the app has every byte: the stream is over.
    private func finishIfDone(_ endpoint: StreamEndpoint) {
        guard endpoint.appFinished, endpoint.peerFinished, endpoint.inbound.isEmpty, !streams.contains(endpoint.id) else { return }
        endpoints[endpoint.id] = nil
        endpoint.finish(abort: false)
        Log.debug("channels: \(endpoint.id) to \(endpoint.channel) with \(who) ended")
    }

    /// Ends a stream abruptly on both sides: RESET to the peer, a reset (or close) of the app's
    /// socket, and its owner told `tellOwner` (nil: the app itself caused it).
    private func resetStream(_ id: StreamID, _ reason: ResetReason, tellOwner: String?) {
        send(streams.reset(id, reason: reason))
        guard let endpoint = endpoints.removeValue(forKey: id) else { return }
        endpoint.finish(abort: true)
        if let tellOwner { endpoint.endedAbruptly(tellOwner) }
    }

    private func send(_ frame: ChannelFrame?) {
        guard let frame, !closed else { return }
        link.sendChannelFrame(frame.encodedBody())
    }

    // MARK: Helpers

    private func logRate(_ transport: TransportReport?) {
        func ms(_ us: Int64?) -> String { us.map { String(format: "%.1f", Double($0) / 1000) } ?? "?" }
        Log.debug("channels: rate to \(who): window \(rate.windowBytes / 1024) KiB, \(rate.inFlightBytes / 1024) KiB in flight, "
            + "queue \(ms(rate.queueingUs)) ms (one-way \(ms(rate.oneWayQueueingUs)), TCP \(ms(transport?.queueingUs))), "
            + "target \(ms(rate.targetUs)) ms, round trip \(ms(rate.roundTripUs)) ms (TCP \(ms(transport?.minimumRoundTripUs))), "
            + "\(rate.inSlowStart ? "slow start, " : "")chunk \(rate.chunkBytes / 1024) KiB, \(rate.acknowledgedBytes >> 20) MiB acknowledged")
    }

    static func refusal(_ reason: RefuseReason, channel: ChannelName, on who: String) -> String {
        switch reason {
        case .notRegistered: "no app on \(who) has registered \(channel)"
        case .appRefused: "the app on \(who) that registered \(channel) refused the stream"
        case .appDidNotAnswer: "the app on \(who) that registered \(channel) did not answer"
        case .tooManyStreams: "\(who) takes no more streams on this link: close one first"
        default: "\(who) refused the stream to \(channel) (\(reason))"
        }
    }

    /// This side's clock for DATA's `sentAtUs` and delay samples: microseconds, modulo 2^32.
    private static func clockUs() -> UInt32 { UInt32(truncatingIfNeeded: monotonicUs()) }

    static func monotonicUs() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }
}
