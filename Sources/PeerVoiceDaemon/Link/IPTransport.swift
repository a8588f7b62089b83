import GIO
import Glibc
import PeerVoiceCore

/// TCP for peer links: a listener (`--listen`, or the default LAN one) and outgoing dials.
final class IPTransport {
    /// How long a dial may take before it counts as failed.
    static let dialTimeout: Duration = .seconds(5)

    /// A connection someone opened to us.
    var onIncoming: (StreamConnection, IPEndpoint) -> Void = { _, _ in }

    private var listener: Socket?
    private var acceptWatch: EventSource?
    /// `HOST:PORT` we listen on ("" when not listening), with the real port if 0 was asked for.
    private(set) var listenAddress = ""
    private(set) var listenPort: UInt16 = 0
    /// Where dials come from: the listen host when it is one address (not 0.0.0.0 or ::), so a
    /// peer sees our links come from the address it can dial back.
    private var dialSource: IPEndpoint?

    /// Starts listening on `address` (`HOST:PORT`, `[V6]:PORT`; port 0 picks one).
    func listen(on address: String) throws(ServiceError) {
        let endpoint = try Self.parseListenAddress(address)
        let socket: Socket
        do {
            socket = try Socket.listening(on: endpoint)
        } catch {
            throw .failed("cannot listen on \(address): \(error)")
        }
        let bound = socket.localEndpoint ?? endpoint
        listener = socket
        listenPort = bound.port
        listenAddress = bound.description
        dialSource = endpoint.host == "0.0.0.0" || endpoint.host == "::" ? nil : IPEndpoint(host: endpoint.host, port: 0)
        acceptWatch = FDWatch.add(fd: socket.fd, events: .readable) { [unowned self] _ in
            acceptWaiting()
            return true
        }
        Log.info("listening for IP peers on \(listenAddress)")
    }

    var isListening: Bool { listener != nil }

    /// Closes the listener; links it accepted stay open.
    func stopListening() {
        guard let listener else { return }
        acceptWatch?.cancel()
        acceptWatch = nil
        listener.close()
        self.listener = nil
        Log.info("no longer listening for IP peers on \(listenAddress)")
        listenAddress = ""
        listenPort = 0
    }

    private func acceptWaiting() {
        guard let listener else { return }
        do {
            while let (socket, remote) = try listener.accept() {
                Log.debug("connection from \(remote)")
                onIncoming(StreamConnection(socket: socket), remote)
            }
        } catch {
            Log.warning("accepting IP peers failed: \(error)")
        }
    }

    /// Connects to `endpoint`; `completion` runs once, on the main loop, with the stream or an
    /// error a person can read. Cancelling the returned source abandons the attempt.
    func dial(_ endpoint: IPEndpoint, completion: @escaping (Result<StreamConnection, ServiceError>) -> Void) -> DialAttempt {
        // The fd watch and the timer: whichever fires first ends the attempt, as cancelling does.
        var sources: [EventSource] = []
        let attempt = DialAttempt { sources.forEach { $0.cancel() } }
        let socket: Socket
        do {
            socket = try Socket.connecting(to: endpoint, from: dialSource)
        } catch {
            // Reported from the main loop, as every other outcome, so callers see one order of events.
            sources = [Timer.after(.zero) { completion(.failure(.failed("cannot reach \(endpoint): \(error)"))) }]
            return attempt
        }
        let finish = { (result: Result<StreamConnection, ServiceError>) in
            sources.forEach { $0.cancel() }
            completion(result)
        }
        sources = [
            FDWatch.add(fd: socket.fd, events: .writable) { _ in
                let code = socket.pendingError
                if code == 0 {
                    finish(.success(StreamConnection(socket: socket)))
                } else {
                    finish(.failure(.failed("cannot reach \(endpoint): \(String(cString: strerror(code)))")))
                }
                return false
            },
            Timer.after(Self.dialTimeout) {
                finish(.failure(.failed("cannot reach \(endpoint): no answer within \(Self.dialTimeout.components.seconds) s")))
            },
        ]
        return attempt
    }

    static func parseListenAddress(_ text: String) throws(ServiceError) -> IPEndpoint {
        if let peer = try? PeerAddress(parsing: "ip:" + text) { return IPEndpoint(host: peer.host, port: peer.port) }
        // Port 0 ("any free port") is fine for a listener though not for a peer id.
        if text.hasSuffix(":0"), let peer = try? PeerAddress(parsing: "ip:" + text.dropLast() + "1") {
            return IPEndpoint(host: peer.host, port: 0)
        }
        throw .invalidArgument("--listen \(text): use HOST:PORT with a numeric address, e.g. 0.0.0.0:47800 or [::]:47800")
    }
}

/// An outgoing dial in progress (TCP, or Bluetooth's Pair and ConnectProfile): cancelling it, or
/// letting go of it, abandons it, and its completion is not called.
final class DialAttempt {
    private var onCancel: (() -> Void)?

    init(onCancel: @escaping () -> Void) {
        self.onCancel = onCancel
    }

    deinit { cancel() }

    func cancel() {
        let action = onCancel
        onCancel = nil
        action?()
    }
}
