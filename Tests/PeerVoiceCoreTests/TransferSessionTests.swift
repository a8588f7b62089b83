import CoreTestSupport
import PeerVoiceCore
import XCTest

/// A stand-in for BLAKE2b (the core's tests have no libsodium): FNV-1a over the bytes, spread to
/// 32 bytes. Enough to tell contents apart; the real hash is tested in SodiumTests.
struct TestHasher: ContentHasher {
    var state: UInt64 = 0xcbf2_9ce4_8422_2325
    var count: UInt64 = 0

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        for byte in bytes {
            state = (state ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        count += UInt64(bytes.count)
    }

    mutating func finish() -> [UInt8] {
        (0..<4).flatMap { round in withUnsafeBytes(of: (state &+ UInt64(round) &* count).bigEndian) { Array($0) } }
    }

    static func of(_ bytes: [UInt8]) -> [UInt8] {
        var hasher = TestHasher()
        hasher.update(bytes)
        return hasher.finish()
    }
}

struct TestHashing: ContentHashing {
    var algorithm = ContentHashAlgorithm.blake2b256

    func makeHasher() -> any ContentHasher { TestHasher() }
}

/// The two ends of one transfer stream (docs/PROTOCOL.md §15.3), as exchanges: what the sender
/// sends, what the receiver makes of it.
final class TransferSessionTests: XCTestCase {
    private let id = TransferID(hex: "00112233445566778899aabbccddeeff")!
    private let a = Array("hello, ".utf8)
    private let b = Array("world".utf8)
    private lazy var manifest = try! TransferManifest(entries: [
        .file(try! TransferPath("a.txt"), size: UInt64(a.count)), .folder(try! TransferPath("empty")),
        .file(try! TransferPath("d/b.txt"), size: UInt64(b.count)), .file(try! TransferPath("d/zero"), size: 0),
    ])

    private func offeredReceiver(hashing: ContentHashAlgorithm = .blake2b256) throws -> IncomingTransferSession {
        var receiver = IncomingTransferSession(hashing: TestHashing(algorithm: hashing))
        guard case .offered(let offeredID, let offered) = try receiver.received(.offer(id, manifest)) else {
            XCTFail("OFFER was not an offer")
            return receiver
        }
        XCTAssertEqual(offeredID, id)
        XCTAssertEqual(offered, manifest)
        return receiver
    }

    /// Runs a whole exchange: the sender's session produces the messages, the receiver checks
    /// them; returns the receiver's steps, described.
    private func run(sender: inout OutgoingTransferSession, receiver: inout IncomingTransferSession, contents: [[UInt8]],
                     chunk: Int, changeHash: Int? = nil) throws -> [String] {
        var steps: [String] = []
        var hasher: any ContentHasher = TestHasher()
        loop: while true {
            switch sender.next {
            case .wait:
                break loop
            case .send(let index, let offset, let maxBytes):
                let take = min(Int(maxBytes), chunk)
                let bytes = Array(contents[index][Int(offset)..<(Int(offset) + take)])
                hasher.update(bytes)
                sender.sent(UInt64(take))
                steps.append(describe(try receiver.received(.data(bytes[...]))))
            case .endFile(let index):
                var hash = hasher.finish()
                if changeHash == index { hash[0] ^= 1 }
                hasher = TestHasher()
                sender.endedFile()
                steps.append(describe(try receiver.received(.fileEnd(fileIndex: index, hash: hash))))
            }
        }
        return steps
    }

    private func describe(_ step: IncomingTransferSession.Step) -> String {
        switch step {
        case .offered: "offered"
        case .write(let index, let offset, let bytes): "write \(index)@\(offset) \(String(decoding: bytes, as: UTF8.self))"
        case .skip(let index, let offset, let length): "skip \(index)@\(offset)+\(length)"
        case .fileVerified(let index): "verified \(index)"
        case .aborted(let code, let reason): "aborted \(code) \(reason)"
        }
    }

