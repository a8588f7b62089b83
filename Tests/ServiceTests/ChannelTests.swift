import Foundation
import GIO
import Glibc
import PeerVoiceCore
import TestHarness
import XCTest

/// App channels between two real peervoiced processes on private buses, linked over TCP on
/// 127.0.0.1, with the apps in processes of their own: `tests/channels/app.py` (dbus-python, as
/// the README's example) and `peervoicectl open` / `listen`.
final class ChannelTests: XCTestCase {
    private static let rejected = "org.example.PeerVoice.Error.Rejected"
    private static let inUse = "org.example.PeerVoice.Error.InUse"
    private static let invalidArgument = "org.example.PeerVoice.Error.InvalidArgument"
    private static let packageDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    private static var app: String { packageDirectory + "/tests/channels/app.py" }

    private let started = StartedPeers()
    private var directory: TemporaryDirectory!
    private var processes: [ChildProcess] = []

    override func setUpWithError() throws {
        directory = try TemporaryDirectory("peervoice-channels")
    }

    override func tearDown() {
        let failed = (testRun?.totalFailureCount ?? 0) > 0
        for process in processes {
            if failed { print("----- \(process.executable) \(process.logPath) -----\n\(process.log.suffix(3_000))") }
            process.kill()
        }
        processes = []
        started.shutdown(printingLogs: failed)
        directory?.remove()
    }

    // MARK: Helpers

    /// Two paired, connected peers; returns them with B's id as A knows it.
    private func connectedPair(arguments: [String] = ["--verbose", "--no-auto-voice"]) throws -> (a: TestPeer, b: TestPeer) {
        let a = try started.make("alpha", arguments: arguments)
        let b = try started.make("bravo", arguments: arguments)
        let pairing = a.pair(with: b)
        XCTAssertEqual(try pairing.connect.get()[0].string, b.id)
        XCTAssertNotNil(b.waitForState("connected", of: a.id), b.log)
        return (a, b)
    }

    private func path(_ name: String) -> String { directory.path + "/" + name }

    /// Starts `tests/channels/app.py` with `arguments` on `peer`'s bus; its output goes to a log.
    @discardableResult
    private func app(_ peer: TestPeer, _ arguments: [String], name: String) throws -> ChildProcess {
        let process = try ChildProcess("/usr/bin/python3", [Self.app] + arguments,
                                       environment: ["DBUS_SESSION_BUS_ADDRESS": peer.bus.address],
                                       logPath: path("\(name).log"))
        processes.append(process)
        return process
    }

    /// An app on `peer` that registered `channel` and handles its streams with `action`.
    @discardableResult
    private func listener(_ peer: TestPeer, _ channel: String, _ action: [String], name: String = "listener") throws -> ChildProcess {
        let process = try app(peer, ["listen", channel] + action, name: name)
        XCTAssertTrue(eventually(timeout: 15) { process.log.contains("registered\n") || !process.isRunning }, process.log)
        XCTAssertTrue(process.isRunning, process.log)
        return process
    }

    /// A shell command on `peer`'s bus (peervoicectl and the tools, with redirections).
    private func shell(_ peer: TestPeer, _ command: String, name: String) throws -> ChildProcess {
        let process = try ChildProcess("/bin/sh", ["-c", command],
                                       environment: ["DBUS_SESSION_BUS_ADDRESS": peer.bus.address,
                                                     "PATH": Binaries.directory + ":/usr/bin:/bin"],
                                       logPath: path("\(name).log"))
        processes.append(process)
        return process
    }

    private func read(_ name: String) -> String { (try? String(contentsOfFile: path(name), encoding: .utf8)) ?? "" }

    private func randomFile(_ name: String, bytes: Int) throws {
        var generator = SystemRandomNumberGenerator()
        var data = [UInt8](repeating: 0, count: bytes)
        data.withUnsafeMutableBytes { buffer in
            let words = buffer.bindMemory(to: UInt64.self)
            for index in words.indices { words[index] = generator.next() }
        }
        try Data(data).write(to: URL(fileURLWithPath: path(name)))
    }

    private func sha256(_ name: String) throws -> String {
        let process = try ChildProcess("sha256sum", [path(name)], logPath: path("sha-\(name).log"))
        XCTAssertEqual(process.wait(timeout: 60), 0)
        return String(process.log.prefix(64))
    }

