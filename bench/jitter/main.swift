// Jitter-buffer benchmark: PeerVoice's JitterBuffer against speexdsp's jitter buffer, on the same
// synthetic arrival traces, ticked the same way (one get per 20 ms frame), scored by the same code.
//
// Built and run by bench/jitter/run.sh (`make bench-jitter`): this file is compiled together with
// Sources/PeerVoiceCore/Voice/JitterBuffer.swift and speex_sim.c; speexdsp never enters the product.
//
// Usage: bench-jitter [--json PATH] [--frame-ms 20|10] [--seconds N] [--late-cost-ms X] [--dump TRACE] ...

import CSpeexSim
import Foundation

// SplitMix64 (the seeded draws) is Tests/SeededRandom's, compiled in by run.sh.

// MARK: - Traces

struct SentPacket {
    var seq: UInt64
    var timestamp: UInt32
    var sendNs: Int64
    var arrivalNs: Int64?  // nil: lost in the network
}

struct Trace {
    var name: String
    var description: String
    var packets: [SentPacket]
}

let msNs: Int64 = 1_000_000

struct TraceSpec {
    var name: String
    var description: String
    var seed: UInt64
    /// For a seed: the one-way delay of packet i, sent at `send` ms, or nil if lost.
    var delay: (UInt64) -> (inout SplitMix64, Int, Double) -> Double?
}

func makeTrace(_ spec: TraceSpec, seed: UInt64, frames: Int, frameMs: Double, frameSamples: Int) -> Trace {
    var rng = SplitMix64(seed: seed)
    let delayOf = spec.delay(seed)
    let seq0 = rng.next()
    // Start near the 32-bit wrap so both buffers cross it.
    let ts0 = UInt32.max - UInt32(frameSamples * 500)
    var packets: [SentPacket] = []
    packets.reserveCapacity(frames)
    for i in 0..<frames {
        let sendMs = Double(i) * frameMs
        let delay = delayOf(&rng, i, sendMs)
        let sendNs = Int64(sendMs * 1e6)
        packets.append(SentPacket(
            seq: seq0 &+ UInt64(i),
            timestamp: ts0 &+ UInt32(truncatingIfNeeded: i * frameSamples),
            sendNs: sendNs,
            arrivalNs: delay.map { sendNs + Int64($0 * 1e6) }))
    }
    return Trace(name: spec.name, description: spec.description, packets: packets)
}

func gaussianDelay(mean: Double, sd: Double, floor: Double, cap: Double, loss: Double)
    -> (UInt64) -> (inout SplitMix64, Int, Double) -> Double?
{
    return { _ in { rng, _, _ in
        let lost = rng.uniform() < loss
        let d = min(cap, max(floor, mean + sd * rng.gaussian()))
        return lost ? nil : d
    } }
}

/// Wi-Fi-like: Gilbert-Elliott bursty loss, small jitter, and stalls (every ~8 s on average, 100–300
/// ms long) during which packets queue and then arrive together.
func burstyDelay(seed: UInt64, durationMs: Double) -> (inout SplitMix64, Int, Double) -> Double? {
    var stallRng = SplitMix64(seed: seed ^ 0xAB_CDEF)
    var stalls: [(start: Double, end: Double)] = []
    var t = stallRng.exponential(mean: 8000)
    while t < durationMs {
        let length = 100 + 200 * stallRng.uniform()
        stalls.append((t, t + length))
        t += length + stallRng.exponential(mean: 8000)
    }
    var bad = false
    return { rng, _, sendMs in
        // Gilbert-Elliott: good → bad 1.5 %, bad → good 30 %; loss 0.2 % in good, 50 % in bad.
        bad = bad ? rng.uniform() >= 0.30 : rng.uniform() < 0.015
        let lost = rng.uniform() < (bad ? 0.5 : 0.002)
        var d = max(8, 25 + 5 * rng.gaussian())
        for s in stalls where sendMs >= s.start && sendMs < s.end {
            // Held until the stall ends, then drained 0.2 ms apart.
            d = max(d, s.end - sendMs + 8 + 0.2 * Double(Int((sendMs - s.start) / 20)))
        }
        return lost ? nil : d
    }
}

