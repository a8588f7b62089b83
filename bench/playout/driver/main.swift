// playout-bench: the receive side of a call, offline and deterministic (bench/playout/README.md).
// The speech (raw 48 kHz mono Int16) is encoded with libopus as the daemon does, sent on seeded
// arrival traces, and played out through the core's JitterBuffer and VoicePlayout by a simulated
// device and voice thread that refill the ring as CallAudio and RemoteVoice do; no real time,
// no threads. Writes what the device played (raw Int16) and prints one JSON line of counts.
import Foundation
import Opus
import PeerVoiceCore
import SeededRandom

struct Options {
    var input = ""
    var output = ""
    var frameMs = 20
    var jitter = false
    var lossPercent = 0.0
    var seed: UInt64 = 1
    /// The jitter buffer's `mergeLatePackets` (off: the playout before late packets merged).
    var merge = true
    /// Render with the core's VoicePlayout (off: the decoder is asked for each output as it
    /// comes, concealment of any length included, as RemoteVoice did before).
    var keepConcealment = true
    /// h-jitter's integration: each output of one refill pass gets `now` advanced by what the
    /// pass produced before it.
    var advanceNow = false
    /// h-jitter's integration: a refill pass that conceals fills the ring a quantum fuller, and the
    /// device then wakes the voice thread a quantum earlier.
    var raiseFill = false
    /// An oracle instead of the jitter buffer: a fixed playout offset, this quantile (0...1) of
    /// the whole trace's relative delays, known in advance; no adaptation (nil: the jitter buffer).
    var oracleQuantile: Double?
    /// Each output of the playout on stderr (diagnosis).
    var logOutputs = false
    /// Jitter buffer tunables other than the defaults, `name=value` (e.g. `initialDelayMs=40`).
    var tunables: [String: Double] = [:]
    /// Refill at once when the device draws, as the daemon did before it waited for a packet
    /// that has not come until shortly before the next draw (``RefillSchedule``).
    var refillAtOnce = false
    /// A resting microphone before the speech, as in a call where nobody spoke yet: this long
    /// (ms), one keepalive frame every 400 ms (the daemon's resting encoder), on the same network.
    var restMs = 0
}

var parsed = Options()
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let flag = arguments.next() {
    func value() -> String {
        guard let v = arguments.next() else { fatalError("\(flag) needs a value") }
        return v
    }
    switch flag {
    case "--input": parsed.input = value()
    case "--output": parsed.output = value()
    case "--frame-ms": parsed.frameMs = Int(value())!
    case "--jitter": parsed.jitter = true
    case "--loss": parsed.lossPercent = Double(value())!
    case "--seed": parsed.seed = UInt64(value())!
    case "--no-merge": parsed.merge = false
    case "--direct-render": parsed.keepConcealment = false
    case "--advance-now": parsed.advanceNow = true
    case "--raise-fill": parsed.raiseFill = true
    case "--oracle-quantile": parsed.oracleQuantile = Double(value())!
    case "--log-outputs": parsed.logOutputs = true
    case "--rest-ms": parsed.restMs = Int(value())!
    case "--refill-at-once": parsed.refillAtOnce = true
    case "--set":
        let pair = value().split(separator: "=")
        parsed.tunables[String(pair[0])] = Double(pair[1])!
    default: fatalError("unknown option \(flag)")
    }
}
let options = parsed

let data = try Data(contentsOf: URL(fileURLWithPath: options.input))
let speech: [Int16] = data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
let duration: OpusFrameDuration = options.frameMs == 10 ? .ms10 : .ms20
let frame = duration.samples
/// The device quantum of both ends (bench-voice pins it): capture delivers, playback draws this much.
let quantum = 256
let fillSamples = quantum  // CallAudio.playbackFillSamples
let rate = Int64(voiceSampleRate)
func ns(samples: Int64) -> Int64 { samples * 1_000_000_000 / rate }
/// CallAudio.refillSchedule; a margin of a whole quantum puts the deadline at the draw (at once).
let refillSchedule = options.refillAtOnce ? RefillSchedule(marginNs: ns(samples: Int64(quantum))) : RefillSchedule()

// MARK: Send: encode as the daemon does (FEC hint 0 on a clean path, 5 % once the peer reports loss).

