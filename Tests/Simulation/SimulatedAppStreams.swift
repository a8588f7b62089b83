import PeerVoiceCore

/// An app's byte streams on the app channel `SimulatedAppStreams.channel` (what `peervoicectl
/// open` and `listen` do over `OpenStream` and a registered handler): the opener writes bytes
/// drawn from the seed a piece at a time, as a socket lets it (the next piece once the channel
/// sent the last), then closes; the listening app reads everything and, at the end of the
/// stream, `History` checks it got exactly what was written, in order, once, or that the stream
/// was reset.
final class SimulatedAppStreams {
    static let channel = "org.example.Simulation.Stream"
    static let pieceBytes = 24 * 1024

    /// The opening app's side of one stream.
    fileprivate final class Writer: SimulatedChannelStream {
        /// Weak: the stream and its channels outlive a service that died (the kernel's sockets).
        weak var owner: SimulatedAppStreams?
        let key: Int
        let bytes: [UInt8]
        let channels: SimulatedChannels
        var id: StreamID?
        var written = 0
        var writeTimer: Scheduler.Timer?

        init(owner: SimulatedAppStreams, key: Int, bytes: [UInt8], channels: SimulatedChannels) {
            self.owner = owner
            self.key = key
            self.bytes = bytes
            self.channels = channels
        }

        func channelAccepted() { channelDrained() }
        func channelReceived(_ bytes: [UInt8]) {}

        func channelDrained() {
            guard writeTimer == nil, let id, let owner else { return }
            // The app's next write, once the service read the last one from its socket.
            writeTimer = owner.scheduler.after(.zero) { [weak self] in
                guard let self, let owner = self.owner else { return }
                writeTimer = nil
                owner.service.perform {
                    guard self.channels.pendingBytes(id) == 0, self.written < self.bytes.count else { return }
                    let count = min(SimulatedAppStreams.pieceBytes, self.bytes.count - self.written)
                    self.channels.write(id, Array(self.bytes[self.written..<(self.written + count)]))
                    self.written += count
                    if self.written == self.bytes.count { self.channels.close(id) }
                }
            }
        }

        func channelEnded(clean: Bool, reason: String) {
            writeTimer?.cancel()
            owner?.writers[key] = nil
        }
    }

    /// The listening app's side of one stream: the first 8 bytes name it (the key), the rest is
    /// what it carries.
    fileprivate final class Reader: SimulatedChannelStream {
        weak var owner: SimulatedAppStreams?
        var received: [UInt8] = []

        init(owner: SimulatedAppStreams) {
            self.owner = owner
        }

        func channelAccepted() {}
        func channelDrained() {}
        func channelReceived(_ bytes: [UInt8]) { received += bytes }

        func channelEnded(clean: Bool, reason: String) {
            guard let owner, owner.service.isAlive else { return }
            owner.readers[ObjectIdentifier(self)] = nil
            owner.history.appStreamEnded(received, at: owner.service.peer, clean: clean)
        }
    }

    fileprivate unowned let service: SimulatedService
    fileprivate let scheduler: Scheduler
    fileprivate let history: History
    fileprivate var writers: [Int: Writer] = [:]
    fileprivate var readers: [ObjectIdentifier: Reader] = [:]

    init(service: SimulatedService, scheduler: Scheduler, history: History) {
        self.service = service
        self.scheduler = scheduler
        self.history = history
    }

    /// Opens a stream on `channels` and writes `bytes` (the key first) to it; false when the
    /// link carries as many streams as it takes.
    func open(on channels: SimulatedChannels, key: Int, bytes: [UInt8]) -> Bool {
        let writer = Writer(owner: self, key: key, bytes: bytes, channels: channels)
        guard let id = channels.open(try! ChannelName(Self.channel), for: writer) else { return false }
        writer.id = id
        writers[key] = writer
        return true
    }

    /// The peer opens a stream to the app's channel: the app takes it.
    func takeStream(_ id: StreamID, on channels: SimulatedChannels) -> SimulatedChannelStream {
        let reader = Reader(owner: self)
        readers[ObjectIdentifier(reader)] = reader
        return reader
    }

    var streamCount: Int { writers.count + readers.count }
}
