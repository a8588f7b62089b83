// libFuzzer target: the voice jitter buffer (Sources/PeerVoiceCore/Voice/JitterBuffer.swift).
//
// The input is a configuration, then a script for a simulated sender, network and playback
// device on one monotonic clock: packets arrive at the current clock reading (so arrivals never go
// back), and the device asks for audio with next(now:) where `now` is the clock plus what is
// queued ahead of it, advancing by what each output lasts (so `now` never goes back either).
//
// Input layout (missing bytes read as 0):
//   byte 0      flags: bit 0 default configuration (20 or 10 ms frames), bit 1 start the
//               sender's seq near 2^64 (wrap), bit 2 start its timestamp near 2^32, bit 3 start
//               the clock late (days)
//   bytes 1-10  configuration (see makeConfiguration)
//   then        operations (see run): send, lose, hold back and release (reordering), duplicate,
//               DTX gaps, restarts, arbitrary packets, clock advances and device pulls, reset().
//
// Checked after every step:
//   - statistics: every counter non-negative and never decreasing (they survive reset and
//     restarts), lossFraction in 0...1, jitterMs >= 0, bufferedMs in 0...capacity (capacityMs
//     rounded up to whole frames, at least 2 frames), played <= received, inserted <= concealed,
//     concealed <= concealedSamples <= concealed x frame;
//   - outputs: samples in 1...frameSamples; conceal and silence a multiple of stepSamples when
//     the step divides the frame; silence only when not playing, anything else only when playing;
//     every .frame payload is one that was inserted and is played at most once; frames of one
//     stream come out in timestamp order; after .recoverWithFEC(p), the next output (with no
//     packet in between) is .frame(p).
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

/// FUZZ_DEFAULT_CONFIG=1: always the default configuration (apart from the frame size).
let defaultConfiguration = getenv("FUZZ_DEFAULT_CONFIG") != nil

/// Sizes of an Opus frame the protocol allows (20 and 10 ms) and a few others the type accepts.
let frameSizes = [960, 960, 480, 480, 240, 1920, 120, 0]

func makeConfiguration(_ input: inout Input, defaults: Bool) -> JitterBuffer.Configuration {
    let b = (0..<10).map { _ in input.u8() }
    var frame = frameSizes[Int(b[0] & 7)]
    if frame == 0 { frame = 40 + Int(b[0] >> 3) * 37 }  // odd sizes, 40...1187
    if defaults { return JitterBuffer.Configuration(frameSamples: b[0] & 1 == 0 ? 960 : 480) }
    var configuration = JitterBuffer.Configuration(frameSamples: frame, stepSamples: min(120, frame))
    let steps = [120, 240, 480, frame, 60, 120, frame / 2, 7]
    configuration.stepSamples = max(1, min(frame, steps[Int(b[1] & 7)]))
    configuration.lateCostMs = Double(b[1] >> 3) * 0.5
    configuration.capacityMs = 20 + Double(b[2]) * 4
    configuration.maximumDelayMs = Double(b[3]) * 2
    configuration.minimumDelayMs = Double(b[4] & 31) * 2
    configuration.initialDelayMs = Double(b[4] >> 5) * 20
    configuration.historyMs = [10_000, 1000, 200, 40, 60_000, 500, 5000, 100][Int(b[5] & 7)]
    configuration.warmupPackets = Int(b[5] >> 3)
    configuration.shrinkHoldMs = Double(b[6] & 15) * 100
    configuration.shrinkIntervalMs = Double(b[6] >> 4) * 50
    configuration.shrinkForceMs = Double(b[7] & 15) * 200
    configuration.idleAfterMs = Double(b[7] >> 4) * 20
    configuration.stallBacklogMs = Double(b[8] & 15) * 10
    configuration.dtxPayloadBytes = Int(b[8] >> 4 & 3)
    configuration.planForFEC = b[8] & 64 != 0
    configuration.maxLateFraction = Double(b[9] & 31) / 31
    configuration.estimatedUntilPackets = [500, 0, 25, 5000, 2, 100, 1, 50][Int(b[9] >> 5)]
    return configuration
}

