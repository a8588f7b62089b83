import Foundation
import GIO
import Glibc
import TestHarness
import XCTest

/// A hosted call (docs/GROUP.md, "How a host forwards voice"): four real peervoiced over IP, each
/// with its own headless PipeWire; A in voice with B, C and D, each of them paired with A only.
/// A relays each one's voice to the others, and tells each who else is in the call.
extension VoiceTests {
    /// The relayed participants a daemon's `Participants` shows: (id, name, speaking).
    func participants(_ daemon: TestPeer) throws -> [(id: String, name: String, speaking: Bool)] {
        try daemon.client.property("Participants").children.map { ($0[0].string!, $0[1].string!, $0[2].bool!) }
    }

    /// B's speech reaches C and D through A (one relay hop on top of the direct bounds); C's
    /// `Participants` names B and D (with their names), and B's `Speaking` there follows B's
    /// speech; A and B talking at once both come out of C's speaker; `SetVolume(A, 0)` on C takes
    /// A out and leaves B; D killed, the others go on (B still reaches C) and D leaves the lists.
    func testAHostRelaysEachParticipantToTheOthers() throws {
        let pwA = try startPipeWire(), pwB = try startPipeWire(), pwC = try startPipeWire(), pwD = try startPipeWire()
        let a = try startPeer("alice", environment: pwA.environment)
        let b = try startPeer("bob", environment: pwB.environment)
        let c = try startPeer("carol", environment: pwC.environment)
        let d = try startPeer("dave", environment: pwD.environment)
        var links: [VoiceLink] = []
        for other in [b, c, d] {
            let markA = a.mark, markOther = other.mark
            let link = try VoicePairing.connect(a, to: other)
            try waitActive(a, other, link, markA: markA, markB: markOther)
            links.append(link)
        }
        let (ab, ac, ad) = (links[0], links[1], links[2])
        let directory = try TemporaryDirectory("peervoice-relay-audio")
        directories.append(directory)
        var backwards = try WAVAudio(contentsOf: Self.speech)
        backwards.samples.reverse()
        try backwards.write(to: directory.path + "/backwards.wav")

        // The lists: C sees B and D by the ids and names A knows them by; B sees C and D.
        XCTAssertTrue(eventually(timeout: 5) { (try? self.participants(c).map(\.id).sorted()) == [ab.bOnA, ad.bOnA].sorted() },
                      "C's Participants is not B and D: \(String(describing: try? participants(c)))")
        let atC = try participants(c)
        XCTAssertEqual(atC.first { $0.id == ab.bOnA }?.name, "bob")
        XCTAssertEqual(atC.first { $0.id == ad.bOnA }?.name, "dave")
        XCTAssertEqual(try participants(b).map(\.id).sorted(), [ac.bOnA, ad.bOnA].sorted())
        XCTAssertEqual(try participants(a).count, 0, "the host has relayed participants")

        // B talks: C and D hear B through A; B's Speaking flips on and off in C's Participants.
        let markC = c.mark
        let fromB = try talk([(pwB, Self.speech)], to: [pwC, pwD], seconds: 3.0, settle: 1.5, directory: directory.path, label: "B")
        for (name, result) in zip(["C", "D"], fromB[0]) {
            XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(result.windows), 0.5, "B's speech did not reach \(name) through A")
            // The direct bound (150 ms) plus a generous relay hop.
            XCTAssertLessThanOrEqual(result.transfer.latencyMs, 250, "B→A→\(name) mouth-to-ear latency")
        }
        let speakingOfB = c.client.signals[markC...].filter { $0.member == "PropertiesChanged" }.compactMap { signal in
            signal.arguments[1].lookup("Participants")?.children.first { $0[0].string == ab.bOnA }?[2].bool
        }
        print("Speaking of B in C's Participants: \(speakingOfB)")
        XCTAssertTrue(speakingOfB.contains(true), "B's Speaking never turned on in C's Participants")
        XCTAssertEqual(try participants(c).first { $0.id == ab.bOnA }?.speaking, false, "B's Speaking stayed on at C")

