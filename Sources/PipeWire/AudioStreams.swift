import CPipeWire
import Glibc
import Synchronization

/// The sample format the stream asks PipeWire for; PipeWire converts from and to the graph's own.
/// The rings always hold Int16: `.f32` converts in the real-time callback.
public enum SampleFormat: Sendable, Equatable {
    case s16
    case f32
}

/// Where a stream is in its life.
public enum StreamState: Sendable, Equatable {
    /// Created, or stopped: not connected to the graph.
    case idle
    /// `start()` was called; PipeWire is creating and linking the node.
    case connecting
    /// Connected and linked but not running (no driver, or suspended).
    case paused
    /// Samples are flowing.
    case streaming
    /// PipeWire reported an error (the stream is dead; make a new one).
    case error(String)
}

/// Called on PipeWire's (non-real-time) loop thread whenever the stream's state changes.
public typealias StreamStateHandler = @Sendable (StreamState) -> Void

/// Audio settings shared by both streams.
public enum VoiceAudio {
    public static let sampleRate = 48_000
    public static let channels = 1
    /// node.latency's default: 256 frames = 5.33 ms at 48 kHz.
    public static let defaultLatencyFrames = 256
}

/// A stream's direction, as a type: ``AudioStream`` is a ``CaptureStream`` or a ``PlaybackStream``.
public protocol StreamDirection: Sendable {}
public enum CaptureDirection: StreamDirection {}
public enum PlaybackDirection: StreamDirection {}

/// One PipeWire stream of 48 kHz mono samples, in the direction `Direction`; what both directions
/// share is here, their own parts in the extensions below.
public final class AudioStream<Direction: StreamDirection>: Sendable {
    private let native: NativeStream

    fileprivate init(native: NativeStream) {
        self.native = native
    }

    /// Connects the stream (autoconnect); samples flow once the state is `.streaming`.
    public func start() throws(PipeWireError) { try native.start() }
    /// Disconnects the stream; `start()` connects it again.
    public func stop() { native.stop() }
    public var state: StreamState { native.state }
    /// Frames PipeWire's callbacks asked for or delivered since creation (silence and what did not
    /// fit included).
    public var framesProcessed: UInt64 { native.framesProcessed.load(ordering: .relaxed) }
    /// The node's id in the PipeWire graph, once connected.
    public var nodeID: UInt32? { native.nodeID }
    /// The stream's last time report (`pw_time.delay`), in 48 kHz frames; 0 before the first. Any
    /// thread. Capture: how long ago the device took the samples a callback delivers now.
    /// Playback: how long the samples a callback hands over now take to reach the device.
    public var deviceDelayFrames: Int { native.deviceDelayFrames }
    fileprivate var shortfalls: UInt64 { native.shortfalls.load(ordering: .relaxed) }
}

/// Captures the microphone (48 kHz mono) into a `SampleSink`.
///
/// The node is `peervoice-capture` (media.role Communication); the session manager links it to
/// `target` (a node name) or to the default source.
public typealias CaptureStream = AudioStream<CaptureDirection>

extension AudioStream where Direction == CaptureDirection {
    public static var defaultNodeName: String { "peervoice-capture" }

    public convenience init(context: PipeWireContext, sink: any SampleSink, target: String? = nil, format: SampleFormat = .s16,
                            latencyFrames: Int = VoiceAudio.defaultLatencyFrames, nodeName: String = CaptureStream.defaultNodeName,
                            onStateChange: StreamStateHandler? = nil) throws(PipeWireError) {
        self.init(native: try NativeStream(context: context, direction: .capture, sink: sink, source: nil, target: target,
                                           format: format, latencyFrames: latencyFrames, nodeName: nodeName,
                                           onStateChange: onStateChange))
    }

    /// Samples dropped because the sink was full.
    public var droppedSamples: UInt64 { shortfalls }
}

/// Plays 48 kHz mono samples taken from a `SampleSource`, silence when it runs dry.
///
/// The node is `peervoice-playback` (media.role Communication); the session manager links it to
/// `target` (a node name) or to the default sink.
public typealias PlaybackStream = AudioStream<PlaybackDirection>

extension AudioStream where Direction == PlaybackDirection {
    public static var defaultNodeName: String { "peervoice-playback" }