    func testAWholeTransferFromTheStart() throws {
        var receiver = try offeredReceiver()
        var sender = OutgoingTransferSession(id: id, manifest: manifest)
        XCTAssertEqual(sender.offer, .offer(id, manifest))
        XCTAssertEqual(sender.next, .wait, "nothing before ACCEPT")
        let accept = receiver.accept(from: .start, hasher: TestHasher())
        XCTAssertEqual(accept, .accept(.start))
        XCTAssertEqual(try sender.received(accept), .accepted(.start))
        let steps = try run(sender: &sender, receiver: &receiver, contents: [a, b, []], chunk: 4)
        XCTAssertEqual(steps, ["write 0@0 hell", "write 0@4 o, ", "verified 0",
                               "write 1@0 worl", "write 1@4 d", "verified 1",
                               "verified 2"])
        XCTAssertTrue(receiver.hasEverything)
        XCTAssertEqual(try sender.received(.complete), .completed)
        assertThrows(TransferProtocolError.unexpected(.complete, "after the transfer ended")) { try sender.received(.complete) }
    }

    func testAResumeStartsAtTheDurablePositionWithTheHashOfWhatIsHeld() throws {
        var receiver = try offeredReceiver()
        // The receiver holds a.txt whole and "wor" of d/b.txt: it hashed those three bytes again from its part file.
        var prefix = TestHasher()
        prefix.update(Array(b[0..<3]))
        let accept = receiver.accept(from: TransferPosition(fileIndex: 1, offset: 3), hasher: prefix)
        var sender = OutgoingTransferSession(id: id, manifest: manifest)
        XCTAssertEqual(try sender.received(accept), .accepted(TransferPosition(fileIndex: 1, offset: 3)))
        XCTAssertEqual(sender.next, .send(fileIndex: 1, offset: 3, maxBytes: 2))
        // The sender hashes the whole file, re-reading the part before the offset.
        var hasher: any ContentHasher = TestHasher()
        hasher.update(Array(b[0..<3]))
        sender.sent(2)
        XCTAssertEqual(describe(try receiver.received(.data(b[3...]))), "write 1@3 ld")
        hasher.update(Array(b[3...]))
        sender.endedFile()
        XCTAssertEqual(describe(try receiver.received(.fileEnd(fileIndex: 1, hash: hasher.finish()))), "verified 1")
        XCTAssertEqual(sender.next, .endFile(fileIndex: 2), "the empty file ends at once")
    }

    func testAReceiverThatHasEverythingAnswersTheOfferWithComplete() throws {
        var sender = OutgoingTransferSession(id: id, manifest: manifest)
        XCTAssertEqual(try sender.received(.complete), .completed)
        XCTAssertEqual(sender.next, .wait)
        var late = OutgoingTransferSession(id: id, manifest: manifest)
        XCTAssertEqual(try late.received(.accept(TransferPosition(fileIndex: 3, offset: 0))), .accepted(TransferPosition(fileIndex: 3, offset: 0)))
        XCTAssertEqual(late.next, .wait, "nothing left to send")
        XCTAssertEqual(try late.received(.complete), .completed)
    }

    /// The error names the hash the stream used (the link's: SHA-256 between two version-10 sides).
    func testAFileThatArrivesDifferentFailsItsFileEnd() throws {
        for (algorithm, name) in [(ContentHashAlgorithm.blake2b256, "BLAKE2b-256"), (.sha256, "SHA-256")] {
            var receiver = try offeredReceiver(hashing: algorithm)
            var sender = OutgoingTransferSession(id: id, manifest: manifest)
            _ = try sender.received(receiver.accept(from: .start, hasher: TestHasher()))
            XCTAssertThrowsError(try run(sender: &sender, receiver: &receiver, contents: [a, b, []], chunk: 100, changeHash: 1)) {
                XCTAssertEqual($0 as? TransferProtocolError, .hashMismatch(fileIndex: 1, algorithm))
                XCTAssertEqual("\($0)", "file 2 arrived different from what was sent (its \(name) hash does not match)")
            }
        }
    }