// MARK: - Playout logs

enum TickKind: String { case silence, frame, fec, conceal, insert }

struct TickLog {
    var kind: TickKind
    var seq: UInt64  // frame: the packet played; fec: the packet whose FEC was used
    var timeNs: Int64  // when this output starts playing
    var samples: Int
}

func arrivals(_ trace: Trace) -> [SentPacket] {
    trace.packets.filter { $0.arrivalNs != nil }.sorted { ($0.arrivalNs!, $0.seq) < ($1.arrivalNs!, $1.seq) }
}

/// Our buffer, asked for audio as a playback device would: each call's `now` is when its output
/// starts playing, i.e. the previous call's time plus the previous output's length.
func runOurs(_ trace: Trace, configuration: JitterBuffer.Configuration, firstTickNs: Int64, endNs: Int64,
             dump: Bool = false) -> (log: [TickLog], stats: JitterBuffer.Statistics)
{
    var jb = JitterBuffer(configuration: configuration)
    let incoming = arrivals(trace)
    let frameSamples = configuration.frameSamples
    var next = 0
    var log: [TickLog] = []
    var produced: Int64 = 0  // samples
    func seqOf(_ payload: [UInt8]) -> UInt64 {
        payload.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
    }
    while true {
        let now = firstTickNs + produced * 125_000 / 6
        if now > endNs { break }
        while next < incoming.count && incoming[next].arrivalNs! <= now {
            let p = incoming[next]
            let payload = withUnsafeBytes(of: p.seq.littleEndian) { Array($0) }
            jb.insert(seq: p.seq, timestamp: p.timestamp, payload: payload, arrival: p.arrivalNs!)
            next += 1
        }
        let insertedBefore = jb.statistics.inserted
        let out = jb.next(now: now)
        let n = out.samples(frameSamples: frameSamples)
        switch out {
        case .frame(let payload): log.append(TickLog(kind: .frame, seq: seqOf(payload), timeNs: now, samples: n))
        case .recoverWithFEC(let payload): log.append(TickLog(kind: .fec, seq: seqOf(payload), timeNs: now, samples: n))
        case .conceal:
            let kind: TickKind = jb.statistics.inserted > insertedBefore ? .insert : .conceal
            log.append(TickLog(kind: kind, seq: 0, timeNs: now, samples: n))
        case .silence: log.append(TickLog(kind: .silence, seq: 0, timeNs: now, samples: n))
        }
        produced += Int64(n)
        if dump && (log.count % 50 == 0 || log.last!.kind != .frame) {
            let st = jb.statistics
            print("t=\(Double(now) / 1e9)s \(log.last!.kind) \(n) target \(st.currentTargetMs) delay \(st.currentDelayMs) buffered \(st.bufferedMs) jitter \(st.jitterMs) ins \(st.inserted) drop \(st.dropped) late \(st.late)")
        }
    }
    return (log, jb.statistics)
}

func runSpeex(_ trace: Trace, frameSamples: Int, marginSamples: Int, firstTickNs: Int64, tickNs: Int64, ticks: Int) -> [TickLog] {
    let incoming = arrivals(trace).map { bench_packet(seq: $0.seq, timestamp: $0.timestamp, arrival_ns: $0.arrivalNs!) }
    var out = [bench_tick](repeating: bench_tick(kind: 0, seq: 0), count: ticks)
    let r = incoming.withUnsafeBufferPointer { packets in
        out.withUnsafeMutableBufferPointer { outBuffer in
            speex_simulate(packets.baseAddress, Int32(packets.count), Int32(frameSamples), firstTickNs, tickNs,
                           Int32(ticks), Int32(marginSamples), outBuffer.baseAddress)
        }
    }
    precondition(r == 0, "speexdsp jitter_buffer_init failed")
    return out.enumerated().map { k, t in
        let time = firstTickNs + Int64(k) * tickNs
        switch Int32(t.kind) {
        case Int32(BENCH_FRAME): return TickLog(kind: .frame, seq: t.seq, timeNs: time, samples: frameSamples)
        case Int32(BENCH_CONCEAL): return TickLog(kind: .conceal, seq: 0, timeNs: time, samples: frameSamples)
        case Int32(BENCH_INSERT): return TickLog(kind: .insert, seq: 0, timeNs: time, samples: frameSamples)
        default: return TickLog(kind: .silence, seq: 0, timeNs: time, samples: frameSamples)
        }
    }
}