    public convenience init(context: PipeWireContext, source: any SampleSource, target: String? = nil, format: SampleFormat = .s16,
                            latencyFrames: Int = VoiceAudio.defaultLatencyFrames, nodeName: String = PlaybackStream.defaultNodeName,
                            onStateChange: StreamStateHandler? = nil) throws(PipeWireError) {
        self.init(native: try NativeStream(context: context, direction: .playback, sink: nil, source: source, target: target,
                                           format: format, latencyFrames: latencyFrames, nodeName: nodeName,
                                           onStateChange: onStateChange))
    }

    /// Cycles in which the source had fewer samples than PipeWire asked for (the rest was silence).
    public var underruns: UInt64 { shortfalls }
}

/// One pw_stream and its real-time callback. Everything but `process` runs on PipeWire's loop
/// thread or under its lock.
///
/// `@unchecked Sendable`: `process` alone touches the sink, source and scratch buffer (on the
/// real-time thread); the rest is immutable, atomic, in the `Mutex` or under the loop's lock.
final class NativeStream: @unchecked Sendable {
    enum Direction { case capture, playback }

    let context: PipeWireContext
    let direction: Direction
    let format: SampleFormat
    let latencyFrames: Int
    /// Only the real-time thread touches these two, through `process`.
    private let sink: (any SampleSink)?
    private let source: (any SampleSource)?
    private let stream: OpaquePointer
    private let hook: UnsafeMutablePointer<spa_hook>
    private let events: UnsafeMutablePointer<pw_stream_events>
    /// For converting between Float and Int16 without allocating in the callback.
    private let scratch: UnsafeMutablePointer<Int16>
    private static let scratchCapacity = 4096

    let framesProcessed = Atomic<UInt64>(0)
    /// Capture: samples the sink did not take. Playback: short cycles (underruns).
    let shortfalls = Atomic<UInt64>(0)

    private struct Shared {
        var state: StreamState = .idle
        var onStateChange: StreamStateHandler?
    }
    private let shared: Mutex<Shared>
    /// Guarded by the thread loop's lock.
    private var connected = false

    init(context: PipeWireContext, direction: Direction, sink: (any SampleSink)?, source: (any SampleSource)?,
         target: String?, format: SampleFormat, latencyFrames: Int, nodeName: String,
         onStateChange: StreamStateHandler?) throws(PipeWireError) {
        guard latencyFrames > 0 else { throw .streamFailed("latencyFrames must be positive") }
        if case .disconnected(let reason) = context.connectionState { throw .notRunning(reason) }
        self.context = context
        self.direction = direction
        self.format = format
        self.latencyFrames = latencyFrames
        self.sink = sink
        self.source = source
        shared = Mutex(Shared(onStateChange: onStateChange))
        scratch = .allocate(capacity: Self.scratchCapacity)
        scratch.initialize(repeating: 0, count: Self.scratchCapacity)
        hook = .allocate(capacity: 1)
        hook.initialize(to: spa_hook())
        events = .allocate(capacity: 1)
        events.initialize(to: Self.makeEvents())

        var properties = [
            "media.type": "Audio",
            "media.category": direction == .capture ? "Capture" : "Playback",
            "media.role": "Communication",
            "node.name": nodeName,
            "node.description": direction == .capture ? "PeerVoice microphone" : "PeerVoice speaker",
            "media.name": direction == .capture ? "PeerVoice capture" : "PeerVoice playback",
            "node.latency": "\(latencyFrames)/\(VoiceAudio.sampleRate)",
        ]
        if let target { properties["target.object"] = target }
        let created: OpaquePointer? = context.locked {
            // pw_stream_new takes ownership of the properties.
            pw_stream_new(context.core, nodeName, PipeWireContext.properties(properties))
        }
        guard let created else {
            let error = errno
            Self.release(hook: hook, events: events, scratch: scratch)
            throw .streamFailed("cannot create the PipeWire stream \(nodeName): \(PipeWireContext.errnoText(error))")
        }
        stream = created
        context.locked {
            pw_stream_add_listener(stream, hook, events, Unmanaged.passUnretained(self).toOpaque())
        }
    }

    deinit {
        context.locked {
            spa_hook_remove(hook)
            pw_stream_destroy(stream)
        }
        Self.release(hook: hook, events: events, scratch: scratch)
    }