        // A and B at once: C's speaker carries both.
        let both = try talk([(pwA, Self.speech), (pwB, directory.path + "/backwards.wav")], to: [pwC], seconds: 4.0,
                            spanSeconds: 3.5, directory: directory.path, label: "A+B")
        for (name, result) in zip(["A", "B"], both.map { $0[0] }) {
            // Two voices at once (as in the three-daemon test): each about half of what C plays,
            // judged over seven windows as there.
            XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(result.windows), 0.35, "\(name)'s speech was cut from C's mix")
        }

        // SetVolume(A, 0) on C: A is gone from C's speaker, B (relayed by A) is still there.
        try c.client.call("SetVolume", [Variant(ac.aOnB), Variant(0.0)])
        let quietA = try talk([(pwA, Self.speech), (pwB, directory.path + "/backwards.wav")], to: [pwC], seconds: 3.0,
                              directory: directory.path, label: "volume(A)=0")
        XCTAssertLessThan(quietA[0][0].transfer.correlation, 0.2, "A is still heard at C at volume 0")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(quietA[1][0].windows), 0.5, "B is no longer heard at C")
        try c.client.call("SetVolume", [Variant(ac.aOnB), Variant(1.0)])

        // D dies: the lists drop it, and B still reaches C through A.
        let markA = a.mark
        d.daemon.process.signal(SIGKILL)
        XCTAssertNotNil(a.client.waitForSignalIndex("PeerStateChanged", after: markA, timeout: 10) {
            $0.string(0) == ad.bOnA && $0.string(1) == "disconnected"
        }, "A never reported D disconnected")
        XCTAssertTrue(eventually(timeout: 3) { (try? self.participants(c).map(\.id)) == [ab.bOnA] },
                      "C's Participants still names D: \(String(describing: try? participants(c)))")
        let afterD = try talk([(pwB, Self.speech)], to: [pwC], seconds: 3.0, directory: directory.path, label: "B after D died")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(afterD[0][0].windows), 0.5, "B no longer reaches C after D died")
        XCTAssertFalse(c.voiceStates(of: ac.aOnB, after: markC).contains("stopped"), "C's voice with A stopped")
    }

    /// A hosts B and C, and B and C then pair and talk directly: the direct voice wins (each asks
    /// every host not to relay the peer it hears itself, so A relays nothing to C while B talks,
    /// and C hears B as directly); `StopVoice(C)` on A takes C out of A's call (B's list from A
    /// empties), A asks B, which now hosts A and C, for C again, and C's voice reaches A through B.
    func testADirectVoiceWinsOverTheRelayAndStopVoiceTakesOneOut() throws {
        let rig = try makeGroupRig()
        let (a, b, c) = (rig.a, rig.b, rig.c)
        XCTAssertTrue(eventually(timeout: 5) { (try? self.participants(b).map(\.id)) == [rig.cOnA] },
                      "B's Participants is not C: \(String(describing: try? participants(b)))")
        let markB = b.mark, markC = c.mark
        let bc = try VoicePairing.connect(b, to: c)
        try waitActive(b, c, bc, markA: markB, markB: markC)
        XCTAssertEqual(bc.bOnA, rig.cOnA, "C's id differs between A and B")
        for (listener, origin) in [(rig.cOnA, rig.bOnA), (rig.bOnA, rig.cOnA)] {
            XCTAssertTrue(eventually(timeout: 5) { a.logCount("voice: \(listener) hears \(origin) directly: not relaying it there") == 1 },
                          "A still relays \(origin) to \(listener), who hears it directly")
        }

        // B talks: C hears it once, directly (the direct bound), and A relays none of it to C.
        let fromB = try talk([(rig.pwB, Self.speech)], to: [rig.pwC], seconds: 3.0, directory: rig.directory, label: "B direct")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(fromB[0][0].windows), 0.5, "C does not hear B")
        XCTAssertLessThanOrEqual(fromB[0][0].transfer.latencyMs, 150, "B→C mouth-to-ear latency (direct)")

        // StopVoice(C) on A: A's voice with C ends; A relayed only B's silence keepalives to C
        // before the direct link (150 packets of speech would be far more).
        let markA = a.mark
        try a.client.call("StopVoice", [Variant(rig.cOnA)])
        XCTAssertNotNil(a.waitForVoiceState("stopped", of: rig.cOnA, after: markA, timeout: 5), "A's voice with C did not stop")
        let closing = try XCTUnwrap(a.log.components(separatedBy: "\n").last { $0.contains("voice with \(rig.cOnA) stopped (StopVoice was called)") })
        let relayedToC = try XCTUnwrap(closing.range(of: #"relayed to it (\d+)"#, options: .regularExpression).map {
            Int(closing[$0].split(separator: " ").last!)! })
        print("A relayed \(relayedToC) packets to C in all")
        XCTAssertLessThan(relayedToC, 60, "A relayed B's speech to C, who heard B directly")
        // C left A's call: B's lists (from A: nobody else; from C: nobody else) are empty, and
        // C's keeps only what B (hosting A and C) says: A.
        XCTAssertTrue(eventually(timeout: 5) { (try? self.participants(b).count) == 0 },
                      "B's Participants after C left A's call: \(String(describing: try? participants(b)))")
        XCTAssertTrue(eventually(timeout: 5) { (try? self.participants(c).map(\.id)) == [rig.ac.aOnB] },
                      "C's Participants after it left A's call: \(String(describing: try? participants(c)))")
        // B hosts A and C now; A asks B for C again, and hears C through B.
        XCTAssertTrue(eventually(timeout: 5) { b.logCount("voice: \(rig.ab.aOnB) asks for \(rig.cOnA) again: relaying it there") == 1 },
                      "A did not ask B for C again")
        XCTAssertTrue(eventually(timeout: 5) { (try? self.participants(a).map(\.id)) == [rig.cOnA] },
                      "A's Participants is not C (through B): \(String(describing: try? participants(a)))")
        let fromC = try talk([(rig.pwC, rig.backwards)], to: [rig.pwA], seconds: 3.0, directory: rig.directory, label: "C via B")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(fromC[0][0].windows), 0.5, "C's voice does not reach A through B")
    }

    /// A hosts B and C, C behind a relay that drops 10 % of what A sends it: the path from B to A
    /// is clean, but C loses a tenth of B's relayed voice and says so (RELAY_REPORT), and A tells
    /// B the worst of its listeners' losses: B's one encoder turns in-band FEC on.
    func testTheWorstListenersLossSizesTheOriginsFEC() throws {
        let rig = try makeGroupRig(lossToC: 10)
        let intoB = try rig.pwB.inject(Self.speech)
        defer { intoB.stop() }
        // C's RELAY_REPORT about B reaches A with a loss FEC is planned for (3 % or more)...
        let reported = "voice: \(rig.cOnA) loses "
        func reportedLoss() -> [Int] {
            rig.a.log.components(separatedBy: "\n").filter { $0.contains(reported) && $0.hasSuffix("of the voice of \(rig.bOnA) we relay") }
                .compactMap { Int($0.components(separatedBy: reported)[1].split(separator: " ")[0]) }
        }
        XCTAssertTrue(eventually(timeout: 8) { (reportedLoss().max() ?? 0) >= 3 },
                      "C never reported a loss of B's relayed voice to A: \(reportedLoss())")
        // ... and B's one encoder plans FEC (A's VOICE_REPORT is the worst of its own loss of B,
        // about nothing on this loopback, and its listeners').
        let fecOn = "voice with \(rig.ab.aOnB): it loses "
        XCTAssertTrue(eventually(timeout: 5) { rig.b.log.components(separatedBy: "\n").contains { $0.contains(fecOn) && $0.contains("in-band FEC on") } },
                      "B's encoder never planned FEC for C's loss: \(rig.b.log.components(separatedBy: "\n").filter { $0.contains("FEC") })")
        print("C reported losing \(reportedLoss()) % of B's relayed voice; B: " +
              rig.b.log.components(separatedBy: "\n").filter { $0.contains(fecOn) }.joined(separator: "; "))
    }
}
