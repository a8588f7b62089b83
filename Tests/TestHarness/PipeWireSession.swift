import Foundation
import Glibc

/// A private headless PipeWire + WirePlumber (scripts/pipewire-session.sh) for one test or one peer.
///
/// It has a virtual microphone `peervoice-test-mic` and a virtual speaker `peervoice-test-speaker`
/// (48 kHz, mono, quantum 256), both defaults. Pass `environment` to every process that should use
/// it, or `socketPath` to `PipeWireContext(remote:)` inside the test process. Several sessions can
/// run at once (one per peer). `stop()` (or deinit) ends its processes by PID.
///
///     let pipewire = try PipeWireSession()
///     defer { pipewire.stop() }
///     let recording = try pipewire.record(to: dir + "/tap.wav")       // ch0 mic, ch1 speaker
///     try pipewire.inject(wavPath).wait(timeout: 10)                  // speak into the mic
///     let tap = try recording.stop()
///     let (lag, peak) = AudioAnalysis.bestLag(reference: tap.channel(0), signal: tap.channel(1), maxLag: 48_000)
public final class PipeWireSession {
    public static let micName = "peervoice-test-mic"
    public static let speakerName = "peervoice-test-speaker"
    public static let sampleRate = 48_000

    /// scripts/pipewire-session.sh of this checkout.
    public static var scriptPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/pipewire-session.sh").path
    }

    /// Holds run/, config/, state/, logs/, env.sh and the pid files.
    public let directory: String
    /// XDG_RUNTIME_DIR, PIPEWIRE_RUNTIME_DIR, PIPEWIRE_REMOTE, XDG_CONFIG_HOME, XDG_STATE_HOME,
    /// XDG_DATA_HOME and DBUS_SESSION_BUS_ADDRESS of this session (read from DIR/env.sh).
    public let environment: [String: String]
    /// The PipeWire socket (absolute path: usable as `PipeWireContext(remote:)`).
    public let socketPath: String
    /// How long `scripts/pipewire-session.sh start` took, in seconds.
    public let startupSeconds: Double
    private let temporary: TemporaryDirectory?
    private var stopped = false
    private var serial = 0

    /// Starts a session in `directory`, or in a fresh /tmp directory (removed by `stop()`).
    public init(directory: String? = nil) throws {
        if let directory {
            self.directory = directory
            temporary = nil
        } else {
            let made = try TemporaryDirectory("peervoice-pw")
            self.directory = made.path
            temporary = made
        }
        let started = Date()
        let script = try ChildProcess(Self.scriptPath, ["start", self.directory],
                                      logPath: self.directory + ".session.log")
        let status = script.wait(timeout: 60)
        startupSeconds = Date().timeIntervalSince(started)
        let log = script.log
        try? FileManager.default.removeItem(atPath: self.directory + ".session.log")
        guard status == 0 else {
            if status == nil { script.kill() }
            _ = try? ChildProcess(Self.scriptPath, ["stop", self.directory], logPath: "/dev/null").wait(timeout: 20)
            temporary?.remove()
            throw HarnessError("pipewire-session.sh start failed (status \(status.map(String.init) ?? "timeout")): \(log)")
        }
        environment = try Self.readEnvironment(self.directory + "/env.sh")
        socketPath = (environment["PIPEWIRE_RUNTIME_DIR"] ?? self.directory + "/run") + "/pipewire-0"
    }

    deinit { stop() }

    /// Stops WirePlumber, PipeWire and the bus by their PIDs; removes the directory it made.
    public func stop() {
        guard !stopped else { return }
        stopped = true
        if let script = try? ChildProcess(Self.scriptPath, ["stop", directory], logPath: "/dev/null"),
           script.wait(timeout: 20) == nil {
            script.kill()
        }
        if ProcessInfo.processInfo.environment["PEERVOICE_KEEP_PIPEWIRE_DIR"] == nil { temporary?.remove() }
    }

    /// PIDs of the session's processes by name: dbus, pipewire, wireplumber.
    public var pids: [String: pid_t] {
        var result = [String: pid_t]()
        for name in ["dbus", "pipewire", "wireplumber"] {
            if let text = try? String(contentsOfFile: "\(directory)/\(name).pid", encoding: .utf8),
               let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                result[name] = pid
            }
        }
        return result
    }

    // MARK: Tools

    /// Starts a PipeWire tool (pw-play, pw-record, ...) against this session; output goes to
    /// DIR/logs/NAME.log.
    public func spawn(_ tool: String, _ arguments: [String], logName: String? = nil) throws -> ChildProcess {
        serial += 1
        return try ChildProcess(tool, arguments, environment: environment,
                                logPath: "\(directory)/logs/\(logName ?? tool)-\(serial).log")
    }

    /// Runs a tool to its end and returns its standard output; throws when it fails.
    @discardableResult
    public func run(_ tool: String, _ arguments: [String], timeout: Double = 10) throws -> String {
        serial += 1
        let output = "\(directory)/logs/run-\(serial).out"
        let errors = "\(directory)/logs/run-\(serial).err"
        defer {
            try? FileManager.default.removeItem(atPath: output)
            try? FileManager.default.removeItem(atPath: errors)
        }
        let process = try ChildProcess("/bin/sh", ["-c", "exec \"$0\" \"$@\" 2>'\(errors)'", tool] + arguments,
                                       environment: environment, logPath: output)
        guard let status = process.wait(timeout: timeout) else {
            process.kill()
            throw HarnessError("\(tool) \(arguments.joined(separator: " ")) did not finish within \(timeout) s")
        }
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else {
            let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            throw HarnessError("\(tool) \(arguments.joined(separator: " ")) failed (\(status)): \(stderr)\(text)")
        }
        return text
    }

    /// Every port as "node:port" (`pw-link -io`).
    public func ports() -> Set<String> {
        guard let text = try? run("pw-link", ["-io"]) else { return [] }
        return Set(text.split(separator: "\n").map { String($0) })
    }

    /// Polls until all `ports` exist.
    public func waitForPorts(_ wanted: [String], timeout: Double = 10) throws {
        var present = Set<String>()
        let ok = eventually(timeout: timeout) {
            present = ports()
            return wanted.allSatisfy(present.contains)
        }
        guard ok else { throw HarnessError("ports \(wanted.filter { !present.contains($0) }) did not appear") }
    }

    /// Links an output port to an input port (both "node:port").
    public func link(_ output: String, _ input: String) throws {
        try run("pw-link", [output, input])
    }

    /// The links as `pw-link -l` prints them.
    public func linkList() -> String { (try? run("pw-link", ["-l"])) ?? "" }

    /// Every link as ("node:port" output, "node:port" input), parsed from `pw-link -l`.
    public func links() -> [(output: String, input: String)] {
        var result = [(output: String, input: String)]()
        var current: String?
        for line in linkList().split(separator: "\n") {
            if !line.hasPrefix(" ") {
                current = String(line)
            } else if let current, let range = line.range(of: "|-> ") {
                result.append((current, String(line[range.upperBound...])))
            }
        }
        return result
    }

    /// Polls until some port of node `from` is linked to some port of node `to`. Streams may run
    /// (and consume or produce samples) before the session manager has linked them, so tests wait
    /// for the link before feeding audio.
    public func waitForLink(from: String, to: String, timeout: Double = 10) throws {
        let linked = eventually(timeout: timeout) {
            links().contains { $0.output.hasPrefix(from + ":") && $0.input.hasPrefix(to + ":") }
        }
        guard linked else { throw HarnessError("no link from \(from) to \(to): \(linkList())") }
    }

    /// Pins the graph's quantum (0 releases it).
    public func forceQuantum(_ frames: Int) throws {
        try run("pw-metadata", ["-n", "settings", "0", "clock.force-quantum", String(frames)])
    }

    /// `pw-dump` parsed: one dictionary per object.
    public func dump() throws -> [[String: Any]] {
        let text = try run("pw-dump", [])
        guard let data = text.data(using: .utf8),
              let objects = try JSONSerialization.jsonObject(with: data) as? [[String: Any]] else {
            throw HarnessError("pw-dump printed no JSON array")
        }
        return objects
    }

    /// The properties of the node called `name` (values as strings), or nil if there is none.
    public func nodeProperties(named name: String) throws -> [String: String]? {
        for object in try dump() where object["type"] as? String == "PipeWire:Interface:Node" {
            guard let info = object["info"] as? [String: Any], let props = info["props"] as? [String: Any],
                  props["node.name"] as? String == name else { continue }
            var result = [String: String]()
            for (key, value) in props { result[key] = "\(value)" }
            if let id = object["id"] { result["object.id"] = "\(id)" }
            return result
        }
        return nil
    }

    /// Makes a mono virtual sink called `name` (a null sink) carrying `properties`, as a real
    /// device's sink would (`device.form-factor`, `device.icon-name`, `device.bus`, ...); returns
    /// once its port exists.
    public func createSink(_ name: String, properties: [String: String] = [:]) throws {
        let extra = properties.sorted { $0.key < $1.key }.map { "\($0.key)=\"\($0.value)\"" }.joined(separator: " ")
        try run("pw-cli", ["create-node", "adapter", "{ factory.name=support.null-audio-sink node.name=\"\(name)\" "
                           + "media.class=Audio/Sink object.linger=true audio.position=[MONO] \(extra) }"])
        try waitForPorts(["\(name):playback_MONO"])
    }

    /// Moves the stream whose node is called `stream` to the sink called `sink`, as a mixer
    /// application does (its `target.object` in the default metadata; WirePlumber relinks it).
    public func move(stream: String, to sink: String) throws {
        guard let id = try nodeProperties(named: stream)?["object.id"] else { throw HarnessError("no node \(stream)") }
        try run("pw-metadata", ["-n", "default", id, "target.object", sink])
    }

    // MARK: Injecting and recording

    /// Plays a WAV file (mono) into `node`'s input (the virtual mic by default): pw-play with
    /// --target 0, then a pw-link, since WirePlumber routes no playback stream to a source.
    /// Returns once linked; the playback runs in real time.
    public func inject(_ wavPath: String, into node: String = PipeWireSession.micName) throws -> Injection {
        serial += 1
        let name = "peervoice-inject-\(serial)"
        let player = try spawn("pw-play", ["--target", "0", "--latency", "256", "-P", "{ node.name = \"\(name)\" }", wavPath],
                               logName: name)
        do {
            try waitForPorts(["\(name):output_MONO"])
            try link("\(name):output_MONO", "\(node):input_MONO")
        } catch {
            player.kill()
            throw HarnessError("cannot inject \(wavPath): \(error); pw-play said: \(player.log)")
        }
        return Injection(process: player, node: name)
    }

    /// Records into a 2-channel 16-bit WAV with ONE pw-record: channel 0 = the mic's capture_MONO
    /// (what apps capture; silent unless `micCapture`), channel 1 = the speaker's monitor_MONO (what
    /// apps played). Both channels are sampled in the same graph cycle, so the lag between them is
    /// the mouth-to-ear latency, free of start-time offsets and clock skew. `channel0` ("node:port")
    /// records that output port instead of the mic (e.g. an injection's, for what was said before
    /// the room mixed anything in). Returns once linked.
    public func record(to path: String, micCapture: Bool = true, speakerMonitor: Bool = true,
                       channel0: String? = nil) throws -> Recording {
        serial += 1
        let name = "peervoice-tap-\(serial)"
        let recorder = try spawn("pw-record", ["--target", "0", "--latency", "256", "--rate", "48000", "--channels", "2",
                                               "--channel-map", "FL,FR", "--format", "s16",
                                               "-P", "{ node.name = \"\(name)\" }", path], logName: name)
        do {
            try waitForPorts(["\(name):input_FL", "\(name):input_FR"])
            if let channel0 {
                try link(channel0, "\(name):input_FL")
            } else if micCapture {
                try link("\(Self.micName):capture_MONO", "\(name):input_FL")
            }
            if speakerMonitor { try link("\(Self.speakerName):monitor_MONO", "\(name):input_FR") }
        } catch {
            recorder.kill()
            throw HarnessError("cannot record: \(error); pw-record said: \(recorder.log)")
        }
        return Recording(process: recorder, path: path)
    }

    private static func readEnvironment(_ path: String) throws -> [String: String] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var result = [String: String]()
        for line in text.split(separator: "\n") where line.hasPrefix("export ") {
            let assignment = line.dropFirst("export ".count)
            guard let equals = assignment.firstIndex(of: "=") else { continue }
            var value = assignment[assignment.index(after: equals)...]
            if value.hasPrefix("'"), value.hasSuffix("'"), value.count >= 2 { value = value.dropFirst().dropLast() }
            result[String(assignment[..<equals])] = String(value)
        }
        return result
    }
}

