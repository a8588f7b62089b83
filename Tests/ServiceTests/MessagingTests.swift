import Foundation
import GIO
import Glibc
import PeerVoiceCore
import TestHarness
import XCTest

/// Text messages between real peervoiced processes, each on its own private bus, linked over TCP
/// on 127.0.0.1 with protocol version 6 (key exchange, pairing confirmed on both sides, sealed
/// frames): connect, send both ways, history, bursts, broadcast, crashes and restarts,
/// Disconnect, RemovePeer, and hostile bytes on the listen port. SecurityTests covers the
/// security properties themselves.
final class MessagingTests: XCTestCase {
    private static let failed = "org.example.PeerVoice.Error.Failed"
    private static let unknownPeer = "org.example.PeerVoice.Error.UnknownPeer"
    private static let tooLarge = "org.example.PeerVoice.Error.TooLarge"
    /// PVLK, versions 6 to 11.
    private static let preamble: [UInt8] = [0x50, 0x56, 0x4C, 0x4B, 0x00, 0x06, 0x00, 0x0B]

    private let started = StartedPeers()

    override func tearDown() {
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
    }

    // MARK: Connect and ListPeers

    func testConnectRepliesOnceConnectedAndBothSidesListEachOther() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        XCTAssertEqual(try a.client.call("ListPeers")[0].count, 0)
        let markA = a.mark, markB = b.mark

        // First contact: both are asked to compare the same code, both accept.
        let pairing = try pair(a, b)
        // The reply, B's id, comes once the link is up: A announced 'connected' before replying.
        XCTAssertEqual(try pairing.connect.get()[0].string, b.id)
        let connectedA = try XCTUnwrap(a.waitForState("connected", of: b.id, after: markA, timeout: 1))
        XCTAssertLessThan(connectedA, pairing.signalsBeforeReply, "Connect replied before PeerStateChanged 'connected'")
        // The address is dialled under its own name; once its key is known, PeerIdentified says
        // whose it is, before any signal under the id.
        XCTAssertEqual(a.states(of: b.address, after: markA), ["connecting"])
        XCTAssertEqual(a.states(of: b.id, after: markA), ["pairing", "connected"])
        let identified = try XCTUnwrap(a.client.signals.firstIndex { $0.member == "PeerIdentified" })
        XCTAssertEqual(a.client.signals[identified].string(0), b.address)
        XCTAssertEqual(a.client.signals[identified].string(1), b.id)
        XCTAssertLessThan(identified, try XCTUnwrap(a.client.signals.firstIndex { $0.string(0) == b.id }))
        // The prompt came with the 'pairing' state, before 'connected'.
        let prompt = try XCTUnwrap(a.client.signals.firstIndex { $0.member == "PairingRequested" })
        XCTAssertLessThan(prompt, connectedA)
        XCTAssertEqual(pairing.dialler?.string(1), "bob", "PairingRequested names the peer")
        XCTAssertEqual(pairing.dialled?.string(1), "alice")

        // B names A by A's key, whatever port A's connection came from.
        XCTAssertNotNil(b.waitForState("connected", of: a.id, after: markB, timeout: 10), b.log)
        let stateSignals = b.client.signals("PeerStateChanged")
        XCTAssertEqual(Set(stateSignals.map { $0.string(0) }), [a.id])
        XCTAssertEqual(b.states(of: a.id, after: markB), ["pairing", "connected"])

        XCTAssertEqual(try peerRows(a), [[b.id, "bob", "ip", "connected"]])
        XCTAssertEqual(try peerRows(b), [[a.id, "alice", "ip", "connected"]])