struct Sent {
    var seq: UInt64
    var timestamp: UInt32
    var payload: [UInt8]
    var arrival: Int64
}
// SplitMix64: the traces are the same for every playout.
var random = SplitMix64(seed: options.seed &* 0x2545_F491_4F6C_DD1D)
func makeEncoder() throws -> OpusVoiceEncoder {
    try OpusVoiceEncoder(configuration: .init(frameDuration: duration, packetLossPercent: options.lossPercent > 0 ? 5 : 0))
}
let encoder = try makeEncoder()
var packets: [Sent] = []
var packet = [UInt8](repeating: 0, count: 1500)
var seq: UInt64 = 1000
let timestamp0: UInt32 = 90_000
/// Frames of the resting microphone before the speech (`--rest-ms`); the speech's frames follow.
let restFrames = options.restMs * 48 / frame
let keepaliveEvery = 400 * 48 / frame
let silentFrame = [Int16](repeating: 0, count: frame)
for index in 0..<(restFrames + speech.count / frame) {
    let resting = index < restFrames
    if resting && index % keepaliveEvery != 0 { continue }  // the resting encoder sends nothing
    let bytes = try packet.withUnsafeMutableBufferPointer { out in
        // A keepalive comes from a fresh encoder (out of DTX: a real small packet), as CallAudio sends it.
        if resting { return try silentFrame.withUnsafeBufferPointer { try makeEncoder().encode($0, into: out) } }
        let start = (index - restFrames) * frame
        return try speech.withUnsafeBufferPointer { pcm in
            try encoder.encode(UnsafeBufferPointer(rebasing: pcm[start..<start + frame]), into: out)
        }
    }
    if bytes <= 2 && !resting { continue }  // DTX silence: not sent, seq not advanced
    seq += 1
    // A frame leaves when the capture quantum that completes it was delivered.
    let complete = Int64(((index + 1) * frame + quantum - 1) / quantum * quantum)
    let delayMs = options.jitter ? min(100, max(5, 30 + 10 * random.gaussian())) : 0.05
    let lost = random.uniform() * 100 < options.lossPercent
    if lost { continue }
    packets.append(Sent(seq: seq, timestamp: timestamp0 &+ UInt32(index * frame), payload: Array(packet[0..<bytes]),
                        arrival: ns(samples: complete) + Int64(delayMs * 1_000_000)))
}
packets.sort { $0.arrival < $1.arrival }

// MARK: The oracle: one fixed playout offset, chosen knowing the whole trace.

/// Plays frame k at its capture time plus one fixed offset (a quantile of the trace's relative
/// delays), whatever arrives: what a playout that knew the network in advance and never adapted
/// would play. A packet not here at its frame's time is late: recovered from its successor's FEC
/// if that is here, else concealed. Frames the sender did not send (DTX) are concealed (comfort
/// noise) for the jitter buffer's 100 ms, then silence, as the jitter buffer plays them.
struct OracleSchedule {
    let byFrame: [Int: Sent]
    let offset: Int64
    /// The offset beyond the fastest packet (ms).
    let bufferMs: Double
    let firstFrame: Int
    var nextFrame: Int?
    var unsentRun = 0
    var late = 0
    var concealedSamples = 0
    var fecRecovered = 0

    init(_ packets: [Sent], quantile: Double) {
        var byFrame: [Int: Sent] = [:]
        for p in packets { byFrame[Int(p.timestamp &- timestamp0) / frame] = p }
        self.byFrame = byFrame
        let delays = byFrame.map { $0.value.arrival - ns(samples: Int64($0.key * frame)) }.sorted()
        offset = delays[min(delays.count - 1, Int(quantile * Double(delays.count)))]
        bufferMs = Double(offset - delays[0]) / 1e6
        firstFrame = byFrame.keys.min()!
    }

    mutating func next(now: Int64) -> JitterBuffer.Output {
        guard let k = nextFrame else {
            if now < ns(samples: Int64(firstFrame * frame)) + offset { return .silence(samples: 120) }
            nextFrame = firstFrame
            return next(now: now)
        }
        nextFrame = k + 1
        guard let packet = byFrame[k] else {
            unsentRun += 1
            if unsentRun * frame > 100 * 48 { return .silence(samples: frame) }
            concealedSamples += frame
            return .conceal(samples: frame)
        }
        unsentRun = 0
        if packet.arrival <= now { return .frame(packet.payload) }
        late += 1
        if let successor = byFrame[k + 1], successor.arrival <= now {
            fecRecovered += 1
            return .recoverWithFEC(successor.payload)
        }
        concealedSamples += frame
        return .conceal(samples: frame)
    }
}

// MARK: Receive: the device draws a quantum at a time; the voice thread refills the ring.