// MARK: - Scoring

struct Score: Codable {
    var buffer: String
    var trace: String
    var meanDelayMs: Double  // playout tick − send time, over frames played from their own packet
    var p95DelayMs: Double
    var bufferDelayMs: Double  // playout tick − arrival, same frames
    var playedPercent: Double
    var latePercent: Double  // arrived but never played (late, dropped or skipped), of frames sent
    var networkLossPercent: Double
    var concealPercent: Double  // PLC audio (losses + insertions) while playing, per audio sent
    var fecPercent: Double  // FEC-recovered ticks, per frame sent
    var insertions: Int
}

func score(_ log: [TickLog], trace: Trace, buffer: String, frameSamples: Int) -> Score {
    let sent = trace.packets.count
    let seq0 = trace.packets[0].seq
    var played = [Bool](repeating: false, count: sent)
    var delays: [Double] = []
    var bufferDelays: [Double] = []
    var firstFrame = Int.max, lastFrame = -1
    for (k, t) in log.enumerated() where t.kind == .frame {
        let i = Int(t.seq &- seq0)
        guard i >= 0 && i < sent else { continue }
        played[i] = true
        let tick = t.timeNs
        delays.append(Double(tick - trace.packets[i].sendNs) / 1e6)
        bufferDelays.append(Double(tick - trace.packets[i].arrivalNs!) / 1e6)
        firstFrame = min(firstFrame, k)
        lastFrame = max(lastFrame, k)
    }
    var concealSamples = 0, fec = 0, insertions = 0
    if lastFrame >= 0 {
        for t in log[firstFrame...lastFrame] {
            switch t.kind {
            case .conceal: concealSamples += t.samples
            case .insert: concealSamples += t.samples; insertions += 1
            case .fec: fec += 1
            default: break
            }
        }
    }
    let arrived = trace.packets.filter { $0.arrivalNs != nil }.count
    let playedCount = played.filter { $0 }.count
    delays.sort()
    let pct = { (x: Int) in 100 * Double(x) / Double(sent) }
    return Score(
        buffer: buffer, trace: trace.name,
        meanDelayMs: delays.reduce(0, +) / Double(max(1, delays.count)),
        p95DelayMs: delays.isEmpty ? 0 : delays[min(delays.count - 1, delays.count * 95 / 100)],
        bufferDelayMs: bufferDelays.reduce(0, +) / Double(max(1, bufferDelays.count)),
        playedPercent: pct(playedCount),
        latePercent: pct(arrived - playedCount),
        networkLossPercent: pct(sent - arrived),
        concealPercent: 100 * Double(concealSamples) / Double(sent * frameSamples),
        fecPercent: pct(fec),
        insertions: insertions)
}

// MARK: - Main

