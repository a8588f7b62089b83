import CoreTestSupport
import PeerVoiceCore
import XCTest

/// File transfers on the wire (docs/PROTOCOL.md §15): the names a peer may send, the manifest,
/// and the bytes of every message.
final class TransferWireTests: XCTestCase {
    private let id = TransferID(hex: "000102030405060708090a0b0c0d0e0f")!

    private func path(_ text: String) -> TransferPath { try! TransferPath(text) }

    // MARK: Names

    func testNamesAPersonGivesFilesAreTaken() throws {
        for text in ["photo.jpg", "Ferien 2024/Strand.jpg", "ñandú/日本語.txt", ".bashrc", "a/.hidden/b", "...", "..a", "a..",
                     "name with  spaces ", "-rf", "~", String(repeating: "é", count: 127), "🎉/🎂"] {
            XCTAssertEqual(try TransferPath(text).description, text, text)
        }
        XCTAssertEqual(path("a/b/c").components, ["a", "b", "c"])
        XCTAssertEqual(path("a/b/c").ancestors.map(\.description), ["a", "a/b"])
        XCTAssertEqual(path("a/b/c").renamingTopLevel(to: "a (1)").description, "a (1)/b/c")
    }

    func testHostileNamesAreRefusedEachForItsReason() {
        let cases: [(String, [UInt8], TransferPathError)] = [
            ("empty", [], .empty),
            ("absolute", Array("/etc/passwd".utf8), .absolute),
            ("up and out", Array("../../.bashrc".utf8), .dotName("..")),
            ("up inside", Array("a/../../b".utf8), .dotName("..")),
            ("a dot", Array("a/./b".utf8), .dotName(".")),
            ("only dots", Array("..".utf8), .dotName("..")),
            ("double slash", Array("a//b".utf8), .emptyName),
            ("trailing slash", Array("a/".utf8), .emptyName),
            ("NUL inside", Array("evil\0.txt".utf8), .nul),
            ("NUL then a path", Array("ok.txt\0/../../x".utf8), .nul),
            // U+070F joins the "/" after it into one Character: split as characters, "\u{70F}/.."
            // would be one name, and the file system would still climb back out of "a\u{70F}".
            ("up behind a prepended mark", Array("a\u{70F}/..".utf8), .dotName("..")),
            ("newline", Array("two\nlines".utf8), .controlCharacter(0x0A)),
            ("escape", Array("\u{1B}[31mred".utf8), .controlCharacter(0x1B)),
            ("delete", Array("a\u{7F}".utf8), .controlCharacter(0x7F)),
            ("C1 control", Array("a\u{85}b".utf8), .controlCharacter(0x85)),
            ("right-to-left override", Array("photo\u{202E}gpj.exe".utf8), .bidiControl(0x202E)),
            ("invalid UTF-8", [0x61, 0xFF, 0x62], .notUTF8),
            ("overlong slash", [0x61, 0xC0, 0xAF, 0x62], .notUTF8),
            ("a name of 256 bytes", [UInt8](repeating: 0x61, count: 256), .nameTooLong(bytes: 256)),
            ("a path of 4096 bytes", Array((0..<16).map { _ in String(repeating: "b", count: 255) }.joined(separator: "/").utf8) + [0x2F, 0x63],
             .pathTooLong(bytes: 4097)),
            ("65 folders deep", Array(Array(repeating: "d", count: 65).joined(separator: "/").utf8), .tooDeep(components: 65)),
        ]
        for (label, bytes, expected) in cases {
            XCTAssertThrowsError(try TransferPath(utf8: bytes), label) { XCTAssertEqual($0 as? TransferPathError, expected, label) }
        }
        XCTAssertNoThrow(try TransferPath(utf8: [UInt8](repeating: 0x61, count: 255)), "255 bytes is the limit")
        XCTAssertThrowsError(try TransferPath.check(name: "a\u{70F}/b"), "one name as a file system takes it holds no /") {
            XCTAssertEqual($0 as? TransferPathError, .slash)
        }
    }

    // MARK: Manifest

    func testAManifestAddsUpItsFilesInOrderAndNamesItsTopLevelItems() throws {
        let manifest = try TransferManifest(entries: [
            .file(path("notes.txt"), size: 10),
            .folder(path("Photos")),
            .file(path("Photos/a.jpg"), size: 5_000_000_000),
            .folder(path("Photos/empty")),
            .file(path("Photos/b.jpg"), size: 0),
        ])
        XCTAssertEqual(manifest.files.map(\.path.description), ["notes.txt", "Photos/a.jpg", "Photos/b.jpg"])
        XCTAssertEqual(manifest.totalBytes, 5_000_000_010)
        XCTAssertEqual(manifest.topLevelNames, ["notes.txt", "Photos"])
        XCTAssertEqual(manifest.fileIndices(under: "Photos"), [1, 2])
        XCTAssertEqual(manifest.bytes(before: TransferPosition(fileIndex: 2, offset: 0)), 5_000_000_010)
        XCTAssertEqual(manifest.bytes(before: TransferPosition(fileIndex: 1, offset: 7)), 17)
        XCTAssertTrue(manifest.contains(TransferPosition(fileIndex: 3, offset: 0)), "past the last file")
        XCTAssertFalse(manifest.contains(TransferPosition(fileIndex: 3, offset: 1)))
        XCTAssertFalse(manifest.contains(TransferPosition(fileIndex: 0, offset: 11)))
        XCTAssertTrue(manifest.contains(TransferPosition(fileIndex: 0, offset: 10)), "the end of a file")
    }