/// The listener's device, ring and voice thread (one remote voice).
final class Receiver {
    let options: Options
    var jitter: JitterBuffer
    var playout: VoicePlayout
    var decoder: OpusVoiceDecoder
    var decoded = [Int16](repeating: 0, count: voiceMaxPacketSamples)
    var ring: [Int16] = []  // what the device has not drawn yet: ring[ringStart...]
    var ringStart = 0
    /// The level under which the device wakes the voice thread (h-jitter raised it while concealing).
    var wakeBelow = fillSamples
    var played: [Int16] = []
    /// The jitter buffer's delay beyond the fastest packet at each frame it played (ms).
    var frameDelaysMs: [Double] = []
    var underruns = 0
    var oracle: OracleSchedule?

    init(options: Options) throws {
        self.options = options
        var configuration = JitterBuffer.Configuration(frameSamples: frame, mergeLatePackets: options.merge)
        for (name, value) in options.tunables {
            switch name {
            case "lateCostMs": configuration.lateCostMs = value
            case "initialDelayMs": configuration.initialDelayMs = value
            case "warmupPackets": configuration.warmupPackets = Int(value)
            case "estimatedUntilPackets": configuration.estimatedUntilPackets = Int(value)
            case "shrinkHoldMs": configuration.shrinkHoldMs = value
            case "shrinkIntervalMs": configuration.shrinkIntervalMs = value
            case "shrinkForceMs": configuration.shrinkForceMs = value
            case "minimumDelayMs": configuration.minimumDelayMs = value
            case "historyMs": configuration.historyMs = value
            default: fatalError("unknown tunable \(name)")
            }
        }
        jitter = JitterBuffer(configuration: configuration)
        playout = VoicePlayout(frameSamples: frame)
        decoder = try OpusVoiceDecoder(frameDuration: duration)
    }

    var isDormant: Bool { oracle.map { $0.nextFrame == nil } ?? (!jitter.isPlaying && jitter.isEmpty) }

    /// One output of the jitter buffer into `decoded`, as RemoteVoice renders it (or as it did).
    func render(_ output: JitterBuffer.Output) throws -> Int {
        try decoded.withUnsafeMutableBufferPointer { pcm in
            if options.keepConcealment { return try playout.render(output, decoder: &decoder, into: pcm) }
            switch output {
            case .frame(let p): return try p.withUnsafeBufferPointer { try decoder.decode($0, fec: false, into: pcm) }
            case .recoverWithFEC(let p): return try p.withUnsafeBufferPointer { try decoder.decode($0, fec: true, into: pcm) }
            case .conceal(let n): return try decoder.decode(nil, fec: false, into: UnsafeMutableBufferPointer(rebasing: pcm[0..<n]))
            case .silence(let n):
                UnsafeMutableBufferPointer(rebasing: pcm[0..<n]).update(repeating: 0)
                return n
            }
        }
    }

    /// One line on stderr: the time (ms), the output, the jitter buffer's target and delay (ms).
    func log(_ output: JitterBuffer.Output, at: Int64) {
        let kind: String
        switch output {
        case .frame(let p): kind = "frame \(p.count) bytes"
        case .recoverWithFEC: kind = "fec"
        case .conceal(let n): kind = "conceal \(n)"
        case .silence(let n): kind = "silence \(n)"
        }
        let s = jitter.statistics
        FileHandle.standardError.write(Data("\(Double(at) / 1e6) \(kind) \(s.currentTargetMs) \(s.currentDelayMs)\n".utf8))
    }

    /// CallAudio.feedPlayback with one voice: when woken below the wake-up level, decode until
    /// the ring holds the fill level.
    func feed(now: Int64) throws {
        guard oracle != nil || !isDormant, ring.count - ringStart < wakeBelow else { return }
        var produced: Int64 = 0
        var fill = fillSamples
        while ring.count - ringStart < fill {
            let at = options.advanceNow ? now + ns(samples: produced) : now
            // The oracle judges a packet at its frame's play time (the ring's lead included):
            // decoding at the refill's time instead would make the frames a quantum early by turns.
            let output = oracle != nil ? oracle!.next(now: at + ns(samples: Int64(ring.count - ringStart)))
                : jitter.next(now: at)
            if options.raiseFill, case .conceal = output { fill = fillSamples + quantum }
            let count = try render(output)
            if options.logOutputs { log(output, at: at) }
            if case .frame = output {
                frameDelaysMs.append(oracle?.bufferMs ?? jitter.statistics.currentDelayMs)
            }
            ring.append(contentsOf: decoded[0..<count])
            produced += Int64(count)
        }
        if produced > 0 { wakeBelow = fill }
    }

