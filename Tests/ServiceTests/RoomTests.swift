import Foundation
import GIO
import PeerVoiceBus
import TestHarness
import XCTest

/// Mumble rooms against the real `mumble-server` (murmurd 1.3.4) started by the test as an
/// ordinary process on loopback, with a third-party client nobody here wrote (pymumble 1.6.1 from
/// PyPI) in the same channel: join and leave, what each side sees of the other, text both ways,
/// mute as self-mute, a server restart, a changed certificate, a wrong password, a missing channel.
final class RoomTests: XCTestCase {
    private static let rejected = PeerVoiceBus.errorPrefix + "Rejected"
    private static let invalidArgument = PeerVoiceBus.errorPrefix + "InvalidArgument"

    private let started = StartedPeers()
    private var directory: TemporaryDirectory!
    private var server: MumbleServer!
    private var clients: [PyMumbleClient] = []

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("peervoice-rooms")
    }

    override func tearDown() {
        let failed = (testRun?.totalFailureCount ?? 0) > 0
        if failed, let server { print("----- murmurd -----\n\(server.log.suffix(3_000))") }
        if failed { clients.forEach { print("----- pymumble \($0.name) -----\n\($0.log.suffix(2_000))") } }
        clients = []
        server = nil
        started.shutdown(printingLogs: failed)
        directory.remove()
    }

    /// A server with channel /Games, made by its SuperUser (a pymumble client that then leaves:
    /// murmurd suppresses the SuperUser's voice), and pymumble user "bob" in it.
    private func serverWithGames(password: String? = nil) throws -> PyMumbleClient {
        server = try MumbleServer(in: directory, serverPassword: password)
        _ = try PyMumbleClient("SuperUser", server: server, in: directory, password: MumbleServer.superUserPassword,
                               channel: "Games", createChannel: true)
        let bob = try PyMumbleClient("bob", server: server, in: directory, password: password, channel: "Games")
        clients.append(bob)
        return bob
    }

    private func url(_ user: String, _ channel: String = "/Games") -> String { "mumble://\(user)@127.0.0.1:\(server.port)\(channel)" }

    private func join(_ peer: TestPeer, _ url: String, _ options: [(String, Variant)] = []) throws(BusError) -> String {
        try peer.client.call("JoinRoom", [Variant(url), Variant(dictionary: options)], timeout: .seconds(30))[0].string!
    }

    private func property(_ peer: TestPeer, _ room: String, _ name: String) throws -> Variant {
        try peer.client.connection.call(destination: PeerVoiceBus.name, path: room, interface: "org.freedesktop.DBus.Properties",
                                        method: "Get", arguments: Variant(tuple: [Variant(PeerVoiceBus.roomInterface), Variant(name)]))[0].unboxed!
    }

    private func state(_ peer: TestPeer, _ room: String) -> String { (try? property(peer, room, "State").string) ?? "" }

    /// Users as (name, muted), by name.
    private func users(_ peer: TestPeer, _ room: String) -> [String: Bool] {
        guard let list = try? property(peer, room, "Users") else { return [:] }
        return Dictionary(list.children.map { ($0[1].string!, $0[3].bool!) }) { a, _ in a }
    }

    private func callRoom(_ peer: TestPeer, _ room: String, _ method: String, _ arguments: [Variant]) throws(BusError) -> Variant {
        try peer.client.connection.call(destination: PeerVoiceBus.name, path: room, interface: PeerVoiceBus.roomInterface,
                                        method: method, arguments: Variant(tuple: arguments))
    }

    /// The room objects GetManagedObjects lists.
    private func roomPaths(_ peer: TestPeer) throws -> [String] {
        let reply = try peer.client.connection.call(destination: PeerVoiceBus.name, path: PeerVoiceBus.path,
                                                    interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
        return reply[0].children.filter { $0[1].lookup(PeerVoiceBus.roomInterface) != nil }.map { $0[0].string! }.sorted()
    }

    // MARK: Tests

    func testPeerVoiceAndAPyMumbleUserShareAChannelWithTextBothWaysAndMuteSeenBySelfMute() throws {
        let bob = try serverWithGames()
        let ana = try started.make("ana", listens: false)
        var received: [(String, String)] = []
        let subscription = ana.client.connection.subscribe(interface: PeerVoiceBus.roomInterface, member: "MessageReceived") {
            received.append(($0.arguments[0].string!, $0.arguments[1].string!))
        }
        let began = Date()
        let room = try join(ana, url("ana"))
        print("RoomTests: JoinRoom took \(Int(Date().timeIntervalSince(began) * 1000)) ms")
        XCTAssertEqual(room, "/org/example/PeerVoice/rooms/1")
        XCTAssertEqual(state(ana, room), "connected")
        XCTAssertEqual(try property(ana, room, "Channel").string, "/Games")
        XCTAssertEqual(try property(ana, room, "Url").string, "mumble://ana@127.0.0.1:\(server.port)/Games")
        XCTAssertEqual(try property(ana, room, "ServerFingerprint").string, server.fingerprint)
        XCTAssertEqual(try roomPaths(ana), [room], "the room is published through the ObjectManager")
        // The object is what dbus/org.example.PeerVoice.Room.xml describes.
        let live = try ana.client.connection.call(destination: PeerVoiceBus.name, path: room, interface: "org.freedesktop.DBus.Introspectable",
                                                  method: "Introspect")[0].string!
        let documented = try String(contentsOfFile: PyMumbleClient.repository + "/dbus/org.example.PeerVoice.Room.xml", encoding: .utf8)
        XCTAssertEqual(try interfaceMembers(ofXML: live, interface: PeerVoiceBus.roomInterface),
                       try interfaceMembers(ofXML: documented, interface: PeerVoiceBus.roomInterface))
        XCTAssertTrue(eventually(timeout: 5) { users(ana, room) == ["bob": false] }, "\(users(ana, room))")
        XCTAssertTrue(eventually(timeout: 5) { bob.usersInChannel(timeout: 1) == ["ana": false] }, "pymumble sees PeerVoice in its channel")

        // Text both ways; Mumble shows HTML, so what PeerVoice sends arrives escaped.
        let id = try callRoom(ana, room, "Send", [Variant("a <b> & c")])[0].string!
        XCTAssertFalse(id.isEmpty)
        XCTAssertTrue(eventually(timeout: 5) { bob.texts.contains { $0 == ("ana", "a &lt;b&gt; &amp; c") } }, "\(bob.texts)")
        bob.send("send hello from pymumble")
        XCTAssertTrue(eventually(timeout: 5) { received.contains { $0 == ("bob", "hello from pymumble") } }, "\(received)")

        // PeerVoice's Mute is the room's self-mute, both ways.
        try ana.client.call("Mute", [Variant(true)])
        XCTAssertTrue(eventually(timeout: 5) { bob.usersInChannel(timeout: 1) == ["ana": true] })
        try ana.client.call("Mute", [Variant(false)])
        XCTAssertTrue(eventually(timeout: 5) { bob.usersInChannel(timeout: 1) == ["ana": false] })
        // Bob talks (pymumble's Opus through the server's TCP tunnel): Users shows him speaking
        // while his packets come, and not once they stop (pymumble never marks its last frame).
        var speaking: [Bool] = []
        let watch = ana.client.connection.subscribe(path: room, { _ in
            if let flag = (try? self.property(ana, room, "Users"))?.children.first?[2].bool, flag != speaking.last { speaking.append(flag) }
        })
        bob.send("tone 1")
        XCTAssertTrue(eventually(timeout: 5) { speaking == [true] }, "\(speaking)")
        XCTAssertTrue(eventually(timeout: 5) { speaking == [true, false] }, "\(speaking)")
        withExtendedLifetime(watch) {}
        bob.send("mute")
        XCTAssertTrue(eventually(timeout: 5) { users(ana, room) == ["bob": true] })

        // Bad input gets a clear error.
        XCTAssertEqual(ana.client.errorName("JoinRoom", [Variant("http://x"), Variant(dictionary: [])]), Self.invalidArgument)
        XCTAssertEqual(ana.client.errorName("JoinRoom", [Variant(url("ana2", "/Nowhere")), Variant(dictionary: [])]), Self.invalidArgument)
        XCTAssertEqual(ana.client.errorName("JoinRoom", [Variant(url("ana3")), Variant(dictionary: [("colour", Variant("red"))])]), Self.invalidArgument)
        XCTAssertEqual(ana.client.errorName("JoinRoom", [Variant(url("ana4")), Variant(dictionary: [("force-tcp", Variant("yes"))])]), Self.invalidArgument)
        XCTAssertThrowsError(try callRoom(ana, room, "Send", [Variant("")]))
        XCTAssertThrowsError(try callRoom(ana, room, "SendTo", [Variant("nobody-here"), Variant("hi")]))
        XCTAssertEqual(try roomPaths(ana), [room], "failed joins leave no room behind")

        // Leave: gone from the bus and from the server.
        _ = try callRoom(ana, room, "Leave", [])
        XCTAssertEqual(try roomPaths(ana), [])
        XCTAssertTrue(eventually(timeout: 5) { bob.usersInChannel(timeout: 1) == [:] })
        withExtendedLifetime(subscription) {}
    }

    /// Voice both ways through the TCP tunnel and the call's engine: PeerVoice in a headless
    /// PipeWire with virtual devices, pymumble's tone out of its speaker, speech said into its
    /// microphone decoded by pymumble; muted, pymumble hears nothing more.
    func testVoiceGoesBothWaysBetweenPeerVoiceAndAPyMumbleUserThroughTheServer() throws {
        let bob = try serverWithGames()
        let pipewire = try PipeWireSession()
        defer { pipewire.stop() }
        let ana = try started.make("ana", listens: false, arguments: ["--verbose", "--no-cue"], environment: pipewire.environment)
        let room = try join(ana, url("ana"))
        XCTAssertTrue(eventually(timeout: 10) { ana.log.contains("voice: room 1 joined the call") }, ana.log)

        // Bob's 440 Hz tone comes out of Ana's speaker: loud, and crossing zero 880 times a second.
        let recording = try TimedRecording(pipewire, to: directory.path + "/ana.wav")
        let toneSent = VoiceRig.monotonicSeconds()
        bob.send("tone 2")
        dispatchEvents(for: 3)
        let speaker = TimedTrack(try recording.stop(), .speaker)
        let start = try XCTUnwrap(speaker.firstLoud(from: toneSent, to: toneSent + 3, above: -30), "the tone never came out of Ana's speaker")
        print("RoomTests: bob's tone out of Ana's speaker \(Int((start - toneSent) * 1000)) ms after pymumble was told to play it")
        let (tone, _) = speaker.slice(from: start + 0.2, to: start + 1.2)
        let crossings = zip(tone, tone.dropFirst()).filter { ($0 < 0) != ($1 < 0) }.count
        XCTAssertEqual(Double(crossings), 880, accuracy: 30, "zero crossings in one second of the tone")

        // SetUserMuted silences Bob here; SetUserVolume 0.5 brings him back 6 dB quieter.
        let full = try XCTUnwrap(toneLevel(bob, pipewire), "no tone at volume 1")
        _ = try callRoom(ana, room, "SetUserMuted", [Variant("bob"), Variant(true)])
        XCTAssertNil(try toneLevel(bob, pipewire), "Bob's tone came out of the speaker while muted here")
        _ = try callRoom(ana, room, "SetUserMuted", [Variant("bob"), Variant(false)])
        _ = try callRoom(ana, room, "SetUserVolume", [Variant("bob"), Variant(0.5)])
        let half = try XCTUnwrap(toneLevel(bob, pipewire), "no tone at volume 0.5")
        print("RoomTests: bob's tone at volume 1: \(full) dBFS, at 0.5: \(half) dBFS")
        XCTAssertEqual(half - full, -6.0, accuracy: 1.5)
        XCTAssertThrowsError(try callRoom(ana, room, "SetUserVolume", [Variant("bob"), Variant(3.0)]))
        XCTAssertThrowsError(try callRoom(ana, room, "SetUserMuted", [Variant("nobody"), Variant(true)]))

        // Speech into Ana's microphone reaches pymumble, decoded by its own Opus decoder.
        XCTAssertEqual(bob.heard()?.loudSeconds ?? -1, 0, accuracy: 0.1, "pymumble heard something before Ana spoke")
        let injection = try pipewire.inject(VoiceRig.fixturePath("speech.wav"))
        dispatchEvents(for: 3)
        injection.stop()
        dispatchEvents(for: 0.5)
        let heard = try XCTUnwrap(bob.heard())
        print("RoomTests: pymumble heard \(heard.seconds) s of Ana, \(heard.loudSeconds) s of it loud")
        XCTAssertGreaterThan(heard.loudSeconds, 1.2)

        // Muted: Ana's speech no longer reaches the room.
        try ana.client.call("Mute", [Variant(true)])
        dispatchEvents(for: 0.3)
        let before = try XCTUnwrap(bob.heard()).loudSeconds
        let muted = try pipewire.inject(VoiceRig.fixturePath("speech.wav"))
        dispatchEvents(for: 2)
        muted.stop()
        dispatchEvents(for: 0.5)
        XCTAssertEqual(try XCTUnwrap(bob.heard()).loudSeconds, before, accuracy: 0.05, "muted speech reached the room")
    }

    /// One call: Ana talks with peer Ben (a PeerVoice link, UDP voice) and sits in a Mumble room
    /// with pymumble's Bob, joined with `force-tcp` (voice only in the TLS tunnel). Her microphone,
    /// captured once, reaches both; Bob's tone comes out of her speaker mixed with the call, and
    /// leaving the room leaves the peer call running.
    func testARoomAndAPeerShareOneCall() throws {
        let bob = try serverWithGames()
        let pwAna = try PipeWireSession(), pwBen = try PipeWireSession()
        defer { pwAna.stop(); pwBen.stop() }
        let ana = try started.make("ana", arguments: ["--verbose", "--no-cue"], environment: pwAna.environment)
        let ben = try started.make("ben", arguments: ["--verbose", "--no-cue"], environment: pwBen.environment)
        let markAna = ana.mark
        let link = try VoicePairing.connect(ana, to: ben)
        XCTAssertNotNil(ana.waitForVoiceState("active", of: link.bOnA, after: markAna, timeout: 15), ana.log)
        let room = try join(ana, url("ana"), [("force-tcp", Variant(true))])
        XCTAssertTrue(eventually(timeout: 10) { ana.log.contains("voice: room 1 joined the call (1 peers, 1 rooms)") }, ana.log)

        // Ana speaks once: Ben's speaker plays it and pymumble decodes it.
        let benSpeaker = try TimedRecording(pwBen, to: directory.path + "/ben.wav")
        let spoke = VoiceRig.monotonicSeconds()
        let injection = try pwAna.inject(VoiceRig.fixturePath("speech.wav"))
        dispatchEvents(for: 3)
        injection.stop()
        dispatchEvents(for: 0.5)
        let atBen = TimedTrack(try benSpeaker.stop(), .speaker)
        XCTAssertNotNil(atBen.firstLoud(from: spoke, to: spoke + 3.5, above: -40), "Ben did not hear Ana")
        XCTAssertGreaterThan(try XCTUnwrap(bob.heard()).loudSeconds, 1.2, "the room did not hear Ana")

        // Bob's tone comes out of Ana's speaker while the peer call runs.
        XCTAssertNotNil(try toneLevel(bob, pwAna), "Bob's tone did not come out of Ana's speaker")
        XCTAssertEqual(voicePath(ana, room), "tcp", "force-tcp: voice never over UDP")
        XCTAssertFalse(ana.log.contains("voice over UDP"), "force-tcp: voice never over UDP")

        // Leaving the room leaves the call with Ben as it was.
        _ = try callRoom(ana, room, "Leave", [])
        XCTAssertTrue(eventually(timeout: 5) { ana.log.contains("voice: room 1 left the call") })
        XCTAssertEqual(ana.voiceStates(of: link.bOnA, after: markAna).last, "active")
        let again = try TimedRecording(pwBen, to: directory.path + "/ben-again.wav")
        let spokeAgain = VoiceRig.monotonicSeconds()
        let more = try pwAna.inject(VoiceRig.fixturePath("speech.wav"))
        dispatchEvents(for: 2)
        more.stop()
        XCTAssertNotNil(TimedTrack(try again.stop(), .speaker).firstLoud(from: spokeAgain, to: spokeAgain + 2, above: -40),
                        "Ben no longer hears Ana after she left the room")
    }

    /// Speech said into `talker`'s microphone for 3 s, found in `listener`'s speaker: the whole
    /// span's transfer and its 0.5 s windows.
    private func speech(from talker: PipeWireSession, to listener: PipeWireSession, _ label: String) throws -> (VoiceTransfer, [VoiceTransfer]) {
        let recordTalker = try TimedRecording(talker, to: directory.path + "/\(label)-talker.wav")
        let recordListener = try TimedRecording(listener, to: directory.path + "/\(label)-listener.wav")
        let start = VoiceRig.monotonicSeconds()
        let injection = try talker.inject(VoiceRig.fixturePath("speech.wav"))
        dispatchEvents(for: 3.2)
        injection.stop()
        dispatchEvents(for: 0.3)
        let mic = TimedTrack(try recordTalker.stop(), .mic), speaker = TimedTrack(try recordListener.stop(), .speaker)
        let (from, audibleTo) = try XCTUnwrap(VoiceAnalysis.audibleSpan(mic, from: start, to: VoiceRig.monotonicSeconds()), "\(label): no speech in the microphone")
        let to = min(audibleTo, from + 2.5)
        let transfer = VoiceAnalysis.transfer(mic: mic, speaker: speaker, from: from, to: to)
        let windows = VoiceAnalysis.windows(mic: mic, speaker: speaker, from: from, to: to)
        print("RoomTests: \(label): \(transfer), median window correlation \(VoiceAnalysis.medianCorrelation(windows))")
        return (transfer, windows)
    }

    /// Two PeerVoices in one channel hear each other through the server, judged as VoiceTests judge
    /// a peer call: over UDP once murmurd echoes their pings (`VoicePath` "udp", and the voice is in
    /// the datagrams each one's `VoiceRelay` in front of murmurd passes); through the TLS tunnel
    /// when UDP stops (the relays drop every datagram towards murmurd: "tcp" 2.5-4.5 s later, as the
    /// last echo came up to 1 s before; then only pings go over UDP and murmurd tunnels the
    /// listener's voice too); over UDP again when it works again. (`make bench-rooms` compares the
    /// latencies with a direct call.)
    func testTwoPeerVoicesHearEachOtherOverUDPAndThroughTheTunnelWhenUDPStops() throws {
        _ = try serverWithGames()
        clients = []  // bob would only add his silence
        // One relay each: murmurd tells users apart by their UDP source address.
        let relayAna = try VoiceRelay(targetPort: server.port), relayBen = try VoiceRelay(targetPort: server.port)
        defer { relayAna.stop(); relayBen.stop() }
        let pwAna = try PipeWireSession(), pwBen = try PipeWireSession()
        defer { pwAna.stop(); pwBen.stop() }
        let ana = try started.make("ana", listens: false, arguments: ["--verbose", "--no-cue"], environment: pwAna.environment)
        let ben = try started.make("ben", listens: false, arguments: ["--verbose", "--no-cue"], environment: pwBen.environment)
        let roomAna = try join(ana, "mumble://ana@127.0.0.1:\(relayAna.port)/Games")
        let roomBen = try join(ben, "mumble://ben@127.0.0.1:\(relayBen.port)/Games")
        XCTAssertTrue(eventually(timeout: 10) { ana.log.contains("voice: room 1 joined the call") && ben.log.contains("voice: room 1 joined the call") })
        let paths = { [self] in [voicePath(ana, roomAna), voicePath(ben, roomBen)] }
        XCTAssertTrue(eventually(timeout: 5) { paths() == ["udp", "udp"] }, "voice never took UDP: \(paths())")
        XCTAssertTrue(ana.log.contains("room 1: voice over UDP to 127.0.0.1:\(relayAna.port)"), ana.log)
        dispatchEvents(for: 0.5)

        /// Judges the speech; returns the datagrams the talker's relay took in (passed or dropped)
        /// and those the listener's relay brought back from murmurd meanwhile.
        func judge(_ label: String, from talker: (PipeWireSession, VoiceRelay), to listener: (PipeWireSession, VoiceRelay)) throws -> (up: Int, down: Int) {
            let (upBefore, downBefore) = (talker.1.statistics.received, listener.1.statistics.returned)
            let (transfer, windows) = try speech(from: talker.0, to: listener.0, label)
            XCTAssertGreaterThanOrEqual(windows.count, 3, "\(label): too little speech to judge")
            XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(windows), 0.5, "\(label): the speech did not come out of the speaker")
            XCTAssertGreaterThan(transfer.latencyMs, 0, label)
            XCTAssertLessThanOrEqual(transfer.latencyMs, 150, "\(label): mouth-to-ear latency")
            let datagrams = (up: talker.1.statistics.received - upBefore, down: listener.1.statistics.returned - downBefore)
            print("RoomTests: \(label): UDP datagrams from the talker \(datagrams.up), to the listener \(datagrams.down)")
            return datagrams
        }
        // 3.5 s of 20 ms packets: about 175 datagrams each way, and 4 pings.
        for (label, talker, listener) in [("ana→ben over UDP", (pwAna, relayAna), (pwBen, relayBen)),
                                          ("ben→ana over UDP", (pwBen, relayBen), (pwAna, relayAna))] {
            let datagrams = try judge(label, from: talker, to: listener)
            XCTAssertGreaterThan(datagrams.up, 100, "\(label): the talker's voice did not go over UDP")
            XCTAssertGreaterThan(datagrams.down, 100, "\(label): murmurd did not send the voice over UDP")
        }

        /// Drops (100) or passes (0) every datagram towards murmurd at both relays, then waits for
        /// both rooms to show `path`.
        func setUDPLoss(_ loss: Double, thenExpect path: String, within timeout: Double) {
            relayAna.setLoss(loss)
            relayBen.setLoss(loss)
            let since = VoiceRig.monotonicSeconds()
            XCTAssertTrue(eventually(timeout: timeout) { paths() == [path, path] }, "UDP loss \(loss) %: not \(path) but \(paths())")
            print("RoomTests: both rooms \(path) \(String(format: "%.1f", VoiceRig.monotonicSeconds() - since)) s after UDP loss became \(loss) %")
        }
        setUDPLoss(100, thenExpect: "tcp", within: 8)
        let tunnelled = try judge("ana→ben through the tunnel, UDP blocked", from: (pwAna, relayAna), to: (pwBen, relayBen))
        XCTAssertLessThan(tunnelled.up, 20, "ana's voice still went over UDP (only pings should)")
        XCTAssertLessThan(tunnelled.down, 20, "murmurd still sent ben the voice over UDP (the tunnelled ping should have stopped it)")
        setUDPLoss(0, thenExpect: "udp", within: 4)
    }

    /// murmurd's resync: when nothing of ours has opened for 5 s it sends an empty CryptSetup, and
    /// the nonce we answer with must be one it can decrypt our next datagrams with (a relay flips a
    /// bit in each of our datagrams meanwhile: voice falls back to the tunnel, then comes back to UDP
    /// once the datagrams are left alone).
    func testMurmurdsResyncRequestIsAnsweredAndUDPWorksAfterIt() throws {
        _ = try serverWithGames()
        clients = []
        let relay = try VoiceRelay(targetPort: server.port)
        defer { relay.stop() }
        let ana = try started.make("ana", listens: false)
        let room = try join(ana, "mumble://ana@127.0.0.1:\(relay.port)/Games")
        XCTAssertTrue(eventually(timeout: 5) { voicePath(ana, room) == "udp" }, voicePath(ana, room))
        relay.tamper(every: 1)
        let tampered = VoiceRig.monotonicSeconds()
        XCTAssertTrue(eventually(timeout: 12) { ana.log.contains("asked for our UDP nonce") }, "murmurd never asked for a resync")
        print("RoomTests: murmurd asked for our nonce \(String(format: "%.1f", VoiceRig.monotonicSeconds() - tampered)) s after our datagrams stopped opening")
        XCTAssertEqual(voicePath(ana, room), "tcp", "no echo for over 5 s, yet voice stayed on UDP")
        relay.tamper(every: 0)
        XCTAssertTrue(eventually(timeout: 4) { voicePath(ana, room) == "udp" }, "murmurd could not open our datagrams after the resync")
    }

    private func voicePath(_ peer: TestPeer, _ room: String) -> String { (try? property(peer, room, "VoicePath").string) ?? "" }

    /// The median level (dBFS) of Bob's 1 s tone out of the speaker, or nil when it never came out.
    private func toneLevel(_ bob: PyMumbleClient, _ pipewire: PipeWireSession) throws -> Double? {
        let recording = try TimedRecording(pipewire, to: directory.path + "/tone-\(Int.random(in: 0..<1_000_000)).wav")
        let sent = VoiceRig.monotonicSeconds()
        bob.send("tone 1")
        dispatchEvents(for: 1.6)
        let speaker = TimedTrack(try recording.stop(), .speaker)
        guard let start = speaker.firstLoud(from: sent, to: sent + 1.6, above: -50) else { return nil }
        let levels = speaker.levels(from: start + 0.2, to: start + 0.8).map(\.dBFS).sorted()
        return levels.isEmpty ? nil : levels[levels.count / 2]
    }

    func testTwoPeerVoicesInOneChannelSeeEachOtherTextAndMuteEachWithItsOwnIdentity() throws {
        let bob = try serverWithGames()
        let ana = try started.make("ana", listens: false)
        let ben = try started.make("ben", listens: false)
        var received: [(String, String)] = []
        let subscription = ben.client.connection.subscribe(interface: PeerVoiceBus.roomInterface, member: "MessageReceived") {
            received.append(($0.arguments[0].string!, $0.arguments[1].string!))
        }
        let roomA = try join(ana, url("ana"))
        let roomB = try join(ben, url("ben"))
        XCTAssertTrue(eventually(timeout: 5) { users(ana, roomA) == ["bob": false, "ben": false] }, "\(users(ana, roomA))")
        XCTAssertTrue(eventually(timeout: 5) { users(ben, roomB) == ["bob": false, "ana": false] }, "\(users(ben, roomB))")
        // To the channel, and to one user by name.
        _ = try callRoom(ana, roomA, "Send", [Variant("to all")])
        _ = try callRoom(ana, roomA, "SendTo", [Variant("ben"), Variant("just you")])
        XCTAssertTrue(eventually(timeout: 5) { received.count == 2 }, "\(received)")
        XCTAssertTrue(received.elementsEqual([("ana", "to all"), ("ana", "just you")], by: ==))
        try ana.client.call("ToggleMute")
        XCTAssertTrue(eventually(timeout: 5) { users(ben, roomB)["ana"] == true })
        withExtendedLifetime(subscription) {}

        // Each installation presents its own client certificate (Mumble's identity), kept in its
        // state directory (0600) and the same after a restart.
        let hashes = try XCTUnwrap(bob.certificateHashes())
        let anaHash = try XCTUnwrap(hashes["ana"]), benHash = try XCTUnwrap(hashes["ben"])
        XCTAssertEqual(anaHash.count, 40, "\(hashes)")
        XCTAssertEqual(benHash.count, 40, "\(hashes)")
        XCTAssertNotEqual(anaHash, benHash)
        let pem = ana.daemon.stateDirectory + "/room-identity.pem"
        let mode = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: pem)[.posixPermissions] as? Int)
        XCTAssertEqual(mode & 0o777, 0o600)
        XCTAssertNotNil(ana.stop())
        try ana.restart()
        _ = try join(ana, url("ana"))
        XCTAssertTrue(eventually(timeout: 5) { bob.certificateHashes(timeout: 1)?["ana"] == anaHash }, "\(String(describing: bob.certificateHashes()))")
    }

    /// peervoicectl against `peer`'s bus: its exit status and output (stdout and stderr).
    private func ctl(_ peer: TestPeer, _ arguments: [String], stdin: String? = nil) throws -> (status: Int32?, output: String) {
        let name = "ctl-\(Int.random(in: 0..<1_000_000))"
        var stdinPath: String?
        if let stdin {
            stdinPath = directory.path + "/\(name).in"
            try stdin.write(toFile: stdinPath!, atomically: true, encoding: .utf8)
        }
        let process = try ChildProcess(Binaries.directory + "/peervoicectl", arguments,
                                       environment: ["DBUS_SESSION_BUS_ADDRESS": peer.bus.address],
                                       logPath: directory.path + "/\(name).log", stdinPath: stdinPath)
        let status = process.wait(timeout: 40)
        if status == nil { process.kill() }
        return (status, process.log)
    }

    func testAWrongPasswordFailsWithTheServersReasonAndTheRightOneJoinsAlsoThroughPeervoicectl() throws {
        let bob = try serverWithGames(password: "open sesame")
        let ana = try started.make("ana", listens: false)
        do {
            _ = try join(ana, url("ana"), [("password", Variant("guess"))])
            XCTFail("JoinRoom with a wrong password succeeded")
        } catch {
            XCTAssertEqual(error.name, Self.rejected)
            XCTAssertTrue(error.message.contains("Invalid server password"), error.message)
        }
        XCTAssertEqual(try roomPaths(ana), [])
        XCTAssertFalse(ana.log.contains("guess"), "the password reached the log")
        let room = try join(ana, url("ana"), [("password", Variant("open sesame"))])
        XCTAssertEqual(state(ana, room), "connected")
        XCTAssertFalse(ana.log.contains("open sesame"), "the password reached the log")
        _ = try callRoom(ana, room, "Leave", [])

        // The same through peervoicectl, the password from standard input.
        let wrong = try ctl(ana, ["join", url("ana"), "--password-stdin"], stdin: "guess\n")
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssertTrue(wrong.output.contains("Invalid server password"), wrong.output)
        let joined = try ctl(ana, ["join", url("ana"), "--password-stdin"], stdin: "open sesame\n")
        XCTAssertEqual(joined.status, 0, joined.output)
        XCTAssertTrue(joined.output.contains("in /Games") && joined.output.contains(server.fingerprint), joined.output)
        let listed = try ctl(ana, ["rooms"])
        XCTAssertTrue(listed.output.contains("connected") && listed.output.contains("with bob"), listed.output)
        let number = String(listed.output.prefix { $0 != " " })
        XCTAssertEqual(try ctl(ana, ["room-send", number, "hi", "bob"]).status, 0)
        XCTAssertTrue(eventually(timeout: 5) { bob.texts.contains { $0 == ("ana", "hi bob") } }, "\(bob.texts)")
        XCTAssertEqual(try ctl(ana, ["leave", number]).status, 0)
        XCTAssertTrue(try ctl(ana, ["rooms"]).output.hasPrefix("no rooms"))
    }

    func testAServerRestartBringsTheRoomBackToItsChannel() throws {
        _ = try serverWithGames()
        let ana = try started.make("ana", listens: false)
        let room = try join(ana, url("ana"))
        clients = []  // pymumble would only notice the restart 20 s later
        server.stop()
        XCTAssertTrue(eventually(timeout: 10) { state(ana, room) == "reconnecting" }, state(ana, room))
        XCTAssertFalse(try property(ana, room, "Error").string!.isEmpty)
        let restarted = Date()
        try server.start()
        XCTAssertTrue(eventually(timeout: 20) { state(ana, room) == "connected" }, state(ana, room))
        print("RoomTests: back in the channel \(Int(Date().timeIntervalSince(restarted) * 1000)) ms after the server was up again")
        XCTAssertEqual(try property(ana, room, "Channel").string, "/Games")
        XCTAssertEqual(try property(ana, room, "Error").string, "")
    }

    /// An administrator's kick and ban end the room (`failed`, with the reason), no reconnecting;
    /// joining again after a ban fails: murmurd 1.3.4 ends the TLS handshake of a banned address
    /// without a word, so all PeerVoice can say is that (NotAvailable).
    func testAKickOrABanFailsTheRoomWithTheReason() throws {
        server = try MumbleServer(in: directory)
        let admin = try PyMumbleClient("SuperUser", server: server, in: directory, password: MumbleServer.superUserPassword)
        clients.append(admin)
        let ana = try started.make("ana", listens: false)
        let room = try join(ana, url("ana", ""))
        XCTAssertTrue(eventually(timeout: 5) { admin.usersInChannel(timeout: 1)?["ana"] != nil })
        admin.send("kick ana be nice")
        XCTAssertTrue(eventually(timeout: 5) { state(ana, room) == "failed" }, state(ana, room))
        let kicked = try property(ana, room, "Error").string!
        XCTAssertTrue(kicked.contains("kicked") && kicked.contains("be nice"), kicked)
        dispatchEvents(for: 1.5)
        XCTAssertEqual(state(ana, room), "failed", "a kicked room came back by itself")
        _ = try callRoom(ana, room, "Leave", [])

        let again = try join(ana, url("ana", ""))
        XCTAssertTrue(eventually(timeout: 5) { admin.usersInChannel(timeout: 1)?["ana"] != nil })
        admin.send("ban ana go away")
        XCTAssertTrue(eventually(timeout: 5) { state(ana, again) == "failed" }, state(ana, again))
        XCTAssertTrue(try property(ana, again, "Error").string!.contains("banned"))
        _ = try callRoom(ana, again, "Leave", [])
        do {
            _ = try join(ana, url("ana", ""))
            XCTFail("a banned PeerVoice joined again")
        } catch {
            XCTAssertEqual(error.name, PeerVoiceBus.errorPrefix + "NotAvailable")
            XCTAssertTrue(error.message.contains("127.0.0.1:\(server.port)") && error.message.contains("banned"), error.message)
        }
    }

    /// murmurd 1.3.4 ends a full server's TLS handshakes without a Reject: the error says what
    /// that may mean.
    func testAFullServerFailsTheJoinSayingWhatItMayMean() throws {
        server = try MumbleServer(in: directory, maxUsers: 1)
        clients.append(try PyMumbleClient("bob", server: server, in: directory))
        let ana = try started.make("ana", listens: false)
        do {
            _ = try join(ana, url("ana", ""))
            XCTFail("JoinRoom to a full server succeeded")
        } catch {
            XCTAssertEqual(error.name, PeerVoiceBus.errorPrefix + "NotAvailable")
            XCTAssertTrue(error.message.contains("TLS handshake") && error.message.contains("full"), error.message)
        }
        XCTAssertEqual(try roomPaths(ana), [])
    }

    func testAChangedCertificateIsRefusedNamingBothFingerprintsUntilAccepted() throws {
        server = try MumbleServer(in: directory)
        let ana = try started.make("ana", listens: false)
        let room = try join(ana, url("ana", ""))
        let first = server.fingerprint
        // The server comes back with a new certificate while the room is in it.
        server.stop()
        try server.start(freshCertificate: true)
        let second = server.fingerprint
        XCTAssertNotEqual(first, second)
        XCTAssertTrue(eventually(timeout: 20) { state(ana, room) == "failed" }, state(ana, room))
        let error = try property(ana, room, "Error").string!
        XCTAssertTrue(error.contains(first) && error.contains(second), error)
        _ = try callRoom(ana, room, "Leave", [])

        // Joining anew: Rejected naming both, until the person accepts the new one. The room
        // object stays, failed, with the certificate presented, for a client to show and compare.
        do {
            _ = try join(ana, url("ana", ""))
            XCTFail("JoinRoom to a server whose certificate changed succeeded")
        } catch {
            XCTAssertEqual(error.name, Self.rejected)
            XCTAssertTrue(error.message.contains(first) && error.message.contains(second), error.message)
        }
        let refused = try XCTUnwrap(try roomPaths(ana).last)
        XCTAssertNotEqual(refused, room)
        XCTAssertEqual(state(ana, refused), "failed")
        XCTAssertEqual(try property(ana, refused, "ServerFingerprint").string, second)
        _ = try callRoom(ana, refused, "Leave", [])
        XCTAssertEqual(try roomPaths(ana), [])
        let accepted = try join(ana, url("ana", ""), [("accept-certificate", Variant(second))])
        XCTAssertEqual(state(ana, accepted), "connected")
        XCTAssertEqual(try property(ana, accepted, "ServerFingerprint").string, second)
        // The new one is pinned now.
        _ = try callRoom(ana, accepted, "Leave", [])
        XCTAssertEqual(state(ana, try join(ana, url("ana", ""))), "connected")
    }

    /// Register: the server keeps the name for this installation's certificate. Before, the name
    /// is anyone's once we leave; after, another client under it (pymumble, with a certificate of
    /// its own) is refused with the server's reason, and we join under it again.
    func testRegisterKeepsTheNameForThisInstallationsCertificate() throws {
        server = try MumbleServer(in: directory)
        let ana = try started.make("ana", listens: false)
        var room = try join(ana, url("ana", ""))
        _ = try callRoom(ana, room, "Leave", [])
        let pem = directory.path + "/other-client.pem"
        let openssl = try ChildProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                                            "-nodes", "-keyout", pem, "-out", pem + ".crt", "-days", "1", "-subj", "/CN=other"],
                                       logPath: directory.path + "/openssl.log")
        XCTAssertEqual(openssl.wait(timeout: 20), 0, openssl.log)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: pem))
        handle.seekToEndOfFile()
        handle.write(try Data(contentsOf: URL(fileURLWithPath: pem + ".crt")))
        handle.closeFile()
        // Unregistered, the name is anyone's once ana has left.
        var other: PyMumbleClient? = try PyMumbleClient("ana", server: server, in: directory, certificate: pem)
        XCTAssertNotNil(other)
        other = nil  // it quits
        var rejoined: String?
        XCTAssertTrue(eventually(timeout: 10) { rejoined = try? join(ana, url("ana", "")); return rejoined != nil },
                      "ana could not join again after the other client left")
        room = try XCTUnwrap(rejoined)
        _ = try callRoom(ana, room, "Register", [])
        XCTAssertTrue(ana.log.contains("registered as user"), ana.log)
        // Again, through peervoicectl: already registered, done at once.
        let number = String(room.split(separator: "/").last!)
        let registered = try ctl(ana, ["room-register", number])
        XCTAssertEqual(registered.status, 0, registered.output)
        XCTAssertTrue(registered.output.contains("registered on mumble://ana@127.0.0.1:\(server.port)"), registered.output)
        _ = try callRoom(ana, room, "Leave", [])

        // Registered: another certificate under the name is refused, with the server's reason.
        XCTAssertThrowsError(try PyMumbleClient("ana", server: server, in: directory, certificate: pem)) { error in
            let reason = (error as? PyMumbleClient.Rejected)?.reason ?? "\(error)"
            XCTAssertTrue(reason.contains("existing user"), reason)
            print("RoomTests: another certificate under the registered name: refused, \"\(reason)\"")
        }
        // And ours joins again.
        room = try join(ana, url("ana", ""))
        XCTAssertEqual(state(ana, room), "connected")
        _ = try callRoom(ana, room, "Register", [])
    }

    /// A server whose access rules forbid self-registration (murmurd's default grants it to
    /// @all on the root channel: revoked in its database between two starts): Register fails
    /// with Rejected saying so, and the room stays in.
    func testARegistrationTheServerForbidsFailsSayingWhy() throws {
        server = try MumbleServer(in: directory)
        server.stop()
        let selfRegister = 0x80000  // ChanACL::SelfRegister
        let sql = "UPDATE acl SET grantpriv = 0, revokepriv = \(selfRegister) WHERE group_name = 'all' AND channel_id = 0"
        let python = try ChildProcess("/usr/bin/python3", ["-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                                                           + "assert c.execute(sys.argv[2]).rowcount == 1; c.commit()",
                                                           server.directory + "/murmur.sqlite", sql],
                                      logPath: directory.path + "/sqlite.log")
        XCTAssertEqual(python.wait(timeout: 20), 0, python.log)
        try server.start()
        let ana = try started.make("ana", listens: false)
        let room = try join(ana, url("ana", ""))
        do {
            _ = try callRoom(ana, room, "Register", [])
            XCTFail("Register succeeded on a server that forbids it")
        } catch {
            XCTAssertEqual(error.name, Self.rejected)
            XCTAssertTrue(error.message.contains("did not register ana") && error.message.contains("access rules"), error.message)
        }
        XCTAssertEqual(state(ana, room), "connected")
    }
}
