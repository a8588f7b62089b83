// The receive-side playout policy for one voice stream. Pure Swift and self-contained (stdlib
// only, no Foundation, no libm), so bench/jitter can compile this file on its own next to its driver.

/// Orders, times and repairs the VOICE packets of one peer for playback.
///
/// Feed every packet that arrives to ``insert(seq:timestamp:payload:arrival:)``; whenever the
/// playback side needs more audio, ask ``next(now:)`` what to produce. The buffer decides from
/// explicit times, so it is deterministic and testable; it does no I/O, takes no lock, allocates
/// nothing per packet (payload arrays are kept, not copied) and is not thread-safe: use it from one
/// thread, or serialize the calls.
///
/// ## Times
/// `arrival` and `now` are readings of one monotonic clock in nanoseconds (e.g.
/// `clock_gettime(CLOCK_MONOTONIC)`); only differences matter. `now` is **when the audio this call
/// produces will start to play**: the clock reading plus what is already queued ahead of it
/// (samples in the playback ring / 48 kHz; a constant device latency may be left out). Outputs
/// have different lengths (``Output/samples``), so successive `now`s advance by what was produced.
/// `timestamp` is the VOICE frame's 48 kHz sender clock (wraps modulo 2^32). Each packet is one
/// frame of ``Configuration/frameSamples`` (both ends must use the same frame duration).
///
/// ## Policy
/// - **Target.** Each packet's *relative delay* is `arrival − timestamp` (offset by the unknown
///   clock difference); the smallest in the history (the last ``Configuration/historyMs`` worth of
///   packets, late ones included) is the fastest path, the *baseline*. The *playout offset* is
///   `now − timestamp` of the frame being played. The target offset, on a grid of
///   ``Configuration/stepSamples``, minimizes `delay + lateCostMs × (percent of the history that
///   would have been late)`, within baseline + [``Configuration/minimumDelayMs``,
///   ``Configuration/maximumDelayMs``] and with at most ``Configuration/maxLateFraction`` late.
///   With ``Configuration/planForFEC`` (off by default), recent network losses that FEC could
///   not repair at that offset (their successor would not be here a frame early) count as late too.
/// - **Early estimate.** While the history holds fewer than
///   ``Configuration/estimatedUntilPackets`` timings, their spread is 10 ms or more and under 2 %
///   of packets are lost, the target is at least the 99th percentile of a normal distribution
///   fitted to the history (its median + 2.33 standard deviations, taken from the interquartile
///   range), never beyond ``Configuration/maximumDelayMs``: the first talkspurt of a call then
///   takes its delay from a few dozen packets instead of growing it miss by miss, each miss a
///   step inside the speech.
/// - **Stalls.** A burst of packets arriving together after a silence of two frames or more (a
///   Wi-Fi or radio stall releasing its backlog) is recorded as one timing, its first: one stall
///   weighs as one late packet, so a rare stall does not inflate everyone's delay afterwards.
/// - **Fast grow.** When the frame due is missing and the offset is below target, the buffer
///   conceals just enough (``Output/conceal(samples:)``, a multiple of the step, at most a
///   frame) without advancing, so the missing frame gets that much longer to arrive.
/// - **Late packets merge.** When the frame due is missing at or beyond the target, its
///   successor is not here either, the link has jitter (the recent spread of relative delays is
///   ``waitAboveJitterMs`` or more) and under ``waitBelowLoss`` of packets are being lost, the
///   buffer conceals it a step at a time without advancing; if its packet comes before a whole
///   frame was concealed it is played right after that concealment (``Statistics/merged``: the
///   playout point moved later by what was concealed, and a slow shrink takes it back). Only then
///   is it given up, and counted ``Statistics/late`` if it comes. When its successor is here, it
///   is recovered from the successor's FEC, after waiting up to half a frame if it was likely
///   overtaken (the successor came less than half a frame ago). Under more loss a missing packet
///   is most likely lost, and on a link without jitter a late one is a scheduling hiccup whose
///   wait would stay in the delay (no holes come to shrink it away): it is concealed whole, or
///   recovered, at once.
/// - **Slow shrink.** Only when the offset has exceeded the target by a step or more for
///   ``Configuration/shrinkHoldMs``, and at most once per ``Configuration/shrinkIntervalMs``:
///   a hole (a frame missing anyway) or a DTX frame is shortened or skipped; a speech frame is
///   dropped whole only when the excess is a frame or more and has lasted
///   ``Configuration/shrinkForceMs``.
/// - **Talkspurts.** After running dry for ``Configuration/idleAfterMs`` (DTX silence, the peer
///   muted, or a stall), the buffer goes idle (``Output/silence(samples:)``) and restarts when the
///   next packet has waited exactly the target (a short silence aligns it): the delay is re-chosen
///   for free at every talkspurt. Frames that queued behind a stall and are already a frame past
///   the target plus ``Configuration/stallBacklogMs`` are skipped at the restart.
/// - **Bounds.** At most ``Configuration/capacityMs`` of audio ahead of the playout point is held;
///   a packet beyond that pushes the oldest frames out (counted in ``Statistics/dropped``).
/// - **Repairs.** A missing frame whose successor is here becomes ``Output/recoverWithFEC(_:)``,
///   unless sequence numbers show nothing was sent for it (DTX): then ``Output/conceal(samples:)``.
/// - **Streams.** Duplicates (by seq) are ignored; packets for frames already played are late and
///   dropped; a sequence number far from the stream's, or one whose order disagrees with its
///   timestamp's, is a new stream (peer restart): everything is forgotten (``Statistics/resets``).
public struct JitterBuffer: Sendable {

