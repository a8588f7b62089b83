import Foundation
import GIO
import Glibc
import Synchronization
import TestHarness
import XCTest

/// Faults during a call, on the rig of VoiceTests (two daemons, two headless PipeWire sessions,
/// real Opus): PipeWire killed and restarted under one daemon, the peer killed, a flood of D-Bus
/// calls, and a long call through a lossy relay. The soak's length comes from PEERVOICE_SOAK_SECONDS (default 40 s in
/// `make test`; `make soak` runs it for 600 s).
extension VoiceTests {

    /// kill -9 of B's PipeWire in the middle of a call: B's voice stops, then resumes by itself
    /// within 3 s of PipeWire being back (the daemon retries every second), while the link stays up
    /// and speech from A is heard at B again.
    func testPipeWireKilledAndRestartedDuringACallVoiceResumesWithinThreeSeconds() throws {
        let (rig, _) = try makeRig()
        let (a, b, link) = (rig.a, rig.b, rig.link)
        let directory = rig.pwB.directory
        let markB = b.mark, markA = a.mark
        let pipewirePid = try XCTUnwrap(rig.pwB.pids["pipewire"])
        kill(pipewirePid, SIGKILL)
        XCTAssertNotNil(b.waitForVoiceState("stopped", of: link.aOnB, after: markB, timeout: 5),
                        "B's voice did not stop when its PipeWire died: \(b.voiceStates(of: link.aOnB, after: markB))")
        rig.pwB.stop()  // WirePlumber and the session bus go too

        let pwB = try PipeWireSession(directory: directory)
        pipewires.append(pwB)
        let back = VoiceRig.monotonicSeconds()
        let resumedAt = b.waitForVoiceState("active", of: link.aOnB, after: markB, timeout: 10)
        let resumed = VoiceRig.monotonicSeconds() - back
        XCTAssertNotNil(resumedAt, "B's voice did not resume: \(b.voiceStates(of: link.aOnB, after: markB))")
        print("PipeWire back after \(ms(pwB.startupSeconds)) ms of startup; voice active again \(ms(resumed)) ms later")
        XCTAssertLessThanOrEqual(resumed, 3, "voice should resume within 3 s of PipeWire being back")
        XCTAssertFalse(a.client.signals("PeerStateChanged").dropFirst(markA).contains { $0.string(0) == link.bOnA && $0.string(1) == "disconnected" },
                       "the link went down with PipeWire")

        let audio = try TemporaryDirectory("peervoice-pw-restart")
        directories.append(audio)
        let speech = try speakOneWay(from: rig.pwA, to: pwB, seconds: 3.0, directory: audio.path)
        print("A→B after the restart: \(speech.transfer)")
        let windows = diagnose("A→B after the restart", speech)
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(windows), 0.5)
    }

    /// kill -9 of B during a call: A reports the peer disconnected and its voice stopped within
    /// 5 s, and goes on serving: it answers calls and holds a new call with another peer.
    func testPeerKilledDuringACallIsDisconnectedWithinFiveSecondsAndTheSurvivorGoesOn() throws {
        let (rig, _) = try makeRig()
        let (a, b, link) = (rig.a, rig.b, rig.link)
        let intoA = try rig.pwA.inject(Self.speech)
        dispatchEvents(for: 1.0)
        let markA = a.mark
        let killed = VoiceRig.monotonicSeconds()
        b.daemon.process.signal(SIGKILL)
        let disconnected = a.client.waitForSignalIndex("PeerStateChanged", after: markA, timeout: 10) {
            $0.string(0) == link.bOnA && $0.string(1) == "disconnected"
        }
        let noticed = VoiceRig.monotonicSeconds() - killed
        XCTAssertNotNil(disconnected, "A never reported B disconnected")
        print("A reported B disconnected \(ms(noticed)) ms after kill -9")
        XCTAssertLessThanOrEqual(noticed, 5)
        XCTAssertNotNil(a.waitForVoiceState("stopped", of: link.bOnA, after: markA, timeout: 2), "A's voice with B did not stop")
        intoA.stop()

        // Still serving: the API answers, and a call with a new peer works.
        XCTAssertNoThrow(try a.client.call("ListPeers"))
        rig.pwB.stop()
        let pwC = try startPipeWire()
        let c = try startPeer("carol", environment: pwC.environment)
        let markA2 = a.mark, markC = c.mark
        let linkC = try VoicePairing.connect(a, to: c)
        try waitActive(a, c, linkC, markA: markA2, markB: markC)
    }

    /// A relay flips one bit in every 10th voice datagram from A, each time in another place
    /// (counter, ciphertext or tag): B refuses every one of them (its session counts exactly as
    /// many rejected records), no tampered audio reaches the speaker, the speech is still heard
    /// through it, and once the tampering stops the call sounds as on a clean link.
    /// Through the tampering B conceals a tenth of the frames, as at 10 % loss: on 2 cores single
    /// windows read 0.34–0.83 and their median fell to 0.31 and 0.37 in 2 of 12 runs (one on CI),
    /// so the median asked is 0.3 (unrelated audio correlates below 0.1); after it, 0.5, as the
    /// other checks of a clean call.
    func testTamperedVoiceDatagramsAreRefusedAndTheCallGoesOn() throws {
        let (rig, relayOrNil) = try makeRig(relayLoss: 0)
        let relay = try XCTUnwrap(relayOrNil)
        relay.tamper(every: 10)
        let tamperedSpeech = try speakOneWay(from: rig.pwA, to: rig.pwB, seconds: 3.4, spanSeconds: 3.0, directory: rig.directory)
        relay.tamper(every: 0)
        let tampered = relay.statistics.tampered
        let through = diagnose("tampered", tamperedSpeech)
        let speech = try speakOneWay(from: rig.pwA, to: rig.pwB, seconds: 3.0, directory: rig.directory)
        let after = diagnose("after the tampering", speech)
        XCTAssertFalse(rig.b.voiceStates(of: rig.link.aOnB).contains("stopped"), "B's voice stopped under tampering")
        let statistics = stopAndReadStatistics(rig)
        let rejected = try XCTUnwrap(statistics["bob"]?["rejected"], "no statistics line in B's log")
        print("tampered \(tampered) datagrams, B rejected \(rejected)")
        XCTAssertGreaterThanOrEqual(tampered, 10, "too few datagrams tampered with to tell")
        XCTAssertEqual(rejected, tampered, "B did not refuse exactly the tampered datagrams")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(through), 0.3, "the speech was not heard through the tampering")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(after), 0.5, "the call did not recover from the tampering")
    }

    /// Another program holds B's listen port for UDP (where B receives voice by default): B
    /// receives voice on a free UDP port instead, says so in its log, tells A in its HELLO, and
    /// the call comes up and carries speech as usual. (Seen on CI: a daemon whose kernel-chosen
    /// TCP port was taken for UDP ran without voice, and its peer never heard why.)
    func testVoiceComesUpWhenAnotherProgramHoldsTheListenPortForUDP() throws {
        let holder = try LoopbackPort.bindTCPAndUDP()
        close(holder.tcp)  // the daemon listens there; the UDP socket stays
        defer { close(holder.udp) }
        let pwA = try startPipeWire(), pwB = try startPipeWire()
        let a = try startPeer("alice", environment: pwA.environment)
        let b = try startPeer("bob", environment: pwB.environment, port: holder.port)
        XCTAssertEqual(b.logCount("UDP port \(holder.port) is taken by another program"), 1, "B's log does not say where voice went")
        let markA = a.mark, markB = b.mark
        let link = try VoicePairing.connect(a, to: b)
        try waitActive(a, b, link, markA: markA, markB: markB)
        let directory = try TemporaryDirectory("peervoice-voice-audio")
        directories.append(directory)
        let speech = try speakOneWay(from: pwA, to: pwB, seconds: 3.0, directory: directory.path)
        let windows = diagnose("A→B, B's voice on another UDP port", speech)
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(windows), 0.5, "A's speech did not reach B")
    }

    /// While A's microphone gives digital silence (here: A is muted), A's voice rests: its voice
    /// thread wakes a few times a second instead of once a frame, yet the one keepalive frame it
    /// sends every 400 ms (`CallAudio.restKeepaliveMs`) leaves on time, since B times its playout
    /// by when packets come. Through the relay, A's datagrams while resting come 400 ms apart,
    /// each gap within 25 ms of that (measured: within 4 ms). A first version of the resting
    /// sent them up to 100 ms late (only bench-voice noticed, by B concealing three times as
    /// much); put back, it failed here with gaps of 366 and 443 ms, when its phase showed it.
    func testARestingMicrophoneSendsItsKeepalivesOnTime() throws {
        let (rig, relayOrNil) = try makeRig(relayLoss: 0)
        let relay = try XCTUnwrap(relayOrNil)
        try rig.a.client.call("Mute", [Variant(true)])
        dispatchEvents(for: 0.6)  // the 200 ms of encoded silence after sound, then the rest
        relay.startCapture()
        dispatchEvents(for: 3.0)
        let datagrams = relay.stopCapture()
        let gapsMs = zip(datagrams.dropFirst(), datagrams).map { ($0.arrival - $1.arrival) * 1000 }
        print("resting: \(datagrams.count) datagrams in 3 s, gaps " + gapsMs.map { String(format: "%.1f", $0) }.joined(separator: " ") + " ms")
        XCTAssertTrue((6...9).contains(datagrams.count), "\(datagrams.count) datagrams from a resting A in 3 s, not one per 400 ms")
        for gap in gapsMs {
            XCTAssertEqual(gap, Double(400), accuracy: 25, "a keepalive left off time")
        }
    }

    /// A flood of D-Bus calls on the listener while the other side talks: B's voice runs on its own
    /// thread (`peervoice-voice`, as `top -H` shows it), not on the main loop that answers the
    /// calls, so what B plays does not stutter: the speech is heard with the bounds of a quiet
    /// bus, B's speaker does not run dry, and few packets come too late, while B's main loop
    /// answers two clients calling History back to back (2,300–3,700 calls a second here).
    func testAFloodOfBusCallsDoesNotMakeVoiceStutter() throws {
        let (rig, _) = try makeRig()
        let threads = threads(of: rig.b.daemon.process.pid).map(\.name)
        XCTAssertTrue(threads.contains("peervoice-voice"), "B's threads: \(threads.sorted())")

        final class Flood: Sendable {
            let running = Atomic<Bool>(true)
            let answered = Atomic<Int>(0)
            let failed = Atomic<Int>(0)
        }
        let flood = Flood()
        let peer = rig.link.aOnB
        let flooding = DispatchGroup()
        for _ in 0..<2 {  // two callers keep B's main loop busy (one leaves it idle between round trips)
            let client = try DBusConnection.connect(address: rig.b.bus.address)
            DispatchQueue.global().async(group: flooding) { [client] in
                while flood.running.load(ordering: .relaxed) {
                    do {
                        try client.call(destination: APIClient.name, path: APIClient.path, interface: APIClient.interface,
                                        method: "History", arguments: Variant(tuple: [Variant(peer), Variant(UInt32(50))]))
                        flood.answered.add(1, ordering: .relaxed)
                    } catch {
                        flood.failed.add(1, ordering: .relaxed)
                    }
                }
            }
        }
        let began = VoiceRig.monotonicSeconds()
        let speech = try speakOneWay(from: rig.pwA, to: rig.pwB, seconds: 3.0, directory: rig.directory)
        flood.running.store(false, ordering: .relaxed)
        flooding.wait()
        let rate = Double(flood.answered.load(ordering: .relaxed)) / (VoiceRig.monotonicSeconds() - began)
        print(String(format: "flood: B answered %.0f History calls a second (%d failed); A→B: ", rate,
                     flood.failed.load(ordering: .relaxed)) + "\(speech.transfer)")
        let windows = diagnose("flood", speech)
        let statistics = try XCTUnwrap(stopAndReadStatistics(rig)["bob"], "no statistics line in B's log")
        print("flood: B's session: \(statistics)")

        XCTAssertGreaterThan(rate, 200, "the calls did not make a flood")
        XCTAssertEqual(flood.failed.load(ordering: .relaxed), 0, "B failed calls during the flood")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(windows), 0.5, "the speech did not come through")
        XCTAssertLessThanOrEqual(speech.transfer.latencyMs, 150)
        let received = try XCTUnwrap(statistics["received"]), late = try XCTUnwrap(statistics["late"])
        XCTAssertLessThanOrEqual(Double(late), 0.05 * Double(received), "\(late) of \(received) packets came too late")
        XCTAssertLessThanOrEqual(try XCTUnwrap(statistics["speaker underruns"]), 3, "B's speaker ran dry")
    }

    /// One thread of a process as /proc shows it: its name (as `top -H` and `ps -L` show it) and
    /// its scheduling policy (`SCHED_OTHER`, `SCHED_FIFO`, ...) and real-time priority.
    struct ProcessThread {
        let name: String
        let policy: Int32
        let realtimePriority: Int
    }

    func threads(of pid: pid_t) -> [ProcessThread] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { task in
            guard let name = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8),
                  let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                  let nameEnd = stat.lastIndex(of: ")") else { return nil }
            // proc(5): after the ")" that ends the name come field 3 (state) on; rt_priority is
            // field 40, policy 41.
            let fields = stat[stat.index(after: nameEnd)...].split(separator: " ")
            guard fields.count >= 39, let priority = Int(fields[37]), let policy = Int32(fields[38]) else { return nil }
            return ProcessThread(name: name.trimmingCharacters(in: .newlines), policy: policy, realtimePriority: priority)
        }
    }

    /// B's voice thread runs at real-time priority 10 (SCHED_FIFO) wherever the process may have
    /// real-time priority, i.e. wherever PipeWire's data thread in the same daemon got it
    /// (module-rt: root, an RLIMIT_RTPRIO, or RealtimeKit); else its log says it runs at normal
    /// priority and why. Measured under three busy loops on 2 cores (20 s at 5 % loss): B's speaker
    /// underran 156 and 225 times at normal priority, 3 and 0 times at real-time priority.
    func testTheVoiceThreadRunsAtRealTimePriorityWhereThePlatformAllowsIt() throws {
        let (rig, _) = try makeRig()
        let threads = threads(of: rig.b.daemon.process.pid)
        let voice = try XCTUnwrap(threads.first { $0.name == "peervoice-voice" }, "B's threads: \(threads.map(\.name))")
        let data = try XCTUnwrap(threads.first { $0.name == "peervoice-rt" }, "B's threads: \(threads.map(\.name))")
        print("B's voice thread: policy \(voice.policy), priority \(voice.realtimePriority); PipeWire's data thread: policy \(data.policy), priority \(data.realtimePriority)")
        if data.policy == SCHED_FIFO || data.policy == SCHED_RR {
            XCTAssertEqual(voice.policy, SCHED_FIFO, "PipeWire's data thread is real-time, the voice thread is not")
            XCTAssertEqual(voice.realtimePriority, 10)
            XCTAssertLessThan(voice.realtimePriority, data.realtimePriority, "the voice thread must not preempt PipeWire's")
            XCTAssertEqual(rig.b.logCount("the voice thread runs at real-time priority 10"), 1)
        } else {
            XCTAssertEqual(voice.policy, SCHED_OTHER)
            XCTAssertEqual(rig.b.logCount("the voice thread runs at normal priority (real-time priority refused:"), 1)
        }
    }

    /// A call through a relay that drops 5 % of the voice datagrams, held for
    /// PEERVOICE_SOAK_SECONDS while A talks without pause: latency sampled along the call stays
    /// bounded and does not creep up (the jitter buffer is bounded), neither daemon's memory grows
    /// by 5 MB, and B's speaker does not underrun in storms.
    func testACallWithFivePercentLossStaysBoundedOverTime() throws {
        let seconds = Double(ProcessInfo.processInfo.environment["PEERVOICE_SOAK_SECONDS"] ?? "") ?? 40
        let (rig, relayOrNil) = try makeRig(relayLoss: 5)
        let (a, b) = (rig.a, rig.b)
        let relay = try XCTUnwrap(relayOrNil)
        let samples = max(3, min(10, Int(seconds / 10)))
        var talker = try rig.pwA.inject(Self.speech)
        var talkerStarted = VoiceRig.monotonicSeconds()
        /// Keeps A talking: the 7.4 s speech again once less than `secondsLeft` of it remain.
        func keepTalking(secondsLeft: Double = 0.2) throws {
            guard VoiceRig.monotonicSeconds() - talkerStarted > 7.4 - secondsLeft else { return }
            talker.stop()
            talker = try rig.pwA.inject(Self.speech)
            talkerStarted = VoiceRig.monotonicSeconds()
        }
        dispatchEvents(for: 2)
        let rssStart = (a: residentKiB(of: a.daemon.process.pid), b: residentKiB(of: b.daemon.process.pid))
        let began = VoiceRig.monotonicSeconds()
        var samplesTaken: [(at: Double, transfer: VoiceTransfer, windows: [VoiceTransfer])] = []
        for index in 0..<samples {
            // Evenly spaced 2.5 s measurements, the last one ending the call.
            let due = began + seconds * Double(index + 1) / Double(samples) - 2.5
            while VoiceRig.monotonicSeconds() < due {
                try keepTalking()
                dispatchEvents(for: min(0.5, max(0.01, due - VoiceRig.monotonicSeconds())))
            }
            try keepTalking(secondsLeft: 2.9)  // enough speech left for the window
            let audio = try TemporaryDirectory("peervoice-soak")
            defer { audio.remove() }
            let recordA = try TimedRecording(rig.pwA, to: audio.path + "/a.wav")
            let recordB = try TimedRecording(rig.pwB, to: audio.path + "/b.wav")
            let start = VoiceRig.monotonicSeconds()
            dispatchEvents(for: 2.5)
            let tapA = try recordA.stop(), tapB = try recordB.stop()
            let mic = TimedTrack(tapA, .mic)
            let (from, to) = try speechSpan(mic, from: start, to: VoiceRig.monotonicSeconds() - 0.3, seconds: 2.0)
            let speaker = TimedTrack(tapB, .speaker)
            let transfer = VoiceAnalysis.transfer(mic: mic, speaker: speaker, from: from, to: to)
            let label = String(format: "soak at %.0f s", start - began)
            print("\(label): \(transfer)")
            samplesTaken.append((start - began, transfer, diagnose(label, mic: mic, speaker: speaker, from: from, to: to)))
        }
        talker.stop()
        let elapsed = VoiceRig.monotonicSeconds() - began
        let rssEnd = (a: residentKiB(of: a.daemon.process.pid), b: residentKiB(of: b.daemon.process.pid))
        let relayed = relay.statistics
        let statistics = stopAndReadStatistics(rig)
        let underruns = statistics["bob"]?["speaker underruns"] ?? -1
        print(String(format: "soak: %.0f s, relay dropped %d of %d datagrams; RSS A %d → %d KiB, B %d → %d KiB; B's speaker underruns %d",
                     elapsed, relayed.dropped, relayed.received, rssStart.a, rssEnd.a, rssStart.b, rssEnd.b, underruns))

        XCTAssertEqual(Double(relayed.dropped) / Double(max(1, relayed.received)), 0.05, accuracy: 0.02, "the relay did not drop ~5 %")
        for (at, transfer, windows) in samplesTaken {
            XCTAssertLessThanOrEqual(transfer.latencyMs, 150, String(format: "latency at %.0f s", at))
            // Judged per 0.5 s window, each at its own lag: after a loss the jitter buffer may move
            // the playout by a few ms, and one lag over the 2.5 s then misjudges the speech (one
            // sample read -0.55, the next 0.90). Unrelated audio correlates < 0.1; where losses
            // cluster a sample can dip, so it only has to be clearly speech...
            XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(windows), 0.2, String(format: "correlation at %.0f s", at))
        }
        // ... and the call as a whole as good as testSpeechSurvivesTenPercentLossThroughARelay asks
        // at twice the loss.
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(samplesTaken.flatMap(\.windows)), 0.5, "median correlation over the call")
        let firstHalf = samplesTaken.prefix(samplesTaken.count / 2).map(\.transfer.latencyMs)
        let secondHalf = samplesTaken.suffix(samplesTaken.count - samplesTaken.count / 2).map(\.transfer.latencyMs)
        XCTAssertLessThanOrEqual(secondHalf.max()!, firstHalf.max()! + 40, "latency crept up along the call")
        XCTAssertLessThan(rssEnd.a - rssStart.a, 5 * 1024, "A's memory grew by 5 MB or more")
        XCTAssertLessThan(rssEnd.b - rssStart.b, 5 * 1024, "B's memory grew by 5 MB or more")
        // An underrun is one device quantum (5.3 ms) the ring could not fill; a storm would be one
        // every few quanta, thousands over the call. Allow one per 2 s: a machine busy with other
        // work (a busy loop on one of two cores) caused 5 in 41 s, and a full `make test` on an
        // otherwise idle machine once 13 in 41 s (2026-12-06), its correlation and latency fine.
        XCTAssertGreaterThanOrEqual(underruns, 0, "B's session statistics were not logged")
        XCTAssertLessThanOrEqual(Double(underruns), max(10, elapsed / 2), "B's speaker underran \(underruns) times")
    }
}
