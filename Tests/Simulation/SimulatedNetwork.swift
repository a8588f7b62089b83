import PeerVoiceCore
import SeededRandom

/// Hosts, their listeners and the byte streams between them, in simulated time. A stream keeps
/// TCP's promises (bytes in order, each once, a close after the last byte) unless a fault says
/// otherwise; faults act on what one `send` carried (a handshake message or a sealed record):
/// a corrupted record (the record layer drops it), a duplicated one (dropped as a replay), two
/// swapped (the earlier dropped as a replay), a reset (both ends closed, what was in flight
/// lost), a partition (nothing passes between two hosts; streams stall and dials time out until
/// it heals). Deliveries are split at random byte boundaries, as reads are.
public final class SimulatedNetwork {
    /// How often each fault hits what one `send` carried while faults are on.
    public struct Faults: Sendable {
        public var corrupt = 0.0
        public var duplicate = 0.0
        public var reorder = 0.0
        public init() {}
    }

    private let scheduler: Scheduler
    private var random: SplitMix64
    private var listeners: [String: (SimulatedStream.End) -> Void] = [:]
    private var partitions: Set<String> = []
    public var faults = Faults()
    /// One-way delay of a stream's bytes.
    public var latency: ClosedRange<Duration> = .microseconds(200)...(.milliseconds(20))
    /// How long a dial waits for an answer that does not come (the daemon's 5 s).
    public static let dialTimeout: Duration = .seconds(5)
    private var nextStreamID = 0
    /// Streams open now, for bounds and for resets.
    private(set) var streams: [Int: SimulatedStream] = [:]

    public init(scheduler: Scheduler, seed: UInt64) {
        self.scheduler = scheduler
        random = SplitMix64(seed: seed)
    }

    // MARK: Hosts

    /// `address` (`ip:HOST:PORT`) accepts streams now.
    public func listen(at address: String, accept: @escaping (SimulatedStream.End) -> Void) {
        listeners[address] = accept
    }

    public func stopListening(at address: String) { listeners[address] = nil }

    /// Nothing passes between the two hosts until `heal`.
    public func partition(_ a: String, _ b: String) { partitions.insert(Self.pairKey(a, b)) }
    public func heal(_ a: String, _ b: String) { partitions.remove(Self.pairKey(a, b)) }
    public func healAll() { partitions = [] }
    func isPartitioned(_ a: String, _ b: String) -> Bool { partitions.contains(Self.pairKey(a, b)) }

    private static func pairKey(_ a: String, _ b: String) -> String { a < b ? "\(a)|\(b)" : "\(b)|\(a)" }

    static func host(of address: String) -> String {
        let parts = address.split(separator: ":")
        return parts.count == 3 ? String(parts[1]) : address
    }

    /// Dials `address` from `host`: the stream's end once connected, or an error (refused at
    /// once when nobody listens; after the dial timeout when partitioned).
    public func dial(from host: String, to address: String, completion: @escaping (Result<SimulatedStream.End, DialFailure>) -> Void) {
        let remoteHost = Self.host(of: address)
        let delay = randomLatency() * 2
        guard !isPartitioned(host, remoteHost) else {
            scheduler.after(Self.dialTimeout) { completion(.failure(.timedOut)) }
            return
        }
        scheduler.after(delay) { [self] in
            guard !isPartitioned(host, remoteHost) else {
                scheduler.after(Self.dialTimeout - delay) { completion(.failure(.timedOut)) }
                return
            }
            guard let accept = listeners[address] else { return completion(.failure(.refused)) }
            let stream = SimulatedStream(id: nextStreamID, network: self, hosts: (host, remoteHost))
            nextStreamID += 1
            streams[stream.id] = stream
            accept(stream.ends.1)
            completion(.success(stream.ends.0))
        }
    }

    public enum DialFailure: Error { case refused, timedOut }

    /// Every open stream of `host` ends at once for its peer too (a killed process: the kernel resets).
    public func resetStreams(of host: String) {
        for id in streams.keys.sorted() where streams[id]!.involves(host) { streams[id]!.reset() }
    }

    /// Every open stream of `host` falls silent (a machine that lost power or its address: the
    /// peers notice only by the silence).
    public func abandonStreams(of host: String) {
        for id in streams.keys.sorted() where streams[id]!.involves(host) { streams[id]!.abandon() }
    }

    /// Resets one stream, chosen by `pick` among the open ones.
    public func resetOneStream(pick: UInt64) {
        let ids = streams.keys.sorted()
        guard !ids.isEmpty else { return }
        streams[ids[Int(pick % UInt64(ids.count))]]!.reset()
    }

    func forget(_ stream: SimulatedStream) { streams[stream.id] = nil }

    func randomLatency() -> Duration {
        let low = latency.lowerBound, span = latency.upperBound - latency.lowerBound
        return low + span * random.uniform()
    }

    func draw() -> Double { random.uniform() }
    func drawInt(_ bound: Int) -> Int { Int(random.next() % UInt64(max(bound, 1))) }

    var scheduling: Scheduler { scheduler }
}