    private func openStream(_ peer: TestPeer, to other: String, channel: String, mode: String = "stream") -> Result<Variant, BusError> {
        peer.client.callRecordingOrder("OpenStream", [Variant(other), Variant(channel), Variant(dictionary: [("mode", Variant(mode))])]).result
    }

    // MARK: Data

    func testSixtyFourMiBEachWayAtOnceArriveWhole() throws {
        let (a, b) = try connectedPair()
        try randomFile("a.bin", bytes: 64 << 20)
        try randomFile("b.bin", bytes: 64 << 20)
        // B's command sends its file while it hashes what arrives; A's bridges its file out and what comes back to a file.
        let listen = try shell(b, "exec peervoicectl listen org.example.Both --once -- sh -c 'cat \(path("b.bin")) & sha256sum > \(path("b-got.sha")); wait'",
                               name: "listen")
        XCTAssertTrue(eventually(timeout: 10) { b.log.contains("registered org.example.Both") }, b.log)
        let started = Date()
        let open = try shell(a, "exec peervoicectl open \(b.id) org.example.Both < \(path("a.bin")) > \(path("a-got.bin"))", name: "open")
        XCTAssertEqual(open.wait(timeout: 120), 0, open.log)
        print("64 MiB each way at once: \(String(format: "%.2f", Date().timeIntervalSince(started))) s (debug build)")
        XCTAssertEqual(listen.wait(timeout: 30), 0, listen.log)
        XCTAssertEqual(try sha256("a-got.bin"), try sha256("b.bin"), "B's bytes arrived at A whole")
        XCTAssertEqual(String(read("b-got.sha").prefix(64)), try sha256("a.bin"), "A's bytes arrived at B whole")
    }

    func testMessagesKeepTheirBoundaries() throws {
        let (a, b) = try connectedPair()
        try listener(b, "org.example.Messages", ["record-messages", path("received")])
        let sender = try app(a, ["open", b.id, "org.example.Messages", "messages", "send-messages", "29", "10000", path("sent")], name: "sender")
        XCTAssertEqual(sender.wait(timeout: 240), 0, sender.log)
        XCTAssertTrue(eventually(timeout: 30) { read("received").hasSuffix("end\n") }, String(read("received").suffix(200)))
        let sent = read("sent").split(separator: "\n")
        let received = read("received").split(separator: "\n")
        XCTAssertEqual(sent.count, 10_001)
        XCTAssertEqual(received.count, sent.count, "every message arrived as one message")
        XCTAssertTrue(zip(sent, received).allSatisfy { $0 == $1 }, "sizes and contents, in order")
        XCTAssertTrue(Set(sent.dropLast().map { $0.split(separator: " ")[0] }).count > 5_000, "sizes vary")
    }

    func testPeervoicectlCarriesLinesAsMessages() throws {
        let (a, b) = try connectedPair()
        let listen = try shell(b, "exec peervoicectl listen org.example.Chat --once > \(path("chat"))", name: "listen")
        XCTAssertTrue(eventually(timeout: 10) { b.log.contains("registered org.example.Chat") }, listen.log)
        try "one\ntwo words\n\nthree".write(toFile: path("lines"), atomically: true, encoding: .utf8)
        let open = try shell(a, "exec peervoicectl open \(b.id) org.example.Chat --mode messages < \(path("lines"))", name: "open")
        XCTAssertEqual(open.wait(timeout: 20), 0, open.log)
        XCTAssertEqual(listen.wait(timeout: 10), 0, listen.log)
        XCTAssertEqual(read("chat"), "one\ntwo words\nthree\n", "a line is a message (an empty line is none), a message a line")
    }