var jsonPath = "bench/results/jitter.json"
var frameMs = 20.0
var seconds = 120.0
var runs = 5
var configuration = JitterBuffer.Configuration()
var speexMargins = [0]
var quiet = false
var dumpTrace = ""
var sweepCosts: [Double] = [1, 2, 3, 5, 7, 10, 15, 25, 50]
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let a = arguments.next() {
    func value() -> String { arguments.next() ?? "" }
    switch a {
    case "--json": jsonPath = value()
    case "--frame-ms": frameMs = Double(value()) ?? 20
    case "--seconds": seconds = Double(value()) ?? 120
    case "--runs": runs = max(1, Int(value()) ?? 5)
    case "--late-cost-ms": configuration.lateCostMs = Double(value()) ?? configuration.lateCostMs
    case "--max-late": configuration.maxLateFraction = Double(value()) ?? configuration.maxLateFraction
    case "--min-delay-ms": configuration.minimumDelayMs = Double(value()) ?? 0
    case "--history-ms": configuration.historyMs = Double(value()) ?? configuration.historyMs
    case "--shrink-hold-ms": configuration.shrinkHoldMs = Double(value()) ?? configuration.shrinkHoldMs
    case "--shrink-interval-ms": configuration.shrinkIntervalMs = Double(value()) ?? configuration.shrinkIntervalMs
    case "--shrink-force-ms": configuration.shrinkForceMs = Double(value()) ?? configuration.shrinkForceMs
    case "--stall-backlog-ms": configuration.stallBacklogMs = Double(value()) ?? configuration.stallBacklogMs
    case "--idle-after-ms": configuration.idleAfterMs = Double(value()) ?? configuration.idleAfterMs
    case "--speex-margins": speexMargins = value().split(separator: ",").compactMap { Int($0) }
    case "--quiet": quiet = true
    case "--dump": dumpTrace = value()
    case "--sweep": sweepCosts = value().split(separator: ",").compactMap { Double($0) }
    case "--fec-planning": configuration.planForFEC = true
    case "--step": configuration.stepSamples = Int(value()) ?? configuration.stepSamples
    case "--initial-delay-ms": configuration.initialDelayMs = Double(value()) ?? configuration.initialDelayMs
    default:
        FileHandle.standardError.write("unknown argument \(a)\n".data(using: .utf8)!)
        exit(2)
    }
}
let frameSamples = Int(frameMs * 48)
configuration.frameSamples = frameSamples
configuration.stepSamples = min(configuration.stepSamples, frameSamples)
let frames = Int(seconds * 1000 / frameMs)
let durationMs = seconds * 1000

let specs: [TraceSpec] = [
    TraceSpec(name: "clean", description: "constant 20 ms one-way delay, no loss", seed: 1,
              delay: { _ in { _, _, _ in 20 } }),
    TraceSpec(name: "jitter30", description: "delay 30 ms + N(0, 10 ms) clipped to [5, 100], no loss", seed: 2,
              delay: gaussianDelay(mean: 30, sd: 10, floor: 5, cap: 100, loss: 0)),
    TraceSpec(name: "jitter30-loss5", description: "as jitter30, 5 % random loss", seed: 3,
              delay: gaussianDelay(mean: 30, sd: 10, floor: 5, cap: 100, loss: 0.05)),
    TraceSpec(name: "jitter30-loss10", description: "as jitter30, 10 % random loss", seed: 4,
              delay: gaussianDelay(mean: 30, sd: 10, floor: 5, cap: 100, loss: 0.10)),
    TraceSpec(name: "bursty", description: "25 ms + N(0, 5 ms), Gilbert-Elliott loss, 100-300 ms stalls every ~8 s", seed: 5,
              delay: { seed in burstyDelay(seed: seed, durationMs: durationMs) }),
]

