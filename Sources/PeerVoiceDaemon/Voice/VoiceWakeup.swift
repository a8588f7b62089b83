import Glibc
import PeerVoiceCore
import PipeWire
import Synchronization

/// Wakes the voice thread from any thread, PipeWire's real-time one included: a non-blocking pipe
/// the voice thread polls, and an atomic flag so that at most one byte is ever in it. A signal is
/// one atomic exchange and at most one write(2) that cannot block (the way PipeWire's own
/// real-time thread signals its loops, with an eventfd; Swift's Glibc module has no eventfd).
final class VoiceWakeup: Sendable {
    /// The end the voice thread polls.
    let fd: Int32
    private let writeEnd: Int32
    /// A byte is in the pipe, or about to be: further signals need not write.
    private let pending = Atomic<Bool>(false)

    init() {
        var ends: [Int32] = [-1, -1]
        pipe(&ends)
        for end in ends {
            _ = fcntl(end, F_SETFL, O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        (fd, writeEnd) = (ends[0], ends[1])
    }

    deinit {
        close(fd)
        close(writeEnd)
    }

    /// Any thread; safe in a real-time callback.
    func signal() {
        // Acquire-release: what the signalling thread wrote before (ring samples, commands) is
        // visible to the voice thread once `consume` has seen the flag.
        guard !pending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Voice thread, when `fd` is readable, before it looks at what the signals were about: empties
    /// the pipe, then re-arms the flag, so any signal from here on wakes the next poll.
    func consume() {
        var drained: UInt64 = 0
        while read(fd, &drained, MemoryLayout<UInt64>.size) > 0 {}
        _ = pending.exchange(false, ordering: .acquiringAndReleasing)
    }
}

/// What the capture stream writes into: the session's capture ring, waking the voice thread when
/// the ring holds a whole frame to encode (not on every quantum), or, while the voice thread
/// says the microphone rests on digital silence, the number of samples it asked for, unless sound came.
final class CaptureRingSink: SampleSink {
    /// Set by the voice thread while the microphone gives exact zeros, its encoders rest, and no
    /// frame has to be cleaned in step with what plays (the echo canceller is off, or the speaker
    /// is dormant): wake it when the ring holds this many samples (whole frames); 0: each frame.
    let restingWakeSamples = Atomic<Int>(0)
    /// A sample that was not zero came while resting: frames wake the voice thread again (the
    /// first frame of sound is taken as soon as it is whole, as when not resting).
    private let heardSound = Atomic<Bool>(false)
    private let ring: AudioRing
    private let frameSamples: Int
    private let wakeup: VoiceWakeup

    init(ring: AudioRing, frameSamples: Int, wakeup: VoiceWakeup) {
        (self.ring, self.frameSamples, self.wakeup) = (ring, frameSamples, wakeup)
    }

    /// PipeWire's real-time thread.
    func write(_ samples: UnsafeBufferPointer<Int16>) -> Int {
        let taken = ring.write(samples)
        var wakeAt = frameSamples
        let resting = restingWakeSamples.load(ordering: .relaxed)
        if resting > 0 {
            if !heardSound.load(ordering: .relaxed) && samples.contains(where: { $0 != 0 }) {
                heardSound.store(true, ordering: .relaxed)
            }
            if !heardSound.load(ordering: .relaxed) { wakeAt = resting }
        } else {
            heardSound.store(false, ordering: .relaxed)
        }
        if ring.availableToRead >= wakeAt { wakeup.signal() }
        return taken
    }
}

/// What the playback stream reads from: the session's playback ring, waking the voice thread when
/// the ring falls below the level it keeps it at, unless the voice thread said it has nothing to play.
final class PlaybackRingSource: SampleSource {
    /// Set by the voice thread while the far side is silent (its jitter buffer idle, with nothing
    /// to start): it has stopped refilling the ring with silence, so the ring running dry is
    /// expected. The callback then plays what is left and zeros, without waking the voice thread
    /// (which would only hand it more zeros) and without counting an underrun. A packet wakes the
    /// voice thread anyway; it refills the ring, then clears this (releasing, so that a callback
    /// that sees it clear also sees the samples).
    let isDormant = Atomic<Bool>(false)
    /// When the device will draw next (CLOCK_MONOTONIC, ns; 0 before its first draw): this draw's
    /// time plus what it drew. The voice thread refills by then (``RefillSchedule``).
    let nextDrawNs = Atomic<Int64>(0)
    private let ring: AudioRing
    private let refillBelowSamples: Int
    private let wakeup: VoiceWakeup
    /// Gets a copy of everything played, silence included: the echo canceller's far end.
    private let played: AudioRing

    init(ring: AudioRing, refillBelowSamples: Int, wakeup: VoiceWakeup, played: AudioRing) {
        (self.ring, self.refillBelowSamples, self.wakeup, self.played) = (ring, refillBelowSamples, wakeup, played)
    }

    /// PipeWire's real-time thread.
    func read(into buffer: UnsafeMutableBufferPointer<Int16>) -> Int {
        nextDrawNs.store(VoiceEngine.monotonicNs() + Int64(buffer.count) * 1_000_000_000 / Int64(voiceSampleRate),
                         ordering: .relaxed)
        if isDormant.load(ordering: .acquiring) {
            _ = ring.read(into: buffer, fillingWith: 0)
            played.write(UnsafeBufferPointer(buffer))
            return buffer.count
        }
        let count = ring.read(into: buffer)
        if ring.availableToRead < refillBelowSamples { wakeup.signal() }
        // The stream plays silence for the rest: so does the copy.
        UnsafeMutableBufferPointer(rebasing: buffer[count...]).update(repeating: 0)
        played.write(UnsafeBufferPointer(buffer))
        return count
    }
}
