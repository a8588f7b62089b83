import Foundation
import GIO
import Glibc
import SeededRandom

// Voice between two real peervoiced processes, each with its own headless PipeWire:
// TestPeer's voice helpers, pairing, recordings whose samples are placed on the monotonic clock
// (so recordings made in two PipeWire instances can be compared), speech analysis, and a TCP+UDP
// relay that loses datagrams.

public enum VoiceRig {
    /// CLOCK_MONOTONIC in seconds: the clock of `TimedRecording` and of the tests' event times.
    public static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// Tests/Fixtures/<name> of this checkout (speech.wav: see Tests/Fixtures/make-speech.sh).
    public static func fixturePath(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/\(name)").path
    }
}

// MARK: Peers

/// What voice tests ask of a `TestPeer` (started with a `PipeWireSession.environment`, or one
/// pointing at a directory with no PipeWire).
extension TestPeer {
    /// The first `VoiceStateChanged` at or after `start` whose first argument is `peer` and second `state`.
    @discardableResult
    public func waitForVoiceState(_ state: String, of peer: String, after start: Int = 0, timeout: Double = 10) -> Int? {
        client.waitForSignalIndex("VoiceStateChanged", after: start, timeout: timeout) {
            $0.string(0) == peer && $0.string(1) == state
        }
    }

    /// VoiceStateChanged states for `peer` at or after `start`.
    public func voiceStates(of peer: String, after start: Int = 0) -> [String] {
        client.signals[min(start, client.signals.count)...]
            .filter { $0.member == "VoiceStateChanged" && $0.string(0) == peer }.map { $0.string(1) }
    }

    /// How many lines of the daemon's log contain `text`.
    public func logCount(_ text: String) -> Int {
        log.components(separatedBy: "\n").filter { $0.contains(text) }.count
    }
}

/// Two paired peers and the ids each knows the other by.
public struct VoiceLink {
    /// B's id as A knows it (the key that answered at the address A dialled: B's, or a relay's).
    public let bOnA: String
    /// A as B knows it.
    public let aOnB: String
}

public enum VoicePairing {
    /// A dials `dial` (B's address, or a relay in front of B) with an asynchronous Connect; both confirm
    /// the code; returns once Connect replied.
    public static func connect(_ a: TestPeer, to b: TestPeer, dial: String? = nil, timeout: Double = 20) throws -> VoiceLink {
        let target = dial ?? b.address
        let markA = a.mark, markB = b.mark
        let connect = a.client.callAsync("Connect", [Variant(target)], timeout: timeout)
        var here: BusSignal?, there: BusSignal?
        eventually(timeout: timeout) {
            here = here ?? a.client.signals[markA...].first { $0.member == "PairingRequested" }
            there = there ?? b.client.signals[markB...].first { $0.member == "PairingRequested" }
            return (here != nil && there != nil) || connect.isDone
        }
        guard let here, let there else {
            throw HarnessError("no pairing prompt (A: \(here != nil), B: \(there != nil)); Connect: \(String(describing: connect.result))")
        }
        try a.client.call("ConfirmPairing", [Variant(here.string(0)), Variant(true)])
        try b.client.call("ConfirmPairing", [Variant(there.string(0)), Variant(true)])
        eventually(timeout: timeout) { connect.isDone }
        guard case .success? = connect.result else {
            throw HarnessError("Connect \(target) failed: \(String(describing: connect.result))")
        }
        return VoiceLink(bOnA: here.string(0), aOnB: there.string(0))
    }
}

// MARK: Recordings on the monotonic clock

/// A `PipeWireSession.record(to:)` (2 channels: the mic's capture, the speaker's monitor) whose
/// file growth is watched every millisecond, so each sample can be placed on CLOCK_MONOTONIC.
///
/// pw-record writes each quantum as it gets it, so the file holds `n` samples by time `t` only if
/// `t - n / rate` ≥ the time of sample 0 (plus the tool's processing delay). The smallest
/// `t - n / rate` seen near a moment is therefore when sample 0 "was" on the monotonic clock, to
/// within the processing delay (measured: 10 µs between two pw-record in one graph; the same
/// delay in two recordings cancels when they are compared). It is taken over polls within
/// ±0.75 s of the moment asked about, so a pause or jump in the recording elsewhere (while links
/// are made) does not matter.
public final class TimedRecording: @unchecked Sendable {
    public let recording: Recording
    private let path: String
    private let lock = NSLock()
    private var polls: [(time: Double, bytes: Int)] = []
    private var running = true
    private let finished = DispatchSemaphore(value: 0)

