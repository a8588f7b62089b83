import PeerVoiceCore

/// What channels need of one open link (a `PeerLink`): sending sealed channel frames, and how
/// much output waits, so that bulk data goes only where it delays nothing else.
protocol ChannelLink: AnyObject {
    /// Bluetooth or IP: decides chunk sizes and whether the delay-based rate control applies.
    var transport: Transport { get }
    /// We dialled the link (our streams are odd).
    var isOutgoing: Bool { get }
    /// Seals and sends one channel frame body now; it may wait in the link's output queue.
    func sendChannelFrame(_ body: [UInt8])
    /// The same for a body already at `SealedFrameLayout.bodyOffset` of `frame`, sealed in place
    /// (the bulk path: no copy of the body); `frame` may be reused once this returns.
    func sendChannelFrameInPlace(_ frame: inout [UInt8], bodyBytes: Int)
    /// Bytes of this link's output the kernel has not taken yet.
    var pendingOutputBytes: Int { get }
    /// Bytes the kernel holds in the socket's send queue, not yet on their way (nil: unknown).
    var kernelQueuedOutputBytes: Int? { get }
    /// Over IP, what the kernel's TCP knows of the path (nil over Bluetooth, or when the kernel
    /// does not say).
    var transportReport: TransportReport? { get }
    /// Called whenever the link's own output queue has emptied.
    var outputDrained: () -> Void { get set }
    /// The link's keys, once its handshake is done (channel datagram keys derive from them).
    var result: HandshakeResult? { get }
    /// Over IP, this side's and the peer's addresses of the link (channel datagrams go between
    /// the same hosts); nil over Bluetooth.
    var ipEndpoints: (local: IPEndpoint, remote: IPEndpoint)? { get }
}

/// A buffer that `ChannelLink.sendChannelFrameInPlace` seals: the length prefix, the record's
/// counter, the body, then room for the tag.
enum SealedFrameLayout {
    static let bodyOffset = Wire.lengthPrefixBytes + SealedRecord.headerBytes
    static func bufferBytes(bodyBytes: Int) -> Int { Wire.lengthPrefixBytes + SealedRecord.overheadBytes + bodyBytes }
}

/// One stream a peer opened to a channel, as its owner gets it.
struct IncomingStream {
    let peer: PeerID
    /// The peer's display name, from its HELLO.
    let peerName: String
    let channel: ChannelName
    let mode: StreamMode
    let id: StreamID
    /// The owner's end, of the kind its handler takes (`ChannelHandler.streamEnds`): the owner
    /// closes it.
    let end: StreamOwnerEnd
}

/// Who owns a registered channel: an app on the bus (`BusChannelOwner`), whose streams reach it
/// as socket descriptors, or a component of the service itself (file transfers), whose streams
/// reach it as in-memory pipes.
protocol ChannelHandler: AnyObject {
    /// Sockets (an app on the bus) or pipes (a component on a thread of its own).
    var streamEnds: StreamEndKind { get }
    /// A peer opened a stream to one of this handler's channels. Answer once: nil takes the
    /// stream (the owner now has `stream.end`), a reason refuses it (the handler closes the
    /// end). The opener waits for this answer, at most `Channels.answerTimeout`.
    func newStream(_ stream: IncomingStream, answer: @escaping (RefuseReason?) -> Void)
    /// A stream this handler took ended abruptly (`reason`: words for a person), not by a clean
    /// end of file.
    func streamEnded(_ stream: IncomingStream, reason: String)
}

extension PeerLink: ChannelLink {}