    /// Tunables. The defaults are the ones the benchmarks ran with (bench/jitter/README.md, bench/playout/README.md).
    public struct Configuration: Sendable, Equatable {
        /// Samples per frame (48 kHz): 960 for 20 ms, 480 for 10 ms.
        public var frameSamples: Int
        /// Granularity of delay changes, in samples: concealment and silence come in multiples of
        /// it. Opus conceals any multiple of 2.5 ms (120 samples). Use `frameSamples` for
        /// whole-frame changes only.
        public var stepSamples: Int
        /// What one percent of late packets is worth in delay (ms): the target minimizes
        /// `delay + lateCostMs × late%` over the history.
        public var lateCostMs: Double
        /// Most late packets the target accepts, whatever the cost (fraction, 0...1).
        public var maxLateFraction: Double
        /// Least buffering beyond the fastest packet (ms): a margin for the receiver's own timing noise.
        public var minimumDelayMs: Double
        /// Most buffering the target asks for beyond the fastest packet (ms).
        public var maximumDelayMs: Double
        /// Most audio held ahead of the playout point (ms); older frames are dropped beyond it.
        public var capacityMs: Double
        /// Least buffering while fewer than ``warmupPackets`` timings are known (ms).
        public var initialDelayMs: Double
        /// Timings the target is computed from, as a duration of packets (ms of audio).
        public var historyMs: Double
        /// Timings needed before ``initialDelayMs`` stops applying.
        public var warmupPackets: Int
        /// While fewer timings than this are known, the link has jitter (the recent spread is
        /// 10 ms or more) and under 2 % of packets are lost, the target is at least the 99th
        /// percentile of a normal distribution fitted to the history (median + 2.33 standard
        /// deviations, from the interquartile range): a few dozen timings say how much jitter
        /// there is long before their own 99th percentile does, so the first talkspurt of a call
        /// does not learn it by concealing inside speech. 0: off. bench/playout gains 0.27–0.34
        /// PESQ-WB under 30 ± 10 ms jitter with 500 (docs/VOICE.md, "Early estimate").
        public var estimatedUntilPackets: Int
        /// How long the offset must exceed the target by a step before it is shrunk (ms).
        public var shrinkHoldMs: Double
        /// Least time between two shrinks (ms).
        public var shrinkIntervalMs: Double
        /// After this long a frame or more in excess, a speech frame is dropped if no hole or
        /// DTX frame came to absorb the shrink (ms).
        public var shrinkForceMs: Double
        /// Running dry this long ends the talkspurt: the buffer goes idle (ms).
        public var idleAfterMs: Double
        /// When playback restarts after a stall, queued frames more than this far behind the
        /// target are skipped (ms); the rest is played and shrunk away slowly (through holes).
        public var stallBacklogMs: Double
        /// Payloads this short carry no audio (Opus DTX): they may be shortened like holes.
        public var dtxPayloadBytes: Int
        /// Counts, in the target's cost, the recent network losses that in-band FEC could not
        /// repair because the next packet would not be here yet: under loss (about 3 % and up),
        /// the buffer then keeps up to a frame more so that losses are recovered instead of
        /// concealed. Off by default: it costs delay (bench/jitter/README.md has the numbers).
        public var planForFEC: Bool
        /// Waits for a missing frame's packet a step at a time, and plays it if it comes before a
        /// whole frame was concealed (the type's "Late packets merge"). On by default; off gives
        /// the playout without it (bench/playout compares the two).
        public var mergeLatePackets: Bool