    /// `channel0`: as in ``PipeWireSession/record(to:micCapture:speakerMonitor:channel0:)``.
    public init(_ session: PipeWireSession, to path: String, channel0: String? = nil) throws {
        self.path = path
        recording = try session.record(to: path, channel0: channel0)
        let thread = Thread { [self] in poll() }
        thread.start()
    }

    private func poll() {
        var info = stat()
        var last = -1
        while lock.withLock({ running }) {
            if stat(path, &info) == 0, Int(info.st_size) != last {
                last = Int(info.st_size)
                let now = VoiceRig.monotonicSeconds()
                // Only the first sighting of a size counts: later ones say less.
                lock.withLock { polls.append((now, last)) }
            }
            usleep(1_000)
        }
        finished.signal()
    }

    /// Ends the recording and returns its channels placed on the monotonic clock.
    public func stop() throws -> TimedAudio {
        let audio = try recording.stop()
        lock.withLock { running = false }
        finished.wait()
        let header = try Self.dataOffset(path)
        let bytesPerSecond = Double(audio.sampleRate * audio.channels * 2)
        let points = lock.withLock { polls }.filter { $0.bytes > header + 2 * audio.channels * 256 }
            .map { (time: $0.time, zero: $0.time - Double($0.bytes - header) / bytesPerSecond) }
        guard !points.isEmpty else { throw HarnessError("\(path): no growth of the recording was seen") }
        return TimedAudio(audio: audio, zeroPoints: points)
    }

    /// Byte offset of the WAV data chunk's samples.
    static func dataOffset(_ path: String) throws -> Int {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw HarnessError("cannot read \(path)") }
        defer { try? handle.close() }
        let bytes = [UInt8](handle.readData(ofLength: 4096))
        var offset = 12
        while offset + 8 <= bytes.count {
            let size = Int(bytes[offset + 4]) | Int(bytes[offset + 5]) << 8 | Int(bytes[offset + 6]) << 16 | Int(bytes[offset + 7]) << 24
            if bytes[offset..<offset + 4].elementsEqual("data".utf8) { return offset + 8 }
            offset += 8 + size + (size & 1)
        }
        throw HarnessError("\(path): no data chunk in the first 4 KiB")
    }
}

/// A recording whose samples are placed on the monotonic clock.
public struct TimedAudio {
    public let audio: WAVAudio
    /// (poll time, the time sample 0 would have had according to that poll).
    let zeroPoints: [(time: Double, zero: Double)]

    public var rate: Double { Double(audio.sampleRate) }

    /// Monotonic time of sample 0, as seen by the polls within ±0.75 s of `moment`.
    public func zeroTime(near moment: Double) -> Double {
        var best = Double.infinity
        for point in zeroPoints where abs(point.time - moment) <= 0.75 { best = min(best, point.zero) }
        if best.isFinite { return best }
        // No poll that close (the moment is outside the recording): the nearest one.
        return zeroPoints.min { abs($0.time - moment) < abs($1.time - moment) }!.zero
    }

    /// The sample index (possibly out of range) that was captured at monotonic `time`.
    public func index(at time: Double) -> Int { Int(((time - zeroTime(near: time)) * rate).rounded()) }

    /// Monotonic time of sample `index`, given the moment near which it was taken.
    public func time(ofIndex index: Int, near moment: Double) -> Double { zeroTime(near: moment) + Double(index) / rate }

    public func channel(_ index: Int) -> [Int16] { audio.channel(index) }

    /// Where the recording lost or gained time against the monotonic clock (the lower envelope of
    /// the zero-time estimates, per 100 ms, jumping by more than 2 ms): (time, jump in ms).
    public var discontinuities: [(time: Double, jumpMs: Double)] {
        var bins: [(time: Double, zero: Double)] = []
        for point in zeroPoints {
            if let last = bins.last, point.time - last.time < 0.1 {
                bins[bins.count - 1].zero = min(last.zero, point.zero)
            } else {
                bins.append(point)
            }
        }
        var result: [(Double, Double)] = []
        for i in 1..<max(1, bins.count) where abs(bins[i].zero - bins[i - 1].zero) > 0.002 {
            result.append((bins[i].time, (bins[i].zero - bins[i - 1].zero) * 1000))
        }
        return result
    }

