import GIO
import PeerVoiceCore

/// One IP link's UDP path for channel datagrams (docs/PROTOCOL.md §13.6): a socket on the link's
/// own host, each CHANNEL_DATAGRAM sealed in a record of its own under the link's datagram keys
/// (`ChannelDatagramKeys`) and sent to the peer's host at the port it announced. A datagram that
/// the kernel does not take at once is dropped; one that arrives and does not open, or is not a
/// CHANNEL_DATAGRAM, is dropped too: nothing in a datagram affects the link.
final class ChannelDatagramPath {
    let port: UInt16
    private let socket: Socket
    private let remoteHost: String
    private var sealer: RecordSealer
    private var opener: RecordOpener
    private var watch: EventSource?
    private var buffer = [UInt8](repeating: 0, count: 2048)

    init(local: IPEndpoint, remote: IPEndpoint, keys: ChannelDatagramKeys,
         received: @escaping (ChannelFrame) -> Void) throws(SystemError) {
        socket = try Socket.datagram(boundTo: IPEndpoint(host: local.host, port: 0))
        port = socket.localEndpoint?.port ?? 0
        remoteHost = remote.host
        sealer = keys.makeSealer()
        opener = keys.makeOpener()
        watch = FDWatch.add(fd: socket.fd, events: .readable) { [unowned self] _ in
            for _ in 0..<64 {
                guard let (count, _) = buffer.withUnsafeMutableBytes({ socket.receive(datagramInto: $0) }) else { break }
                if let frame = open(buffer[0..<count]) { received(frame) }
            }
            return true
        }
    }

    deinit { watch?.cancel() }

    /// Seals `frame` and sends it to the peer's `port`; false when it was dropped.
    func send(_ frame: ChannelFrame, toPort port: UInt16) -> Bool {
        guard !sealer.shouldRekey, let record = try? sealer.seal(frame.encodedBody()) else { return false }
        return socket.send(datagram: Wire.lengthPrefixed(record), to: IPEndpoint(host: remoteHost, port: port))
    }

    private func open(_ datagram: ArraySlice<UInt8>) -> ChannelFrame? {
        guard datagram.count > Wire.lengthPrefixBytes,
              datagram.prefix(Wire.lengthPrefixBytes).reduce(0, { $0 << 8 | Int($1) }) == datagram.count - Wire.lengthPrefixBytes,
              let plaintext = try? opener.open(datagram.dropFirst(Wire.lengthPrefixBytes)) else { return nil }
        return try? ChannelFrame(body: plaintext[...])
    }
}