    var state: StreamState { shared.withLock { $0.state } }

    var nodeID: UInt32? {
        let id = context.locked { pw_stream_get_node_id(stream) }
        return id == SPA_ID_INVALID ? nil : id
    }

    /// `pw_stream_get_time_n` reads a snapshot the data thread publishes under a sequence
    /// counter: no lock needed.
    var deviceDelayFrames: Int {
        var time = pw_time()
        guard pw_stream_get_time_n(stream, &time, MemoryLayout<pw_time>.size) == 0, time.rate.denom > 0 else { return 0 }
        return max(0, Int(time.delay) * Int(time.rate.num) * VoiceAudio.sampleRate / Int(time.rate.denom))
    }

    func start() throws(PipeWireError) {
        if case .disconnected(let reason) = context.connectionState { throw .notRunning(reason) }
        try context.locked { () throws(PipeWireError) in
            guard !connected else { return }
            var info = spa_audio_info_raw()
            #if _endian(little)
            info.format = format == .s16 ? SPA_AUDIO_FORMAT_S16_LE : SPA_AUDIO_FORMAT_F32_LE
            #else
            info.format = format == .s16 ? SPA_AUDIO_FORMAT_S16_BE : SPA_AUDIO_FORMAT_F32_BE
            #endif
            info.rate = UInt32(VoiceAudio.sampleRate)
            info.channels = UInt32(VoiceAudio.channels)
            info.position.0 = SPA_AUDIO_CHANNEL_MONO.rawValue
            let podBytes = 1024
            let podBuffer = UnsafeMutableRawPointer.allocate(byteCount: podBytes, alignment: 8)
            defer { podBuffer.deallocate() }
            var builder = spa_pod_builder()
            spa_pod_builder_init(&builder, podBuffer, UInt32(podBytes))
            guard let format = spa_format_audio_raw_build(&builder, SPA_PARAM_EnumFormat.rawValue, &info) else {
                throw .streamFailed("cannot build the audio format")
            }
            var params: [UnsafePointer<spa_pod>?] = [UnsafePointer(format)]
            let flags = pw_stream_flags(rawValue: PW_STREAM_FLAG_AUTOCONNECT.rawValue | PW_STREAM_FLAG_MAP_BUFFERS.rawValue
                                                  | PW_STREAM_FLAG_RT_PROCESS.rawValue)
            let direction = direction == .capture ? SPA_DIRECTION_INPUT : SPA_DIRECTION_OUTPUT
            setState(.connecting)
            // pw_stream_connect copies the params.
            let result = pw_stream_connect(stream, direction, SPA_ID_INVALID, flags, &params, UInt32(params.count))
            guard result >= 0 else {
                let message = "cannot connect the PipeWire stream: \(PipeWireContext.errnoText(-result))"
                setState(.error(message))
                throw .streamFailed(message)
            }
            connected = true
        }
    }

    func stop() {
        context.locked {
            guard connected else { return }
            connected = false
            pw_stream_disconnect(stream)
        }
        setState(.idle)
    }

    private func setState(_ state: StreamState) {
        let handler: StreamStateHandler? = shared.withLock {
            guard $0.state != state else { return nil }
            $0.state = state
            return $0.onStateChange
        }
        handler?(state)
    }

    /// PipeWire's loop thread, lock held.
    fileprivate func stateChanged(to state: pw_stream_state, error: String?) {
        switch state {
        case PW_STREAM_STATE_ERROR: setState(.error(error ?? "stream error"))
        case PW_STREAM_STATE_UNCONNECTED:
            // After an error PipeWire may also report "unconnected": keep the error visible.
            if case .error = self.state { return }
            if connected {
                // Not through stop(): the daemon went away (or destroyed the node).
                connected = false
                if case .disconnected(let reason) = context.connectionState {
                    setState(.error(reason))
                } else {
                    setState(.error("PipeWire disconnected the stream"))
                }
                return
            }
            setState(.idle)
        case PW_STREAM_STATE_CONNECTING: setState(.connecting)
        case PW_STREAM_STATE_PAUSED: setState(.paused)
        case PW_STREAM_STATE_STREAMING: setState(.streaming)
        default: break
        }
    }

    // MARK: Real-time thread: no locks, no allocation, no awaiting.

