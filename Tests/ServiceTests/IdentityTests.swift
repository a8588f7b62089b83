import Foundation
import GIO
import PeerVoiceCore
import TestHarness
import XCTest

/// A peer is a device (its key), not an address: real peervoiced processes on private buses,
/// reconnecting from new ports, moving to another address, forgetting each other on one side,
/// dialling each other at once, migrating a protocol-version-3 state directory; and the peer
/// objects that show it all.
final class IdentityTests: XCTestCase {
    private let started = StartedPeers()

    override func tearDown() {
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
    }

    private func makePeer(_ name: String, port: UInt16 = 0, listens: Bool = true) throws -> TestPeer {
        try started.make(name, port: port, listens: listens)
    }

    /// First contact from `a` to `b`'s address: both people see one code and accept.
    private func pair(_ a: TestPeer, _ b: TestPeer, file: StaticString = #filePath, line: UInt = #line) throws {
        let pairing = a.pair(with: b)
        XCTAssertNotNil(pairing.dialler, "\(a.name) was not asked", file: file, line: line)
        XCTAssertNotNil(pairing.dialled, "\(b.name) was not asked", file: file, line: line)
        XCTAssertEqual(pairing.passkeys.dialler, pairing.passkeys.dialled, file: file, line: line)
        XCTAssertEqual(try pairing.connect.get()[0].string, b.id, "Connect answers with the peer's id", file: file, line: line)
        XCTAssertNotNil(b.waitForState("connected", of: a.id, timeout: 10), file: file, line: line)
    }

    /// Sends `count` numbered messages and returns their ids.
    private func send(_ count: Int, from: TestPeer, to peer: String, tag: String) throws -> [String] {
        try (0..<count).map { index in
            try XCTUnwrap(try from.client.call("Send", [Variant(peer), Variant("\(tag) \(index)")])[0].string)
        }
    }

    /// Waits until `to` has received every id in `ids` from `from`; then checks each arrived once.
    private func assertReceivedOnce(_ ids: [String], by to: TestPeer, from: TestPeer, timeout: Double = 30,
                                    file: StaticString = #filePath, line: UInt = #line) {
        let wanted = Set(ids)
        let all = eventually(timeout: timeout) {
            dispatchEvents(for: 0.05)
            return wanted.isSubset(of: Set(to.client.signals("MessageReceived").map { $0.string(1) }))
        }
        XCTAssertTrue(all, "\(to.name) is missing \(wanted.subtracting(to.client.signals("MessageReceived").map { $0.string(1) }).count) of \(ids.count) messages", file: file, line: line)
        let received = to.client.signals("MessageReceived").filter { wanted.contains($0.string(1)) }
        XCTAssertEqual(received.count, ids.count, "a message arrived twice", file: file, line: line)
        XCTAssertEqual(Set(received.map { $0.string(0) }), [from.id], "received under another name", file: file, line: line)
        let stored = (try? to.client.call("History", [Variant(from.id), Variant(UInt32(1000))])[0].children.map { $0[0].string! }) ?? []
        XCTAssertTrue(wanted.isSubset(of: Set(stored)), "not all in History", file: file, line: line)
    }

    private func assertDelivered(_ ids: [String], by from: TestPeer, timeout: Double = 30,
                                 file: StaticString = #filePath, line: UInt = #line) {
        let wanted = Set(ids)
        XCTAssertTrue(eventually(timeout: timeout) {
            dispatchEvents(for: 0.05)
            return wanted.isSubset(of: Set(from.client.signals("MessageDelivered").map { $0.string(1) }))
        }, "\(from.name) did not report every message delivered", file: file, line: line)
        XCTAssertEqual(from.client.signals("MessageDelivered").filter { wanted.contains($0.string(1)) }.count, ids.count,
                       "MessageDelivered twice", file: file, line: line)
    }

    // MARK: The reported loss