        public init(
            frameSamples: Int = 960,
            stepSamples: Int = 120,
            lateCostMs: Double = 7,
            maxLateFraction: Double = 0.05,
            minimumDelayMs: Double = 0,
            maximumDelayMs: Double = 200,
            capacityMs: Double = 300,
            initialDelayMs: Double = 0,
            historyMs: Double = 10000,
            warmupPackets: Int = 25,
            estimatedUntilPackets: Int = 500,
            shrinkHoldMs: Double = 1000,
            shrinkIntervalMs: Double = 500,
            shrinkForceMs: Double = 2000,
            idleAfterMs: Double = 100,
            stallBacklogMs: Double = 40,
            dtxPayloadBytes: Int = 2,
            planForFEC: Bool = false,
            mergeLatePackets: Bool = true
        ) {
            self.frameSamples = frameSamples
            self.stepSamples = stepSamples
            self.lateCostMs = lateCostMs
            self.maxLateFraction = maxLateFraction
            self.minimumDelayMs = minimumDelayMs
            self.maximumDelayMs = maximumDelayMs
            self.capacityMs = capacityMs
            self.initialDelayMs = initialDelayMs
            self.historyMs = historyMs
            self.warmupPackets = warmupPackets
            self.estimatedUntilPackets = estimatedUntilPackets
            self.shrinkHoldMs = shrinkHoldMs
            self.shrinkIntervalMs = shrinkIntervalMs
            self.shrinkForceMs = shrinkForceMs
            self.idleAfterMs = idleAfterMs
            self.stallBacklogMs = stallBacklogMs
            self.dtxPayloadBytes = dtxPayloadBytes
            self.planForFEC = planForFEC
            self.mergeLatePackets = mergeLatePackets
        }
    }

    /// What to produce next.
    public enum Output: Equatable, Sendable {
        /// Decode this packet normally (one frame).
        case frame([UInt8])
        /// The frame due is lost but the next packet is here: decode *it* with `fec: true` to
        /// recover the lost frame (one frame). The same packet comes back as ``frame(_:)`` next.
        case recoverWithFEC([UInt8])
        /// No packet for this stretch: decode `nil` for `samples` samples (packet loss
        /// concealment; in DTX silence, the decoder's comfort noise). A multiple of
        /// ``Configuration/stepSamples``, at most a frame.
        case conceal(samples: Int)
        /// Nothing is playing (before the first packet, between talkspurts): produce `samples`
        /// zeros without touching the decoder. One step at a time while idle, so that the next
        /// talkspurt starts on time to within a step.
        case silence(samples: Int)

        /// The samples this output stands for, given the frame size (a packet is one frame).
        public func samples(frameSamples: Int) -> Int {
            switch self {
            case .frame, .recoverWithFEC: return frameSamples
            case .conceal(let n), .silence(let n): return n
            }
        }
    }

    /// Counters since creation (they survive ``reset()`` and peer restarts) and the current state.
    public struct Statistics: Sendable, Equatable {
        /// Distinct packets received (late ones included, duplicates not).
        public var received = 0
        /// Packets ignored because the same sequence number (or frame) was already here.
        public var duplicates = 0
        /// Packets that came after their frame was played, concealed or skipped.
        public var late = 0
        /// Packets that came while their frame was being concealed, before a whole frame was, and
        /// were played after that concealment (not counted ``late``).
        public var merged = 0
        /// Packets never received, from gaps in sequence numbers (reordered arrivals fill gaps).
        public var lost = 0
        /// ``Output/conceal(samples:)`` outputs (losses, DTX gaps, insertions, shortened holes).
        public var concealed = 0
        /// Samples of concealment produced.
        public var concealedSamples = 0
        /// ``Output/recoverWithFEC(_:)`` outputs.
        public var fecRecovered = 0
        /// Concealments inserted to grow the buffer (a subset of ``concealed``).
        public var inserted = 0
        /// Frames received but not decoded: skipped to shrink the buffer (speech frames, or DTX
        /// frames replaced by shorter concealment) or to respect the capacity.
        public var dropped = 0
        /// Packets played with ``Output/frame(_:)``.
        public var played = 0
        /// New streams detected (peer restart) besides the first.
        public var resets = 0
        /// The target buffering beyond the fastest packet (ms): what the policy aims for.
        public var currentTargetMs = 0.0
        /// The playout offset beyond the fastest packet at the last output while playing (ms).
        public var currentDelayMs = 0.0
        /// Audio held ahead of the playout point (ms).
        public var bufferedMs = 0.0
        /// Recent spread of relative delays (95th percentile minus minimum, ms).
        public var jitterMs = 0.0
        /// Recent fraction of packets lost or late (0...1), smoothed over about a second: the
        /// packet-loss hint for the sender's encoder.
        public var lossFraction = 0.0

        /// ``lossFraction`` in percent, rounded up: what VOICE_REPORT tells the sender.
        public var lossPercent: Int {
            let percent = lossFraction * 100
            let whole = Int(percent)
            return Double(whole) < percent ? whole + 1 : whole
        }
    }

    public let configuration: Configuration

    // MARK: Derived constants (samples)

    private let frame: Int64
    private let step: Int64
    private let capacityFrames: Int64
    /// Expected packets per loss interval: a second's worth.
    private let lossIntervalPackets: Int
    private let minimumDelay: Int64
    private let maximumDelay: Int64
    private let initialDelay: Int64
    private let shrinkHold: Int64
    private let shrinkInterval: Int64
    private let shrinkForce: Int64
    private let idleAfter: Int64
    private let stallBacklog: Int64
    private let lateCost: Double

