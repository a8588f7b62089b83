import Foundation
import GIO
import TestHarness
import XCTest

/// Capture processing between two real peervoiced (docs/VOICE.md, "Capture processing"): B sits
/// in a room (``AcousticPath``: B's speaker back into B's mic, 67 ms late, -18 dB), or has a
/// noisy mic, and what A hears is compared with a second call whose processing is switched off
/// by the option under test. Levels are relative to A's own mic, so the two calls'
/// speech need not be equally loud.
extension VoiceTests {
    /// What is compared: the echo of A's speech that comes back from B's room, from 3 s after A
    /// started talking (the canceller has heard 3 s of far end by then), and, in double talk (B
    /// talks, backwards speech, while A's echo is there), B's own speech at A.
    ///
    /// Cancelled: the echo is at least 15 dB quieter than with `--no-echo-cancel`. Double talk:
    /// B's speech still reaches A with a median window correlation ≥ 0.5 (VoiceTests' bound for
    /// "the speech came out of the speaker") and at most 10 dB quieter than uncancelled. A gate
    /// or half-duplex suppressor, which mutes B while A's echo is present, fails both (it leaves
    /// no speech to correlate); a canceller leaves B's speech, a few dB quieter.
    func testEchoFromTheRoomIsCancelledAndDoubleTalkGetsThrough() throws {
        let (on, _) = try makeRig()
        let (off, _) = try makeRig(extraArguments: ["--no-echo-cancel"])
        XCTAssertEqual(try off.b.client.runningProcessing(), ["noise-suppression", "high-pass"])
        XCTAssertEqual(try off.b.client.audioProcessing().first, "echo-cancel off: option")
        let rooms = try [on, off].map { try AcousticPath($0.pwB) }
        defer { rooms.forEach { $0.stop() } }

        var backwards = try WAVAudio(contentsOf: Self.speech)
        backwards.samples.reverse()
        try backwards.write(to: on.directory + "/backwards.wav")
        let recordings = try [on, off].map { try TimedRecording($0.pwA, to: $0.directory + "/a.wav") }
        // A talks twice in a row: first alone (echo only), then while B talks.
        let aloneFrom = VoiceRig.monotonicSeconds()
        var intoA = try [on, off].map { try $0.pwA.inject(Self.speech) }
        dispatchEvents(for: 7.3)
        intoA.forEach { $0.stop() }
        let aloneTo = VoiceRig.monotonicSeconds()
        intoA = try [on, off].map { try $0.pwA.inject(Self.speech) }
        let intoB = try [on, off].map { try $0.pwB.inject(on.directory + "/backwards.wav") }
        let saidByB = try zip([on, off], intoB).map { rig, injection in
            try TimedRecording(rig.pwB, to: rig.directory + "/b-said.wav", channel0: "\(injection.node):output_MONO")
        }
        let bothFrom = VoiceRig.monotonicSeconds()
        dispatchEvents(for: 5.5)
        (intoA + intoB).forEach { $0.stop() }
        let bothTo = VoiceRig.monotonicSeconds()
        let tapsA = try recordings.map { try $0.stop() }
        let tapsB = try saidByB.map { try $0.stop() }

        // Echo: what A's speaker plays against what A's mic said, from 3 s in.
        let echo = tapsA.map { tap -> Double in
            let mic = TimedTrack(tap, .mic).slice(from: aloneFrom + 3, to: aloneTo).samples
            let speaker = TimedTrack(tap, .speaker).slice(from: aloneFrom + 3, to: aloneTo).samples
            return max(AudioAnalysis.levelDBFS(speaker), -100) - AudioAnalysis.levelDBFS(mic)
        }
        print(String(format: "echo back at A, relative to A's mic: %.1f dB cancelled, %.1f dB with --no-echo-cancel: %.1f dB less",
                     echo[0], echo[1], echo[1] - echo[0]))
        XCTAssertGreaterThan(echo[1], -30, "--no-echo-cancel: the room's echo (-18 dB) should come back")
        XCTAssertGreaterThanOrEqual(echo[1] - echo[0], 15, "the echo is not cancelled")

        // Double talk: B's speech as said against A's speaker.
        var heard: [(correlation: Double, level: Double)] = []
        for (tapA, tapB) in zip(tapsA, tapsB) {
            let said = TimedTrack(tapB, .mic), speaker = TimedTrack(tapA, .speaker)
            let (from, to) = try speechSpan(said, from: bothFrom + 0.5, to: bothTo, seconds: 4.5)
            let windows = diagnose("double talk", mic: said, speaker: speaker, from: from, to: to)
            let level = AudioAnalysis.levelDBFS(speaker.slice(from: from + 0.1, to: to + 0.1).samples)
                - AudioAnalysis.levelDBFS(said.slice(from: from, to: to).samples)
            heard.append((VoiceAnalysis.medianCorrelation(windows), level))
        }
        print(String(format: "double talk, B's speech at A: correlation %.2f, %.1f dB cancelled; %.2f, %.1f dB with --no-echo-cancel",
                     heard[0].correlation, heard[0].level, heard[1].correlation, heard[1].level))
        XCTAssertGreaterThanOrEqual(heard[0].correlation, 0.5, "B's speech did not get through during double talk")
        XCTAssertGreaterThanOrEqual(heard[0].level, heard[1].level - 10, "B's speech was suppressed during double talk")
        for rig in [on, off] { _ = stopAndReadStatistics(rig) }
    }