    func testDatagramsArriveMostlyAndNeverBlockTheSender() throws {
        let (a, b) = try connectedPair()
        try listener(b, "org.example.Game", ["count-datagrams", path("count")])
        let sender = try app(a, ["open", b.id, "org.example.Game", "datagrams", "send-datagrams", "2000", "500", path("sent")], name: "sender")
        XCTAssertEqual(sender.wait(timeout: 60), 0, sender.log)
        XCTAssertTrue(eventually(timeout: 5) { (Int(read("count")) ?? 0) >= 1_800 }, "arrived: \(read("count")) of 2000")
        let fields = read("sent").split(separator: " ")
        let slowestMs = Double(fields.last ?? "") ?? .infinity
        XCTAssertLessThan(slowestMs, 100, "the slowest send() took \(slowestMs) ms")
        // Between IP peers they take the UDP path, both ways announced.
        XCTAssertTrue(a.log.contains("datagrams with bravo") && a.log.contains("over UDP"), a.log)
        XCTAssertTrue(b.log.contains("datagrams with alpha") && b.log.contains("over UDP"), b.log)
    }

    // MARK: The README

    /// The README's two Python apps, taken from it as written, between two real peers.
    func testTheReadmeExampleWorksAsWritten() throws {
        let (a, b) = try connectedPair()
        let readme = try String(contentsOfFile: Self.packageDirectory + "/README.md", encoding: .utf8)
        let blocks = readme.components(separatedBy: "```python\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
        let bob = try XCTUnwrap(blocks.first { $0.contains("# chess-bob.py") }, "the README has chess-bob.py")
        let alice = try XCTUnwrap(blocks.first { $0.contains("# chess-alice.py") }, "the README has chess-alice.py")
        try bob.write(toFile: path("chess-bob.py"), atomically: true, encoding: .utf8)
        try alice.write(toFile: path("chess-alice.py"), atomically: true, encoding: .utf8)
        let bobProcess = try ChildProcess("/usr/bin/python3", [path("chess-bob.py")], environment: ["DBUS_SESSION_BUS_ADDRESS": b.bus.address],
                                          logPath: path("bob.log"))
        processes.append(bobProcess)
        XCTAssertTrue(eventually(timeout: 15) { bobProcess.log.contains("waiting for games") }, bobProcess.log)
        let aliceProcess = try ChildProcess("/usr/bin/python3", [path("chess-alice.py"), b.id],
                                            environment: ["DBUS_SESSION_BUS_ADDRESS": a.bus.address], logPath: path("alice.log"))
        processes.append(aliceProcess)
        XCTAssertEqual(aliceProcess.wait(timeout: 20), 0, aliceProcess.log)
        XCTAssertEqual(aliceProcess.log, "bob answers e7e5\n")
        XCTAssertTrue(eventually(timeout: 5) { bobProcess.log.contains("alpha plays e2e4\n") }, bobProcess.log)
    }

    // MARK: Opening and owners

    func testAChannelNobodyRegisteredIsRejectedAtOnceInWords() throws {
        let (a, b) = try connectedPair()
        let started = Date()
        let result = openStream(a, to: b.id, channel: "org.example.Chess")
        XCTAssertLessThan(Date().timeIntervalSince(started), 1, "answered within a round trip, not a timeout")
        guard case .failure(let error) = result else { return XCTFail("OpenStream to an unregistered channel succeeded") }
        XCTAssertEqual(error.name, Self.rejected)
        XCTAssertTrue(error.message.contains("no app on bravo") && error.message.contains("org.example.Chess"), error.message)
        // An app whose handler refuses: Rejected too, saying so.
        try listener(b, "org.example.Chess", ["refuse"])
        guard case .failure(let refused) = openStream(a, to: b.id, channel: "org.example.Chess") else { return XCTFail("a refused stream opened") }
        XCTAssertEqual(refused.name, Self.rejected)
        XCTAssertTrue(refused.message.contains("refused"), refused.message)
    }

    func testAnotherConnectionCannotTakeARegisteredChannelAndNeverGetsItsStreams() throws {
        let (a, b) = try connectedPair()
        let owner = try listener(b, "org.example.Chess", ["hold", path("held")], name: "owner")
        // A second client on B's bus: its registration is refused, and streams keep going to the owner.
        let other = try APIClient(address: b.bus.address)
        let handler = try other.connection.registerObject(
            path: "/org/example/Other", introspectionXML: try String(contentsOfFile: Self.packageDirectory + "/dbus/org.example.PeerVoice.ChannelHandler.xml", encoding: .utf8),
            interface: "org.example.PeerVoice.ChannelHandler", methods: { call in
                XCTFail("the refused client got \(call.method)")
                call.reply()
            }, properties: { _ in nil })
        do {
            try other.call("RegisterChannel", [Variant("org.example.Chess"), Variant(objectPath: "/org/example/Other"), Variant(dictionary: [])])
            XCTFail("a second registration of org.example.Chess succeeded")
        } catch {
            XCTAssertEqual(error.name, Self.inUse)
        }
        XCTAssertEqual(other.errorName("UnregisterChannel", [Variant("org.example.Chess")]), Self.invalidArgument,
                       "only the owner unregisters")
        let opened = try app(a, ["open", b.id, "org.example.Chess", "stream", "hold", path("held-a")], name: "opener")
        XCTAssertTrue(eventually(timeout: 10) { owner.log.contains("stream \(a.id) stream alpha") }, owner.log)
        // The opener prints once OpenStream has answered, which may be after the owner printed.
        XCTAssertTrue(eventually(timeout: 10) { opened.log.contains("opened") }, opened.log)
        dispatchEvents(for: 0.2)
        withExtendedLifetime(handler) {}
    }

    func testTheOwnerLeavingTheBusUnregistersItsChannels() throws {
        let (a, b) = try connectedPair()
        let owner = try listener(b, "org.example.Chess", ["hold", path("held")])
        owner.kill()
        XCTAssertTrue(eventually(timeout: 5) { b.log.contains("left the bus: org.example.Chess unregistered") }, b.log)
        guard case .failure(let error) = openStream(a, to: b.id, channel: "org.example.Chess") else { return XCTFail("opened after its owner left") }
        XCTAssertEqual(error.name, Self.rejected)
        // The name is free again.
        try listener(b, "org.example.Chess", ["hold", path("held")], name: "next-owner")
        XCTAssertNoThrow(try openStream(a, to: b.id, channel: "org.example.Chess").get())
    }

    func testOpenStreamChecksItsArgumentsThenThePeer() throws {
        let a = try started.make("alpha", arguments: ["--verbose", "--no-auto-voice"])
        let cases: [(peer: String, channel: String, options: [(String, Variant)], error: String)] = [
            ("pv:aaaaaaaaaaaaaaaaaaaaaaaaaa", "chess", [], Self.invalidArgument),
            ("pv:aaaaaaaaaaaaaaaaaaaaaaaaaa", "org.example.Chess", [("mode", Variant("video"))], Self.invalidArgument),
            ("pv:aaaaaaaaaaaaaaaaaaaaaaaaaa", "org.example.Chess", [("speed", Variant(true))], Self.invalidArgument),
            ("pv:aaaaaaaaaaaaaaaaaaaaaaaaaa", "org.example.Chess", [], "org.example.PeerVoice.Error.UnknownPeer"),
            ("not a peer", "org.example.Chess", [], Self.invalidArgument),
        ]
        for (peer, channel, options, expected) in cases {
            let name = a.client.errorName("OpenStream", [Variant(peer), Variant(channel), Variant(dictionary: options)])
            XCTAssertEqual(name, expected, "\(peer) \(channel) \(options.map(\.0))")
        }
        XCTAssertEqual(a.client.errorName("RegisterChannel", [Variant("nodot"), Variant(objectPath: "/x"), Variant(dictionary: [])]),
                       Self.invalidArgument)
        XCTAssertEqual(a.client.errorName("RegisterChannel", [Variant("org.example.X"), Variant(objectPath: "/x"),
                                                              Variant(dictionary: [("mode", Variant("stream"))])]), Self.invalidArgument)
    }

    // MARK: A hand-driven peer

    /// A peer built from the core, paired with B: what reaches the wire.
    private func pairedFakePeer(_ b: TestPeer, channels: Bool) throws -> (link: SecureLink, id: String) {
        try SecureLink.pairedFake(with: b, capabilities: channels ? [.text, .channels] : [.text])
    }

    func testAPeerWithoutChannelsIsNotAvailableAndItsChannelFramesEndTheLink() throws {
        let b = try started.make("bravo", arguments: ["--verbose", "--no-auto-voice"])
        let (link, id) = try pairedFakePeer(b, channels: false)
        defer { link.close() }
        do {
            try b.client.call("OpenStream", [Variant(id), Variant("org.example.Chess"), Variant(dictionary: [])])
            XCTFail("OpenStream to a peer without channels succeeded")
        } catch {
            XCTAssertEqual(error.name, "org.example.PeerVoice.Error.NotAvailable")
            XCTAssertTrue(error.message.contains("mallory") && error.message.contains("without app channels"), error.message)
        }
        // It never announced channels, so its channel frames break the protocol.
        try link.send(body: ChannelFrame.open(StreamID(rawValue: 1), mode: .stream, window: 65_536, datagramPort: 0,
                                              channel: try ChannelName("org.example.Chess")).encodedBody())
        let end = link.waitForEnd(timeout: 5)
        XCTAssertTrue(end.ended)
        XCTAssertEqual(end.frames.last, .goodbye(.protocolError))
    }

    /// A paired peer with channels (it dialled: its streams are odd) that breaks the rules: B says
    /// GOODBYE with "protocol error" and ends the link, whatever its app does.
    func testChannelFramesACorrectPeerNeverSendsEndTheLink() throws {
        let b = try started.make("bravo", arguments: ["--verbose", "--no-auto-voice"])
        try listener(b, "org.example.Chess", ["stall", "60", path("stalled")])
        let chess = try ChannelName("org.example.Chess")
        let cases: [(name: String, run: (SecureLink) throws -> Void, logged: String)] = [
            ("an OPEN with B's own parity", { link in
                try link.send(body: ChannelFrame.open(StreamID(rawValue: 2), mode: .stream, window: 65_536, datagramPort: 0, channel: chess).encodedBody())
            }, "CHANNEL_OPEN for stream 2"),
            ("DATA beyond the credit B gave, its app not reading", { link in
                try link.send(body: ChannelFrame.open(StreamID(rawValue: 1), mode: .stream, window: 65_536, datagramPort: 0, channel: chess).encodedBody())
                XCTAssertEqual(try link.nextChannelFrame(), .accept(StreamID(rawValue: 1), window: 262_144, datagramPort: 0))
                // Credit comes back only as B's app's socket takes the bytes; it stops taking them at some point.
                for _ in 0..<1_024 {
                    guard (try? link.send(body: ChannelFrame.data(StreamID(rawValue: 1), endOfMessage: false, sentAtUs: 0,
                                                                 payload: [UInt8](repeating: 0x42, count: 65_536)).encodedBody())) != nil else { break }
                }
            }, "bytes of CHANNEL_DATA on stream 1 with a window of"),
        ]
        for (name, run, logged) in cases {
            let (link, _) = try pairedFakePeer(b, channels: true)
            defer { link.close() }
            try run(link)
            let end = link.waitForEnd(timeout: 10)
            XCTAssertTrue(end.ended, name)
            XCTAssertEqual(end.frames.last, .goodbye(.protocolError), name)
            XCTAssertTrue(eventually(timeout: 5) { b.log.contains(logged) }, "\(name): \(b.log.suffix(1_500))")
        }
    }

    // MARK: Many streams, slow readers, ends

    func testSixtyFourStreamsAtOnce() throws {
        let (a, b) = try connectedPair()
        let listen = try shell(b, "exec peervoicectl listen org.example.Many -- sh -c 'cat > \(path("got"))-$$; echo done'", name: "listen")
        XCTAssertTrue(eventually(timeout: 10) { b.log.contains("registered org.example.Many") }, listen.log)
        try randomFile("one.bin", bytes: 1 << 20)
        let opens = try (0..<64).map { index in
            try shell(a, "exec peervoicectl open \(b.id) org.example.Many < \(path("one.bin")) > /dev/null", name: "open-\(index)")
        }
        for (index, open) in opens.enumerated() { XCTAssertEqual(open.wait(timeout: 120), 0, "stream \(index): \(open.log)") }
        let received = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("got-") }
        XCTAssertEqual(received.count, 64)
        let expected = try sha256("one.bin")
        for file in received { XCTAssertEqual(try sha256(file), expected, file) }
    }