    func testManifestsThatCouldNotBeSavedAsSentAreRefused() {
        let many = (0...TransferWire.maxEntries).map { TransferManifest.Entry.file(path("f\($0)"), size: 1) }
        let cases: [(String, [TransferManifest.Entry], TransferManifestError)] = [
            ("nothing", [], .empty),
            ("a million tiny files (well, the limit and one)", many, .tooManyEntries(TransferWire.maxEntries + 1)),
            ("twice the same file", [.file(path("a"), size: 1), .file(path("a"), size: 1)], .duplicate(index: 1)),
            ("a file and a folder of one name", [.folder(path("a")), .file(path("a"), size: 1)], .duplicate(index: 1)),
            ("something inside a file", [.file(path("a"), size: 1), .file(path("a/b"), size: 1)], .insideFile(index: 1)),
            ("deep inside a file", [.file(path("a/b/c/d"), size: 1), .file(path("a/b"), size: 1)], .insideFile(index: 0)),
            ("a folder with a size", [TransferManifest.Entry(kind: .folder, path: path("a"), size: 3)], .folderWithSize(index: 0)),
            ("sizes past 2^64", [.file(path("a"), size: .max), .file(path("b"), size: 1)], .sizesOverflow),
        ]
        for (label, entries, expected) in cases {
            XCTAssertThrowsError(try TransferManifest(entries: entries), label) { XCTAssertEqual($0 as? TransferManifestError, expected, label) }
        }
    }

    // MARK: Messages

    func testEveryMessageHasTheDocumentedBytesAndDecodesToItself() throws {
        let manifest = try TransferManifest(entries: [.folder(path("d")), .file(path("d/é"), size: 0x1_0000_0002)])
        let cases: [(TransferMessage, [UInt8])] = [
            (.offer(id, manifest),
             [0, 0, 0, 0x30, 0x01] + (0...15).map { UInt8($0) } + [0, 0, 0, 2,
              1, 0, 1, 0x64, 0, 0, 0, 0, 0, 0, 0, 0,
              0, 0, 4, 0x64, 0x2F, 0xC3, 0xA9, 0, 0, 0, 1, 0, 0, 0, 2]),
            (.data([9, 8, 7]), [0, 0, 0, 4, 0x02, 9, 8, 7]),
            (.hole(length: 0x1_0000_0000), [0, 0, 0, 9, 0x03, 0, 0, 0, 1, 0, 0, 0, 0]),
            (.fileEnd(fileIndex: 1, hash: [UInt8](repeating: 0xAB, count: 32)), [0, 0, 0, 37, 0x04, 0, 0, 0, 1] + [UInt8](repeating: 0xAB, count: 32)),
            (.accept(TransferPosition(fileIndex: 2, offset: 0x0102_0304_0506)), [0, 0, 0, 13, 0x10, 0, 0, 0, 2, 0, 0, 1, 2, 3, 4, 5, 6]),
            (.complete, [0, 0, 0, 1, 0x11]),
            (.abort(.failed, reason: "no space"), [0, 0, 0, 10, 0x20, 3] + Array("no space".utf8)),
            (.abort(.declined, reason: ""), [0, 0, 0, 2, 0x20, 2]),
        ]
        for (message, bytes) in cases {
            XCTAssertEqual(message.encoded(), bytes, "\(message.type)")
            XCTAssertEqual(try TransferMessage(body: bytes[4...]), message, "\(message.type)")
        }
        var header = [UInt8](repeating: 0, count: TransferMessage.dataHeaderBytes)
        header.withUnsafeMutableBytes { TransferMessage.writeDataHeader(payloadBytes: 3, into: $0) }
        XCTAssertEqual(header, [0, 0, 0, 4, 0x02], "DATA built in place has the same header")
    }