    fileprivate func process() {
        guard let buffer = pw_stream_dequeue_buffer(stream) else { return }
        defer { pw_stream_queue_buffer(stream, buffer) }
        guard let spaBuffer = buffer.pointee.buffer, spaBuffer.pointee.n_datas > 0,
              let data = spaBuffer.pointee.datas, let bytes = data.pointee.data, let chunk = data.pointee.chunk else { return }
        let maxSize = Int(data.pointee.maxsize)
        let bytesPerSample = format == .s16 ? 2 : 4
        switch direction {
        case .capture:
            let offset = min(Int(chunk.pointee.offset), maxSize)
            let size = min(Int(chunk.pointee.size), maxSize - offset)
            capture(bytes + offset, count: size / bytesPerSample)
        case .playback:
            var frames = maxSize / bytesPerSample
            let requested = Int(clamping: buffer.pointee.requested)
            frames = min(frames, requested > 0 ? requested : latencyFrames)
            play(into: bytes, count: frames)
            chunk.pointee.offset = 0
            chunk.pointee.stride = Int32(bytesPerSample)
            chunk.pointee.size = UInt32(frames * bytesPerSample)
        }
    }

    private func capture(_ bytes: UnsafeMutableRawPointer, count: Int) {
        guard count > 0, let sink else { return }
        var taken = 0
        switch format {
        case .s16:
            taken = sink.write(UnsafeBufferPointer(start: bytes.assumingMemoryBound(to: Int16.self), count: count))
        case .f32:
            let floats = bytes.assumingMemoryBound(to: Float.self)
            var done = 0
            while done < count {
                let n = min(Self.scratchCapacity, count - done)
                for i in 0..<n { scratch[i] = Self.int16(floats[done + i]) }
                taken += sink.write(UnsafeBufferPointer(start: scratch, count: n))
                done += n
            }
        }
        framesProcessed.wrappingAdd(UInt64(count), ordering: .relaxed)
        if taken < count { shortfalls.wrappingAdd(UInt64(count - taken), ordering: .relaxed) }
    }

    private func play(into bytes: UnsafeMutableRawPointer, count: Int) {
        guard count > 0 else { return }
        var got = 0
        switch format {
        case .s16:
            let samples = bytes.assumingMemoryBound(to: Int16.self)
            if let source { got = source.read(into: UnsafeMutableBufferPointer(start: samples, count: count)) }
            if got < count { (samples + got).update(repeating: 0, count: count - got) }
        case .f32:
            let floats = bytes.assumingMemoryBound(to: Float.self)
            var done = 0
            var dry = source == nil
            while done < count {
                let n = min(Self.scratchCapacity, count - done)
                let read = dry ? 0 : source!.read(into: UnsafeMutableBufferPointer(start: scratch, count: n))
                for i in 0..<read { floats[done + i] = Float(scratch[i]) / 32768 }
                for i in read..<n { floats[done + i] = 0 }
                got += read
                if read < n { dry = true }
                done += n
            }
        }
        framesProcessed.wrappingAdd(UInt64(count), ordering: .relaxed)
        if got < count { shortfalls.wrappingAdd(1, ordering: .relaxed) }
    }

    private static func int16(_ sample: Float) -> Int16 {
        let scaled = (sample * 32768).rounded()
        return scaled >= 32767 ? .max : scaled <= -32768 ? .min : Int16(scaled)
    }

    // MARK: Setup

    private static func makeEvents() -> pw_stream_events {
        var events = pw_stream_events()
        events.version = UInt32(PW_VERSION_STREAM_EVENTS)
        events.state_changed = { data, _, state, error in
            guard let data else { return }
            Unmanaged<NativeStream>.fromOpaque(data).takeUnretainedValue()
                .stateChanged(to: state, error: error.map { String(cString: $0) })
        }
        events.process = { data in
            guard let data else { return }
            Unmanaged<NativeStream>.fromOpaque(data).takeUnretainedValue().process()
        }
        return events
    }

    private static func release(hook: UnsafeMutablePointer<spa_hook>, events: UnsafeMutablePointer<pw_stream_events>,
                                scratch: UnsafeMutablePointer<Int16>) {
        hook.deinitialize(count: 1)
        hook.deallocate()
        events.deinitialize(count: 1)
        events.deallocate()
        scratch.deallocate()
    }
}
