import Foundation
import GIO
import PeerVoiceCore
import TestHarness
import XCTest

/// Version negotiation with a real peervoiced (docs/PROTOCOL.md §3): peers of other versions
/// built from the core (`SecureLink` announcing what a version-6, a newer or a too-old side
/// announces), a relay that edits a preamble on the way, and the words a person gets. The real
/// previous release is tests/old-release/ (make test-old-release).
final class VersionTests: XCTestCase {
    private let started = StartedPeers()
    private var relays: [Relay] = []
    private static let notAvailable = "org.example.PeerVoice.Error.NotAvailable"

    override func tearDown() {
        relays.forEach { $0.stop() }
        started.shutdown(printingLogs: (testRun?.totalFailureCount ?? 0) > 0)
        relays = []
    }

    private func range(_ lowest: UInt16, _ highest: UInt16) -> VersionRange { VersionRange(lowest: lowest, highest: highest)! }

    /// A peer built from the core that announces `versions` in its preamble and `capabilities` in
    /// its HELLO, paired with `b` (first contact, both accept): the link is open when it returns.
    private func pairedPeer(with b: TestPeer, versions: VersionRange, capabilities: Capabilities,
                            name: String = "other") throws -> (link: SecureLink, id: String) {
        let mark = b.mark
        let link = try SecureLink.connect(port: b.port, hello: SecureLink.makeHello(name: name, capabilities: capabilities))
        link.preamble = Preamble.bytes(announcing: versions)
        try link.runHandshake()
        let id = SecureLink.peerID(of: link.identity)
        XCTAssertNotNil(b.pairingRequest(for: id, after: mark), b.log)
        try b.client.call("ConfirmPairing", [Variant(id), Variant(true)])
        try link.sendPairing(.asking)
        try link.sendPairing(.accept)
        XCTAssertEqual(try link.awaitPairing(timeout: 5).decision, .accept)
        XCTAssertNotNil(b.waitForState("connected", of: id, after: mark), b.log)
        return (link, id)
    }

    /// Frames from `link` up to B's TEXT (B sends one now, after everything it sent on opening).
    private func framesUpToAText(from b: TestPeer, to id: String, over link: SecureLink) throws -> [Frame] {
        try b.client.call("Send", [Variant(id), Variant("marker")])
        return try link.receive(timeout: 10) { if case .text = $0 { true } else { false } }
    }

    // MARK: Versions that meet

    /// A version-6 side (the previous release) announces 6 alone and text and voice: the link runs
    /// at 6, and what version 6 has without announcing it (PRESENCE) flows both ways.
    func testAVersion6PeerGetsAVersion6LinkWithWhatVersion6Has() throws {
        let b = try started.make("bob")
        let (link, id) = try pairedPeer(with: b, versions: VersionRange(only: 6), capabilities: [.text, .voice])
        XCTAssertTrue(eventually(timeout: 5) { b.log.contains("\(id) connected (incoming over ip, protocol 6 with text messages, voice, presence, hosted calls") }, b.log)
        let frames = try framesUpToAText(from: b, to: id, over: link)
        XCTAssertTrue(frames.contains { if case .presence = $0 { true } else { false } }, "B sent no PRESENCE to a version-6 peer: \(frames)")

        let mark = b.mark
        try link.send(.presence(secret: [UInt8](repeating: 7, count: 32)))
        try link.sendText(seq: 1, previousSeq: 0, text: "from version 6")
        XCTAssertNotNil(b.client.waitForSignalIndex("MessageReceived", after: mark, timeout: 5) { $0.string(2) == "from version 6" })
        XCTAssertNil(b.client.signals[mark...].first { $0.member == "PeerStateChanged" && $0.string(1) == "disconnected" })
    }