    /// Seq numbers further ahead than this start a new stream (about 20 min at 20 ms).
    private static let maxSeqJump: Int64 = 1 << 16
    /// Recent network loss (fraction) under which a missing frame is waited for, as late or
    /// overtaken; above it a missing packet is most likely lost, and waiting would only add delay.
    private static let waitBelowLoss = 0.02
    /// Least spread of recent relative delays (95th percentile minus the fastest, ms) for which a
    /// missing frame is waited for: the sender's capture-quantum ripple (up to 4.7 ms) and the
    /// hosts' scheduling stay below it.
    private static let waitAboveJitterMs = 10.0
    private static let waitAboveJitter = Int64(waitAboveJitterMs * 48)

    /// The link has jitter (recent spread ≥ ``waitAboveJitterMs``) and loses under
    /// ``waitBelowLoss``: a missing packet is most likely late, not lost, so waiting for it (the
    /// merge) and aiming for the jitter's tail early (the estimate) pay off.
    private var hasJitterAndLittleLoss: Bool {
        spread >= Self.waitAboveJitter && networkLossFraction < Self.waitBelowLoss
    }
    /// The 99th percentile of a standard normal distribution (the early estimate's).
    private static let normalPercentile99 = 2.33
    /// Seq numbers further behind than this start a new stream.
    private static let maxSeqBack: Int64 = 1024

    // MARK: Stream identity

    private var streamActive = false
    private var highestSeq: UInt64 = 0
    private var highestTimestamp: UInt32 = 0
    /// `highestTimestamp` unwrapped, relative to the stream's first packet.
    private var highestTimestampExt: Int64 = 0
    private var firstSeq: UInt64 = 0
    private var streamReceived = 0
    /// `seen[seq % count] == seq` and `seenValid[seq % count]` when `seq` was received recently.
    private var seen: [UInt64]
    private var seenValid: [Bool]

    // MARK: Frames

    private struct Slot: Sendable {
        var frame: Int64 = .min
        var seq: UInt64 = 0
        var payload: [UInt8] = []
        /// When it arrived (samples of the monotonic clock).
        var arrival: Int64 = 0
    }
    private var slots: [Slot]
    private var bufferedCount = 0
    private var maxFrame: Int64 = .min
    /// The first frame not yet played, concealed or skipped.
    private var nextFrame: Int64 = 0
    /// Whether `nextFrame` is a hard floor (something was rendered since the stream started).
    private var hasFloor = false
    private var playing = false
    private var lastPlayedSeq: UInt64?
    /// The frame whose FEC data was just decoded: it plays next, never dropped by a shrink (that
    /// would follow the recovered audio with a gap).
    private var frameAfterFEC: Int64?
    private var dryStart: Int64?
    /// The frame being waited for (late packets merge) and the samples concealed for it so far.
    private var waitFrame: Int64 = .min
    private var waited: Int64 = 0
    private var excessSince: Int64?
    private var lastShrinkAt: Int64 = .min / 2

    // MARK: Timing history (relative delays, samples)

    /// Ring of the last relative delays, in arrival order.
    private var history: [Int64]
    private var historyHead = 0
    private var historyCount = 0
    /// The same values, sorted (`sorted[0..<historyCount]`), kept up to date on each insert.
    private var sorted: [Int64]
    private var baseline: Int64 = 0
    /// The 95th percentile of the recent relative delays minus `baseline` (samples).
    private var spread: Int64 = 0
    private var target: Int64 = 0
    private var lastArrival: Int64?
    /// Whether the arrivals since the last one that followed a silence have all been bunched.
    private var inBurst = false

    // MARK: Statistics

    private var stats = Statistics()
    private var lostBeforeStream = 0
    private var intervalExpected = 0
    private var intervalMissing = 0
    private var intervalLate = 0
    /// Like `lossFraction`, packets never received only (what FEC planning weighs).
    private var networkLossFraction = 0.0
    private var lastOffset: Int64 = 0

    public init(configuration: Configuration = Configuration()) {
        precondition(configuration.frameSamples > 0, "frameSamples must be positive")
        precondition(
            configuration.stepSamples > 0 && configuration.stepSamples <= configuration.frameSamples,
            "stepSamples must be in 1...frameSamples")
        self.configuration = configuration
        let f = Int64(configuration.frameSamples)
        frame = f
        step = Int64(configuration.stepSamples)
        func samples(_ ms: Double) -> Int64 { Int64(ms * 48 + 0.5) }  // (no libm: stdlib only)
        capacityFrames = max(2, (samples(configuration.capacityMs) + f - 1) / f)
        lossIntervalPackets = max(1, Int(samples(1000) / f))
        minimumDelay = samples(configuration.minimumDelayMs)
        maximumDelay = max(samples(configuration.maximumDelayMs), samples(configuration.minimumDelayMs))
        initialDelay = samples(configuration.initialDelayMs)
        shrinkHold = samples(configuration.shrinkHoldMs)
        shrinkInterval = samples(configuration.shrinkIntervalMs)
        shrinkForce = samples(configuration.shrinkForceMs)
        idleAfter = samples(configuration.idleAfterMs)
        stallBacklog = samples(configuration.stallBacklogMs)
        lateCost = configuration.lateCostMs * 48
        let historySize = max(16, Int(samples(configuration.historyMs) / f))
        history = Array(repeating: 0, count: historySize)
        sorted = Array(repeating: 0, count: historySize)
        slots = Array(repeating: Slot(), count: Int(capacityFrames))
        seen = Array(repeating: 0, count: 2048)
        seenValid = Array(repeating: false, count: 2048)
    }