/// A packet as the sender made it.
struct Packet {
    var seq: UInt64
    var timestamp: UInt32
    var payload: [UInt8]
}

struct Simulation {
    var buffer: JitterBuffer
    let configuration: JitterBuffer.Configuration
    let frame: Int
    let step: Int
    /// Most audio the buffer may report as held (samples).
    let capacitySamples: Int
    /// The monotonic clock (ns) and where playback has got to (ns, >= clock).
    var clock: Int64
    var playhead: Int64
    /// Sender state: the next packet's seq and timestamp.
    var seq: UInt64
    var timestamp: UInt32
    var held: [Packet] = []
    var lastSent: Packet?
    /// Speech payloads carry a tag: [0xA5, tag (u32 BE), filler...]. Tag -> timestamp.
    var nextTag: UInt32 = 0
    var tagTimestamps: [UInt32: UInt32] = [:]
    var playedTags: Set<UInt32> = []
    var inserts = 0
    var previous: JitterBuffer.Statistics
    var lastFrameTimestamp: UInt32?
    var resetsSeen = 0
    var pendingFEC: [UInt8]?

    init(configuration: JitterBuffer.Configuration, clock: Int64, seq: UInt64, timestamp: UInt32) {
        buffer = JitterBuffer(configuration: configuration)
        previous = buffer.statistics
        self.configuration = configuration
        frame = configuration.frameSamples
        step = configuration.stepSamples
        let capacityFrames = max(2, (Int(configuration.capacityMs * 48 + 0.5) + frame - 1) / frame)
        capacitySamples = capacityFrames * frame
        self.clock = clock
        playhead = clock
        self.seq = seq
        self.timestamp = timestamp
    }

    mutating func makePacket(_ input: inout Input, kind: UInt8) -> Packet {
        let payload: [UInt8]
        if kind & 3 == 1 {
            // DTX: too short to carry audio.
            payload = [UInt8](repeating: 0xD7, count: Int(input.u8()) % (configuration.dtxPayloadBytes + 1))
        } else {
            nextTag += 1
            payload = [0xA5, UInt8(truncatingIfNeeded: nextTag >> 24), UInt8(truncatingIfNeeded: nextTag >> 16),
                       UInt8(truncatingIfNeeded: nextTag >> 8), UInt8(truncatingIfNeeded: nextTag)]
                + [UInt8](repeating: 0x5A, count: Int(kind >> 2 & 7))
        }
        let packet = Packet(seq: seq, timestamp: timestamp, payload: payload)
        seq &+= 1
        timestamp &+= UInt32(frame)
        return packet
    }