/// A running `pw-play` linked into a node.
public final class Injection {
    public let process: ChildProcess
    /// The player's node name (its port is NODE:output_MONO).
    public let node: String
    init(process: ChildProcess, node: String) {
        self.process = process
        self.node = node
    }
    deinit { process.kill() }

    /// Waits until the whole file has played; false on timeout.
    @discardableResult
    public func wait(timeout: Double) -> Bool { process.wait(timeout: timeout) != nil }

    public func stop() {
        process.signal(SIGINT)
        if process.wait(timeout: 5) == nil { process.kill() }
    }
}

/// A running 2-channel `pw-record`.
public final class Recording {
    public let process: ChildProcess
    public let path: String
    init(process: ChildProcess, path: String) {
        self.process = process
        self.path = path
    }
    deinit { process.kill() }

    /// Ends the recording (SIGINT, so pw-record finishes the WAV header) and reads it.
    public func stop() throws -> WAVAudio {
        process.signal(SIGINT)
        if process.wait(timeout: 5) == nil { process.kill() }
        return try WAVAudio(contentsOf: path)
    }
}

/// 16-bit PCM WAV, interleaved channels.
public struct WAVAudio {
    public var sampleRate: Int
    public var channels: Int
    /// Interleaved samples.
    public var samples: [Int16]