    /// Counters and current state.
    public var statistics: Statistics {
        var s = stats
        s.lost = lostBeforeStream + streamLost
        s.currentTargetMs = Double(target - baseline) / 48
        s.currentDelayMs = playing ? Double(lastOffset - baseline) / 48 : 0
        s.bufferedMs = Double(bufferedSpan) / 48
        return s
    }

    /// Whether a talkspurt is playing (false: idle, producing silence).
    public var isPlaying: Bool { playing }

    /// Whether no packet waits to be played.
    public var isEmpty: Bool { bufferedCount == 0 }

    /// Playing, and the packet of the frame due has not come (nor is it a frame the sender
    /// skipped in DTX): ``next(now:)`` would conceal it, wait for it a step, or recover it from
    /// FEC. A caller with time left before its audio must be ready may wait for the packet first
    /// (``RefillSchedule``).
    public var isAwaitingFrameDue: Bool {
        guard playing, slot(nextFrame) == nil else { return false }
        guard let successor = slot(nextFrame + 1), let last = lastPlayedSeq else { return true }
        return successor.seq != last &+ 1
    }

    /// ``Statistics/lossPercent`` without assembling the rest of ``statistics``: cheap enough to
    /// read on every pass of the voice thread.
    public var lossPercent: Int { stats.lossPercent }

    /// Forgets the stream (buffered packets, timing history, playout position); keeps the counters.
    /// For the start of a new call. A peer restart is detected without it.
    public mutating func reset() {
        lostBeforeStream += streamLost
        streamActive = false
        for i in slots.indices { slots[i] = Slot() }
        for i in seenValid.indices { seenValid[i] = false }
        bufferedCount = 0
        maxFrame = .min
        nextFrame = 0
        hasFloor = false
        playing = false
        lastPlayedSeq = nil
        frameAfterFEC = nil
        dryStart = nil
        waitFrame = .min
        waited = 0
        excessSince = nil
        lastShrinkAt = .min / 2
        historyHead = 0
        historyCount = 0
        lastArrival = nil
        inBurst = false
        baseline = 0
        spread = 0
        target = 0
        streamReceived = 0
    }

    // MARK: - Input

    /// Takes one received packet. `arrival` is when it was received (monotonic ns).
    public mutating func insert(seq: UInt64, timestamp: UInt32, payload: [UInt8], arrival: Int64) {
        if streamActive {
            let dSeq = Int64(bitPattern: seq &- highestSeq)
            let dTs = Int64(Int32(bitPattern: timestamp &- highestTimestamp))
            let restart = dSeq > Self.maxSeqJump || dSeq < -Self.maxSeqBack
                || (dSeq > 0 && dTs < 0) || (dSeq < 0 && dTs > 0)
            if restart {
                reset()
                stats.resets += 1
            }
        }
        if !streamActive {
            streamActive = true
            highestSeq = seq
            highestTimestamp = timestamp
            highestTimestampExt = 0
            firstSeq = seq
        }

        let seenIndex = Int(seq % UInt64(seen.count))
        if seenValid[seenIndex] && seen[seenIndex] == seq {
            stats.duplicates += 1
            return
        }
        seen[seenIndex] = seq
        seenValid[seenIndex] = true

        let timestampExt = highestTimestampExt + Int64(Int32(bitPattern: timestamp &- highestTimestamp))
        if Int64(bitPattern: seq &- firstSeq) < 0 { firstSeq = seq }
        if Int64(bitPattern: seq &- highestSeq) > 0 {
            highestSeq = seq
            highestTimestamp = timestamp
            highestTimestampExt = timestampExt
        }
        stats.received += 1
        streamReceived += 1

        let arrivalSamples = Self.samples(nanoseconds: arrival)
        let gap = lastArrival.map { arrivalSamples - $0 } ?? .max
        let bunched = gap < frame / 4
        if gap >= 2 * frame {
            inBurst = true
        } else if !bunched {
            inBurst = false
        }
        lastArrival = arrivalSamples
        if !(inBurst && bunched) {
            recordTiming(arrivalSamples - timestampExt)
        }
        updateLossFraction()

        let frameIndex = Self.floorDiv(timestampExt + frame / 2, frame)
        place(frameIndex, seq: seq, payload: payload, arrival: arrivalSamples)
    }