    /// Pink noise at 10 dB below B's speech in B's mic: in B's pauses A hears at least 6 dB less
    /// of it than with `--no-noise-suppression`, and B's speech still comes through. Unlike the
    /// echo test the two calls run one after the other: two at once on a 2-core machine moved the
    /// playout delay by up to 25 ms inside the speech (scheduling jitter), which took windows of
    /// either call below the speech bound.
    func testNoiseIsSuppressedInSpeechPauses() throws {
        let pauseLevels = try [[], ["--no-noise-suppression"]].map { arguments in
            let (rig, _) = try makeRig(extraArguments: arguments)
            defer { stopAndReadStatistics(rig) }
            return try noiseInPauses(rig, label: arguments.isEmpty ? "suppressed" : "unsuppressed")
        }
        print(String(format: "noise in B's pauses at A, relative to B's mic: %.1f dB suppressed, %.1f dB with --no-noise-suppression",
                     pauseLevels[0], pauseLevels[1]))
        XCTAssertGreaterThan(pauseLevels[1], -6, "--no-noise-suppression: the noise should come through")
        XCTAssertGreaterThanOrEqual(pauseLevels[1] - pauseLevels[0], 6, "the noise is not suppressed")
    }

    /// Plays 1 s of noise, 2.5 s of speech on it, a 2.5 s pause, 1 s more speech into B's mic,
    /// after 1 s of digital silence (so the recording of what was said runs before the noise
    /// starts, and its onset places the rest); checks that B's speech reached A and returns the
    /// noise level A heard in the pause (from 0.5 s into it) relative to B's mic.
    private func noiseInPauses(_ rig: Rig, label: String) throws -> Double {
        let speech = try WAVAudio(contentsOf: Self.speech)
        let speech48 = speech.samples.flatMap { [$0, $0, $0] }  // 16 kHz fixture, held to 48 kHz
        let speechLevel = AudioAnalysis.levelDBFS(Array(speech48.prefix(48_000 * 3)))
        var mix = AudioAnalysis.pinkNoise(seconds: 7, dBFS: speechLevel - 10)
        for (offset, range) in [(48_000, 0..<48_000 * 5 / 2), (48_000 * 6, 48_000 * 3..<48_000 * 4)] {
            for (i, sample) in speech48[range].enumerated() {
                mix[offset + i] = Int16(clamping: Int(mix[offset + i]) + Int(sample))
            }
        }
        try WAVAudio(samples: [Int16](repeating: 0, count: 48_000) + mix).write(to: rig.directory + "/noisy.wav")
        let recording = try TimedRecording(rig.pwA, to: rig.directory + "/a.wav")
        let intoB = try rig.pwB.inject(rig.directory + "/noisy.wav")
        let saidByB = try TimedRecording(rig.pwB, to: rig.directory + "/b-said.wav", channel0: "\(intoB.node):output_MONO")
        dispatchEvents(for: 8.3)
        intoB.stop()
        let said = TimedTrack(try saidByB.stop(), .mic), speaker = TimedTrack(try recording.stop(), .speaker)
        // Where the file started playing: its first loud window (the noise).
        let started = try XCTUnwrap(said.firstLoud(from: said.timed.startTime, to: said.timed.endTime, above: speechLevel - 20))
        let windows = diagnose(label, mic: said, speaker: speaker, from: started + 1.2, to: started + 3.4)
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(windows), 0.5, "\(label): B's speech did not come through the noise")
        let pauseSaid = said.slice(from: started + 4, to: started + 5.8).samples
        let pauseHeard = speaker.slice(from: started + 4.1, to: started + 5.9).samples
        return max(AudioAnalysis.levelDBFS(pauseHeard), -100) - AudioAnalysis.levelDBFS(pauseSaid)
    }

    /// No canceller where nothing can echo (docs/VOICE.md): B's speaker stream is moved during the
    /// call, as a mixer application moves it, from the test speaker (a sink that says nothing of
    /// itself: the canceller runs) to virtual sinks that say they are headphones
    /// (`device.form-factor`) and a Bluetooth headset (`device.icon-name`, `device.bus`), and
    /// back. `AudioProcessing` says after each move whether the canceller runs and why (with a
    /// PropertiesChanged), the log says when it turns off and on, and the call goes on.
    func testEchoCancellerFollowsTheOutputToHeadphonesAndBack() throws {
        let (rig, _) = try makeRig()
        defer { stopAndReadStatistics(rig) }
        let (pw, b) = (rig.pwB, rig.b)
        try pw.createSink("peervoice-test-headphones", properties: ["device.form-factor": "headphones"])
        try pw.createSink("peervoice-test-headset", properties: ["device.icon-name": "audio-headset-bluetooth", "device.bus": "bluetooth"])
        func echoCancel() -> String { (try? b.client.audioProcessing().first) ?? "-" }
        XCTAssertTrue(eventually(timeout: 5) { echoCancel() == "echo-cancel on: speaker: \(PipeWireSession.speakerName)" }, echoCancel())
        let moves = [
            ("peervoice-test-headphones", "echo-cancel off: headphones: peervoice-test-headphones (device.form-factor=headphones)"),
            ("peervoice-test-headset", "echo-cancel off: bluetooth-headset: peervoice-test-headset (device.icon-name=audio-headset-bluetooth)"),
            (PipeWireSession.speakerName, "echo-cancel on: speaker: \(PipeWireSession.speakerName)"),
        ]
        for (sink, expected) in moves {
            let mark = b.mark, moved = VoiceRig.monotonicSeconds()
            try pw.move(stream: "peervoice-playback", to: sink)
            XCTAssertTrue(eventually(timeout: 5) { echoCancel() == expected }, "after the move to \(sink): \(echoCancel())")
            XCTAssertNotNil(b.client.waitForSignal("PropertiesChanged", after: mark, timeout: 5) { $0.arguments[1].lookup("AudioProcessing") != nil },
                            "no PropertiesChanged for AudioProcessing after the move to \(sink)")
            print("moved to \(sink): \(expected) after \(ms(VoiceRig.monotonicSeconds() - moved)) ms")
        }
        XCTAssertEqual(b.logCount("voice: echo cancellation off, headphones: peervoice-test-headphones"), 1, b.log.suffix(3_000).description)
        XCTAssertEqual(b.logCount("voice: echo cancellation on, speaker: \(PipeWireSession.speakerName)"), 1)
        XCTAssertEqual(b.voiceStates(of: rig.link.aOnB).last, "active", "the call went on")
    }

    /// B's default source is PipeWire's own echo canceller (libpipewire-module-echo-cancel, run in
    /// a client process of B's PipeWire): once voice runs, B's canceller is off and says so in the
    /// log, and AudioProcessing shows "echo-cancel" off and why — never two cancellers in series.
    /// B runs with `--gain-control`, which lists "gain-control" and stays through the swap.
    func testOwnCancellerTurnsOffOnPipeWiresEchoCanceller() throws {
        let pwB = try startPipeWire()
        let configuration = pwB.directory + "/echo-cancel.conf"
        try """
            context.spa-libs = { audio.convert.* = audioconvert/libspa-audioconvert  support.* = support/libspa-support }
            context.modules = [
                { name = libpipewire-module-protocol-native }
                { name = libpipewire-module-client-node }
                { name = libpipewire-module-adapter }
                { name = libpipewire-module-echo-cancel
                  args = { library.name = aec/libspa-aec-webrtc audio.rate = 48000 audio.channels = 1 audio.position = [ MONO ] } }
            ]
            """.write(toFile: configuration, atomically: true, encoding: .utf8)
        let canceller = try pwB.spawn("pipewire", ["-c", configuration], logName: "echo-cancel")
        defer { canceller.kill() }
        try pwB.waitForPorts(["echo-cancel-source:capture_MONO"])
        XCTAssertTrue(eventually(timeout: 10) { (try? pwB.run("pw-metadata", ["0", "default.audio.source"]))?.contains("echo-cancel-source") == true },
                      "WirePlumber did not make echo-cancel-source the default source")

        let pwA = try startPipeWire()
        let a = try startPeer("alice", environment: pwA.environment)
        let b = try startPeer("bob", environment: pwB.environment, extraArguments: ["--gain-control"])
        XCTAssertEqual(try b.client.runningProcessing(), ["echo-cancel", "noise-suppression", "high-pass", "gain-control"])
        let markA = a.mark, markB = b.mark
        let link = try VoicePairing.connect(a, to: b)
        try waitActive(a, b, link, markA: markA, markB: markB)
        XCTAssertTrue(eventually(timeout: 5) { b.logCount("is PipeWire's echo canceller already: PeerVoice's echo cancellation is off") == 1 },
                      "no log line saying the canceller turned off: \(b.log.suffix(2_000))")
        XCTAssertTrue(eventually(timeout: 5) {
            (try? b.client.runningProcessing()) == ["noise-suppression", "high-pass", "gain-control"]
        }, "AudioProcessing still lists echo-cancel")
        XCTAssertEqual(try b.client.audioProcessing().first, "echo-cancel off: pipewire-echo-cancel: echo-cancel-source")
        // The Get that saw the new list can return before the main loop dispatched the signal that
        // came ahead of its reply, so the signal is waited for, not looked up.
        XCTAssertNotNil(b.client.waitForSignal("PropertiesChanged", after: markB, timeout: 5) { $0.arguments[1].lookup("AudioProcessing") != nil },
                        "no PropertiesChanged for AudioProcessing")
        // A's microphone is the plain virtual one: its canceller stays on.
        XCTAssertEqual(a.logCount("PeerVoice's echo cancellation is off"), 0)
        XCTAssertEqual(try a.client.runningProcessing(), ["echo-cancel", "noise-suppression", "high-pass"])
    }
}