    func testAStoppedReaderHoldsItsStreamOnlyAndTheServiceBuffersLittle() throws {
        let (a, b) = try connectedPair()
        try listener(b, "org.example.Slow", ["stall", "10", path("slow")], name: "slow")
        let baselineB = residentKiB(of: b.daemon.process.pid), baselineA = residentKiB(of: a.daemon.process.pid)
        let writer = try app(a, ["open", b.id, "org.example.Slow", "stream", "write", "\(512 << 20)", path("written")], name: "writer")
        XCTAssertTrue(eventually(timeout: 10) { writer.log.contains("opened") }, writer.log)
        // While B's app reads nothing: another stream flows, text goes both ways, the bus answers.
        let listen = try shell(b, "exec peervoicectl listen org.example.Fast --once > \(path("fast"))", name: "fast-listen")
        XCTAssertTrue(eventually(timeout: 10) { b.log.contains("registered org.example.Fast") }, listen.log)
        try randomFile("fast.bin", bytes: 8 << 20)
        let fast = try shell(a, "exec peervoicectl open \(b.id) org.example.Fast < \(path("fast.bin"))", name: "fast-open")
        XCTAssertEqual(fast.wait(timeout: 8), 0, "a second stream on the same link is not held up: \(fast.log)")
        XCTAssertEqual(listen.wait(timeout: 5), 0)
        XCTAssertEqual(try sha256("fast"), try sha256("fast.bin"))
        let mark = b.mark
        let messageID = try a.client.call("Send", [Variant(b.id), Variant("still here")])[0].string!
        XCTAssertNotNil(b.client.waitForSignal("MessageReceived", after: mark, timeout: 3) { $0.string(1) == messageID },
                        "text arrives while the stream is stopped")
        var peakB = 0, peakA = 0, slowestCallMs = 0.0
        // Through the rest of the stall and the catching up after it.
        while read("slow").isEmpty && writer.isRunning {
            peakB = max(peakB, residentKiB(of: b.daemon.process.pid))
            peakA = max(peakA, residentKiB(of: a.daemon.process.pid))
            let before = Date()
            _ = try b.client.property("Name")
            _ = try a.client.property("Name")
            slowestCallMs = max(slowestCallMs, Date().timeIntervalSince(before) * 1000)
            usleep(50_000)
        }
        XCTAssertEqual(writer.wait(timeout: 120), 0, writer.log)
        XCTAssertTrue(eventually(timeout: 120) { !read("slow").isEmpty }, "the slow reader got to the end")
        XCTAssertEqual(read("slow"), read("written"), "all 512 MiB arrived, in order")
        print("RSS growth while a reader stalled: B \(peakB - baselineB) KiB, A \(peakA - baselineA) KiB; slowest bus call \(Int(slowestCallMs)) ms")
        XCTAssertLessThan(peakB - baselineB, 8 << 10, "B's service buffers the stopped stream's window, not the writer's 512 MiB")
        XCTAssertLessThan(peakA - baselineA, 8 << 10, "A's service reads no faster than B takes")
        XCTAssertLessThan(slowestCallMs, 500, "the bus is answered while the stream runs")
    }