        // Connect to a connected peer succeeds at once and changes nothing.
        let again = Date()
        try a.client.call("Connect", [Variant(b.id)], timeout: .seconds(30))
        XCTAssertLessThan(Date().timeIntervalSince(again), 2)
        dispatchEvents(for: 0.2)
        XCTAssertEqual(a.states(of: b.id, after: markA), ["pairing", "connected"])
        XCTAssertEqual(a.pairingRequests().count, 1)
        XCTAssertEqual(b.pairingRequests().count, 1)
    }

    func testConnectToAPortWhereNothingListensFailsReadably() throws {
        let a = try makePeer("alice")
        let port = try freeTCPPort()
        let started = Date()
        do {
            try a.client.call("Connect", [Variant("ip:127.0.0.1:\(port)")], timeout: .seconds(30))
            XCTFail("Connect to a closed port succeeded")
        } catch {
            XCTAssertEqual(error.name, Self.failed, error.message)
            XCTAssertTrue(error.message.contains("127.0.0.1:\(port)"), error.message)
            XCTAssertTrue(error.message.lowercased().contains("refused"), error.message)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        XCTAssertTrue(a.isRunning)
    }

    // MARK: Sending

    func testMessagesBothWaysArriveExactlyAndHistoryRecordsThem() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)
        let before = nowMs()

        let textsA = ["Hello, Bob!", "👋🏽 emoji 🎉 family 👨‍👩‍👧‍👦 flag 🇫🇷", "你好，世界 — こんにちは 안녕하세요", "Cafe\u{301} vs Caf\u{E9}"]
        let textsB = ["Hi Alice.", "🚀🔥💬 ✔︎", "漢字テスト：中文、日本語、한국어。", "tab\tnewline\nend"]
        var expected: [(id: String, fromA: Bool, text: String)] = []
        for (textA, textB) in zip(textsA, textsB) {
            expected.append((try sendAndConfirm(a, b, textA), true, textA))
            expected.append((try sendAndConfirm(b, a, textB), false, textB))
        }
        // The largest text there is: 65536 bytes of mostly three-byte characters.
        let largest = String(repeating: "界", count: 21_845) + "a"
        XCTAssertEqual(largest.utf8.count, 65_536)
        expected.append((try sendAndConfirm(a, b, largest), true, largest))
        let after = nowMs()

        // Too large is refused and stores nothing.
        XCTAssertEqual(a.client.errorName("Send", [Variant(b.id), Variant(String(repeating: "a", count: 65_537))]),
                       Self.tooLarge)
        XCTAssertEqual(a.client.errorName("Send", [Variant(b.id), Variant(String(repeating: "€", count: 21_845) + "ab")]),
                       Self.tooLarge, "65537 bytes of multi-byte text")

        // Every message was announced exactly once on each side.
        dispatchEvents(for: 0.3)
        for message in expected {
            let (sender, receiver) = message.fromA ? (a, b) : (b, a)
            XCTAssertEqual(receiver.client.signals("MessageReceived").filter { $0.string(1) == message.id }.count, 1)
            XCTAssertEqual(sender.client.signals("MessageDelivered").filter { $0.string(1) == message.id }.count, 1)
        }
        XCTAssertTrue(a.client.signals("MessageFailed").isEmpty)
        XCTAssertTrue(b.client.signals("MessageFailed").isEmpty)

        // History: both directions, oldest first, status by side, local unix ms near now.
        let historyA = try history(a, of: b.id, max: 100)
        let historyB = try history(b, of: a.id, max: 100)
        XCTAssertEqual(historyA.map(\.id), expected.map(\.id))
        XCTAssertEqual(historyB.map(\.id), expected.map(\.id))
        XCTAssertEqual(historyA.map(\.status), expected.map { $0.fromA ? "delivered" : "received" })
        XCTAssertEqual(historyB.map(\.status), expected.map { $0.fromA ? "received" : "delivered" })
        XCTAssertEqual(historyA.map { Array($0.text.utf8) }, expected.map { Array($0.text.utf8) })
        XCTAssertEqual(historyB.map { Array($0.text.utf8) }, expected.map { Array($0.text.utf8) })
        for rows in [historyA, historyB] {
            for row in rows {
                XCTAssertGreaterThanOrEqual(row.timeMs, before - 2_000, "time \(row.timeMs) is not near now (\(before))")
                XCTAssertLessThanOrEqual(row.timeMs, after + 2_000, "time \(row.timeMs) is not near now (\(after))")
            }
            XCTAssertEqual(rows.map(\.timeMs), rows.map(\.timeMs).sorted(), "not oldest first")
        }

        // max keeps the newest.
        XCTAssertEqual(try history(a, of: b.id, max: 3).map(\.id), expected.suffix(3).map(\.id))
        XCTAssertEqual(try history(b, of: a.id, max: 1).map(\.id), [expected.last!.id])
        XCTAssertEqual(try history(a, of: b.id, max: 0).count, 0)
        XCTAssertEqual(try a.client.call("History", [Variant(b.id), Variant(UInt32(5))]).typeString, "(a(ssts))")
    }

    func testThousandMessagesArriveInOrderExactlyOnce() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)
        let logA = MessageLog(a), logB = MessageLog(b)

        let texts = (0..<1000).map { "message \($0) of 1000 ✉️" }
        var ids: [String] = []
        let started = Date()
        for text in texts {
            ids.append(try send(a, to: b.id, text))
        }
        let sendSeconds = Date().timeIntervalSince(started)
        let done = eventually(timeout: 45) {
            logA.update()
            logB.update()
            return logB.received.count >= 1000 && logA.delivered.count >= 1000
        }
        print("1000 sends took \(String(format: "%.2f", sendSeconds)) s; all delivered after \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
        XCTAssertTrue(done, "received \(logB.received.count), delivered \(logA.delivered.count)")
        dispatchEvents(for: 0.5)
        logA.update()
        logB.update()

        XCTAssertEqual(Set(ids).count, 1000, "message ids are not unique")
        XCTAssertEqual(logB.received.count, 1000, "MessageReceived count")
        XCTAssertNil(firstDifference(logB.received.map(\.id), ids), "MessageReceived order")
        XCTAssertNil(firstDifference(logB.received.map(\.text), texts), "MessageReceived texts")
        XCTAssertEqual(Set(logB.received.map(\.peer)), [a.id])
        XCTAssertEqual(logA.delivered.count, 1000, "MessageDelivered count")
        XCTAssertNil(firstDifference(logA.delivered.map(\.id), ids), "MessageDelivered order")
        XCTAssertEqual(Set(logA.delivered.map(\.peer)), [b.id])

        let historyB = try history(b, of: a.id, max: 1000)
        XCTAssertNil(firstDifference(historyB.map(\.id), ids), "History on the receiver")
        XCTAssertEqual(Set(historyB.map(\.status)), ["received"])
        let historyA = try history(a, of: b.id, max: 1000)
        XCTAssertNil(firstDifference(historyA.map(\.id), ids), "History on the sender")
        XCTAssertEqual(Set(historyA.map(\.status)), ["delivered"])
    }

    func testSendToEveryoneGoesToEachConnectedPeerWithOneID() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        let c = try makePeer("carol")
        try pair(a, b)
        try pair(a, c)
        let markA = a.mark, markB = b.mark, markC = c.mark

        let text = "to everyone 📣 みなさん"
        let id = try send(a, to: "", text)
        for receiver in [b, c] {
            let index = try XCTUnwrap(receiver.client.waitForSignalIndex("MessageReceived", after: receiver === b ? markB : markC,
                                                                         timeout: 10) { $0.string(1) == id },
                                      "\(receiver.name) did not receive the broadcast")
            let signal = receiver.client.signals[index]
            XCTAssertEqual(signal.string(0), a.id)
            XCTAssertEqual(Array(signal.string(2).utf8), Array(text.utf8))
        }
        XCTAssertTrue(eventually(timeout: 10) {
            a.client.signals[markA...].filter { $0.member == "MessageDelivered" && $0.string(1) == id }.count >= 2
        })
        dispatchEvents(for: 0.3)
        let deliveredTo = a.client.signals[markA...].filter { $0.member == "MessageDelivered" && $0.string(1) == id }.map { $0.string(0) }
        XCTAssertEqual(deliveredTo.sorted(), [b.id, c.id].sorted())
        XCTAssertEqual(try history(a, of: b.id, max: 10).map { [$0.id, $0.status] }, [[id, "delivered"]])
        XCTAssertEqual(try history(a, of: c.id, max: 10).map { [$0.id, $0.status] }, [[id, "delivered"]])

        // Only connected peers: after Disconnect(C), a broadcast reaches B alone.
        let beforeDisconnect = a.mark
        try a.client.call("Disconnect", [Variant(c.id)])
        XCTAssertNotNil(a.waitForState("disconnected", of: c.id, after: beforeDisconnect))
        let second = try send(a, to: "", "only Bob is here")
        XCTAssertNotNil(b.client.waitForSignalIndex("MessageReceived", after: markB, timeout: 10) { $0.string(1) == second })
        XCTAssertEqual(try history(a, of: c.id, max: 10).map(\.id), [id], "the broadcast was queued for a disconnected peer")
    }

    /// An outbox larger than what a link buffers for output (16 MiB): 400 messages of about 64 KB
    /// (26 MB, well within the 64 MiB a peer's outbox may hold) queued while the peer was down
    /// are all delivered, once each and in order, when it comes back.
    func testLargeOutboxIsDeliveredWhenThePeerComesBack() throws {
        let a = try makePeer("alice", fixedPort: true)
        let b = try makePeer("bob", fixedPort: true)
        try pair(a, b)
        let markKill = a.mark
        b.kill()
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markKill, timeout: 10))
        let filler = String(repeating: "▒", count: 21_600)  // 64 800 bytes
        var ids: [String] = []
        for i in 0..<400 {
            ids.append(try send(a, to: b.id, "\(i) " + filler))
        }
        let logA = MessageLog(a), logB = MessageLog(b)
        let markRestart = a.mark
        let restarted = Date()
        try b.restart()
        let done = eventually(timeout: 30) {
            logA.update()
            logB.update()
            return logA.delivered.count >= 400 && logB.received.count >= 400
        }
        print("large outbox: \(logA.delivered.count) delivered after \(String(format: "%.2f", Date().timeIntervalSince(restarted))) s")
        XCTAssertTrue(done, "delivered \(logA.delivered.count), received \(logB.received.count) of 400; A's link to B went "
                      + a.states(of: b.id, after: markRestart).prefix(12).joined(separator: ", "))
        dispatchEvents(for: 0.3)
        logA.update()
        logB.update()
        XCTAssertNil(firstDifference(logB.received.map(\.id), ids), "MessageReceived on B")
        XCTAssertNil(firstDifference(logA.delivered.map(\.id), ids), "MessageDelivered on A")
        XCTAssertNil(firstDifference(try history(b, of: a.id, max: 1000).map(\.id), ids), "B's History")
    }

    // MARK: Crashes and restarts

    func testKilledReceiverGetsEveryMessageAcrossItsRestartAtMostOncePerLife() throws {
        let a = try makePeer("alice", fixedPort: true)
        let b = try makePeer("bob", fixedPort: true)
        try pair(a, b)
        let logA = MessageLog(a), logB = MessageLog(b)
        let oldB = try XCTUnwrap(b.client.signals("PeerStateChanged").last?.sender)
        var ids: [String] = [], texts: [String] = []

        // A keeps sending; B freezes (what A sends now is written to the link but never read) and
        // is killed in the middle of the burst, so those messages die in its socket buffer.
        let markBeforeKill = a.mark
        var killedAt = Date()
        for i in 0..<40 {
            if i == 20 { b.daemon.process.signal(SIGSTOP) }
            let text = "burst \(i) 🚀"
            ids.append(try send(a, to: b.id, text))
            texts.append(text)
            if i == 29 {
                b.kill()
                killedAt = Date()
            }
        }
        let disconnected = try XCTUnwrap(a.waitForState("disconnected", of: b.id, after: markBeforeKill, timeout: 10),
                                         "A did not notice B's death")
        XCTAssertLessThan(Date().timeIntervalSince(killedAt), 5, "'disconnected' later than 5 s after the kill")

        // Messages sent while B is down wait in A's outbox, and A redials.
        for i in 0..<10 {
            let text = "while down \(i) 你好"
            ids.append(try send(a, to: b.id, text))
            texts.append(text)
        }
        let whileDown = Array(ids.suffix(10))
        let statuses = Dictionary(uniqueKeysWithValues: try history(a, of: b.id, max: 1000).map { ($0.id, $0.status) })
        XCTAssertEqual(whileDown.map { statuses[$0] }, Array(repeating: "queued", count: 10))
        XCTAssertNotNil(a.waitForState("connecting", of: b.id, after: disconnected, timeout: 10), "A did not redial")

        // B comes back with its state and port: A reconnects and everything arrives once.
        let markRestart = a.mark
        let restartMs = nowMs()  // the old B is dead: it stored everything it stored before this
        try b.restart()
        XCTAssertNotNil(a.waitForState("connected", of: b.id, after: markRestart, timeout: 20), "A did not reconnect")
        let allDelivered = eventually(timeout: 20) {
            logA.update()
            return Set(logA.delivered.map(\.id)).isSuperset(of: ids)
        }
        XCTAssertTrue(allDelivered, "delivered \(Set(logA.delivered.map(\.id)).intersection(ids).count) of \(ids.count)")
        dispatchEvents(for: 0.5)
        logA.update()
        logB.update()

        // B's history (from the store it kept across the kill): each message once, in order.
        let historyB = try history(b, of: a.id, max: 1000)
        XCTAssertNil(firstDifference(historyB.map(\.id), ids), "B's History after the restart")
        XCTAssertEqual(Set(historyB.map(\.status)), ["received"])
        XCTAssertNil(firstDifference(historyB.map { Array($0.text.utf8) }, texts.map { Array($0.utf8) }), "texts")

        // Which life stored each message shows in its receive time (History has B's local time).
        let storedByOld = Set(historyB.filter { $0.timeMs < restartMs }.map(\.id))
        let storedByNew = Set(historyB.filter { $0.timeMs >= restartMs }.map(\.id))
        XCTAssertTrue(storedByNew.isSuperset(of: whileDown))
        XCTAssertTrue(storedByOld.isSubset(of: ids.prefix(20)), "the old B stored a message sent while it was frozen or dead")
        XCTAssertTrue(storedByNew.isSuperset(of: ids[20..<40]), "lost in the dead B's socket buffer, so not resent")

        // Each announced, once by each of B's lives at most: the new B announced what it stored,
        // and again (same id) what the old one stored without noting its signal written before
        // the kill (seed 12: a signal still on its way out at the kill).
        XCTAssertEqual(Set(logB.received.map(\.id)), Set(ids), "not every message was announced")
        XCTAssertEqual(Set(logB.received.map(\.peer)), [a.id])
        let byOld = logB.received.filter { $0.sender == oldB }.map(\.id)
        let byNew = logB.received.filter { $0.sender != oldB }.map(\.id)
        XCTAssertEqual(byOld.count, Set(byOld).count, "the old B announced a message twice")
        XCTAssertEqual(byNew.count, Set(byNew).count, "the new B announced a message twice")
        XCTAssertTrue(Set(byNew).isSuperset(of: storedByNew), "the new B must announce the messages it stored")
        XCTAssertTrue(Set(byOld).isSubset(of: storedByOld))
        let repeated = Set(byNew).subtracting(storedByNew)
        XCTAssertTrue(repeated.isSubset(of: storedByOld), "the new B announced what neither life stored")
        print("old B stored \(storedByOld.count) (announced \(byOld.count)), new B stored \(storedByNew.count), "
              + "announced again \(repeated.count)")

        // A: each delivered once, all delivered in its History.
        XCTAssertEqual(logA.delivered.count, ids.count, "MessageDelivered repeated or missing")
        XCTAssertEqual(Set(logA.delivered.map(\.peer)), [b.id])
        let historyA = try history(a, of: b.id, max: 1000)
        XCTAssertNil(firstDifference(historyA.map(\.id), ids))
        XCTAssertEqual(Set(historyA.map(\.status)), ["delivered"])
        XCTAssertTrue(logA.failed.isEmpty)
    }

    /// Chaos seed 12: alpha's text was reported delivered, but bravo's client never saw its
    /// `MessageReceived`: bravo was killed (-9) a moment after storing it, GDBus had not yet
    /// written the signal (its worker thread writes it), and the store had noted it announced in
    /// the write that stored it, so the restarted bravo never announced it. Here B's bus is held
    /// (SIGSTOP) so B's signals back up behind a full socket buffer, unwritten, while A's texts
    /// are stored and acknowledged; then B is killed. After the restart each must be announced,
    /// with its id: the ones written before the kill perhaps twice, none twice by one life.
    func testSeed12_AMessageWhoseSignalAKillCaughtUnwrittenIsAnnouncedAfterTheRestart() throws {
        let a = try makePeer("alice", fixedPort: true)
        let b = try makePeer("bob", fixedPort: true)
        try pair(a, b)
        let logA = MessageLog(a), logB = MessageLog(b)
        let oldB = try XCTUnwrap(b.client.signals("PeerStateChanged").last?.sender)

        b.bus.signal(SIGSTOP)
        var busHeld = true
        defer { if busHeld { b.bus.signal(SIGCONT) } }
        // 12 × 60 KB of MessageReceived: several times a socket buffer (about 200 KB).
        var ids: [String] = []
        for i in 0..<12 {
            ids.append(try send(a, to: b.id, "\(i) " + String(repeating: "ü", count: 30_000)))
        }
        // Delivered: B stored each and acknowledged it, its signals not all written.
        let allDelivered = eventually(timeout: 20) {
            logA.update()
            return Set(logA.delivered.map(\.id)).isSuperset(of: ids)
        }
        XCTAssertTrue(allDelivered, "delivered \(Set(logA.delivered.map(\.id)).intersection(ids).count) of 12")
        let (byOld, byNew) = try killAndRestart(b, busHeld: &busHeld, until: ids, oldLife: oldB) {
            logB.update()
            return logB.received.map { (id: $0.id, life: $0.sender) }
        }
        XCTAssertEqual(Set(logB.received.map(\.peer)), [a.id])
        XCTAssertEqual(try history(b, of: a.id, max: 100).map(\.id), ids, "B's History")
        print("seed 12: \(byOld.count) of 12 signals written before the kill, \(byNew.count) announced after the restart")
    }

    /// Seed 12's window on the sender's side: `MessageDelivered` emitted, and the sender killed
    /// before GDBus wrote it, was never reported. A's dbus-daemon is stopped so A's signals back
    /// up unwritten while B acknowledges 1,000 texts (about 250 bytes of signal each, more in the
    /// kernel: several socket buffers); A is killed. Each delivery is reported once by each of A's
    /// lives at most, and every one by one of them.
    func testSeed12_ADeliveryWhoseSignalAKillCaughtUnwrittenIsReportedAfterTheRestart() throws {
        let a = try makePeer("alice", fixedPort: true)
        let b = try makePeer("bob", fixedPort: true)
        try pair(a, b)
        let logA = MessageLog(a)
        let oldA = try XCTUnwrap(a.client.signals("PeerStateChanged").last?.sender)

        // B holds still, so the texts wait unacknowledged while A's bus still answers Send.
        b.daemon.process.signal(SIGSTOP)
        var bHeld = true
        defer { if bHeld { b.daemon.process.signal(SIGCONT) } }
        var ids: [String] = []
        for batch in stride(from: 0, to: 1_000, by: 100) {  // the bus allows 128 pending calls
            let calls = (batch..<batch + 100).map { a.client.callAsync("Send", [Variant(b.id), Variant("text \($0)")]) }
            XCTAssertTrue(eventually(timeout: 30) { calls.allSatisfy(\.isDone) }, "Send did not answer")
            ids += try calls.map { try XCTUnwrap(try $0.result?.get()[0].string) }
        }

        a.bus.signal(SIGSTOP)
        var aBusHeld = true
        defer { if aBusHeld { a.bus.signal(SIGCONT) } }
        b.daemon.process.signal(SIGCONT)
        bHeld = false
        // B stored them all (and acknowledged each once on its disk); A's reports are emitted.
        XCTAssertTrue(eventually(timeout: 30) { (try? self.history(b, of: a.id, max: 1_000).count) == ids.count },
                      "B did not store the 1,000 texts")
        dispatchEvents(for: 1)
        let (byOld, byNew) = try killAndRestart(a, busHeld: &aBusHeld, until: ids, oldLife: oldA) {
            logA.update()
            return logA.delivered.map { (id: $0.id, life: $0.sender) }
        }
        XCTAssertEqual(Set(logA.delivered.map(\.peer)), [b.id])
        XCTAssertEqual(logA.failed.count, 0)
        let historyA = try history(a, of: b.id, max: 1_000)
        XCTAssertEqual(historyA.map(\.id), ids, "A's History")
        XCTAssertEqual(Set(historyA.map(\.status)), ["delivered"])
        print("seed 12, sender: \(byOld.count) of \(ids.count) MessageDelivered written before the kill, "
              + "\(byNew.count) reported after the restart")
    }

    /// Seed 12's kill: `peer`, its dbus-daemon stopped (`busHeld`) so its signals wait unwritten,
    /// is killed, the bus goes on and `peer` restarts. `reports` are the ids of the signals the
    /// test watches, with the service's unique name that sent each. Some of `ids` must have been
    /// unwritten at the kill (else this tests nothing), every one is reported after the restart,
    /// none twice by one life: returns those the old life and the new one reported.
    private func killAndRestart(_ peer: TestPeer, busHeld: inout Bool, until ids: [String], oldLife: String,
                                reports: () -> [(id: String, life: String)],
                                file: StaticString = #filePath, line: UInt = #line) throws -> (byOld: [String], byNew: [String]) {
        peer.kill()
        peer.bus.signal(SIGCONT)
        busHeld = false
        dispatchEvents(for: 0.5)
        let beforeRestart = Set(reports().map(\.id))
        XCTAssertLessThan(beforeRestart.count, ids.count, "every signal was written before the kill: this tests nothing",
                          file: file, line: line)
        try peer.restart()
        let allReported = eventually(timeout: 20) { Set(reports().map(\.id)).isSuperset(of: ids) }
        XCTAssertTrue(allReported, "\(Set(reports().map(\.id)).intersection(ids).count) of \(ids.count) reported after the "
                      + "restart; \(beforeRestart.count) were written before the kill", file: file, line: line)
        dispatchEvents(for: 0.3)
        let all = reports()
        let byOld = all.filter { $0.life == oldLife }.map(\.id)
        let byNew = all.filter { $0.life != oldLife }.map(\.id)
        XCTAssertEqual(byOld.count, Set(byOld).count, "the old \(peer.name) reported one twice", file: file, line: line)
        XCTAssertEqual(byNew.count, Set(byNew).count, "the new \(peer.name) reported one twice", file: file, line: line)
        XCTAssertTrue(Set(byNew).isSuperset(of: Set(ids).subtracting(byOld)), "the new \(peer.name) left one unreported",
                      file: file, line: line)
        return (byOld, byNew)
    }

    /// Chaos seed 18: alpha's and bravo's links to charlie flapped, six times in a row: connected,
    /// then "the peer closed the connection" at once. charlie's state directory was full: each new
    /// link brought the queued TEXTs again, charlie could not store them and closed the link, and
    /// the sender dialled again at once, every link's voice and transfers going with it. A
    /// receiver that cannot store a message now leaves it unacknowledged on the same link; the
    /// sender sends it again when the run stalls (2 s), and it arrives once space returns.
    func testSeed18_AReceiverWhoseDiskIsFullKeepsTheLinkAndStoresTheMessageOnceSpaceReturns() throws {
        let a = try makePeer("alice", fixedPort: true)
        let b = try makePeer("bob", fixedPort: true)
        try b.moveStateOntoTmpfs(megabytes: 4)
        defer { b.unmountState() }
        try pair(a, b)
        let logA = MessageLog(a), logB = MessageLog(b)
        let markA = a.mark, markB = b.mark

        try b.fillState()
        let text = "stored once space returns " + String(repeating: "ß", count: 10_000)
        let id = try send(a, to: b.id, text)
        dispatchEvents(for: 4.5)  // two resends at least
        logB.update()
        XCTAssertEqual(logB.received.map(\.id), [], "B announced a message its disk refused")
        XCTAssertTrue(b.log.contains("cannot store a message from \(a.id)"), "B did not say why: \(b.log.suffix(1_500))")
        XCTAssertEqual(a.states(of: b.id, after: markA), [], "the link flapped while B's disk was full")

        try b.freeState()
        let arrived = eventually(timeout: 5) {
            logA.update()
            return logA.delivered.map(\.id) == [id]
        }
        XCTAssertTrue(arrived, "not delivered within 5 s of the space's return: \(b.log.suffix(1_500))")
        dispatchEvents(for: 0.3)
        logB.update()
        XCTAssertEqual(logB.received.map(\.id), [id])
        XCTAssertEqual(logB.received.first.map { Array($0.text.utf8) }, Array(text.utf8))
        XCTAssertEqual(a.states(of: b.id, after: markA), [], "A's link to B closed")
        XCTAssertEqual(b.states(of: a.id, after: markB), [], "B's link to A closed")
    }

    func testKilledSenderRedialsByItselfAndDeliversItsOutboxAfterRestart() throws {
        let a = try makePeer("alice", fixedPort: true)
        let b = try makePeer("bob", fixedPort: true)
        try pair(a, b)
        let first = try sendAndConfirm(a, b, "before the crash")

        // B stops: what A sends now waits in its outbox.
        let markStop = a.mark
        XCTAssertEqual(b.stop(), 0, b.log)
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markStop, timeout: 10))
        var ids: [String] = [], texts: [String] = []
        for i in 0..<5 {
            let text = "outbox \(i) ✉️ 郵便"
            ids.append(try send(a, to: b.id, text))
            texts.append(text)
        }
        XCTAssertEqual(try history(a, of: b.id, max: 10).map { [$0.id, $0.status] },
                       [[first, "delivered"]] + ids.map { [$0, "queued"] })

        // A dies with that outbox; B comes back; A comes back and delivers without being asked.
        a.kill()
        try b.restart()
        let logB = MessageLog(b, from: b.mark)
        let markA = a.mark
        try a.restart()
        let logA = MessageLog(a, from: markA)
        XCTAssertNotNil(a.waitForState("connected", of: b.id, after: markA, timeout: 20), "A did not redial B")
        let arrived = eventually(timeout: 20) {
            logA.update()
            logB.update()
            return Set(logB.received.map(\.id)).isSuperset(of: ids) && Set(logA.delivered.map(\.id)).isSuperset(of: ids)
        }
        XCTAssertTrue(arrived, "received \(logB.received.count), delivered \(logA.delivered.count) of \(ids.count)")
        dispatchEvents(for: 0.5)
        logA.update()
        logB.update()

        XCTAssertEqual(logB.received.map(\.id), ids, "B must receive each exactly once, in order")
        XCTAssertEqual(logB.received.map(\.text), texts)
        XCTAssertEqual(Set(logB.received.map(\.peer)), [a.id])
        XCTAssertEqual(logA.delivered.map(\.id), ids)
        XCTAssertEqual(try history(b, of: a.id, max: 10).map { [$0.id, $0.status] },
                       ([first] + ids).map { [$0, "received"] })
        XCTAssertEqual(try history(a, of: b.id, max: 10).map { [$0.id, $0.status] },
                       ([first] + ids).map { [$0, "delivered"] })
    }

    // MARK: Disconnect and RemovePeer

    func testDisconnectIsNotRedialledUntilTheNextConnect() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)
        let markA = a.mark, markB = b.mark

        try a.client.call("Disconnect", [Variant(b.id)])
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markA), "A")
        XCTAssertNotNil(b.waitForState("disconnected", of: a.id, after: markB), "B")
        XCTAssertEqual(try peerRows(a), [[b.id, "bob", "ip", "disconnected"]])
        XCTAssertEqual(try peerRows(b), [[a.id, "alice", "ip", "disconnected"]])

        // B has messages for A, but A said goodbye: B must not dial A.
        let queued = [try send(b, to: a.id, "queued 1"), try send(b, to: a.id, "queued 2 ⏳")]
        let quietA = a.mark, quietB = b.mark
        dispatchEvents(for: 2.0)
        XCTAssertEqual(b.states(of: a.id, after: quietB), [], "B redialled A after its goodbye")
        XCTAssertEqual(a.states(of: b.id, after: quietA), [], "A's state changed after its own Disconnect")
        XCTAssertTrue(a.client.signals("MessageReceived").isEmpty)
        XCTAssertEqual(try history(b, of: a.id, max: 10).map { [$0.id, $0.status] }, queued.map { [$0, "queued"] })
        XCTAssertEqual(try peerRows(b), [[a.id, "alice", "ip", "disconnected"]])

        // A's next Connect brings the link back, and B delivers what waited.
        let markB2 = b.mark
        try connect(a, b)
        for id in queued {
            XCTAssertNotNil(a.client.waitForSignalIndex("MessageReceived", after: quietA, timeout: 10) { $0.string(1) == id },
                            "A did not receive \(id)")
            XCTAssertNotNil(b.client.waitForSignalIndex("MessageDelivered", after: markB2, timeout: 10) { $0.string(1) == id },
                            "B did not report \(id) delivered")
        }
        XCTAssertEqual(a.client.signals("MessageReceived").map { $0.string(1) }, queued)
        XCTAssertEqual(try history(b, of: a.id, max: 10).map { [$0.id, $0.status] }, queued.map { [$0, "delivered"] })
    }

    func testRemovePeerFailsItsQueuedMessagesAndForgetsIt() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)
        let markKill = a.mark
        b.kill()
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markKill, timeout: 10))
        let ids = try (0..<3).map { try send(a, to: b.id, "never delivered \($0)") }
        XCTAssertEqual(try history(a, of: b.id, max: 10).map(\.status), ["queued", "queued", "queued"])

        let remove = a.client.callRecordingOrder("RemovePeer", [Variant(b.id)])
        XCTAssertNoThrow(try remove.result.get())
        XCTAssertTrue(eventually(timeout: 10) {
            a.client.signals[markKill...].filter { $0.member == "MessageFailed" }.count >= 3
        })
        dispatchEvents(for: 1.0)
        let failures = a.client.signals[markKill...].filter { $0.member == "MessageFailed" }
        XCTAssertEqual(failures.map { $0.string(1) }, ids)
        XCTAssertEqual(Set(failures.map { $0.string(0) }), [b.id])
        for failure in failures {
            XCTAssertFalse(failure.string(2).isEmpty, "MessageFailed without a reason")
        }
        XCTAssertTrue(a.client.signals("MessageDelivered").isEmpty)

        XCTAssertEqual(a.client.errorName("History", [Variant(b.id), Variant(UInt32(10))]), Self.unknownPeer)
        XCTAssertEqual(a.client.errorName("Send", [Variant(b.id), Variant("hello?")]), Self.unknownPeer)
        XCTAssertEqual(try peerRows(a), [])
        // A stopped redialling the removed peer.
        let afterReply = a.client.signals[remove.signalsBefore...]
        XCTAssertFalse(afterReply.contains { $0.member == "PeerStateChanged" && ["connecting", "connected"].contains($0.string(1)) },
                       a.states(of: b.id, after: remove.signalsBefore).joined(separator: ", "))
    }

    // MARK: Hostile bytes

    func testMalformedStreamsAreClosedAndTheServiceKeepsServing() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")

        // 4 KiB of random bytes.
        var garbage = (0..<4096).map { _ in UInt8.random(in: 0...255) }
        garbage[0] = 0xA5
        let first = try TCPStream.connect(port: a.port)
        try first.send(garbage)
        XCTAssertNotEqual(first.readUntilEnd(timeout: 5).ending, .stillOpen, "garbage: the link stayed open")
        XCTAssertTrue(eventually(timeout: 5) { a.log.contains("not a PeerVoice stream") }, a.log)

        // The right magic with version 99: the daemon's own preamble (sent first, without waiting
        // for ours), then the end; no GOODBYE, nothing is sealed yet.
        let second = try TCPStream.connect(port: a.port)
        try second.send(Array("PVLK".utf8) + [0x00, 0x63, 0x00, 0x00])
        let secondEnd = second.readUntilEnd(timeout: 5)
        XCTAssertEqual(secondEnd.ending, .closed, "version 99: the link stayed open or was reset")
        XCTAssertEqual(secondEnd.bytes, Self.preamble, "version 99: only the daemon's preamble")
        XCTAssertTrue(eventually(timeout: 5) { a.log.contains("protocol version 99") }, a.log)

        // A valid preamble: the daemon answers with its preamble and, as the responder, waits for
        // handshake message 1 (it sends nothing more and keeps the stream open).
        let third = try TCPStream.connect(port: a.port)
        try third.send(Self.preamble)
        let answer = third.read(timeout: 0.7) { _ in false }
        XCTAssertEqual(answer.ending, .stillOpen, "valid preamble: the daemon hung up")
        XCTAssertEqual(answer.bytes, Self.preamble, "valid preamble: the daemon's answer")
        // Then a length over the 1024-byte handshake limit and no body: closed without waiting
        // for the body (and well before the 10 s allowed for the key exchange).
        let sentAt = Date()
        try third.send([0x00, 0x00, 0x04, 0x01])  // 1025
        let thirdEnd = third.readUntilEnd(timeout: 5)
        XCTAssertEqual(thirdEnd.ending, .closed, "oversized handshake message: the link stayed open or was reset")
        XCTAssertEqual(thirdEnd.bytes, [], "oversized handshake message: bytes after the preamble")
        XCTAssertLessThan(Date().timeIntervalSince(sentAt), 2)
        XCTAssertTrue(eventually(timeout: 5) { a.log.contains("frame of 1025 bytes is over the limit") }, a.log)

        // Exactly 1024 bytes is allowed by the framing (the handshake refuses it as message 1).
        let fourth = try TCPStream.connect(port: a.port)
        try fourth.send(Self.preamble + [0x00, 0x00, 0x04, 0x00] + [0x21] + Array(repeating: 0, count: 1023))
        let fourthEnd = fourth.readUntilEnd(timeout: 5)
        XCTAssertEqual(fourthEnd.ending, .closed)
        XCTAssertEqual(fourthEnd.bytes, Self.preamble)
        XCTAssertTrue(eventually(timeout: 5) { a.log.contains("handshake message 1 (initiator's commitment) has 1024 bytes") }, a.log)

        // Still up, none of them became a peer, and a real peer gets through.
        XCTAssertTrue(a.isRunning, a.log)
        XCTAssertEqual(try peerRows(a), [])
        XCTAssertEqual(a.pairingRequests().count, 0)
        try pair(b, a)
        _ = try sendAndConfirm(b, a, "after the garbage")
        XCTAssertEqual(try peerRows(a), [[b.id, "bob", "ip", "connected"]])
    }

    // MARK: A hand-made peer

    /// Retransmissions (same sender instance and sequence numbers, on a new link and after the
    /// receiver's restart) are acknowledged again but stored once, and announced once by each life
    /// of the receiver (again after the kill only what it had not noted announced). The sender is a
    /// real version-3 peer driven by hand (TestHarness.SecureLink), so the test decides exactly
    /// what is sent again; the first link is a first contact (B's person confirms), the later
    /// ones are recognised by the pinned key.
    func testRetransmittedTextIsAcknowledgedButStoredOnceAndAnnouncedOncePerLife() throws {
        let b = try makePeer("bob", fixedPort: true)
        let fake = FakePeer(identity: SecureLink.newIdentity(), instance: .random(), listenPort: try freeTCPPort())
        let messages = (1...4).map { n in (seq: UInt64(n), id: MessageID.random(), text: "retransmitted \(n) 🔁") }
        let hexIDs = messages.map(\.id.hex)
        let logB = MessageLog(b)

        // One link: TEXT 1 and 2 -> ACK 2, both announced.
        var mark = b.mark
        let acks1 = try fakeLink(fake, to: b, texts: Array(messages[0..<2]), expectAck: 2, firstContact: true)
        XCTAssertEqual(acks1.last, 2, "ACKs \(acks1)")
        XCTAssertNotNil(b.waitForState("disconnected", of: fake.id, after: mark), b.log)
        logB.update()
        XCTAssertEqual(logB.received.map(\.id), Array(hexIDs[0..<2]))
        XCTAssertEqual(Set(logB.received.map(\.peer)), [fake.id])

        // A new link resends 1 and 2 with 3: ACK 3, only 3 announced.
        mark = b.mark
        let acks2 = try fakeLink(fake, to: b, texts: Array(messages[0..<3]), expectAck: 3, firstContact: false)
        XCTAssertEqual(acks2.last, 3, "ACKs \(acks2)")
        XCTAssertNotNil(b.waitForState("disconnected", of: fake.id, after: mark), b.log)
        logB.update()
        XCTAssertEqual(logB.received.map(\.id), Array(hexIDs[0..<3]))

        // B is killed and restarted: it still knows 1 to 3 (durable high-water mark) and the key.
        let oldB = try XCTUnwrap(logB.received.last?.sender)
        b.kill()
        try b.restart()
        mark = b.mark
        let acks3 = try fakeLink(fake, to: b, texts: messages, expectAck: 4, firstContact: false)
        XCTAssertEqual(acks3.last, 4, "ACKs \(acks3)")
        XCTAssertNotNil(b.waitForState("disconnected", of: fake.id, after: mark), b.log)
        dispatchEvents(for: 0.3)
        logB.update()
        // The old B announced each once, in order; the new B announced 4, and 3 again only if the
        // kill came before the old one noted its signal written (seed 12: at least once, same id).
        let byOld = logB.received.filter { $0.sender == oldB }, byNew = logB.received.filter { $0.sender != oldB }
        XCTAssertEqual(byOld.map(\.id), Array(hexIDs[0..<3]), "each message announced once, in order")
        XCTAssertEqual(byNew.map(\.id).filter { $0 != hexIDs[2] }, [hexIDs[3]], "the new B announced what it had noted")
        XCTAssertEqual(logB.received.map(\.text), logB.received.map { received in
            messages.first { $0.id.hex == received.id }?.text ?? "" }, "a text changed on the way")

        let historyB = try history(b, of: fake.id, max: 100)
        XCTAssertEqual(historyB.map(\.id), hexIDs)
        XCTAssertEqual(Set(historyB.map(\.status)), ["received"])
        XCTAssertEqual(try peerRows(b), [[fake.id, "fake", "ip", "disconnected"]])
        XCTAssertEqual(b.pairingRequests().count, 1, "only the first contact asks B's person")
    }

    /// Issue 37: B stored 1 and 2 from a peer whose ACK never counted (the peer resends all it
    /// holds unacknowledged), then B's person removed the peer and the two paired again. Its
    /// resend of 1 and 2 with 3 is acknowledged up to 3, and only 3 is stored and announced.
    func testAResendAfterRemovePeerAndANewPairingIsNotStoredTwice() throws {
        let b = try makePeer("bob", fixedPort: true)
        let fake = FakePeer(identity: SecureLink.newIdentity(), instance: .random(), listenPort: try freeTCPPort())
        let messages = (1...3).map { n in (seq: UInt64(n), id: MessageID.random(), text: "before and after removal \(n)") }
        let hexIDs = messages.map(\.id.hex)
        let logB = MessageLog(b)

        var mark = b.mark
        XCTAssertEqual(try fakeLink(fake, to: b, texts: Array(messages[0..<2]), expectAck: 2, firstContact: true).last, 2)
        XCTAssertNotNil(b.waitForState("disconnected", of: fake.id, after: mark), b.log)
        try b.client.call("RemovePeer", [Variant(fake.id)])
        XCTAssertEqual(try peerRows(b), [])

        mark = b.mark
        XCTAssertEqual(try fakeLink(fake, to: b, texts: messages, expectAck: 3, firstContact: true).last, 3)
        XCTAssertNotNil(b.waitForState("disconnected", of: fake.id, after: mark), b.log)
        dispatchEvents(for: 0.3)
        logB.update()
        XCTAssertEqual(logB.received.map(\.id), hexIDs, "each message announced once, in order")
        XCTAssertEqual(try history(b, of: fake.id, max: 100).map(\.id), [hexIDs[2]],
                       "the history starts afresh after RemovePeer, and holds 3 once")
        XCTAssertEqual(b.pairingRequests().count, 2, "B's person was asked again after RemovePeer")
    }

    /// Simulation seed 201: a message queued for a peer whose pairing was not done yet lived
    /// only as long as the daemon (only paired peers are remembered), so after a restart it sat
    /// unsent for a week. Send refuses such a peer, saying why, and works once the pairing is done.
    func testSendToAPeerWhosePairingIsNotDoneIsRefusedUntilItIs() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        let markA = a.mark, markB = b.mark
        let connect = a.client.callAsync("Connect", [Variant(b.address)])
        eventually(timeout: 15) { !a.pairingRequests(for: b.id, after: markA).isEmpty }
        XCTAssertEqual(a.pairingRequests(for: b.id, after: markA).count, 1, a.log)

        XCTAssertThrowsError(try a.client.call("Send", [Variant(b.id), Variant("too early")])) { error in
            let busError = error as? BusError
            XCTAssertEqual(busError?.name, "org.example.PeerVoice.Error.NotConnected")
            XCTAssertTrue(busError?.message.contains("not paired yet") == true, "\(error)")
        }
        XCTAssertEqual(try history(a, of: b.id, max: 10).count, 0, "the refused message was kept")

        try a.client.call("ConfirmPairing", [Variant(b.id), Variant(true)])
        eventually(timeout: 15) { !b.pairingRequests(for: a.id, after: markB).isEmpty }
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        eventually(timeout: 15) { connect.isDone }
        XCTAssertNoThrow(try connect.result?.get())
        _ = try sendAndConfirm(a, b, "now that we are paired")
    }

    // MARK: Silence

    func testSilentPeerIsDisconnectedWithinFiveSecondsAndTheLinkRecovers() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)
        let markA = a.mark
        b.daemon.process.signal(SIGSTOP)
        let stoppedAt = Date()
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markA, timeout: 8), "A kept the link of a frozen peer")
        let silentFor = Date().timeIntervalSince(stoppedAt)
        XCTAssertLessThan(silentFor, 5.5, "'disconnected' after \(silentFor) s")
        XCTAssertGreaterThan(silentFor, 2, "'disconnected' after only \(silentFor) s of silence")

        b.daemon.process.signal(SIGCONT)
        _ = try sendAndConfirm(a, b, "are you back?", timeout: 20)
    }

    // MARK: Helpers

    private func makePeer(_ name: String, fixedPort: Bool = false) throws -> TestPeer {
        try started.make(name, port: fixedPort ? freeTCPPort() : 0)
    }

    /// First contact: `a` dials `b`; both are asked to compare a code, the same 6 digits on both
    /// sides; both accept; Connect succeeds and both report the other connected.
    @discardableResult
    private func pair(_ a: TestPeer, _ b: TestPeer, file: StaticString = #filePath, line: UInt = #line) throws -> Pairing {
        let markA = a.mark, markB = b.mark
        let pairing = a.pair(with: b)
        let (codeA, codeB) = pairing.passkeys
        XCTAssertNotNil(pairing.dialler, "\(a.name) showed no PairingRequested for \(b.id)", file: file, line: line)
        XCTAssertNotNil(pairing.dialled, "\(b.name) showed no PairingRequested for \(a.id)", file: file, line: line)
        XCTAssertTrue(Pairing.isPasskey(codeA), "passkey '\(codeA)' is not 6 digits", file: file, line: line)
        XCTAssertEqual(codeA, codeB, "the two sides show different codes", file: file, line: line)
        do {
            _ = try pairing.connect.get()
        } catch {
            XCTFail("Connect(\(b.id)) failed: \(error)", file: file, line: line)
            throw error
        }
        XCTAssertNotNil(a.waitForState("connected", of: b.id, after: markA, timeout: 10), "\(a.name) not connected", file: file, line: line)
        XCTAssertNotNil(b.waitForState("connected", of: a.id, after: markB, timeout: 10), "\(b.name) not connected", file: file, line: line)
        return pairing
    }

    /// `a` dials `b` again, after they paired: the pinned keys are enough, nobody is asked.
    private func connect(_ a: TestPeer, _ b: TestPeer, file: StaticString = #filePath, line: UInt = #line) throws {
        let markA = a.mark, markB = b.mark
        try a.client.call("Connect", [Variant(b.id)], timeout: .seconds(30))
        XCTAssertNotNil(a.waitForState("connected", of: b.id, after: markA, timeout: 10), "\(a.name) not connected", file: file, line: line)
        XCTAssertNotNil(b.waitForState("connected", of: a.id, after: markB, timeout: 10), "\(b.name) not connected", file: file, line: line)
        XCTAssertEqual(a.states(of: b.id, after: markA), ["connecting", "connected"], file: file, line: line)
        XCTAssertEqual(a.pairingRequests(after: markA).count, 0, "a pinned peer was prompted for", file: file, line: line)
        XCTAssertEqual(b.pairingRequests(after: markB).count, 0, "a pinned peer was prompted for", file: file, line: line)
    }

    private func send(_ from: TestPeer, to peer: String, _ text: String) throws -> String {
        try XCTUnwrap(try from.client.call("Send", [Variant(peer), Variant(text)])[0].string)
    }

    /// Sends one message and checks it end to end: MessageReceived on the receiver with the same
    /// id and the exact bytes, then MessageDelivered on the sender, not before the Send reply.
    private func sendAndConfirm(_ from: TestPeer, _ to: TestPeer, _ text: String, timeout: Double = 10,
                                file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let markFrom = from.mark, markTo = to.mark
        let reply = from.client.callRecordingOrder("Send", [Variant(to.id), Variant(text)])
        let id = try XCTUnwrap(try reply.result.get()[0].string, file: file, line: line)
        XCTAssertEqual(id.count, 32, "message id '\(id)'", file: file, line: line)
        XCTAssertTrue(id.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "message id '\(id)'", file: file, line: line)

        let received = try XCTUnwrap(to.client.waitForSignalIndex("MessageReceived", after: markTo, timeout: timeout) { $0.string(1) == id },
                                     "\(to.name) did not receive \(id)", file: file, line: line)
        let signal = to.client.signals[received]
        XCTAssertEqual(signal.string(0), from.id, file: file, line: line)
        XCTAssertEqual(Array(signal.string(2).utf8), Array(text.utf8), "text changed on the way", file: file, line: line)

        let delivered = try XCTUnwrap(from.client.waitForSignalIndex("MessageDelivered", after: markFrom, timeout: timeout) { $0.string(1) == id },
                                      "\(from.name) did not report \(id) delivered", file: file, line: line)
        XCTAssertEqual(from.client.signals[delivered].string(0), to.id, file: file, line: line)
        XCTAssertGreaterThanOrEqual(delivered, reply.signalsBefore, "MessageDelivered before the Send reply", file: file, line: line)
        return id
    }

    private struct HistoryRow {
        let id: String
        let status: String
        let timeMs: UInt64
        let text: String
    }

    private func history(_ peer: TestPeer, of other: String, max: UInt32) throws -> [HistoryRow] {
        try peer.client.call("History", [Variant(other), Variant(max)])[0].children.map {
            HistoryRow(id: $0[0].string!, status: $0[1].string!, timeMs: $0[2].uint64!, text: $0[3].string!)
        }
    }

    private func peerRows(_ peer: TestPeer) throws -> [[String]] {
        try peer.client.call("ListPeers")[0].children.map { row in row.children.map { $0.string ?? "?" } }
    }

    /// A hand-driven version-3 peer's lasting parts: its key, instance id and announced listen port.
    private struct FakePeer {
        let identity: StaticIdentity
        let instance: InstanceID
        let listenPort: UInt16
        var id: String { SecureLink.peerID(of: identity) }
    }

    /// One link from `fake` to `peer` (docs/SECURITY.md §10): key exchange with the HELLO named
    /// "fake"; on first contact `peer`'s person confirms the code it shows, which must be the
    /// handshake's; PAIRING both ways; then the TEXT frames as one run; reads until an ACK of
    /// `expectAck` and closes without GOODBYE. Returns the ACKed seqs.
    private func fakeLink(_ fake: FakePeer, to peer: TestPeer, texts: [(seq: UInt64, id: MessageID, text: String)],
                          expectAck: UInt64, firstContact: Bool,
                          file: StaticString = #filePath, line: UInt = #line) throws -> [UInt64] {
        let mark = peer.mark
        let link = try SecureLink.connect(port: peer.port, identity: fake.identity,
                                          hello: SecureLink.makeHello(name: "fake", listenPort: fake.listenPort, instance: fake.instance))
        defer { link.close() }
        try link.runHandshake()
        if firstContact {
            let prompt = try XCTUnwrap(peer.pairingRequest(for: fake.id, after: mark), "no PairingRequested: \(peer.log.suffix(800))",
                                       file: file, line: line)
            XCTAssertEqual(prompt.string(2), link.verificationCode, "the code shown is not the handshake's", file: file, line: line)
            try peer.client.call("ConfirmPairing", [Variant(fake.id), Variant(true)])
        }
        // First contact both sides ask (and B's person accepted above); a pinned key is simply known.
        try link.sendPairing(firstContact ? .asking : .known)
        if firstContact { try link.sendPairing(.accept) }
        XCTAssertEqual(try link.awaitPairing(timeout: 10).decision, firstContact ? .accept : .known, file: file, line: line)
        XCTAssertNotNil(peer.waitForState("connected", of: fake.id, after: mark), file: file, line: line)
        if !firstContact {
            XCTAssertEqual(peer.pairingRequests(after: mark).count, 0, "a pinned key was prompted for", file: file, line: line)
        }

        var previous: UInt64 = 0
        for text in texts {
            try link.sendText(seq: text.seq, previousSeq: previous, messageID: text.id, text: text.text)
            previous = text.seq
        }
        var acks: [UInt64] = []
        try link.receive(timeout: 10) { frame in
            guard case .ack(let seq) = frame else { return false }
            acks.append(seq)
            return seq >= expectAck
        }
        XCTAssertEqual(acks.sorted(), acks, "ACKs go down", file: file, line: line)
        XCTAssertTrue(acks.contains(expectAck), "no ACK \(expectAck), got \(acks)", file: file, line: line)
        return acks
    }

    private func nowMs() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }

    /// nil if equal, else where and how they differ (readable for 1000-element arrays).
    private func firstDifference<T: Equatable>(_ actual: [T], _ expected: [T]) -> String? {
        for index in 0..<min(actual.count, expected.count) where actual[index] != expected[index] {
            return "first difference at \(index): \(actual[index]) instead of \(expected[index]) (\(actual.count) vs \(expected.count) items)"
        }
        return actual.count == expected.count ? nil : "\(actual.count) items instead of \(expected.count)"
    }
}

/// The message signals one peer's client has seen, read once each in arrival order.
private final class MessageLog {
    struct Received { let peer: String; let id: String; let text: String; let sender: String }
    struct Delivered { let peer: String; let id: String; let sender: String }
    struct Failed { let peer: String; let id: String; let reason: String }

    private let client: APIClient
    private var next: Int
    private(set) var received: [Received] = []
    private(set) var delivered: [Delivered] = []
    private(set) var failed: [Failed] = []

    init(_ peer: TestPeer, from start: Int? = nil) {
        client = peer.client
        next = start ?? peer.mark
    }

    func update() {
        let signals = client.signals
        while next < signals.count {
            let signal = signals[next]
            next += 1
            switch signal.member {
            case "MessageReceived":
                received.append(Received(peer: signal.string(0), id: signal.string(1), text: signal.string(2), sender: signal.sender))
            case "MessageDelivered":
                delivered.append(Delivered(peer: signal.string(0), id: signal.string(1), sender: signal.sender))
            case "MessageFailed":
                failed.append(Failed(peer: signal.string(0), id: signal.string(1), reason: signal.string(2)))
            default:
                break
            }
        }
    }
}