    public var startTime: Double { zeroPoints.first!.zero }
    public var endTime: Double { zeroPoints.last!.zero + Double(audio.frames) / rate }
}

/// Which channel of a `PipeWireSession.record` recording.
public enum TapChannel: Int {
    case mic = 0
    case speaker = 1
}

/// One channel of a timed recording.
public struct TimedTrack {
    public let timed: TimedAudio
    public let samples: [Int16]

    public init(_ timed: TimedAudio, _ channel: TapChannel) {
        self.timed = timed
        samples = timed.channel(channel.rawValue)
    }

    /// Samples captured between monotonic `from` and `to` (clipped to the recording), and the
    /// index of the first.
    public func slice(from: Double, to: Double) -> (samples: [Int16], start: Int) {
        let start = max(0, min(samples.count, timed.index(at: from)))
        let end = max(start, min(samples.count, timed.index(at: to)))
        return (Array(samples[start..<end]), start)
    }

    /// RMS in dBFS of consecutive `windowMs` windows between `from` and `to`: (window start time, dBFS).
    public func levels(from: Double, to: Double, windowMs: Double = 20) -> [(time: Double, dBFS: Double)] {
        let (part, start) = slice(from: from, to: to)
        let window = Int(windowMs * timed.rate / 1000)
        var result: [(Double, Double)] = []
        var offset = 0
        while offset + window <= part.count {
            var sum = 0.0
            for sample in part[offset..<offset + window] { sum += Double(sample) * Double(sample) }
            let rms = (sum / Double(window)).squareRoot() / 32768
            result.append((timed.time(ofIndex: start + offset, near: from), rms > 0 ? 20 * log10(rms) : -200))
            offset += window
        }
        return result
    }

    /// Monotonic time of the first `windowMs` window between `from` and `to` louder than `dBFS`.
    public func firstLoud(from: Double, to: Double, above dBFS: Double, windowMs: Double = 20) -> Double? {
        levels(from: from, to: to, windowMs: windowMs).first { $0.dBFS > dBFS }?.time
    }
}

/// Where speech said into one peer's microphone came out of the other's speaker.
public struct VoiceTransfer: CustomStringConvertible {
    /// Mouth-to-ear latency in ms (mic capture to speaker monitor, on the monotonic clock).
    public let latencyMs: Double
    /// Normalized cross-correlation at that lag (1 = the same waveform up to gain).
    public let correlation: Double
    public var description: String { String(format: "latency %.1f ms, correlation %.3f", latencyMs, correlation) }
}

public enum VoiceAnalysis {
    /// Finds the speech captured from `mic` between monotonic `from` and `to` in `speaker`, lagging
    /// by 0...`maxLagMs`.
    public static func transfer(mic: TimedTrack, speaker: TimedTrack, from: Double, to: Double,
                                maxLagMs: Double = 400) -> VoiceTransfer {
        let reference = mic.slice(from: from, to: to)
        let maxLag = Int(maxLagMs * speaker.timed.rate / 1000)
        let signal = speaker.slice(from: from, to: to + maxLagMs / 1000 + 0.05)
        guard reference.samples.count > 4_800, signal.samples.count > 4_800 else {
            return VoiceTransfer(latencyMs: .nan, correlation: 0)
        }
        let (lag, correlation) = AudioAnalysis.bestLag(reference: reference.samples, signal: signal.samples, maxLag: maxLag)
        let micTime = mic.timed.time(ofIndex: reference.start, near: from)
        let speakerTime = speaker.timed.time(ofIndex: signal.start + lag, near: from)
        return VoiceTransfer(latencyMs: (speakerTime - micTime) * 1000, correlation: correlation)
    }

    /// Start and end (monotonic) of the audible part of `track` between `from` and `to`: first and
    /// last 20 ms window above `dBFS`.
    public static func audibleSpan(_ track: TimedTrack, from: Double, to: Double, above dBFS: Double = -40) -> (Double, Double)? {
        let loud = track.levels(from: from, to: to).filter { $0.dBFS > dBFS }
        guard let first = loud.first, let last = loud.last else { return nil }
        return (first.time, last.time + 0.02)
    }
}

// MARK: A lossy relay

