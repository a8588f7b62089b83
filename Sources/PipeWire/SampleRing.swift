import PeerVoiceCore

/// Where a `CaptureStream` puts the samples it captures: the producer side of a single-producer,
/// single-consumer ring (PeerVoiceCore's `AudioRing` is meant to conform).
///
/// `write` is called on PipeWire's real-time data thread: it must not block, lock, allocate or await.
public protocol SampleSink: AnyObject, Sendable {
    /// Copies as many of `samples` as fit and returns how many it took (the rest are dropped).
    func write(_ samples: UnsafeBufferPointer<Int16>) -> Int
}

/// Where a `PlaybackStream` takes the samples it plays: the consumer side of a single-producer,
/// single-consumer ring.
///
/// `read` is called on PipeWire's real-time data thread: it must not block, lock, allocate or await.
public protocol SampleSource: AnyObject, Sendable {
    /// Fills the front of `buffer` with up to `buffer.count` samples and returns how many it wrote;
    /// the stream plays silence for the rest.
    func read(into buffer: UnsafeMutableBufferPointer<Int16>) -> Int
}

/// PeerVoiceCore's lock-free ring plugs straight into both streams: the capture stream is its
/// producer, the playback stream its consumer.
extension AudioRing: SampleSink, SampleSource {}