/// One simulated byte stream between two hosts, both directions.
public final class SimulatedStream {
    /// One end: what its owner sends and what it receives.
    public final class End {
        /// Weak: the network holds a stream while it lives; a dead one's ends do nothing.
        fileprivate weak var stream: SimulatedStream?
        fileprivate let side: Int
        /// Bytes that arrived (in order, split as reads split them).
        public var onBytes: ([UInt8]) -> Void = { _ in }
        /// The other end closed, or the stream was reset.
        public var onClose: () -> Void = {}
        fileprivate var isClosed = false

        fileprivate init(stream: SimulatedStream, side: Int) {
            self.stream = stream
            self.side = side
            localHost = side == 0 ? stream.hosts.0 : stream.hosts.1
            remoteHost = side == 0 ? stream.hosts.1 : stream.hosts.0
        }

        /// Sends bytes (one handshake message or one record: what faults act on).
        public func send(_ bytes: [UInt8]) { stream?.send(bytes, from: side) }

        /// Closes after what was sent (FIN); nothing more is received.
        public func close() {
            guard !isClosed else { return }
            isClosed = true
            stream?.close(from: side)
        }

        public let localHost: String
        public let remoteHost: String
    }

    private enum Piece {
        case bytes([UInt8])
        case fin
    }

    let id: Int
    let hosts: (String, String)
    private unowned let network: SimulatedNetwork
    private(set) var ends: (End, End)!
    /// Per direction (0: from end 0): pieces waiting, and whether a delivery is scheduled.
    private var queues: [[(piece: Piece, at: Duration)]] = [[], []]
    private var pumping = [false, false]
    private var isDead = false

    fileprivate init(id: Int, network: SimulatedNetwork, hosts: (String, String)) {
        self.id = id
        self.network = network
        self.hosts = hosts
        ends = (End(stream: self, side: 0), End(stream: self, side: 1))
    }

    func involves(_ host: String) -> Bool { hosts.0 == host || hosts.1 == host }

    private var scheduler: Scheduler { network.scheduling }

    fileprivate func send(_ bytes: [UInt8], from side: Int) {
        guard !isDead, !(side == 0 ? ends.0 : ends.1).isClosed else { return }
        let faults = network.faults
        let at = max(scheduler.now + network.randomLatency(), queues[side].last?.at ?? .zero)
        let roll = network.draw()
        if roll < faults.corrupt, bytes.count > 4 {
            // After the 4-byte length, or the framing breaks (that ends the link: a reset does too).
            var corrupted = bytes
            corrupted[4 + network.drawInt(bytes.count - 4)] ^= 0x5A
            queues[side].append((.bytes(corrupted), at))
        } else if roll < faults.corrupt + faults.duplicate {
            queues[side].append((.bytes(bytes), at))
            queues[side].append((.bytes(bytes), at))
        } else if roll < faults.corrupt + faults.duplicate + faults.reorder,
                  let last = queues[side].last, case .bytes(let previous) = last.piece {
            // Overtakes the piece still waiting before it.
            queues[side][queues[side].count - 1] = (.bytes(bytes), last.at)
            queues[side].append((.bytes(previous), at))
        } else {
            queues[side].append((.bytes(bytes), at))
        }
        pump(side)
    }

    fileprivate func close(from side: Int) {
        guard !isDead else { return }
        let at = max(scheduler.now + network.randomLatency(), queues[side].last?.at ?? .zero)
        queues[side].append((.fin, at))
        pump(side)
    }

    /// Both ends closed at once, what was in flight lost (an RST).
    func reset() {
        guard !isDead else { return }
        isDead = true
        network.forget(self)
        for end in [ends.0, ends.1] where !end.isClosed {
            end.isClosed = true
            scheduler.after(network.randomLatency()) { end.onClose() }
        }
    }

    /// Nothing more passes, and nobody is told.
    func abandon() {
        isDead = true
        network.forget(self)
    }

    private func pump(_ side: Int) {
        guard !pumping[side], let first = queues[side].first else { return }
        pumping[side] = true
        scheduler.after(first.at - scheduler.now) { [self] in
            pumping[side] = false
            deliverNext(side)
        }
    }

    private func deliverNext(_ side: Int) {
        guard !isDead, !queues[side].isEmpty else { return }
        if network.isPartitioned(hosts.0, hosts.1) {
            // TCP keeps retransmitting: the bytes pass once the partition heals.
            pumping[side] = true
            scheduler.after(.milliseconds(200)) { [self] in
                pumping[side] = false
                deliverNext(side)
            }
            return
        }
        let (piece, _) = queues[side].removeFirst()
        let receiver = side == 0 ? ends.1 : ends.0
        switch piece {
        case .bytes(let bytes):
            if !receiver.isClosed {
                // Reads split the bytes anywhere.
                var start = 0
                while start < bytes.count {
                    let length = network.draw() < 0.7 ? bytes.count - start : 1 + network.drawInt(bytes.count - start)
                    receiver.onBytes(Array(bytes[start..<start + length]))
                    start += length
                    if isDead || receiver.isClosed { break }
                }
            }
        case .fin:
            if !receiver.isClosed {
                receiver.isClosed = true
                receiver.onClose()
            }
            let sender = side == 0 ? ends.0 : ends.1
            if sender.isClosed && receiver.isClosed {
                isDead = true
                network.forget(self)
            }
        }
        pump(side)
    }
}