    /// A side of version 8 (the dial proof, before file transfers) links at 8 with channels, and
    /// `SendFiles` to it fails at once in words that say which side to update.
    func testSendFilesToAVersion8PeerIsNotAvailableAndSaysToUpdateIt() throws {
        let b = try started.make("bob")
        let (link, id) = try pairedPeer(with: b, versions: range(6, 8), capabilities: [.text, .channels, .highestVersion(8)],
                                        name: "eight")
        defer { link.close() }
        XCTAssertTrue(eventually(timeout: 5) { b.log.contains("\(id) connected (incoming over ip, protocol 8 with text messages, app channels, key") }, b.log)
        let file = NSTemporaryDirectory() + "peervoice-version8-\(getpid()).txt"
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data("hello".utf8)))
        defer { try? FileManager.default.removeItem(atPath: file) }
        do {
            _ = try TransferWatch(b.client).send([file], to: id)
            XCTFail("SendFiles to a version-8 peer succeeded")
        } catch {
            XCTAssertEqual(error.name, Self.notAvailable)
            XCTAssertEqual(error.message, "eight runs PeerVoice protocol 8; file transfers came with protocol 9: update it")
        }
    }

    /// A link at version 10 seals its records with XChaCha20-Poly1305, one at 11 with AES-256-GCM
    /// (the peer built from the core picks the cipher from the agreed version, as the daemon does):
    /// text goes both ways on each, so the daemon sealed and opened with the same cipher.
    func testAVersion10LinkSealsWithXChaChaAndAVersion11LinkWithAESGCM() throws {
        let b = try started.make("bob")
        for (versions, cipher) in [(range(6, 10), LinkCipher.Algorithm.xChaCha20Poly1305), (range(6, 11), .aes256GCM)] {
            let (link, id) = try pairedPeer(with: b, versions: versions, capabilities: Capabilities.text.union(.highestVersion(versions.highest)),
                                            name: "v\(versions.highest)")
            defer { link.close() }
            XCTAssertEqual(link.recordCipher, cipher)
            XCTAssertTrue(eventually(timeout: 5) { b.log.contains("\(id) connected (incoming over ip, protocol \(versions.highest) with text messages, key") }, b.log)
            _ = try framesUpToAText(from: b, to: id, over: link)
            let mark = b.mark
            try link.sendText(seq: 1, previousSeq: 0, text: "sealed with \(cipher)")
            XCTAssertNotNil(b.client.waitForSignalIndex("MessageReceived", after: mark, timeout: 5) { $0.string(2) == "sealed with \(cipher)" })
        }
    }

    /// A side of this version that does not announce presence gets no PRESENCE, and a PRESENCE from it
    /// is a frame of a feature its link does not carry: GOODBYE with reason 2.
    func testAFeatureOnlyOneSideAnnouncedStaysOffTheLink() throws {
        let b = try started.make("bob")
        let (link, id) = try pairedPeer(with: b, versions: .supported,
                                        capabilities: Capabilities.text.union(.highestVersion(Wire.protocolVersion)))
        XCTAssertTrue(eventually(timeout: 5) { b.log.contains("\(id) connected (incoming over ip, protocol \(Wire.protocolVersion) with text messages, key") }, b.log)
        let frames = try framesUpToAText(from: b, to: id, over: link)
        XCTAssertFalse(frames.contains { if case .presence = $0 { true } else { false } }, "B sent PRESENCE to a peer without it: \(frames)")

        try link.send(.presence(secret: [UInt8](repeating: 7, count: 32)))
        let end = try link.receive(timeout: 5) { if case .goodbye = $0 { true } else { false } }
        XCTAssertEqual(end.last, .goodbye(.protocolError))
        XCTAssertTrue(eventually(timeout: 5) { b.log.contains("frame type 0xa on a link at protocol \(Wire.protocolVersion) that does not carry it") }, b.log)
    }

    /// A peer that speaks a newer version too links at this build's; a frame type this side does not know
    /// is skipped, and what follows it arrives. From a peer of this side's own version the same
    /// frame ends the link, as it always did.
    func testAnUnknownFrameFromANewerPeerIsSkipped() throws {
        let b = try started.make("bob")
        let next = Wire.protocolVersion + 1
        let (newer, newerID) = try pairedPeer(with: b, versions: range(6, next),
                                              capabilities: Capabilities.text.union(.highestVersion(next)), name: "newer")
        XCTAssertTrue(eventually(timeout: 5) { b.log.contains("\(newerID) connected (incoming over ip, protocol \(Wire.protocolVersion)") }, b.log)
        var mark = b.mark
        try newer.send(body: [0x7E, 1, 2, 3])
        try newer.sendText(seq: 1, previousSeq: 0, text: "after a frame of a newer version")
        XCTAssertNotNil(b.client.waitForSignalIndex("MessageReceived", after: mark, timeout: 5) { $0.string(2) == "after a frame of a newer version" })
        XCTAssertNil(b.client.signals[mark...].first { $0.member == "PeerStateChanged" && $0.string(1) == "disconnected" })

        let (same, sameID) = try pairedPeer(with: b, versions: .supported,
                                            capabilities: Capabilities.text.union(.highestVersion(Wire.protocolVersion)), name: "same")
        mark = b.mark
        try same.send(body: [0x7E, 1, 2, 3])
        let end = try same.receive(timeout: 5) { if case .goodbye = $0 { true } else { false } }
        XCTAssertEqual(end.last, .goodbye(.protocolError))
        XCTAssertNotNil(b.waitForState("disconnected", of: sameID, after: mark))
    }

    // MARK: Versions that do not meet

    /// B dials an address where a side answers with `preamble`: Connect fails with NotAvailable
    /// in words; the other side got B's preamble and nothing more (message 1 waits for the
    /// peer's preamble, which shares no version), and B closed the stream.
    private func connectFails(_ b: TestPeer, answeringWith preamble: [UInt8]) throws -> String {
        let listener = try TCPListener()
        defer { listener.close() }
        let address = "ip:127.0.0.1:\(listener.port)"
        let connect = b.client.callAsync("Connect", [Variant(address)])
        let stream = try XCTUnwrap(try listener.accept(timeout: 10), "B did not dial")
        defer { stream.close() }
        try stream.send(preamble)
        let end = stream.readUntilEnd(timeout: 5)
        XCTAssertEqual(Array(end.bytes.prefix(8)), Preamble.bytes)
        XCTAssertEqual(end.bytes.count, 8, "B's preamble, nothing more")
        XCTAssertEqual(end.ending, .closed)
        XCTAssertTrue(eventually(timeout: 5) { connect.isDone })
        guard case .failure(let error)? = connect.result else {
            XCTFail("Connect(\(address)) did not fail: \(String(describing: connect.result))")
            return ""
        }
        XCTAssertEqual(error.name, Self.notAvailable, error.message)
        return error.message.replacingOccurrences(of: address, with: "ADDRESS")
    }

    func testATooOldPeerIsRefusedInWordsThatSayWhichSideToUpdate() throws {
        let b = try started.make("bob")
        XCTAssertEqual(try connectFails(b, answeringWith: Array("PVLK".utf8) + [0, 5, 0, 0]),
                       "ADDRESS runs PeerVoice protocol 5; this one needs 6 or later: update it")
        // The same side dialling B: B answers with its preamble and closes; its log says why.
        let stream = try TCPStream.connect(port: b.port)
        try stream.send(Array("PVLK".utf8) + [0, 5, 0, 0])
        let end = stream.readUntilEnd(timeout: 5)
        XCTAssertEqual(end.bytes, Preamble.bytes)
        XCTAssertEqual(end.ending, .closed)
        XCTAssertTrue(eventually(timeout: 5) { b.log.contains("peer speaks protocol version 5; this side speaks versions \(VersionRange.supported)") }, b.log)
    }

    /// The two versions after this build's newest.
    private static let newer = VersionRange(lowest: Wire.protocolVersion + 1, highest: Wire.protocolVersion + 2)!

    func testATooNewPeerIsRefusedInWordsThatSayWhichSideToUpdate() throws {
        let b = try started.make("bob")
        XCTAssertEqual(try connectFails(b, answeringWith: Preamble.bytes(announcing: Self.newer)),
                       "ADDRESS runs PeerVoice protocol \(Self.newer) only; this one speaks \(VersionRange.supported): update this one")
    }

    /// A paired peer that comes back speaking only newer versions: B's Connect by its id fails
    /// with NotAvailable naming it, its object shows State disconnected and StateReason in the
    /// same words (in the PropertiesChanged that follows PeerStateChanged), and the next link
    /// clears it.
    func testAPairedPeerThatNoLongerSharesAVersionShowsWhyOnItsObject() throws {
        let b = try started.make("bob")
        let listener = try TCPListener()
        defer { listener.close() }
        var mark = b.mark
        let link = try SecureLink.connect(port: b.port, hello: SecureLink.makeHello(name: "carol", listenPort: listener.port))
        try link.runHandshake()
        let id = SecureLink.peerID(of: link.identity)
        XCTAssertNotNil(b.pairingRequest(for: id, after: mark))
        try b.client.call("ConfirmPairing", [Variant(id), Variant(true)])
        try link.sendPairing(.asking)
        try link.sendPairing(.accept)
        XCTAssertEqual(try link.awaitPairing(timeout: 5).decision, .accept)
        XCTAssertNotNil(b.waitForState("connected", of: id, after: mark))
        mark = b.mark
        link.close()
        XCTAssertNotNil(b.waitForState("disconnected", of: id, after: mark, timeout: 10))

        // carol updated past this side: B dials her known route, she answers with newer versions only.
        let path = "/org/example/PeerVoice/peers/" + id.dropFirst("pv:".count)
        var objectChanges: [BusSignal] = []
        let subscription = b.client.connection.subscribe(member: "PropertiesChanged", path: path) { objectChanges.append($0) }
        defer { withExtendedLifetime(subscription) {} }
        mark = b.mark
        let connect = b.client.callAsync("Connect", [Variant(id)])
        let stream = try XCTUnwrap(try listener.accept(timeout: 10), "B did not dial carol's route")
        try stream.send(Preamble.bytes(announcing: Self.newer))
        XCTAssertEqual(stream.readUntilEnd(timeout: 5).ending, .closed)
        stream.close()
        XCTAssertTrue(eventually(timeout: 5) { connect.isDone })
        let words = "carol (\(id)) runs PeerVoice protocol \(Self.newer) only; this one speaks \(VersionRange.supported): update this one"
        guard case .failure(let error)? = connect.result else { return XCTFail("Connect succeeded: \(String(describing: connect.result))") }
        XCTAssertEqual(error.name, Self.notAvailable)
        XCTAssertEqual(error.message, words)
        // A PropertiesChanged of carol's first disconnection may still arrive after the
        // subscription: wait for the one that carries the reason.
        XCTAssertTrue(eventually(timeout: 5) {
            objectChanges.contains { $0.arguments[1].lookup("State")?.string == "disconnected" && $0.arguments[1].lookup("StateReason")?.string == words }
        })
        let changed = objectChanges.last { $0.arguments[1].lookup("State") != nil }
        XCTAssertEqual(changed?.arguments[1].lookup("State")?.string, "disconnected")
        XCTAssertEqual(changed?.arguments[1].lookup("StateReason")?.string, words, "State and StateReason change together")
        let states = b.states(of: id, after: mark)
        XCTAssertEqual(states.last, "disconnected", "\(states)")

        // She is back on this build's versions: the next link clears the reason.
        mark = b.mark
        objectChanges = []
        let again = try SecureLink.connect(port: b.port, identity: link.identity,
                                           hello: SecureLink.makeHello(name: "carol", listenPort: listener.port))
        try again.runHandshake()
        try again.sendPairing(.known)
        XCTAssertEqual(try again.awaitPairing(timeout: 5).decision, .known)
        XCTAssertNotNil(b.waitForState("connected", of: id, after: mark))
        XCTAssertTrue(eventually(timeout: 5) { objectChanges.contains { $0.arguments[1].lookup("StateReason")?.string == "" } },
                      "StateReason was not cleared: \(objectChanges.map(\.arguments))")
    }

    /// A relay that lowers the preambles to "6 only" (a man in the middle forcing the older
    /// version). One side's edited: the two sides lay message 1 out differently (from version 8 it
    /// carries the dial proof), so the key exchange fails at message 1. Both edited: both run the
    /// key exchange at 6, and each finds the peer's HELLO naming this build's version and ends the
    /// link before asking its person anything. The link never opens.
    func testAPreambleEditedOnTheWayIsFoundOutAndTheLinkEnds() throws {
        let a = try started.make("alice")
        let b = try started.make("bob")
        let oldest = Preamble.bytes(announcing: VersionRange(only: 6))
        for edited in [[Relay.Direction.fromClient], [.fromServer], [.fromClient, .fromServer]] {
            let relay = try Relay(targetPort: b.port, preambles: Dictionary(uniqueKeysWithValues: edited.map { ($0, oldest) }))
            relays.append(relay)
            let markA = a.mark, markB = b.mark
            let connect = a.client.callAsync("Connect", [Variant(relay.address)])
            XCTAssertTrue(eventually(timeout: 15) { connect.isDone }, a.log)
            guard case .failure(let error)? = connect.result else { return XCTFail("Connect through an edited preamble succeeded") }
            if edited.count == 2 {
                for side in [a, b] {
                    XCTAssertTrue(eventually(timeout: 5) {
                        side.log.contains("the peer's preamble announced protocol versions up to 6 but its authenticated HELLO says \(Wire.protocolVersion): the preamble was altered on the way")
                    }, "\(edited): \(side.log)")
                }
            }
            print("\(edited) edited: A's Connect failed: \(error.name): \(error.message)")
            XCTAssertTrue(a.pairingRequests(after: markA).isEmpty && b.pairingRequests(after: markB).isEmpty, "\(edited): a person was asked")
            XCTAssertFalse(a.client.signals[markA...].contains { $0.member == "PeerStateChanged" && $0.string(1) == "connected" })
        }
    }
}