    public init(sampleRate: Int = 48_000, channels: Int = 1, samples: [Int16]) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.samples = samples
    }

    public var frames: Int { samples.count / max(channels, 1) }

    public func channel(_ index: Int) -> [Int16] {
        stride(from: index, to: samples.count, by: channels).map { samples[$0] }
    }

    /// Reads a 16-bit PCM WAV (walks the chunks; tolerates a data size left unset by a killed writer).
    public init(contentsOf path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else { throw HarnessError("cannot read \(path)") }
        let bytes = [UInt8](data)
        func u32(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 | Int(bytes[at + 2]) << 16 | Int(bytes[at + 3]) << 24 }
        func u16(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }
        guard bytes.count >= 12, bytes[0..<4] == [0x52, 0x49, 0x46, 0x46], bytes[8..<12] == [0x57, 0x41, 0x56, 0x45] else {
            throw HarnessError("\(path) is not a WAV file")
        }
        var offset = 12
        var rate = 0, channels = 0, bits = 0
        while offset + 8 <= bytes.count {
            let id = String(decoding: bytes[offset..<offset + 4], as: UTF8.self)
            var size = u32(offset + 4)
            let body = offset + 8
            if id == "fmt " {
                channels = u16(body + 2)
                rate = u32(body + 4)
                bits = u16(body + 14)
            } else if id == "data" {
                guard bits == 16, channels > 0 else { throw HarnessError("\(path): only 16-bit PCM is supported") }
                if size == 0 || size == 0xFFFF_FFFF || body + size > bytes.count { size = bytes.count - body }
                let count = size / 2
                var samples = [Int16](repeating: 0, count: count)
                for i in 0..<count { samples[i] = Int16(bitPattern: UInt16(u16(body + 2 * i))) }
                self.init(sampleRate: rate, channels: channels, samples: samples)
                return
            }
            offset = body + size + (size & 1)
        }
        throw HarnessError("\(path) has no data chunk")
    }

    public func write(to path: String) throws {
        var bytes = [UInt8]()
        bytes.reserveCapacity(44 + samples.count * 2)
        func u32(_ value: Int) { for shift in stride(from: 0, to: 32, by: 8) { bytes.append(UInt8((value >> shift) & 0xff)) } }
        func u16(_ value: Int) { bytes.append(UInt8(value & 0xff)); bytes.append(UInt8((value >> 8) & 0xff)) }
        bytes += Array("RIFF".utf8); u32(36 + samples.count * 2); bytes += Array("WAVE".utf8)
        bytes += Array("fmt ".utf8); u32(16); u16(1); u16(channels); u32(sampleRate)
        u32(sampleRate * channels * 2); u16(channels * 2); u16(16)
        bytes += Array("data".utf8); u32(samples.count * 2)
        for sample in samples { u16(Int(UInt16(bitPattern: sample))) }
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else {
            throw HarnessError("cannot write \(path)")
        }
    }
}