    func testMalformedMessagesAreRefusedInTheDocumentedOrder() {
        let entry: [UInt8] = [0, 0, 1, 0x61, 0, 0, 0, 0, 0, 0, 0, 1]
        let offer = [0x01] + [UInt8](repeating: 7, count: 16)
        let cases: [(String, [UInt8], TransferMessageError)] = [
            ("empty", [], .emptyMessage),
            ("unknown type", [0x7F], .unknownType(0x7F)),
            ("OFFER without count", offer, .tooShort(.offer, bytes: 17)),
            ("OFFER of nothing", offer + [0, 0, 0, 0], .manifest(.empty)),
            ("OFFER of too many", offer + [0, 1, 0x86, 0xA1], .manifest(.tooManyEntries(100_001))),
            ("OFFER cut in an entry", offer + [0, 0, 0, 1] + entry.dropLast(), .tooShort(.offer, bytes: 32)),
            ("OFFER with an unknown kind", offer + [0, 0, 0, 1, 5] + entry.dropFirst(), .manifest(.unknownKind(index: 0, 5))),
            ("OFFER with bytes after", offer + [0, 0, 0, 1] + entry + [0], .trailingBytes(.offer, count: 1)),
            ("OFFER of ../x", offer + [0, 0, 0, 1, 0, 0, 4] + Array("../x".utf8) + [0, 0, 0, 0, 0, 0, 0, 1],
             .manifest(.invalidPath(index: 0, .dotName("..")))),
            ("OFFER of a twin", offer + [0, 0, 0, 2] + entry + entry, .manifest(.duplicate(index: 1))),
            ("empty DATA", [0x02], .emptyData),
            ("DATA over 1 MiB", [0x02] + [UInt8](repeating: 0, count: TransferWire.maxDataBytes + 1), .dataTooLarge(bytes: TransferWire.maxDataBytes + 1)),
            ("HOLE of 0", [0x03, 0, 0, 0, 0, 0, 0, 0, 0], .zeroHole),
            ("HOLE too short", [0x03, 1], .tooShort(.hole, bytes: 2)),
            ("FILE_END too long", [0x04] + [UInt8](repeating: 0, count: 37), .trailingBytes(.fileEnd, count: 1)),
            ("ACCEPT too short", [0x10, 0, 0, 0, 0], .tooShort(.accept, bytes: 5)),
            ("COMPLETE with bytes", [0x11, 0], .trailingBytes(.complete, count: 1)),
            ("ABORT without code", [0x20], .tooShort(.abort, bytes: 1)),
            ("ABORT with code 9", [0x20, 9], .unknownAbortCode(9)),
            ("ABORT reason not UTF-8", [0x20, 3, 0xFF], .reasonNotUTF8),
            ("ABORT reason with NUL", [0x20, 3, 0x61, 0], .reasonNotUTF8),
            ("ABORT reason too long", [0x20, 3] + [UInt8](repeating: 0x61, count: 1025), .reasonTooLong(bytes: 1025)),
        ]
        for (label, body, expected) in cases {
            XCTAssertThrowsError(try TransferMessage(body: body[...]), label) { XCTAssertEqual($0 as? TransferMessageError, expected, label) }
        }
    }

    func testAReasonIsCutAtACharacterBoundaryAndLosesItsNULs() {
        let reason = String(repeating: "ü", count: 600) + "\0"
        let cut = TransferMessage.truncatedReason(reason)
        XCTAssertEqual(cut.utf8.count, 1024)
        XCTAssertEqual(cut, String(repeating: "ü", count: 512))
        XCTAssertEqual(TransferMessage.truncatedReason("a\0b"), "ab")
    }

    func testTheDecoderGivesTheSameMessagesHoweverTheStreamIsCut() throws {
        let manifest = try TransferManifest(entries: [.file(path("a"), size: 5)])
        let messages: [TransferMessage] = [.offer(id, manifest), .data([1, 2, 3]), .hole(length: 2), .fileEnd(fileIndex: 0, hash: [UInt8](repeating: 1, count: 32)),
                                           .abort(.cancelled, reason: "bye")]
        let stream = messages.flatMap { $0.encoded() }
        for chunk in [1, 2, 3, 7, 64, stream.count] {
            var decoder = TransferMessageDecoder()
            var got: [TransferMessage] = []
            var offset = 0
            while offset < stream.count {
                let end = min(stream.count, offset + chunk)
                decoder.append(stream[offset..<end])
                offset = end
                while let message = try decoder.next() { got.append(message) }
            }
            XCTAssertEqual(got, messages, "cut every \(chunk) bytes")
            XCTAssertEqual(decoder.bufferedByteCount, 0)
        }
    }

    func testTheDecoderRefusesAHugeLengthBeforeItsBodyAndStaysFailed() {
        var decoder = TransferMessageDecoder()
        decoder.append([0x01, 0x00, 0x00, 0x01])
        assertThrows(TransferMessageError.messageTooLarge(bytes: 0x0100_0001)) { try decoder.next() }
        decoder.append(TransferMessage.complete.encoded())
        assertThrows(TransferMessageError.messageTooLarge(bytes: 0x0100_0001)) { try decoder.next() }
        var empty = TransferMessageDecoder()
        empty.append([0, 0, 0, 0])
        assertThrows(TransferMessageError.emptyMessage) { try empty.next() }
    }

    func testTheDecoderReadsStraightIntoItsBuffer() throws {
        var decoder = TransferMessageDecoder()
        let bytes = TransferMessage.data([UInt8](repeating: 5, count: 100)[...]).encoded()
        let put = decoder.append(readingAtMost: 4096) { buffer in
            _ = buffer.initialize(from: bytes)
            return bytes.count
        }
        XCTAssertEqual(put, bytes.count)
        XCTAssertEqual(try decoder.next(), .data([UInt8](repeating: 5, count: 100)[...]))
        XCTAssertEqual(decoder.append(readingAtMost: 10) { _ in -1 }, -1, "a failed read adds nothing")
        XCTAssertNil(try decoder.next())
    }
}
