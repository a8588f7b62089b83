import GIO
import PeerVoiceCore

/// The service's side of one running stream: its end (a socket, or a pipe to a component's
/// thread), the bytes the peer sent that wait for the owner (at most the stream's window, because
/// the peer sends no more than it was granted), a message read from the app that waits for
/// credit, and how the stream's two directions stand.
/// `LinkChannels` owns every endpoint of its link and drives them.
final class StreamEndpoint {
    let id: StreamID
    let channel: ChannelName
    let end: StreamIO
    /// Told when the stream ends abruptly (the owner's StreamClosed, or a component's callback).
    let endedAbruptly: (String) -> Void

    /// Waiting for the app, oldest first: byte chunks (stream) or whole messages.
    var inbound: [[UInt8]] = []
    /// How much of `inbound[0]` the app has taken (stream mode).
    var inboundOffset = 0
    /// Fragments of the message arriving now (messages mode).
    var incomingMessage: [UInt8] = []
    /// A message read from the app and not yet all sent, and how much of it went.
    var outgoingMessage: [UInt8]?
    var outgoingOffset = 0

    var readWatch: EventSource?
    var writeWatch: EventSource?
    /// Where credit follows what the owner took (a pipe): the watch that hears of it.
    var takenWatch: EventSource?
    /// In its link's queue of streams with something to read.
    var isQueued = false
    /// The app's direction ended (end of file read, CLOSE sent).
    var appFinished = false
    /// The peer's direction ended (CLOSE received); end of file once `inbound` is empty.
    var peerFinished = false

    init(id: StreamID, channel: ChannelName, end: StreamIO, endedAbruptly: @escaping (String) -> Void) {
        self.id = id
        self.channel = channel
        self.end = end
        self.endedAbruptly = endedAbruptly
    }

    var mode: StreamMode { end.mode }

    /// Stops watching and closes: cleanly (`abort` false), or with a reset where the end has one.
    func finish(abort: Bool) {
        readWatch = nil
        writeWatch = nil
        takenWatch = nil
        inbound = []
        if abort { end.abort() } else { end.close() }
    }
}
