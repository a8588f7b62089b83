import Foundation
import PeerVoiceCore
import XCTest

/// A protocol-version-3 state directory (peers named by address) becomes peers named by key:
/// `PeerDirectory` merges entries by pinned key, `MessageStore.merge` their journals.
final class MigrationTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("MigrationTests-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private let keyA = String(repeating: "a1", count: 32)
    private let keyB = String(repeating: "b2", count: 32)
    /// Ids from a stand-in derivation: the first 26 hex digits of the key, spelt in base32's digits.
    private func id(of key: PublicKey) -> PeerID {
        PeerID("pv:" + String(key.hex.prefix(26).map { $0.isNumber ? Character(Unicode.Scalar(UInt8(ascii: "a") + UInt8(String($0))!)) : $0 }))!
    }
    private func messageID(_ n: Int) -> String { String(format: "%032x", n) }

    func testVersion3PeersWithOneKeyBecomeOnePeerWithTheirAddressesAsRoutes() throws {
        let path = directory + "/peers.json"
        let old = """
            [{"id":"ip:192.168.1.20:47800","name":"laptop","instance":"\(String(repeating: "0f", count: 16))","redialable":true,"key":"\(keyA)","stayDisconnected":false},
             {"id":"ip:192.168.1.20:51234","name":"laptop","redialable":false,"key":"\(keyA)","stayDisconnected":true},
             {"id":"AA:BB:CC:DD:EE:FF","name":"laptop (bt)","redialable":true,"key":"\(keyA)","stayDisconnected":true},
             {"id":"ip:10.0.0.9:47800","name":"phone","redialable":true,"key":"\(keyB)","stayDisconnected":true},
             {"id":"ip:10.0.0.7:47800","name":"never paired","redialable":true,"stayDisconnected":false}]
            """
        try Data(old.utf8).write(to: URL(fileURLWithPath: path))
        let directory = try PeerDirectory(path: path, idOf: id(of:))
        let migration = try XCTUnwrap(directory.migration)
        let a = try XCTUnwrap(directory[id(of: PublicKey(hex: keyA)!)])
        XCTAssertEqual(a.name, "laptop (bt)", "the name of the first entry by address")
        XCTAssertEqual(a.instance, String(repeating: "0f", count: 16))
        XCTAssertEqual(a.routes.map(\.address.description), ["AA:BB:CC:DD:EE:FF", "ip:192.168.1.20:47800"],
                       "dialable addresses become routes; an incoming port that was never a listen port does not")
        XCTAssertFalse(a.stayDisconnected, "stays disconnected only if every former entry said so")
        let b = try XCTUnwrap(directory[id(of: PublicKey(hex: keyB)!)])
        XCTAssertTrue(b.stayDisconnected)
        XCTAssertEqual(directory.all.count, 2)
        XCTAssertEqual(migration.unpaired, ["ip:10.0.0.7:47800"])
        XCTAssertEqual(migration.journals.first { $0.into == a.id }?.from,
                       ["AA:BB:CC:DD:EE:FF", "ip:192.168.1.20:47800", "ip:192.168.1.20:51234"])

        // Until the store has merged and the caller finishes, the old file stays (a crash migrates again).
        try directory.save(KnownPeer(id: a.id, key: a.key, name: "renamed", instance: nil, routes: a.routes))
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), old)
        try directory.finishMigration()
        let reopened = try PeerDirectory(path: path, idOf: id(of:))
        XCTAssertNil(reopened.migration)
        XCTAssertEqual(reopened[a.id]?.name, "renamed")
        XCTAssertEqual(reopened.all.count, 2)
        XCTAssertTrue(try String(contentsOfFile: path, encoding: .utf8).contains(#""format":4"#))
    }

    /// A peer's presence secret is kept with it (hex); a file written before there were any reads
    /// as peers without one.
    func testAPresenceSecretIsKeptWithItsPeer() throws {
        let path = directory + "/peers.json"
        let key = PublicKey(hex: keyA)!
        let secret = PresenceSecret(bytes: Array(repeating: UInt8(7), count: 32))!
        let peers = try PeerDirectory(path: path, idOf: id(of:))
        try peers.save(KnownPeer(id: id(of: key), key: key, name: "laptop", instance: nil, routes: [], presenceSecret: secret))
        XCTAssertTrue(try String(contentsOfFile: path, encoding: .utf8).contains(secret.hex))
        XCTAssertEqual(try PeerDirectory(path: path, idOf: id(of:))[id(of: key)]?.presenceSecret, secret)
        try peers.save(KnownPeer(id: id(of: key), key: key, name: "laptop", instance: nil, routes: []))
        XCTAssertNil(try PeerDirectory(path: path, idOf: id(of:))[id(of: key)]?.presenceSecret)
    }

    /// A peer's volume and mute here are kept with it, each written only when set; a format-4
    /// file written before there were any reads as a peer at volume 1.0, not muted.
    func testAVolumeAndAMuteAreKeptWithTheirPeerAndOlderFilesReadWithout() throws {
        let path = directory + "/peers.json"
        let key = PublicKey(hex: keyA)!
        let before = #"{"format":4,"peers":[{"id":"\#(id(of: key))","key":"\#(keyA)","name":"laptop","routes":[],"stayDisconnected":false}]}"#
        try Data(before.utf8).write(to: URL(fileURLWithPath: path))
        let old = try XCTUnwrap(try PeerDirectory(path: path, idOf: id(of:))[id(of: key)])
        XCTAssertNil(old.volume)
        XCTAssertNil(old.muted)

        let cases: [(volume: Double?, muted: Bool?, written: [String], absent: [String])] = [
            (nil, nil, [], [#""volume""#, #""muted""#]),
            (0.5, nil, [#""volume":0.5"#], [#""muted""#]),
            (nil, true, [#""muted":true"#], [#""volume""#]),
            (1.5, true, [#""volume":1.5"#, #""muted":true"#], []),
        ]
        for (volume, muted, written, absent) in cases {
            try PeerDirectory(path: path, idOf: id(of:))
                .save(KnownPeer(id: id(of: key), key: key, name: "laptop", instance: nil, routes: [], volume: volume, muted: muted))
            let file = try String(contentsOfFile: path, encoding: .utf8)
            for text in written { XCTAssertTrue(file.contains(text), "\(text) missing for \(String(describing: volume)), \(String(describing: muted)): \(file)") }
            for text in absent { XCTAssertFalse(file.contains(text), "\(text) written for \(String(describing: volume)), \(String(describing: muted)): \(file)") }
            let read = try PeerDirectory(path: path, idOf: id(of:))[id(of: key)]
            XCTAssertEqual(read?.volume, volume)
            XCTAssertEqual(read?.muted, muted)
        }
    }

    func testAFileThatIsNeitherFormatIsRefusedRatherThanEmptied() throws {
        let path = directory + "/peers.json"
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try PeerDirectory(path: path, idOf: id(of:)))
    }

    func testMergedJournalsContinueAboveTheLargestNumberWithQueuedMessagesInOrder() throws {
        let messages = directory + "/messages"
        let instance = String(repeating: "c3", count: 16)
        do {
            let store = try MessageStore(directory: messages)
            // Toward the peer at its listen address: 3 sent, 2 delivered, 1 queued.
            for n in 1...3 { _ = try store.enqueue(peer: "ip:192.168.1.20:47800", id: messageID(n), text: "listen \(n)", nowMs: UInt64(n * 10)) }
            XCTAssertEqual(store.acknowledge(peer: "ip:192.168.1.20:47800", upTo: 2).count, 2)
            // Toward the same key over Bluetooth: numbered 1, 2 on their own, both queued.
            for n in 4...5 { _ = try store.enqueue(peer: "AA:BB:CC:DD:EE:FF", id: messageID(n), text: "bt \(n)", nowMs: UInt64(n * 10 - 25)) }
            // What the peer sent us under each name, with duplicate marks per sender instance.
            XCTAssertTrue(try store.receive(peer: "ip:192.168.1.20:47800", senderInstance: instance, seq: 7, id: messageID(10),
                                            text: "hi", sentAtMs: 1, nowMs: 12))
            XCTAssertTrue(try store.receive(peer: "AA:BB:CC:DD:EE:FF", senderInstance: instance, seq: 9, id: messageID(11),
                                            text: "yo", sentAtMs: 2, nowMs: 40))
        }
        let target = "pv:abcdefghijklmnopqrstuvwxyz"
        let store = try MessageStore(directory: messages)
        try store.merge(["AA:BB:CC:DD:EE:FF", "ip:192.168.1.20:47800"], into: target)
        XCTAssertEqual(store.knownPeers, [target])
        // Queued: the listen one (accepted at 30) and the two Bluetooth ones (at 15 and 25), in
        // the order they were accepted, above the largest number either name used (3).
        XCTAssertEqual(store.pending(peer: target).map(\.seq), [4, 5, 6])
        XCTAssertEqual(store.pending(peer: target).map(\.text), ["bt 4", "bt 5", "listen 3"])
        XCTAssertEqual(store.history(peer: target, max: 20).map(\.text), ["listen 1", "hi", "bt 4", "listen 2", "bt 5", "listen 3", "yo"])
        // Duplicate marks merged by maximum: 9 and below from that instance are duplicates.
        XCTAssertFalse(try store.receive(peer: target, senderInstance: instance, seq: 9, id: messageID(12), text: "dup", sentAtMs: 3, nowMs: 50))
        XCTAssertTrue(try store.receive(peer: target, senderInstance: instance, seq: 10, id: messageID(13), text: "new", sentAtMs: 3, nowMs: 51))
        // An ACK of the new numbers delivers them.
        XCTAssertEqual(store.acknowledge(peer: target, upTo: 6), [messageID(4), messageID(5), messageID(3)])

        // Reopened, it is all still there; a second merge (an interrupted run redone) changes nothing.
        let again = try MessageStore(directory: messages)
        try again.merge(["AA:BB:CC:DD:EE:FF", "ip:192.168.1.20:47800"], into: target)
        XCTAssertEqual(again.knownPeers, [target])
        XCTAssertEqual(again.history(peer: target, max: 20).count, 8)
        XCTAssertEqual(again.pending(peer: target).count, 0)
    }

    func testAMergeInterruptedAfterTheNewJournalOnlyDeletesTheSources() throws {
        let messages = directory + "/messages"
        let target = "pv:abcdefghijklmnopqrstuvwxyz"
        do {
            let store = try MessageStore(directory: messages)
            _ = try store.enqueue(peer: "ip:10.0.0.1:1", id: messageID(1), text: "one", nowMs: 1)
            _ = try store.enqueue(peer: target, id: messageID(2), text: "already merged", nowMs: 2)
        }
        let store = try MessageStore(directory: messages)
        try store.merge(["ip:10.0.0.1:1"], into: target)
        XCTAssertEqual(store.knownPeers, [target])
        XCTAssertEqual(store.pending(peer: target).map(\.text), ["already merged"])
    }

    func testTheSequenceFloorRaisesEveryNewNumbering() throws {
        let store = try MessageStore(directory: directory + "/messages")
        _ = try store.enqueue(peer: "ip:10.0.0.1:1", id: messageID(1), text: "x", nowMs: 1)
        _ = try store.forget(peer: "ip:10.0.0.1:1")
        XCTAssertEqual(store.highestSequenceEver, 1)
        try store.raiseSequenceFloor(to: 40)
        let reopened = try MessageStore(directory: directory + "/messages")
        XCTAssertEqual(try reopened.enqueue(peer: "pv:abcdefghijklmnopqrstuvwxyz", id: messageID(2), text: "y", nowMs: 2).seq, 41)
    }
}