let tickNs = Int64(frameMs * 1e6)
var scores: [Score] = []  // averaged over the runs
var perRun: [Score] = []
func average(_ runs: [Score]) -> Score {
    var a = runs[0]
    let n = Double(runs.count)
    a.meanDelayMs = runs.map(\.meanDelayMs).reduce(0, +) / n
    a.p95DelayMs = runs.map(\.p95DelayMs).reduce(0, +) / n
    a.bufferDelayMs = runs.map(\.bufferDelayMs).reduce(0, +) / n
    a.playedPercent = runs.map(\.playedPercent).reduce(0, +) / n
    a.latePercent = runs.map(\.latePercent).reduce(0, +) / n
    a.networkLossPercent = runs.map(\.networkLossPercent).reduce(0, +) / n
    a.concealPercent = runs.map(\.concealPercent).reduce(0, +) / n
    a.fecPercent = runs.map(\.fecPercent).reduce(0, +) / n
    a.insertions = runs.map(\.insertions).reduce(0, +) / runs.count
    return a
}
for spec in specs {
    var byBuffer: [String: [Score]] = [:]
    var order: [String] = []
    for run in 0..<runs {
        // Each run: another draw of the same conditions, and another receiver tick phase.
        let seed = spec.seed &+ UInt64(run) &* 1_000_003
        let trace = makeTrace(spec, seed: seed, frames: frames, frameMs: frameMs, frameSamples: frameSamples)
        var phaseRng = SplitMix64(seed: seed &* 7919)
        let firstTickNs = Int64(phaseRng.uniform() * Double(tickNs))
        let lastArrival = trace.packets.compactMap(\.arrivalNs).max() ?? 0
        let ticks = Int((lastArrival - firstTickNs) / tickNs) + Int(1000 / frameMs)
        var results: [Score] = []
        let endNs = firstTickNs + Int64(ticks) * tickNs
        let ours = runOurs(trace, configuration: configuration, firstTickNs: firstTickNs,
                           endNs: endNs, dump: dumpTrace == spec.name && run == 0)
        results.append(score(ours.log, trace: trace, buffer: "peervoice", frameSamples: frameSamples))
        // The same planning a spare frame for FEC under loss (lower loss, more delay).
        var withFEC = configuration
        withFEC.planForFEC = true
        let withFECLog = runOurs(trace, configuration: withFEC, firstTickNs: firstTickNs, endNs: endNs).log
        results.append(score(withFECLog, trace: trace, buffer: "peervoice+fecplan", frameSamples: frameSamples))
        let noFEC = configuration
        // The frontier: our buffer at other late costs (the delay/late trade-off it can reach).
        for cost in sweepCosts where cost != configuration.lateCostMs {
            var c = noFEC
            c.lateCostMs = cost
            let log = runOurs(trace, configuration: c, firstTickNs: firstTickNs, endNs: endNs).log
            results.append(score(log, trace: trace, buffer: "peervoice@\(cost)", frameSamples: frameSamples))
        }
        for margin in speexMargins {
            let log = runSpeex(trace, frameSamples: frameSamples, marginSamples: margin * frameSamples,
                               firstTickNs: firstTickNs, tickNs: tickNs, ticks: ticks)
            let name = margin == 0 ? "speexdsp" : "speexdsp+margin\(margin)"
            results.append(score(log, trace: trace, buffer: name, frameSamples: frameSamples))
        }
        for r in results {
            if byBuffer[r.buffer] == nil { order.append(r.buffer) }
            byBuffer[r.buffer, default: []].append(r)
        }
        perRun += results
    }
    for b in order { scores.append(average(byBuffer[b]!)) }
}

/// Our mean delay at speexdsp's late rate, interpolated along our frontier (the late-cost sweep);
/// nil when speexdsp's late rate is outside the swept range.
struct FrontierPoint: Codable {
    var trace: String
    var speexDelayMs: Double
    var speexLatePercent: Double
    var oursDelayAtSpeexLateMs: Double?
    var points: [[Double]]  // [lateCostMs, delayMs, late%]
}
var frontier: [FrontierPoint] = []
if !sweepCosts.isEmpty {
    for trace in specs.map(\.name) {
        guard let speex = scores.first(where: { $0.trace == trace && $0.buffer == "speexdsp" }) else { continue }
        var pts: [(cost: Double, delay: Double, late: Double)] = []
        for s in scores where s.trace == trace && s.buffer.hasPrefix("peervoice") {
            guard s.buffer == "peervoice" || s.buffer.hasPrefix("peervoice@") else { continue }
            let cost = s.buffer == "peervoice" ? configuration.lateCostMs : Double(s.buffer.split(separator: "@")[1])!
            pts.append((cost, s.meanDelayMs, s.latePercent))
        }
        pts.sort { $0.late < $1.late }
        var atSpeex: Double?
        if let exact = pts.first(where: { abs($0.late - speex.latePercent) < 1e-9 }) {
            atSpeex = exact.delay
        } else {
            for (a, b) in zip(pts, pts.dropFirst()) where a.late <= speex.latePercent && speex.latePercent <= b.late {
                let w = (speex.latePercent - a.late) / (b.late - a.late)
                atSpeex = a.delay + w * (b.delay - a.delay)
                break
            }
        }
        frontier.append(FrontierPoint(trace: trace, speexDelayMs: speex.meanDelayMs, speexLatePercent: speex.latePercent,
                                      oursDelayAtSpeexLateMs: atSpeex,
                                      points: pts.sorted { $0.cost < $1.cost }.map { [$0.cost, $0.delay, $0.late] }))
    }
    scores.removeAll { $0.buffer.hasPrefix("peervoice@") }
}