    private mutating func place(_ frameIndex: Int64, seq: UInt64, payload: [UInt8], arrival: Int64) {
        if playing || hasFloor {
            if frameIndex < nextFrame {
                late()
                return
            }
        } else if bufferedCount == 0 {
            nextFrame = frameIndex
        } else if frameIndex < nextFrame {
            // Nothing played yet: an earlier frame moves the start back, if it fits.
            if maxFrame - frameIndex >= capacityFrames {
                late()
                return
            }
            nextFrame = frameIndex
        }
        if frameIndex >= nextFrame + capacityFrames {
            // Beyond the capacity: push the oldest frames out.
            let newStart = frameIndex - capacityFrames + 1
            var f = nextFrame
            while f < newStart && bufferedCount > 0 {
                if removeSlot(f) != nil { stats.dropped += 1 }
                f += 1
            }
            nextFrame = newStart
        }
        let i = slotIndex(frameIndex)
        if slots[i].frame == frameIndex {
            stats.duplicates += 1  // another packet already holds this frame
            return
        }
        slots[i] = Slot(frame: frameIndex, seq: seq, payload: payload, arrival: arrival)
        bufferedCount += 1
        maxFrame = max(maxFrame, frameIndex)
    }

    /// A packet came after its frame was played, concealed or skipped. It counts in the loss the
    /// sender is told of only once the history holds a warm-up's timings: before that the buffer
    /// is still learning the delay from nothing (it starts at the first packet's), which says
    /// nothing about the path, yet it would turn the sender's FEC on for a link that loses nothing.
    private mutating func late() {
        stats.late += 1
        if historyCount >= configuration.warmupPackets { intervalLate += 1 }
    }

    // MARK: - Output

    /// What to produce for the audio that starts playing at `now` (monotonic ns; see the type's
    /// documentation). Call again for the audio that follows.
    public mutating func next(now: Int64) -> Output {
        let nowSamples = Self.samples(nanoseconds: now)
        // While idle, silence comes a step at a time, so that a talkspurt can start on time to
        // within a step rather than a frame.
        guard streamActive else { return .silence(samples: Int(step)) }
        if !playing {
            guard let earliest = earliestBufferedFrame() else { return .silence(samples: Int(step)) }
            let offset = nowSamples - timestamp(of: earliest)
            chooseTarget(reference: offset)
            if offset < target {
                // Wait, ending exactly on the target.
                return .silence(samples: Int(min(frame, roundUp(target - offset))))
            }
            playing = true
            nextFrame = earliest
            hasFloor = true
            dryStart = nil
            excessSince = nil
            // Frames that queued behind a stall: skip those more than `stallBacklog` past the
            // target (the rest of the backlog may still be arriving).
            var skip = (offset - target - stallBacklog) / frame
            while skip > 0 {
                if removeSlot(nextFrame) != nil { stats.dropped += 1 }
                nextFrame += 1
                skip -= 1
            }
            return playTick(nowSamples)
        }
        chooseTarget(reference: nowSamples - timestamp(of: nextFrame))
        return playTick(nowSamples)
    }