    func testAPeerWhoseServiceIsKilledEndsTheStreamAbruptlyNotWithEndOfFile() throws {
        let (a, b) = try connectedPair()
        try listener(b, "org.example.Chess", ["hold", path("held-b")])
        let mark = a.mark
        let holder = try app(a, ["open", b.id, "org.example.Chess", "stream", "hold", path("held-a")], name: "holder")
        XCTAssertTrue(eventually(timeout: 10) { holder.log.contains("opened") }, holder.log)
        // peervoicectl bridging a stream says so and fails, rather than ending as if all was sent.
        let bridge = try shell(a, "exec peervoicectl open \(b.id) org.example.Chess < /dev/zero", name: "bridge")
        XCTAssertTrue(eventually(timeout: 10) { a.log.components(separatedBy: "accepted stream").count == 3 }, a.log)
        // The opener's own client sees StreamClosed only if it owns the stream: watch A's daemon log and the app.
        b.kill()
        XCTAssertTrue(eventually(timeout: 10) { !read("held-a").isEmpty }, "the app learns of the end within the silence limit")
        XCTAssertEqual(read("held-a"), "reset Connection reset by peer", "an abrupt end, not end of file")
        XCTAssertEqual(bridge.wait(timeout: 10), 1, bridge.log)
        XCTAssertTrue(bridge.log.contains("the stream ended abruptly"), bridge.log)
        XCTAssertTrue(a.log.contains("channels:") || a.states(of: b.id, after: mark).contains("disconnected"))
    }
}