func f(_ x: Double, _ width: Int, _ digits: Int = 1) -> String {
    let s = String(format: "%.\(digits)f", x)
    return String(repeating: " ", count: max(0, width - s.count)) + s
}
func pad(_ s: String, _ width: Int) -> String { s + String(repeating: " ", count: max(0, width - s.count)) }

print("Jitter buffers, \(Int(frameMs)) ms frames, mean of \(runs) runs × \(Int(seconds)) s per trace (delay = playout tick − send time)")
print("\(pad("trace", 16)) \(pad("buffer", 20)) \(pad("delay ms", 9)) \(pad("p95 ms", 7)) \(pad("late %", 7)) \(pad("net loss %", 10)) \(pad("conceal %", 9)) \(pad("FEC %", 6)) insertions")
for s in scores {
    print("\(pad(s.trace, 16)) \(pad(s.buffer, 20)) \(f(s.meanDelayMs, 8)) \(f(s.p95DelayMs, 7)) \(f(s.latePercent, 7, 2)) \(f(s.networkLossPercent, 10, 2)) \(f(s.concealPercent, 9, 2)) \(f(s.fecPercent, 6, 2)) \(s.insertions)")
}

if !frontier.isEmpty {
    print("")
    print("At equal late rate (peervoice, late-cost sweep \(sweepCosts.map { String(format: "%g", $0) }.joined(separator: ", ")) ms/%, interpolated):")
    print("\(pad("trace", 16)) \(pad("speexdsp late %", 16)) \(pad("speexdsp delay", 15)) peervoice delay at that late %")
    for p in frontier {
        let ours = p.oursDelayAtSpeexLateMs.map { f($0, 8) } ?? "   (outside sweep)"
        print("\(pad(p.trace, 16)) \(f(p.speexLatePercent, 15, 2)) \(f(p.speexDelayMs, 15)) \(ours)")
    }
}

struct Report: Codable {
    var frameMs: Double
    var secondsPerTrace: Double
    var runsPerTrace: Int
    var traces: [String: String]
    var configuration: [String: Double]
    var results: [Score]  // mean over the runs
    var perRun: [Score]
    var frontier: [FrontierPoint]
}
let report = Report(
    frameMs: frameMs, secondsPerTrace: seconds, runsPerTrace: runs,
    traces: Dictionary(uniqueKeysWithValues: specs.map { ($0.name, $0.description) }),
    configuration: [
        "stepSamples": Double(configuration.stepSamples), "lateCostMs": configuration.lateCostMs, "maxLateFraction": configuration.maxLateFraction, "minimumDelayMs": configuration.minimumDelayMs,
        "maximumDelayMs": configuration.maximumDelayMs, "capacityMs": configuration.capacityMs,
        "initialDelayMs": configuration.initialDelayMs, "historyMs": configuration.historyMs,
        "shrinkHoldMs": configuration.shrinkHoldMs, "shrinkIntervalMs": configuration.shrinkIntervalMs,
        "shrinkForceMs": configuration.shrinkForceMs, "idleAfterMs": configuration.idleAfterMs, "stallBacklogMs": configuration.stallBacklogMs,
    ],
    results: scores, perRun: perRun.filter { !$0.buffer.hasPrefix("peervoice@") }, frontier: frontier)
if !jsonPath.isEmpty {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    let data = try encoder.encode(report)
    let url = URL(fileURLWithPath: jsonPath)
    try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
    try data.write(to: url)
    if !quiet { print("wrote \(jsonPath)") }
}