    func run(_ packets: [Sent], devicePhase: Int64, end: Int64) throws {
        var next = 0
        var cycle: Int64 = 0
        while true {
            let deviceTime = ns(samples: devicePhase + cycle * Int64(quantum))
            if deviceTime > end { break }
            // Packets that came before this cycle: the voice thread took each as it came, and fed
            // the ring if it was dormant (a packet wakes it).
            while next < packets.count && packets[next].arrival <= deviceTime {
                let p = packets[next]
                let wasDormant = isDormant
                insert(p)
                if wasDormant { try feed(now: refillTime(clock: p.arrival, nextDraw: deviceTime)) }
                next += 1
            }
            // The device draws a quantum (zeros for what the ring lacks), then wakes the voice thread.
            let count = min(quantum, ring.count - ringStart)
            if count < quantum && !isDormant { underruns += 1 }
            played.append(contentsOf: ring[ringStart..<ringStart + count])
            played.append(contentsOf: [Int16](repeating: 0, count: quantum - count))
            ringStart += count
            if ringStart > 1 << 16 { ring.removeFirst(ringStart); ringStart = 0 }
            // The voice thread waits for a packet of the frame due that has not come, until
            // the schedule's deadline: the packets that come meanwhile are taken as they come.
            var clock = deviceTime
            let nextDraw = deviceTime + ns(samples: Int64(quantum))
            while oracle == nil && ring.count - ringStart < wakeBelow,
                  case .wait(let until) = refillSchedule.decide(clock: clock, nextDrawNs: nextDraw,
                                                                awaitingPacket: jitter.isAwaitingFrameDue) {
                guard next < packets.count, packets[next].arrival <= until else {
                    clock = until
                    break
                }
                insert(packets[next])
                clock = packets[next].arrival
                next += 1
            }
            try feed(now: refillTime(clock: clock, nextDraw: nextDraw))
            cycle += 1
        }
    }

    /// A packet as the voice thread takes it when it comes.
    func insert(_ p: Sent) {
        jitter.insert(seq: p.seq, timestamp: p.timestamp, payload: p.payload, arrival: p.arrival)
    }

    /// The `now` a refill at `clock` gives the jitter buffer: the schedule's deadline, or the
    /// clock once past it (the oracle's: the clock, which it turns into play times itself).
    func refillTime(clock: Int64, nextDraw: Int64) -> Int64 {
        guard oracle == nil,
              case .refill(let now) = refillSchedule.decide(clock: clock, nextDrawNs: nextDraw, awaitingPacket: false)
        else { return clock }
        return now
    }
}

let receiver = try Receiver(options: options)
if let quantile = options.oracleQuantile { receiver.oracle = OracleSchedule(packets, quantile: quantile) }
let devicePhase = Int64(random.uniform() * Double(quantum))
let restSamples = restFrames * frame
try receiver.run(packets, devicePhase: devicePhase, end: ns(samples: Int64(restSamples + speech.count)) + 1_000_000_000)

var stats = receiver.jitter.statistics
if let oracle = receiver.oracle {
    stats.received = packets.count
    stats.late = oracle.late
    stats.concealedSamples = oracle.concealedSamples
    stats.fecRecovered = oracle.fecRecovered
    (stats.merged, stats.inserted, stats.dropped) = (0, 0, 0)
}
// What played while the microphone rested is left out: the output starts with the speech's time.
let outputData = receiver.played[restSamples...].withUnsafeBufferPointer { Data(buffer: $0) }
try outputData.write(to: URL(fileURLWithPath: options.output))
let summary: [String: Any] = [
    "sent": Int(seq - 1000), "received": stats.received, "late": stats.late, "merged": stats.merged,
    "lost": stats.lost, "concealed": stats.concealed, "concealed_ms": Double(stats.concealedSamples) / 48,
    "fec": stats.fecRecovered, "dropped": stats.dropped, "inserted": stats.inserted, "underruns": receiver.underruns,
    "device_start_ms": Double(ns(samples: devicePhase)) / 1e6,
    "buffer_delay_ms": receiver.frameDelaysMs.isEmpty ? 0 : receiver.frameDelaysMs.reduce(0, +) / Double(receiver.frameDelaysMs.count),
]
let json = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
print(String(decoding: json, as: UTF8.self))