/// Test signals and the cross-correlation used to find where (and how faithfully) they came out.
public enum AudioAnalysis {
    /// A linear chirp from `from` to `to` Hz with `silence` seconds of silence before and after.
    public static func chirp(seconds: Double, from: Double = 300, to: Double = 3_000, amplitude: Double = 0.4,
                             silence: Double = 0.1, sampleRate: Int = 48_000) -> [Int16] {
        let lead = Int(silence * Double(sampleRate))
        let count = Int(seconds * Double(sampleRate))
        let sweep = (to - from) / seconds
        var samples = [Int16](repeating: 0, count: lead)
        samples.reserveCapacity(2 * lead + count)
        for i in 0..<count {
            let t = Double(i) / Double(sampleRate)
            // 5 ms fades avoid clicks.
            let fade = min(1, Double(min(i, count - 1 - i)) / (0.005 * Double(sampleRate)))
            let value = amplitude * fade * sin(2 * Double.pi * (from * t + sweep * t * t / 2))
            samples.append(Int16((value * 32767).rounded()))
        }
        samples += [Int16](repeating: 0, count: lead)
        return samples
    }

    /// Index of the first sample whose magnitude exceeds `threshold`, or nil.
    public static func onset(_ samples: [Int16], threshold: Int16 = 300) -> Int? {
        samples.firstIndex { abs(Int($0)) > Int(threshold) }
    }