    /// The defect a second implementation found: B listens, A does not (most laptops). A
    /// disconnects and connects again from a new source port; B used to name A anew, ask its
    /// person again, restart its numbering and see A drop the messages as duplicates while
    /// acknowledging them. Now A is its key: the same id, nobody asked, every message once,
    /// both ways, also across A's restart.
    /// A dial to an address where nothing listens: its found object comes and goes with it (an
    /// app that shows the objects keeps no row for it).
    func testAFailedDialLeavesNoFoundObject() throws {
        let alpha = try makePeer("alpha")
        let nowhere = "ip:127.0.0.1:\(try freeTCPPort())"
        XCTAssertNotNil(alpha.client.errorName("Connect", [Variant(nowhere)]))
        let managed = try alpha.client.connection.call(destination: APIClient.name, path: APIClient.path,
                                                       interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
        XCTAssertEqual(managed[0].children.count, 0, "objects after the dial failed: \(managed)")
    }

    func testReconnectingFromNewPortsAsksNobodyAndLosesNothing() throws {
        let b = try makePeer("bob")
        let a = try makePeer("alice", listens: false)
        try pair(a, b)
        let first = try send(1, from: b, to: a.id, tag: "m1")
        assertReceivedOnce(first, by: a, from: b)
        var fromB = first, fromA: [String] = []

        for round in 1...3 {
            let markA = a.mark, markB = b.mark
            if round == 3 {
                // A restarted in between: same key, same instance, a new port again.
                a.kill()
                XCTAssertNotNil(b.waitForState("disconnected", of: a.id, after: markB, timeout: 10))
                try a.restart()
            } else {
                try a.client.call("Disconnect", [Variant(b.id)])
                XCTAssertNotNil(b.waitForState("disconnected", of: a.id, after: markB, timeout: 10))
            }
            XCTAssertEqual(try a.client.call("Connect", [Variant(b.address)], timeout: .seconds(30))[0].string, b.id)
            XCTAssertNotNil(b.waitForState("connected", of: a.id, after: markB, timeout: 10), "round \(round)")
            let ids = try send(40, from: b, to: a.id, tag: "round \(round) from B")
            let back = try send(40, from: a, to: b.address, tag: "round \(round) from A")
            assertReceivedOnce(ids, by: a, from: b)
            assertReceivedOnce(back, by: b, from: a)
            assertDelivered(ids, by: b)
            assertDelivered(back, by: a)
            fromB += ids
            fromA += back
            XCTAssertEqual(a.pairingRequests(after: markA).count, 0, "round \(round): A was asked again")
            XCTAssertEqual(b.pairingRequests(after: markB).count, 0, "round \(round): B was asked again (one-sided prompt)")
            XCTAssertEqual(Set(b.client.signals[markB...].filter { $0.member == "PeerStateChanged" }.map { $0.string(0) }), [a.id],
                           "round \(round): B named A by something other than its id")
        }
        XCTAssertEqual(try b.client.call("ListPeers")[0].count, 1, "one row for A, whatever ports it came from")
        XCTAssertEqual(try b.client.call("History", [Variant(a.id), Variant(UInt32(1000))])[0].count, fromB.count + fromA.count)
        print("reconnects: \(fromB.count) messages B→A and \(fromA.count) A→B, each received once")
    }

    /// 1,000 messages while A reconnects three times from new ports: 0 lost, 0 duplicated.
    func testAThousandMessagesAcrossThreeReconnectsArriveExactlyOnce() throws {
        let b = try makePeer("bob")
        let a = try makePeer("alice", listens: false)
        try pair(a, b)
        var ids: [String] = []
        for round in 0..<4 {
            ids += try send(250, from: b, to: a.id, tag: "batch \(round)")
            guard round < 3 else { break }
            let markB = b.mark
            try a.client.call("Disconnect", [Variant(b.id)])
            XCTAssertNotNil(b.waitForState("disconnected", of: a.id, after: markB, timeout: 10))
            try a.client.call("Connect", [Variant(b.id)], timeout: .seconds(30))
        }
        assertReceivedOnce(ids, by: a, from: b, timeout: 60)
        assertDelivered(ids, by: b, timeout: 60)
        let received = a.client.signals("MessageReceived").map { $0.string(1) }
        XCTAssertEqual(received, ids, "in order")
        XCTAssertEqual(b.pairingRequests().count, 1, "B was asked only at the first contact")
    }

    // MARK: Any route, one peer

    /// B moves from 127.0.0.1 to 127.0.0.2 (a new DHCP lease). Its key arrives from the new
    /// address: the same peer to A, nobody asked, and the messages A queued meanwhile arrive once.
    func testAPeerThatMovesToAnotherAddressKeepsItsIDAndItsQueue() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob", port: try freeTCPPort())
        try pair(a, b)
        let oldAddress = b.address
        let markA = a.mark
        XCTAssertEqual(b.stop(), 0)
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markA, timeout: 10))
        let queued = try send(5, from: a, to: b.id, tag: "while away")
        try b.restart(onHost: "127.0.0.2")
        XCTAssertNotEqual(b.address, oldAddress)

        // B's person reconnects; A knows the key, not the address.
        let markB = b.mark
        XCTAssertEqual(try b.client.call("Connect", [Variant(a.id)], timeout: .seconds(30))[0].string, a.id)
        assertReceivedOnce(queued, by: b, from: a)
        assertDelivered(queued, by: a)
        XCTAssertEqual(a.pairingRequests(after: markA).count, 0, "A asked about a key it has pinned")
        XCTAssertEqual(b.pairingRequests(after: markB).count, 0)
        let rows = try a.client.call("ListPeers")[0].children
        XCTAssertEqual(rows.map { $0[0].string! }, [b.id], "one row per device")
        XCTAssertEqual(rows.first?[3].string, "connected")
        // The new address is a route now: A can name B by it.
        let reply = try a.client.call("Send", [Variant("ip:127.0.0.2:\(b.port)"), Variant("by the new address")])
        assertReceivedOnce([try XCTUnwrap(reply[0].string)], by: b, from: a)
    }

    // MARK: Both people or nobody

    /// After RemovePeer on one side only, the next contact asks both people, with one code, whichever
    /// side dials: the side that still has the key pinned hears that the other is asking.
    func testRemovePeerOnOneSideAsksBothPeopleWithTheSameCode() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)

        // A forgets B and dials B's address.
        try a.client.call("RemovePeer", [Variant(b.id)])
        XCTAssertNotNil(b.waitForState("disconnected", of: a.id, timeout: 10))
        let again = a.pair(with: b)
        XCTAssertEqual(again.dialler?.string(0), b.id)
        XCTAssertEqual(again.dialled?.string(0), a.id, "B, which still had A pinned, was not asked")
        XCTAssertTrue(Pairing.isPasskey(again.passkeys.dialler))
        XCTAssertEqual(again.passkeys.dialler, again.passkeys.dialled, "the two people were shown different codes")
        XCTAssertEqual(try again.connect.get()[0].string, b.id)
        assertReceivedOnce(try send(1, from: a, to: b.id, tag: "paired again"), by: b, from: a)

        // B forgets A; A (which has B pinned) dials B by id: B asks, so A asks too.
        let markA = a.mark, markB2 = b.mark
        try b.client.call("RemovePeer", [Variant(a.id)])
        XCTAssertNotNil(a.waitForState("disconnected", of: b.id, after: markA, timeout: 10))
        let connect = a.client.callAsync("Connect", [Variant(b.id)])
        let promptA = try XCTUnwrap(a.pairingRequest(for: b.id, after: markA, timeout: 15), "A, the pinned side, was not asked")
        let promptB = try XCTUnwrap(b.pairingRequest(for: a.id, after: markB2, timeout: 15))
        XCTAssertEqual(promptA.string(2), promptB.string(2))
        try a.client.call("ConfirmPairing", [Variant(b.id), Variant(true)])
        XCTAssertFalse(eventually(timeout: 1) { connect.isDone }, "the link opened before B's person answered")
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        eventually(timeout: 10) { connect.isDone }
        XCTAssertEqual(try connect.result?.get()[0].string, b.id)

        // And when the pinned side's person says no, nobody connects.
        let markB = b.mark
        try a.client.call("RemovePeer", [Variant(b.id)])
        XCTAssertNotNil(b.waitForState("disconnected", of: a.id, after: markB, timeout: 10))
        let refused = a.pair(with: b, accept: true, otherAccepts: false)
        XCTAssertNotNil(refused.dialled, "B was not asked")
        guard case .failure(let error) = refused.connect else { return XCTFail("Connect succeeded though B's person said no") }
        XCTAssertEqual(error.name, "org.example.PeerVoice.Error.Rejected", error.message)
        XCTAssertFalse(b.client.signals[markB...].contains { $0.member == "PeerStateChanged" && $0.string(1) == "connected" })
    }

    /// Both sides dial each other at the same moment: two links open, both sides keep the same one.
    func testTwoLinksAtOnceResolveToOne() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)
        for _ in 0..<3 {
            let markA = a.mark, markB = b.mark
            try a.client.call("Disconnect", [Variant(b.id)])
            XCTAssertNotNil(b.waitForState("disconnected", of: a.id, after: markB, timeout: 10))
            let fromA = a.client.callAsync("Connect", [Variant(b.id)], timeout: 30)
            let fromB = b.client.callAsync("Connect", [Variant(a.id)], timeout: 30)
            eventually(timeout: 20) { fromA.isDone && fromB.isDone }
            XCTAssertEqual(try fromA.result?.get()[0].string, b.id)
            XCTAssertEqual(try fromB.result?.get()[0].string, a.id)
            // Settled: connected on both sides, and it stays so (no link keeps replacing the other).
            dispatchEvents(for: 1)
            XCTAssertEqual(a.states(of: b.id, after: markA).last, "connected")
            XCTAssertEqual(b.states(of: a.id, after: markB).last, "connected")
            XCTAssertEqual(try a.client.call("ListPeers")[0].children.map { $0[3].string! }, ["connected"])
            let ids = try send(20, from: a, to: b.id, tag: "after both dialled")
            assertReceivedOnce(ids, by: b, from: a)
        }
    }

    // MARK: Peer objects

    /// The tree has one object per ListPeers row and follows every change: a device being dialled
    /// under its address, the peer under its id once the key is known, its state as it changes.
    /// A paired peer's volume and mute here (`SetVolume`, `SetPeerMuted`) are kept across a
    /// restart with the same state directory: its peer object, there from the start, shows them
    /// again, and unmuting is kept as well.
    func testAPeersVolumeAndMuteHereSurviveARestart() throws {
        let a = try makePeer("alice"), b = try makePeer("bob")
        try pair(a, b)
        let path = "/org/example/PeerVoice/peers/" + b.id.dropFirst(3)
        let playback = { () -> (volume: Double?, muted: Bool?) in
            let object = try? a.client.peerObjects()[path]
            return (object?.lookup("Volume")?.double, object?.lookup("Muted")?.bool)
        }
        try a.client.call("SetVolume", [Variant(b.id), Variant(0.25)])
        try a.client.call("SetPeerMuted", [Variant(b.id), Variant(true)])
        XCTAssertEqual(playback().muted, true)
        XCTAssertEqual(a.stop(), 0)
        try a.restart()
        XCTAssertEqual(playback().volume, 0.25, "the volume was not kept")
        XCTAssertEqual(playback().muted, true, "the mute was not kept")

        try a.client.call("SetPeerMuted", [Variant(b.id), Variant(false)])
        XCTAssertEqual(a.stop(), 0)
        try a.restart()
        XCTAssertEqual(playback().muted, false, "the unmute was not kept")
        XCTAssertEqual(playback().volume, 0.25)
    }

    func testThePeerObjectsMatchListPeersAndFollowEveryChange() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        XCTAssertEqual(try a.client.peerObjects().count, 0)
        let markA = a.mark
        let connect = a.client.callAsync("Connect", [Variant(b.address)])
        // While the key is unknown, the device is a found object under its address.
        let added = try XCTUnwrap(a.client.waitForSignalIndex("InterfacesAdded", after: markA, timeout: 10))
        let foundPath = a.client.signals[added].arguments[0].string ?? ""
        XCTAssertTrue(foundPath.hasPrefix("/org/example/PeerVoice/found/ip_"), foundPath)
        // Once the key is known, PeerIdentified; then the found object goes and the peer's comes.
        XCTAssertNotNil(a.pairingRequest(for: b.id, after: markA, timeout: 15))
        let identified = try XCTUnwrap(a.client.waitForSignalIndex("PeerIdentified", after: markA) { $0.string(1) == b.id })
        let removed = try XCTUnwrap(a.client.waitForSignalIndex("InterfacesRemoved", after: markA) { $0.arguments[0].string == foundPath })
        let peerPath = "/org/example/PeerVoice/peers/" + b.id.dropFirst(3)
        let addedPeer = try XCTUnwrap(a.client.waitForSignalIndex("InterfacesAdded", after: markA) { $0.arguments[0].string == peerPath })
        XCTAssertLessThan(identified, removed)
        XCTAssertLessThan(removed, addedPeer)
        XCTAssertLessThan(addedPeer, a.client.signals.firstIndex { $0.member == "PairingRequested" } ?? -1)
        try a.client.call("ConfirmPairing", [Variant(b.id), Variant(true)])
        XCTAssertNotNil(b.pairingRequest(for: a.id, timeout: 15))
        try b.client.call("ConfirmPairing", [Variant(a.id), Variant(true)])
        eventually(timeout: 10) { connect.isDone }
        XCTAssertNoThrow(try connect.result?.get())

        let fingerprint = try XCTUnwrap(try b.client.property("Fingerprint").string)
        XCTAssertTrue(eventually(timeout: 5) {
            dispatchEvents(for: 0.05)
            return (try? a.client.peerObjects()[peerPath]?.lookup("State")?.string) == "connected"
        })
        let objects = try a.client.peerObjects()
        XCTAssertEqual(Array(objects.keys), [peerPath], "one object per ListPeers row")
        let object = try XCTUnwrap(objects[peerPath])
        XCTAssertEqual(object.lookup("Id")?.string, b.id)
        XCTAssertEqual(object.lookup("Name")?.string, "bob")
        XCTAssertEqual(object.lookup("Transport")?.string, "ip")
        XCTAssertEqual(object.lookup("Paired")?.bool, true)
        XCTAssertEqual(object.lookup("Fingerprint")?.string, fingerprint, "A shows the key B's own service shows")
        XCTAssertEqual(object.lookup("Routes")?.children.map { $0[1].string! }, [b.address])
        let rows = try a.client.call("ListPeers")[0].children
        XCTAssertEqual(rows.map { [$0[0].string!, $0[1].string!, $0[3].string!] }, [[b.id, "bob", "connected"]])

        // A change of state is one PropertiesChanged on the peer's object.
        var changes: [BusSignal] = []
        let subscription = a.client.connection.subscribe(interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                                         path: peerPath) { changes.append($0) }
        let markChange = a.mark
        try a.client.call("Disconnect", [Variant(b.id)])
        XCTAssertTrue(eventually(timeout: 5) { !changes.isEmpty })
        XCTAssertEqual(changes.first?.arguments[1].lookup("State")?.string, "disconnected")
        withExtendedLifetime(subscription) {}
        // RemovePeer removes the object.
        try a.client.call("RemovePeer", [Variant(b.id)])
        XCTAssertNotNil(a.client.waitForSignalIndex("InterfacesRemoved", after: markChange) { $0.arguments[0].string == peerPath })
        XCTAssertEqual(try a.client.peerObjects().count, 0)
    }

    // MARK: Migration

    /// A protocol-version-3 state directory, where A named B by two addresses, each with its own
    /// journal and numbering, and messages queued under both: on the first start A merges them
    /// into B's id, keeps what was delivered, and the queued messages reach B exactly once.
    func testAVersion3StateDirectoryIsMigratedAndItsQueueDelivered() throws {
        let a = try makePeer("alice")
        let b = try makePeer("bob")
        try pair(a, b)
        let delivered = try send(3, from: a, to: b.id, tag: "before")
        assertDelivered(delivered, by: a)
        let bID = b.id
        XCTAssertEqual(a.stop(), 0)

        // Rewrite A's state as protocol version 3 wrote it: peers by address, journals by address.
        let state = a.daemon.stateDirectory
        let messages = state + "/messages"
        let stem = { (name: String) in name.utf8.map { String(format: "%02x", $0) }.joined() }
        try FileManager.default.moveItem(atPath: messages + "/" + stem(bID) + ".pvj", toPath: messages + "/" + stem(b.address) + ".pvj")
        let otherAddress = "ip:127.0.0.1:1"
        var queued: [String] = []
        do {
            let store = try MessageStore(directory: messages)
            for (index, name) in [b.address, otherAddress, b.address].enumerated() {
                let id = MessageID.random().hex
                _ = try store.enqueue(peer: name, id: id, text: "queued in version 3, \(index)",
                                      nowMs: UInt64(Date().timeIntervalSince1970 * 1000) + UInt64(index))
                queued.append(id)
            }
        }
        let key = try XCTUnwrap(try b.client.property("Fingerprint").string).replacingOccurrences(of: " ", with: "")
        let version3 = """
            [{"id":"\(b.address)","name":"bob","redialable":true,"key":"\(key)","stayDisconnected":false},
             {"id":"\(otherAddress)","name":"bob","redialable":false,"key":"\(key)","stayDisconnected":false}]
            """
        try Data(version3.utf8).write(to: URL(fileURLWithPath: state + "/peers.json"))

        let markB = b.mark
        try a.restart()
        XCTAssertTrue(a.log.contains("migrated the state directory"), a.log)
        XCTAssertEqual(try a.client.call("ListPeers")[0].children.map { $0[0].string! }, [bID])
        // A redials B on the migrated route by itself (messages wait) and delivers them once.
        assertReceivedOnce(queued, by: b, from: a)
        assertDelivered(queued, by: a)
        let receivedInOrder = b.client.signals[markB...].filter { $0.member == "MessageReceived" }.map { $0.string(1) }
        XCTAssertEqual(receivedInOrder, queued, "renumbered in the order they were accepted")
        XCTAssertEqual(b.pairingRequests(after: markB).count, 0)
        let history = try a.client.call("History", [Variant(bID), Variant(UInt32(20))])[0].children
        XCTAssertEqual(history.map { $0[0].string! }, delivered + queued)
        XCTAssertTrue(history.allSatisfy { $0[1].string == "delivered" })
        let file = try String(contentsOfFile: state + "/peers.json", encoding: .utf8)
        XCTAssertTrue(file.contains(#""format":4"#), file)
    }
}