    func testASenderThatSendsWhatItDidNotAnnounceIsStopped() throws {
        let hash = [UInt8](repeating: 0, count: 32)
        let cases: [(String, [TransferMessage], TransferProtocolError)] = [
            ("more bytes than announced", [.data(a[...] + [0x21])], .tooManyBytes(fileIndex: 0, announced: 7)),
            ("a hole past the end", [.hole(length: 8)], .tooManyBytes(fileIndex: 0, announced: 7)),
            ("fewer bytes than announced", [.data(a[0..<3]), .fileEnd(fileIndex: 0, hash: hash)],
             .shortFile(fileIndex: 0, announced: 7, sent: 3)),
            ("the wrong file ends", [.data(a[...]), .fileEnd(fileIndex: 1, hash: hash)],
             .unexpected(.fileEnd, "for file 2 while file 1 was due")),
            ("a second offer", [.offer(id, manifest)], .unexpected(.offer, "a second time")),
            ("an ACCEPT from the sender", [.accept(.start)], .unexpected(.accept, "from the sender")),
        ]
        for (label, messages, expected) in cases {
            var receiver = try offeredReceiver()
            _ = receiver.accept(from: .start, hasher: TestHasher())
            XCTAssertThrowsError(try messages.forEach { _ = try receiver.received($0) }, label) {
                XCTAssertEqual($0 as? TransferProtocolError, expected, label)
            }
        }
        var early = try offeredReceiver()
        assertThrows(TransferProtocolError.unexpected(.data, "before ACCEPT")) { try early.received(.data(a[...])) }
        var fresh = IncomingTransferSession(hashing: TestHashing())
        assertThrows(TransferProtocolError.unexpected(.data, "before OFFER")) { try fresh.received(.data(a[...])) }
        var done = try offeredReceiver()
        done.refuse()
        assertThrows(TransferProtocolError.unexpected(.data, "after the transfer ended")) { try done.received(.data(a[...])) }
    }

    func testAHoleIsZerosForTheHash() throws {
        let sparse = try TransferManifest(entries: [.file(try TransferPath("sparse"), size: 10)])
        var receiver = IncomingTransferSession(hashing: TestHashing())
        _ = try receiver.received(.offer(id, sparse))
        _ = receiver.accept(from: .start, hasher: TestHasher())
        XCTAssertEqual(describe(try receiver.received(.data([1, 2]))), "write 0@0 \u{1}\u{2}")
        XCTAssertEqual(describe(try receiver.received(.hole(length: 8))), "skip 0@2+8")
        let hash = TestHasher.of([1, 2] + [UInt8](repeating: 0, count: 8))
        XCTAssertEqual(describe(try receiver.received(.fileEnd(fileIndex: 0, hash: hash))), "verified 0")
    }

    func testAReceiverThatAnswersOutsideTheOfferIsStopped() {
        let cases: [(String, TransferMessage, TransferProtocolError)] = [
            ("past a file's end", .accept(TransferPosition(fileIndex: 0, offset: 8)), .positionOutside(TransferPosition(fileIndex: 0, offset: 8))),
            ("past the last file", .accept(TransferPosition(fileIndex: 4, offset: 0)), .positionOutside(TransferPosition(fileIndex: 4, offset: 0))),
            ("data from the receiver", .data([1]), .unexpected(.data, "from the receiver")),
        ]
        for (label, message, expected) in cases {
            var sender = OutgoingTransferSession(id: id, manifest: manifest)
            XCTAssertThrowsError(try sender.received(message), label) { XCTAssertEqual($0 as? TransferProtocolError, expected, label) }
        }
        var twice = OutgoingTransferSession(id: id, manifest: manifest)
        _ = try? twice.received(.accept(.start))
        assertThrows(TransferProtocolError.unexpected(.accept, "a second time")) { try twice.received(.accept(.start)) }
        assertThrows(TransferProtocolError.unexpected(.complete, "before the last file was sent")) { try twice.received(.complete) }
    }

    func testAnAbortEndsEitherSide() throws {
        var receiver = try offeredReceiver()
        XCTAssertEqual(describe(try receiver.received(.abort(.cancelled, reason: "changed my mind"))), "aborted cancelled changed my mind")
        var sender = OutgoingTransferSession(id: id, manifest: manifest)
        XCTAssertEqual(try sender.received(.abort(.declined, reason: "declined")), .aborted(.declined, reason: "declined"))
        XCTAssertEqual(sender.next, .wait)
    }
}