    /// The lag L (0...maxLag) at which `signal[i + L]` best matches `reference[i]`, and the
    /// normalized correlation there (1 = identical up to gain; > 0.9 = clearly the same audio).
    /// Coarse search on 8x decimated signals, then exact search around the best coarse lag.
    /// Audio paths keep polarity, so the largest positive correlation wins: with the low
    /// frequencies gone (a high-pass filter in the path), a negative lobe half a pitch period
    /// away can be nearly as strong, and picking by magnitude locked onto it.
    public static func bestLag(reference: [Int16], signal: [Int16], maxLag: Int) -> (lag: Int, correlation: Double) {
        let maxLag = max(0, min(maxLag, signal.count - 1))
        let factor = 8
        let coarseReference = decimate(reference, by: factor)
        let coarseSignal = decimate(signal, by: factor)
        var best = (lag: 0, value: 0.0)
        for lag in 0...(maxLag / factor) {
            let value = normalizedCorrelation(coarseReference, coarseSignal, lag: lag)
            if value > best.value { best = (lag, value) }
        }
        let reference = reference.map(Double.init)
        let signal = signal.map(Double.init)
        var fine = (lag: 0, value: -Double.infinity)
        for lag in max(0, best.lag * factor - 2 * factor)...min(maxLag, best.lag * factor + 2 * factor) {
            let value = normalizedCorrelation(reference, signal, lag: lag)
            if value > fine.value { fine = (lag, value) }
        }
        return (fine.lag, fine.value)
    }

    private static func decimate(_ samples: [Int16], by factor: Int) -> [Double] {
        let count = samples.count / factor
        var result = [Double](repeating: 0, count: count)
        samples.withUnsafeBufferPointer { input in
            for i in 0..<count {
                var sum = 0
                for j in 0..<factor { sum += Int(input[i * factor + j]) }
                result[i] = Double(sum) / Double(factor)
            }
        }
        return result
    }

    private static func normalizedCorrelation(_ reference: [Double], _ signal: [Double], lag: Int) -> Double {
        let count = min(reference.count, signal.count - lag)
        guard count > 0 else { return 0 }
        var dot = 0.0, energyReference = 0.0, energySignal = 0.0
        reference.withUnsafeBufferPointer { r in
            signal.withUnsafeBufferPointer { s in
                for i in 0..<count {
                    let a = r[i], b = s[i + lag]
                    dot += a * b
                    energyReference += a * a
                    energySignal += b * b
                }
            }
        }
        let norm = (energyReference * energySignal).squareRoot()
        return norm > 0 ? dot / norm : 0
    }
}