    private mutating func playTick(_ now: Int64) -> Output {
        var offset = now - timestamp(of: nextFrame)
        var shrinkDue = updateShrink(offset: offset, now: now)
        let owedAfterFEC = frameAfterFEC == nextFrame
        frameAfterFEC = nil
        while true {
            lastOffset = offset
            let excess = offset - target
            if let slot = slot(nextFrame) {
                dryStart = nil
                let isDTX = slot.payload.count <= configuration.dtxPayloadBytes
                if shrinkDue && isDTX && !owedAfterFEC {
                    // A DTX frame decodes to comfort noise, as concealment does: shorten it.
                    _ = removeSlot(nextFrame)
                    nextFrame += 1
                    lastPlayedSeq = slot.seq
                    stats.dropped += 1
                    lastShrinkAt = now
                    shrinkDue = false
                    let cut = min(frame, roundDown(excess))
                    if cut == frame { offset -= frame; continue }
                    return conceal(frame - cut)
                }
                if shrinkDue && !owedAfterFEC && excess >= frame && now - excessSince! >= shrinkForce
                    && self.slot(nextFrame + 1) != nil
                {
                    _ = removeSlot(nextFrame)
                    nextFrame += 1
                    stats.dropped += 1
                    lastShrinkAt = now
                    shrinkDue = false
                    offset -= frame
                    continue
                }
                _ = removeSlot(nextFrame)
                if waitFrame == nextFrame && waited > 0 { stats.merged += 1 }
                nextFrame += 1
                lastPlayedSeq = slot.seq
                stats.played += 1
                return .frame(slot.payload)
            }
            // The frame due is missing.
            if bufferedCount == 0 {
                if dryStart == nil { dryStart = now }
                if now - dryStart! >= idleAfter {
                    playing = false
                    return .silence(samples: Int(step))
                }
            } else {
                dryStart = nil
            }
            if offset < target {
                // Too little buffering: give the missing frame a little longer (grow).
                stats.inserted += 1
                return conceal(min(frame, roundUp(target - offset)))
            }
            let successor = slot(nextFrame + 1)
            // What is left of the frame's hole after the concealment already played for it.
            let remaining = frame - (waitFrame == nextFrame ? waited : 0)
            if shrinkDue {
                // Shorten the hole, or skip it if the next frame is here: a free shrink.
                lastShrinkAt = now
                shrinkDue = false
                let cut = min(remaining, roundDown(excess))
                nextFrame += 1
                if cut == remaining && successor != nil { offset -= frame; continue }
                return conceal(remaining - min(cut, remaining - min(step, remaining)))
            }
            let mayWait = configuration.mergeLatePackets && hasJitterAndLittleLoss
            if let successor {
                if let last = lastPlayedSeq, successor.seq == last &+ 1 {
                    nextFrame += 1
                    return conceal(remaining)  // nothing was sent for it: DTX
                }
                if mayWait && remaining - step >= frame / 2 && now - successor.arrival < frame / 2 {
                    // Overtaken rather than lost, perhaps (its successor has only just come):
                    // wait up to half a frame for it.
                    return waitStep()
                }
                nextFrame += 1
                stats.fecRecovered += 1
                frameAfterFEC = nextFrame
                return .recoverWithFEC(successor.payload)
            }
            if mayWait && remaining > step {
                return waitStep()  // its packet may still come, and be merged
            }
            nextFrame += 1
            return conceal(remaining)
        }
    }

    /// Conceals a step of the frame due without advancing: its packet may still come.
    private mutating func waitStep() -> Output {
        if waitFrame != nextFrame { waitFrame = nextFrame; waited = 0 }
        waited += step
        return conceal(step)
    }

    private mutating func conceal(_ samples: Int64) -> Output {
        stats.concealed += 1
        stats.concealedSamples += Int(samples)
        return .conceal(samples: Int(samples))
    }

    /// Tracks how long the offset has exceeded the target by a step; true when a shrink is due.
    private mutating func updateShrink(offset: Int64, now: Int64) -> Bool {
        guard offset - target >= step else {
            excessSince = nil
            return false
        }
        if excessSince == nil { excessSince = now }
        return now - excessSince! >= shrinkHold && now - lastShrinkAt >= shrinkInterval
    }

    // MARK: - Target

    /// Adds a relative delay to the history, evicting the oldest when full; keeps `sorted` sorted.
    private mutating func recordTiming(_ relativeDelay: Int64) {
        var n = historyCount
        if n == history.count {
            let old = history[historyHead]
            let i = Self.lowerBound(sorted, n, old)  // present: it was inserted
            sorted.withUnsafeMutableBufferPointer { b in
                var j = i
                while j < n - 1 { b[j] = b[j + 1]; j += 1 }
            }
            n -= 1
        }
        let i = Self.lowerBound(sorted, n, relativeDelay + 1)  // after equal values
        sorted.withUnsafeMutableBufferPointer { b in
            var j = n
            while j > i { b[j] = b[j - 1]; j -= 1 }
            b[i] = relativeDelay
        }
        history[historyHead] = relativeDelay
        historyHead = (historyHead + 1) % history.count
        historyCount = n + 1
    }

    /// Sets `target`: the best playout offset among those a whole number of steps from
    /// `reference` (the offset the buffer has, or would have if it started now). Also updates
    /// `baseline` and the jitter statistic.
    private mutating func chooseTarget(reference: Int64) {
        let n = historyCount
        guard n > 0 else {
            target = reference
            return
        }
        baseline = sorted[0]
        spread = sorted[min(n - 1, n * 95 / 100)] - baseline
        stats.jitterMs = Double(spread) / 48
        var low = baseline + max(minimumDelay, n < configuration.warmupPackets ? initialDelay : 0)
        if n < configuration.estimatedUntilPackets && hasJitterAndLittleLoss {
            // Never beyond what the target may ask for: a stall early in a call must not set it.
            low = max(low, baseline + min(estimatedPercentile99(), maximumDelay))
        }
        let high = max(low, baseline + maximumDelay)
        var offset = reference + Self.ceilDiv(low - reference, step) * step  // first candidate ≥ low
        var best = offset
        var bestCost = Double.infinity
        let maxLate = configuration.maxLateFraction * Double(n)
        var index = Self.lowerBound(sorted, n, offset + 1)
        var indexFEC = Self.lowerBound(sorted, n, offset - frame + 1)
        // A lost packet is repaired by FEC only if its successor is here a frame early.
        let loss = configuration.planForFEC ? networkLossFraction : 0
        while true {
            while index < n && sorted[index] <= offset { index += 1 }
            while indexFEC < n && sorted[indexFEC] <= offset - frame { indexFEC += 1 }
            let late = n - index  // relative delays > offset
            if Double(late) <= maxLate {
                let unrepaired = Double(late) + loss * Double(n - indexFEC)
                let cost = Double(offset - baseline) + lateCost * 100 * unrepaired / Double(n)
                if cost < bestCost {
                    best = offset
                    bestCost = cost
                }
            }
            if (late == 0 && (loss == 0 || indexFEC == n)) || offset + step > high { break }
            offset += step
        }
        target = bestCost.isFinite ? best : offset
    }