/// A relay on 127.0.0.1 for one peer link and its voice: TCP connections to `port` are relayed to
/// 127.0.0.1:`targetPort`, and UDP datagrams arriving on the same port number are forwarded to
/// UDP 127.0.0.1:`targetPort`, a seeded `lossPercent` of them dropped (and, with ``setJitter(delayMs:jitterMs:)``,
/// each delayed as bench/voice's relay.py does); datagrams from the target
/// go back to the last sender. A daemon that dials the relay sends its voice there (voice goes to
/// the address dialled), so the relay sees, drops and can record the sealed voice datagrams.
public final class VoiceRelay: @unchecked Sendable {
    public let port: UInt16
    public let targetPort: UInt16
    private let listener: Int32
    private let udp: Int32
    private let lock = NSLock()
    private var lossPercent: Double
    private var random: SplitMix64
    private var stopping = false
    private let threads = Threads()
    private var captureOn = false
    private var captured: [CapturedDatagram] = []
    private var counts = (received: 0, dropped: 0, forwarded: 0, returned: 0, tampered: 0)
    private var tamperEvery = 0
    private var lastSender: sockaddr_in?
    private var delayMs = 0.0
    private var jitterMs = 0.0
    /// Datagrams held back by the delay, with when they are due (monotonic s), in arrival order.
    private var delayed: [(due: Double, datagram: [UInt8])] = []

    public init(targetPort: UInt16, lossPercent: Double = 0, seed: UInt64 = 1) throws {
        self.targetPort = targetPort
        self.lossPercent = lossPercent
        random = SplitMix64(seed: seed)
        (listener, udp, port) = try LoopbackPort.bindTCPAndUDP()
        threads.spawn { [self] in acceptLoop() }
        threads.spawn { [self] in datagramLoop() }
    }

    deinit { stop() }

    /// The peer id a daemon dials to reach the relay.
    public var address: String { "ip:127.0.0.1:\(port)" }

    public var statistics: (received: Int, dropped: Int, forwarded: Int, returned: Int, tampered: Int) { lock.withLock { counts } }

    /// From now on, flips one bit in every `n`th datagram forwarded to the target (0: none),
    /// walking the flipped bit through the sealed record (counter, ciphertext and tag).
    public func tamper(every n: Int) { lock.withLock { tamperEvery = n } }

    public func setLoss(_ percent: Double) { lock.withLock { lossPercent = percent } }

    /// From now on, delays each datagram forwarded to the target by `delayMs` + N(0, `jitterMs`)
    /// ms, clipped to 5...100 ms when jittered (bench/voice/relay.py's network): datagrams may
    /// overtake each other.
    public func setJitter(delayMs: Double, jitterMs: Double) { lock.withLock { self.delayMs = delayMs; self.jitterMs = jitterMs } }

    /// A datagram from the dialler as it reached the relay, and when (monotonic seconds).
    public struct CapturedDatagram {
        public let arrival: Double
        public let bytes: [UInt8]
    }

    /// Starts (or restarts, forgetting what was recorded) recording the datagrams that reach the
    /// relay from the dialler, as they arrived (dropped ones included).
    public func startCapture() { lock.withLock { captureOn = true; captured = [] } }

    /// Stops recording; returns what was recorded.
    public func stopCapture() -> [CapturedDatagram] { lock.withLock { captureOn = false; return captured } }

    /// Sends `datagrams` to the target from the relay's port, as if the dialler had sent them.
    public func replay(_ datagrams: [[UInt8]]) {
        var target = loopbackAddress(port: targetPort)
        for datagram in datagrams { Self.send(udp, datagram, to: &target) }
    }

    public func stop() {
        let already = lock.withLock { () -> Bool in defer { stopping = true }; return stopping }
        guard !already else { return }
        threads.wait(seconds: 5)
        close(listener)
        close(udp)
    }

    private var isStopping: Bool { lock.withLock { stopping } }

