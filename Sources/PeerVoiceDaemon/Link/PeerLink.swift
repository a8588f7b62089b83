import GIO
import PeerVoiceCore

/// What a link reports to whoever owns it (the service).
protocol PeerLinkDelegate: AnyObject {
    /// Both HELLOs are exchanged: the link is up.
    func linkDidOpen(_ link: PeerLink)
    /// Every frame after the handshake, in order.
    func link(_ link: PeerLink, received frame: Frame)
    /// Every frame of one read has been delivered: a good moment to acknowledge them together.
    func linkDidDrainInput(_ link: PeerLink)
    /// The link is gone; `goodbye` is the peer's reason if it said goodbye.
    func linkDidClose(_ link: PeerLink, reason: String, goodbye: GoodbyeReason?)
}

/// One peer-link connection speaking the wire protocol (docs/PROTOCOL.md) over a byte stream:
/// preamble and HELLO both ways, then frames, with keepalives so a silent peer is noticed.
final class PeerLink {
    /// Sent when nothing else was sent for this long.
    static let keepaliveInterval: Duration = .seconds(1)
    /// A peer silent this long is gone (reported `disconnected` well within 5 s).
    static let silenceLimit: Duration = .seconds(4)
    /// Time allowed from connect to the peer's HELLO.
    static let handshakeLimit: Duration = .seconds(10)

    weak var delegate: PeerLinkDelegate?
    /// Where the connection came from or went to.
    let remote: IPEndpoint
    /// True if we dialled.
    let isOutgoing: Bool
    /// The peer's HELLO, once received.
    private(set) var peerHello: Hello?
    private(set) var isOpen = false
    private(set) var isClosed = false

    private let connection: StreamConnection
    private var decoder = FrameDecoder()
    private var timer: EventSource?
    private let clock = ContinuousClock()
    private let startedAt: ContinuousClock.Instant
    private var lastReceived: ContinuousClock.Instant
    private var lastSent: ContinuousClock.Instant

    init(connection: StreamConnection, remote: IPEndpoint, isOutgoing: Bool) {
        self.connection = connection
        self.remote = remote
        self.isOutgoing = isOutgoing
        startedAt = clock.now
        lastReceived = startedAt
        lastSent = startedAt
    }

    /// Sends our preamble and HELLO and starts reading.
    func start(hello: Hello) {
        connection.onBytes = { [unowned self] bytes in received(bytes) }
        connection.onClose = { [unowned self] reason in finish(reason: reason, goodbye: nil) }
        connection.start()
        connection.send(Preamble.bytes + Frame.hello(hello).encoded())
        timer = Timer.every(milliseconds: 250) { [weak self] in
            self?.checkLiveness()
            return true
        }
    }

    func send(_ frame: Frame) {
        guard !isClosed else { return }
        connection.send(frame.encoded())
        lastSent = clock.now
    }

    /// Closes on purpose, telling the peer why (a `userDisconnected` goodbye means "do not redial").
    func close(goodbye reason: GoodbyeReason, logReason: String) {
        guard !isClosed else { return }
        connection.send(Frame.goodbye(reason).encoded())
        connection.closeAfterFlushing()
        finish(reason: logReason, goodbye: nil)
    }

    /// Closes without a goodbye (the peer may redial).
    func drop(reason: String) {
        guard !isClosed else { return }
        connection.closeAfterFlushing()
        finish(reason: reason, goodbye: nil)
    }

    private func received(_ bytes: ArraySlice<UInt8>) {
        lastReceived = clock.now
        decoder.append(bytes)
        do {
            while !isClosed, let frame = try decoder.next() {
                handle(frame)
            }
            if isOpen && !isClosed { delegate?.linkDidDrainInput(self) }
        } catch {
            Log.info("link \(remote): \(error); closing")
            close(goodbye: .protocolError, logReason: "protocol error: \(error)")
        }
    }

    private func handle(_ frame: Frame) {
        switch frame {
        case .hello(let hello):
            guard peerHello == nil else {
                close(goodbye: .protocolError, logReason: "protocol error: a second HELLO")
                return
            }
            peerHello = hello
            isOpen = true
            delegate?.linkDidOpen(self)
        case _ where peerHello == nil:
            close(goodbye: .protocolError, logReason: "protocol error: \(frame.type) before HELLO")
        case .goodbye(let reason):
            connection.closeAfterFlushing()
            finish(reason: "the peer said goodbye (\(reason))", goodbye: reason)
        case .keepalive:
            break
        default:
            delegate?.link(self, received: frame)
        }
    }

    private func checkLiveness() {
        let now = clock.now
        if !isOpen, now - startedAt > Self.handshakeLimit {
            drop(reason: "no HELLO within \(Self.handshakeLimit)")
        } else if isOpen, now - lastReceived > Self.silenceLimit {
            drop(reason: "the peer was silent for \(Self.silenceLimit)")
        } else if isOpen, now - lastSent >= Self.keepaliveInterval {
            send(.keepalive)
        }
    }

    private func finish(reason: String, goodbye: GoodbyeReason?) {
        guard !isClosed else { return }
        isClosed = true
        timer?.cancel()
        timer = nil
        delegate?.linkDidClose(self, reason: reason, goodbye: goodbye)
    }
}