    /// A normal distribution's 99th percentile fitted to the history's relative delays beyond
    /// `baseline` (samples): the median + 2.33 standard deviations, the deviation taken from the
    /// interquartile range (÷ 1.349), which a few stalls' outliers do not inflate as they would
    /// the plain standard deviation.
    private func estimatedPercentile99() -> Int64 {
        let n = historyCount
        let median = Double(sorted[n / 2] - baseline)
        let deviation = Double(sorted[n * 3 / 4] - sorted[n / 4]) / 1.349
        return Int64(median + Self.normalPercentile99 * deviation)
    }

    /// The first index in `array[0..<count]` whose value is ≥ `value`.
    private static func lowerBound(_ array: [Int64], _ count: Int, _ value: Int64) -> Int {
        var lo = 0
        var hi = count
        while lo < hi {
            let mid = (lo + hi) / 2
            if array[mid] < value { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    // MARK: - Loss fraction

    private var streamLost: Int {
        guard streamActive else { return 0 }
        let expected = Int(truncatingIfNeeded: highestSeq &- firstSeq) + 1
        return max(0, expected - streamReceived)
    }

    /// Every second of expected packets (50 at 20 ms frames, 100 at 10 ms), blends that
    /// interval's (lost + late) / expected into `lossFraction`, starting from 0. Packets missing
    /// when an interval ended that came in the next (overtaken, not lost) are taken back there.
    /// Under jitter that loses nothing, half-second intervals at 10 ms frames, packets in flight
    /// past an interval's end and a first interval taken alone each read as 2–6 % and turned the
    /// sender's FEC on, which cost the call more than it repaired (bench/voice/README.md, "loss
    /// reports under jitter turned the sender's FEC on").
    private mutating func updateLossFraction() {
        let missing = lostBeforeStream + streamLost  // expected but not (yet) here, over all streams
        let expected = missing + stats.received
        let dExpected = expected - intervalExpected
        guard dExpected >= lossIntervalPackets else { return }
        let network = Double(missing - intervalMissing) / Double(dExpected)
        let lost = network + Double(intervalLate) / Double(dExpected)
        stats.lossFraction = min(1, max(0, 0.5 * stats.lossFraction + 0.5 * lost))
        networkLossFraction = min(1, max(0, 0.5 * networkLossFraction + 0.5 * network))
        intervalExpected = expected
        intervalMissing = missing
        intervalLate = 0
    }

    // MARK: - Slots

    private func slotIndex(_ frameIndex: Int64) -> Int {
        Int(((frameIndex % capacityFrames) + capacityFrames) % capacityFrames)
    }

    private func slot(_ frameIndex: Int64) -> Slot? {
        let s = slots[slotIndex(frameIndex)]
        return s.frame == frameIndex ? s : nil
    }

    private mutating func removeSlot(_ frameIndex: Int64) -> Slot? {
        let i = slotIndex(frameIndex)
        guard slots[i].frame == frameIndex else { return nil }
        let s = slots[i]
        slots[i] = Slot()
        bufferedCount -= 1
        if bufferedCount == 0 { maxFrame = .min }
        return s
    }

    private func earliestBufferedFrame() -> Int64? {
        guard bufferedCount > 0 else { return nil }
        var f = nextFrame
        while f <= maxFrame {
            if slot(f) != nil { return f }
            f += 1
        }
        return nil
    }

    private var bufferedSpan: Int64 {
        guard bufferedCount > 0 else { return 0 }
        let start = playing ? nextFrame : (earliestBufferedFrame() ?? nextFrame)
        return (maxFrame + 1 - start) * frame
    }

    private func timestamp(of frameIndex: Int64) -> Int64 { frameIndex * frame }

    private func roundUp(_ samples: Int64) -> Int64 { Self.ceilDiv(samples, step) * step }

    private func roundDown(_ samples: Int64) -> Int64 { Self.floorDiv(samples, step) * step }

    // MARK: - Helpers

    /// Nanoseconds to 48 kHz samples (floor).
    private static func samples(nanoseconds: Int64) -> Int64 {
        floorDiv(nanoseconds * 6, 125_000)  // × 48 / 1_000_000
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    private static func ceilDiv(_ a: Int64, _ b: Int64) -> Int64 { -floorDiv(-a, b) }
}