    private func datagramLoop() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var target = loopbackAddress(port: targetPort)
        while !isStopping {
            var poller = pollfd(fd: udp, events: Int16(POLLIN), revents: 0)
            let due = lock.withLock { delayed.map(\.due).min() }
            let wait = due.map { max(0, min(100, Int32((($0 - VoiceRig.monotonicSeconds()) * 1000).rounded(.up)))) } ?? 100
            let ready = poll(&poller, 1, wait) > 0
            let now = VoiceRig.monotonicSeconds()
            for datagram in lock.withLock({ () -> [[UInt8]] in
                let sent = delayed.filter { $0.due <= now }.sorted { $0.due < $1.due }.map(\.datagram)
                delayed.removeAll { $0.due <= now }
                return sent
            }) {
                Self.send(udp, datagram, to: &target)
            }
            guard ready else { continue }
            var from = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &from) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(udp, raw.baseAddress, raw.count, 0, $0, &length) }
                }
            }
            guard count >= 0 else { continue }
            let datagram = Array(buffer[0..<count])
            if from.sin_port == target.sin_port && from.sin_addr.s_addr == target.sin_addr.s_addr {
                guard var back = lock.withLock({ lastSender }) else { continue }
                lock.withLock { counts.returned += 1 }
                Self.send(udp, datagram, to: &back)
                continue
            }
            var forwarded = datagram
            let drop: Bool = lock.withLock {
                lastSender = from
                counts.received += 1
                if captureOn { captured.append(CapturedDatagram(arrival: VoiceRig.monotonicSeconds(), bytes: datagram)) }
                let drop = lossPercent > 0 && random.uniform() * 100 < lossPercent
                if drop { counts.dropped += 1 } else { counts.forwarded += 1 }
                if !drop, tamperEvery > 0, counts.forwarded % tamperEvery == 0, datagram.count > 4 {
                    // Past the u32 length prefix, a different bit each time.
                    let bit = (counts.tampered * 61) % ((datagram.count - 4) * 8)
                    forwarded[4 + bit / 8] ^= UInt8(1 << (bit % 8))
                    counts.tampered += 1
                }
                return drop
            }
            guard !drop else { continue }
            let delay: Double = lock.withLock {
                guard jitterMs > 0 else { return delayMs }
                // Box-Muller from two seeded uniforms.
                let gaussian = random.gaussian()
                return min(100, max(5, delayMs + jitterMs * gaussian))
            }
            if delay > 0 {
                let due = VoiceRig.monotonicSeconds() + delay / 1000
                lock.withLock { delayed.append((due, forwarded)) }
            } else {
                Self.send(udp, forwarded, to: &target)
            }
        }
    }

    private func acceptLoop() {
        while !isStopping {
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            let client = acceptClosingOnExec(listener)
            guard client >= 0 else { continue }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
            var address = loopbackAddress(port: targetPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(client)
                close(server)
                continue
            }
            threads.spawn { [self] in pipe(client, server) }
        }
    }

    /// Copies bytes both ways until either side ends or the relay stops.
    private func pipe(_ a: Int32, _ b: Int32) {
        defer {
            close(a)
            close(b)
        }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var fds = [pollfd(fd: a, events: Int16(POLLIN), revents: 0), pollfd(fd: b, events: Int16(POLLIN), revents: 0)]
        while !isStopping {
            guard poll(&fds, 2, 100) > 0 else { continue }
            for (index, entry) in fds.enumerated() where entry.revents != 0 {
                let from = entry.fd, to = index == 0 ? b : a
                let count = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
                guard count > 0 else { return }
                var offset = 0
                while offset < count {
                    let written = buffer[offset..<count].withUnsafeBytes { Glibc.send(to, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    guard written > 0 else { return }
                    offset += written
                }
            }
        }
    }


    private static func send(_ fd: Int32, _ datagram: [UInt8], to address: inout sockaddr_in) {
        _ = datagram.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }
}

extension VoiceAnalysis {
    /// The median correlation of `transfers` (the upper one of an even count), 0 when there are
    /// none: how a call sounds as a whole, judged piece by piece (each piece at its own lag).
    public static func medianCorrelation(_ transfers: [VoiceTransfer]) -> Double {
        let sorted = transfers.map(\.correlation).sorted()
        return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
    }

    /// `transfer` in consecutive windows of `windowSeconds`: how latency and correlation move
    /// along the speech (judged with ``medianCorrelation(_:)``).
    public static func windows(mic: TimedTrack, speaker: TimedTrack, from: Double, to: Double,
                               windowSeconds: Double = 0.5) -> [VoiceTransfer] {
        var result: [VoiceTransfer] = []
        var start = from
        while start + windowSeconds <= to + 1e-9 {
            if let span = audibleSpan(mic, from: start, to: start + windowSeconds), span.1 - span.0 > 0.15 {
                result.append(transfer(mic: mic, speaker: speaker, from: start, to: start + windowSeconds))
            }
            start += windowSeconds
        }
        return result
    }
}