    static func tag(_ payload: [UInt8]) -> UInt32? {
        guard payload.count >= 5, payload[0] == 0xA5 else { return nil }
        return payload[1...4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    mutating func insert(_ packet: Packet) {
        if let tag = Self.tag(packet.payload) { tagTimestamps[tag] = packet.timestamp }
        trace("t=\(clock) insert seq \(packet.seq) ts \(packet.timestamp) payload \(packet.payload)")
        buffer.insert(seq: packet.seq, timestamp: packet.timestamp, payload: packet.payload, arrival: clock)
        inserts += 1
        if buffer.statistics.resets != resetsSeen {
            // A new stream (peer restart): its packets are new, even a stale duplicate that caused it.
            resetsSeen = buffer.statistics.resets
            lastFrameTimestamp = nil
            playedTags = []
        }
        lastSent = packet
        pendingFEC = nil
        checkStatistics()
    }

    /// One device pull at the playhead.
    mutating func pull() {
        if playhead < clock { playhead = clock }  // the device ran dry: it plays from now
        let output = buffer.next(now: playhead)
        trace("t=\(clock) next(now: \(playhead)) -> \(output)")
        let samples = output.samples(frameSamples: frame)
        check(samples > 0 && samples <= frame, "\(output) lasts \(samples) samples (frame \(frame))")
        let playing = buffer.isPlaying
        switch output {
        case .silence(let n):
            check(!playing, "silence while playing")
            if frame % step == 0 { check(n % step == 0, "silence of \(n) samples, step \(step)") }
        case .conceal(let n):
            check(playing, "conceal while idle")
            if frame % step == 0 { check(n % step == 0, "conceal of \(n) samples, step \(step)") }
        case .recoverWithFEC(let payload):
            check(playing, "FEC while idle")
            if let tag = Self.tag(payload) {
                check(tagTimestamps[tag] != nil, "FEC from a payload never inserted")
                check(!playedTags.contains(tag), "FEC from packet \(tag), which was already played")
            }
        case .frame(let payload):
            check(playing, "frame while idle")
            if let tag = Self.tag(payload) {
                check(tagTimestamps[tag] != nil, "played a payload never inserted")
                check(playedTags.insert(tag).inserted, "packet \(tag) played twice")
            }
        }
        if let expected = pendingFEC {
            check(output == JitterBuffer.Output.frame(expected), "after .recoverWithFEC the next output is \(output), not that packet")
        }
        pendingFEC = nil
        if case .recoverWithFEC(let payload) = output { pendingFEC = payload }

        // Frames of one stream come out in timestamp order.
        check(buffer.statistics.resets == resetsSeen, "next(now:) detected a new stream")
        if case .frame(let payload) = output, let tag = Self.tag(payload), let timestamp = tagTimestamps[tag] {
            if let last = lastFrameTimestamp {
                let difference = Int32(bitPattern: timestamp &- last)
                check(difference > 0 || difference < -(1 << 30), "frame at timestamp \(timestamp) played after \(last)")
            }
            lastFrameTimestamp = timestamp
        }
        // 48 kHz samples to ns, rounded up so that the playhead always moves.
        playhead += (Int64(samples) * 125_000 + 5) / 6
        checkStatistics()
    }

    mutating func checkStatistics() {
        // Written out rather than as arrays of counters: this runs after every step, and with the
        // three arrays it allocated it was 22 % of the target's samples under AddressSanitizer.
        let s = buffer.statistics, p = previous
        check(s.received >= 0 && s.duplicates >= 0 && s.late >= 0 && s.lost >= 0 && s.concealed >= 0 && s.concealedSamples >= 0
              && s.fecRecovered >= 0 && s.inserted >= 0 && s.dropped >= 0 && s.played >= 0 && s.resets >= 0,
              "negative counter in \(s)")
        check(s.received >= p.received && s.duplicates >= p.duplicates && s.late >= p.late && s.concealed >= p.concealed
              && s.concealedSamples >= p.concealedSamples && s.fecRecovered >= p.fecRecovered && s.inserted >= p.inserted
              && s.dropped >= p.dropped && s.played >= p.played && s.resets >= p.resets,
              "a counter went down: \(previous) -> \(s)")
        check(s.lossFraction >= 0 && s.lossFraction <= 1, "lossFraction \(s.lossFraction)")
        check(s.lossPercent >= 0 && s.lossPercent <= 100, "lossPercent \(s.lossPercent)")
        check(s.jitterMs >= 0 && s.jitterMs.isFinite, "jitterMs \(s.jitterMs)")
        check(s.bufferedMs >= 0 && s.bufferedMs * 48 <= Double(capacitySamples) + 1e-6,
              "bufferedMs \(s.bufferedMs) above the capacity \(Double(capacitySamples) / 48) ms")
        check(s.currentTargetMs.isFinite && s.currentDelayMs.isFinite, "target/delay not finite")
        check(s.received <= inserts && s.duplicates <= inserts, "more packets counted than inserted")
        check(s.played <= s.received, "played \(s.played) of \(s.received) received")
        check(s.inserted <= s.concealed, "inserted \(s.inserted) > concealed \(s.concealed)")
        check(s.concealed <= s.concealedSamples && s.concealedSamples <= s.concealed * frame, "concealedSamples")
        previous = s
    }

    /// Advances the clock by `nanoseconds`, then lets the device pull until `lead` ns are queued.
    mutating func advance(by nanoseconds: Int64, lead: Int64) {
        clock += nanoseconds
        var pulls = 0
        while playhead < clock + lead {
            pull()
            pulls += 1
            if pulls == 4096 {
                // A tiny step makes for many pulls: skip ahead (now only has to be monotonic).
                playhead = clock + lead
                break
            }
        }
    }

    mutating func run(_ input: inout Input) {
        var operations = 0
        while !input.isEmpty && operations < 2000 {
            operations += 1
            let op = input.u8()
            switch op & 7 {
            case 0, 1:
                // The next packet, sent now.
                insert(makePacket(&input, kind: op >> 3))
            case 2:
                // Real time passes: 0...163 ms in 2.5 ms steps by default, the device keeps up.
                let amount = Int64(op >> 3)
                let lead = Int64(input.u8() & 15) * 2_500_000
                advance(by: amount * 2_500_000 + Int64(input.u8() & 3) * 100_000, lead: lead)
            case 3:
                // A packet lost on the way.
                _ = makePacket(&input, kind: op >> 3)
            case 4:
                // Held back (reordered) ...
                let packet = makePacket(&input, kind: op >> 3)
                if held.count < 16 { held.append(packet) }
            case 5:
                // ... and released.
                if !held.isEmpty { insert(held.remove(at: Int(op >> 3) % held.count)) }
            case 6:
                // Device pulls without time passing (a burst of callbacks).
                for _ in 0..<(1 + Int(op >> 3) % 8) { pull() }
            default:
                switch op >> 3 & 7 {
                case 0:
                    // Duplicate.
                    if let lastSent { insert(lastSent) }
                case 1:
                    // DTX: nothing sent for a while, then the next packet.
                    timestamp &+= UInt32(frame) * UInt32(1 + input.u8() % 64)
                    insert(makePacket(&input, kind: 0))
                case 2:
                    // The peer restarts: new seq and timestamp.
                    seq = input.u64()
                    timestamp = input.u32()
                case 3:
                    // A packet with arbitrary seq and timestamp offsets.
                    let packet = Packet(seq: seq &+ UInt64(bitPattern: Int64(Int8(bitPattern: input.u8()))) &* UInt64(input.u8() & 15),
                                        timestamp: timestamp &+ input.u32(), payload: [UInt8](repeating: 0x11, count: Int(op >> 6)))
                    insert(packet)
                case 4:
                    trace("reset()")
                    buffer.reset()
                    pendingFEC = nil
                    lastFrameTimestamp = nil  // a new stream: old packets may play again
                    playedTags = []
                    checkStatistics()
                case 5:
                    // A long stall or a suspended machine: seconds to minutes.
                    advance(by: Int64(input.u16()) * 10_000_000, lead: 0)
                case 6:
                    // Timestamp drift: the next packet is off the frame grid.
                    let drift = Int(Int8(bitPattern: input.u8())) * frame / 256
                    timestamp &+= UInt32(bitPattern: Int32(drift))
                    insert(makePacket(&input, kind: 2))
                default:
                    // The clock moves without the device pulling (it was busy).
                    clock += Int64(input.u16()) * 100_000
                }
            }
        }
        // Drain: play out what is left.
        advance(by: 200_000_000, lead: 0)
    }
}

func run(_ bytes: [UInt8]) {
    var input = Input(bytes)
    let flags = input.u8()
    let configuration = makeConfiguration(&input, defaults: flags & 1 != 0 || defaultConfiguration)
    let seq: UInt64 = flags & 2 != 0 ? UInt64.max - UInt64(input.u8()) : UInt64(input.u16())
    let timestamp: UInt32 = flags & 4 != 0 ? UInt32.max - UInt32(input.u16()) * 97 : input.u32()
    // CLOCK_MONOTONIC counts from boot: seconds to weeks.
    let clock: Int64 = flags & 8 != 0 ? Int64(input.u16()) * 60_000_000_000 : 1_000_000_000 + Int64(input.u16()) * 1_000_000
    var simulation = Simulation(configuration: configuration, clock: clock, seq: seq, timestamp: timestamp)
    trace("\(configuration)")
    simulation.checkStatistics()
    simulation.run(&input)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
