// libFuzzer target: the messages of a file transfer and the two ends of its stream
// (Sources/PeerVoiceCore/Transfers/; docs/PROTOCOL.md §15), which take bytes and names from a
// paired peer.
//
// Input layout (missing bytes read as 0):
//   byte 0   % 3 == 0: the rest is a stream of messages, fed to a TransferMessageDecoder in
//                      chunks whose sizes come from the first byte of the rest;
//            % 3 == 1: the rest is such a stream from a sender, handed to a receiver session
//                      (IncomingTransferSession) that accepts the first OFFER from the position
//                      the next u32 picks within it;
//            % 3 == 2: the same, handed to a sender session (OutgoingTransferSession) with a
//                      fixed manifest, as if from the receiver, the sender sending as it is told.
//
// Checked on every input:
//   - decoding does not depend on how the stream is cut (same messages, same error); an error
//     is final; every decoded message re-encodes to exactly its bytes;
//   - an accepted OFFER's manifest keeps the rules: paths of valid names only (no "..", ".",
//     empty names, NUL, control or text-direction characters, names of at most 255 bytes, paths
//     of at most 4095), no duplicates, nothing inside a file, at most 100 000 entries;
//   - a receiver session never writes outside a file's announced size or out of order (each
//     write starts where the last ended), verifies a file only when all its bytes arrived, and
//     after an error takes nothing more;
//   - a sender session only ever sends within the file and offset the receiver asked for.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

/// FNV-1a over each update's length and its first 64 bytes, spread to 32 bytes: libsodium is not
/// linked into this target, and a hole an input declares (up to 2^64 - 1 bytes) is folded as its
/// length alone, so no input takes longer than its time limit here.
struct FuzzHasher: ContentHasher {
    var state: UInt64 = 0xcbf2_9ce4_8422_2325
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        state = (state ^ UInt64(bytes.count)) &* 0x100_0000_01b3
        for byte in bytes.prefix(64) { state = (state ^ UInt64(byte)) &* 0x100_0000_01b3 }
    }
    mutating func updateWithZeros(_ count: UInt64) {
        state = (state ^ count ^ 0x5a5a) &* 0x100_0000_01b3
    }
    mutating func finish() -> [UInt8] { (0..<4).flatMap { _ in withUnsafeBytes(of: state.bigEndian) { Array($0) } } }
}

struct FuzzHashing: ContentHashing {
    var algorithm: ContentHashAlgorithm { .blake2b256 }

    func makeHasher() -> any ContentHasher { FuzzHasher() }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Input(Array(UnsafeBufferPointer(start: data, count: size)))
    switch input.u8() % 3 {
    case 0: decodeInChunks(&input)
    case 1: receive(&input)
    default: send(&input)
    }
    return 0
}

/// Every message of `bytes` and the error that ended them, fed `chunk` bytes at a time.
func decodeAll(_ bytes: ArraySlice<UInt8>, chunk: Int) -> ([TransferMessage], TransferMessageError?) {
    var decoder = TransferMessageDecoder()
    var messages: [TransferMessage] = []
    var offset = bytes.startIndex
    while offset < bytes.endIndex {
        let end = min(bytes.endIndex, offset + chunk)
        decoder.append(bytes[offset..<end])
        offset = end
        do {
            while let message = try decoder.next() { messages.append(message) }
        } catch {
            check((try? decoder.next()) == nil, "a failed decoder decoded again")
            return (messages, error)
        }
    }
    return (messages, nil)
}

func decodeInChunks(_ input: inout Input) {
    let chunk = Int(input.u8()) % 97 + 1
    let stream = input.rest
    let (messages, error) = decodeAll(stream, chunk: chunk)
    let (whole, wholeError) = decodeAll(stream, chunk: max(1, stream.count))
    check(messages == whole && error == wholeError, "cut every \(chunk) bytes: \(messages.count)/\(String(describing: error)) vs \(whole.count)/\(String(describing: wholeError))")
    var again: [UInt8] = []
    for message in messages {
        trace("decoded \(message.type)")
        again += message.encoded()
        if case .offer(_, let manifest) = message { checkManifest(manifest) }
    }
    check(Array(stream.prefix(again.count)) == again, "messages re-encode to other bytes")
}

func checkManifest(_ manifest: TransferManifest) {
    check(!manifest.entries.isEmpty && manifest.entries.count <= TransferWire.maxEntries, "\(manifest.entries.count) entries")
    var seen: Set<String> = []
    var files: Set<String> = []
    for entry in manifest.entries {
        let text = entry.path.description
        check(text.utf8.count <= TransferWire.maxPathBytes && !text.hasPrefix("/"), "path \(text)")
        check(seen.insert(text).inserted, "duplicate \(text)")
        if entry.kind == .file { files.insert(text) } else { check(entry.size == 0, "folder with a size") }
        for name in entry.path.components {
            check(!name.isEmpty && name != "." && name != ".." && name.utf8.count <= TransferWire.maxNameBytes, "name \(name)")
            check(!name.contains("/"), "a slash inside a name")
            check(!name.unicodeScalars.contains { $0.value == 0 || $0.properties.generalCategory == .control || (0x202A...0x202E).contains($0.value) || (0x2066...0x2069).contains($0.value) },
                  "a forbidden character in \(name.unicodeScalars.map(\.value))")
        }
    }
    for entry in manifest.entries {
        for ancestor in entry.path.ancestors { check(!files.contains(ancestor.description), "\(entry.path) inside a file") }
    }
}

func receive(_ input: inout Input) {
    let pick = input.u32()
    let (messages, _) = decodeAll(input.rest, chunk: max(1, input.rest.count))
    var session = IncomingTransferSession(hashing: FuzzHashing())
    var manifest: TransferManifest?
    var written: [Int: UInt64] = [:]
    for message in messages {
        let step: IncomingTransferSession.Step
        do {
            step = try session.received(message)
        } catch {
            trace("refused: \(error)")
            session.refuse()
            check((try? session.received(.data([1]))) == nil, "data taken after an error")
            return
        }
        switch step {
        case .offered(_, let offered):
            checkManifest(offered)
            manifest = offered
            let index = Int(pick % UInt32(offered.files.count + 1))
            let size = index < offered.files.count ? offered.files[index].size : 0
            let offset = size == .max ? UInt64(pick >> 8) : UInt64(pick >> 8) % (size + 1)
            let position = TransferPosition(fileIndex: index, offset: offset)
            check(offered.contains(position), "picked \(position) outside")
            _ = session.accept(from: position, hasher: FuzzHasher())
            for file in 0..<index { written[file] = offered.files[file].size }
            written[index] = offset
        case .write(let index, let offset, let bytes):
            wrote(index, offset, UInt64(bytes.count), manifest!, &written)
        case .skip(let index, let offset, let length):
            wrote(index, offset, length, manifest!, &written)
        case .fileVerified(let index):
            check(written[index] == manifest!.files[index].size, "file \(index) verified with \(written[index] ?? 0) of \(manifest!.files[index].size) bytes")
            written[index + 1] = written[index + 1] ?? 0
        case .aborted:
            return
        }
    }
}

func wrote(_ index: Int, _ offset: UInt64, _ count: UInt64, _ manifest: TransferManifest, _ written: inout [Int: UInt64]) {
    check(index < manifest.files.count, "a write to file \(index) of \(manifest.files.count)")
    check(written[index] == offset, "a write at \(offset) where \(written[index] ?? 0) bytes were written")
    let (end, overflow) = offset.addingReportingOverflow(count)
    check(!overflow && end <= manifest.files[index].size, "a write past the end of file \(index)")
    written[index] = end
}

func send(_ input: inout Input) {
    let manifest = try! TransferManifest(entries: [.file(try! TransferPath("a"), size: 5), .folder(try! TransferPath("f")),
                                                   .file(try! TransferPath("f/b"), size: 0), .file(try! TransferPath("f/c"), size: 1 << 40)])
    var session = OutgoingTransferSession(id: TransferID(bytes: [UInt8](repeating: 1, count: 16))!, manifest: manifest)
    let (messages, _) = decodeAll(input.rest, chunk: max(1, input.rest.count))
    var asked: TransferPosition?
    for message in messages {
        guard let step = try? session.received(message) else { return }
        if case .accepted(let position) = step {
            check(asked == nil && manifest.contains(position), "accepted \(position)")
            asked = position
        }
        var sends = 0
        while sends < 8 {
            sends += 1
            switch session.next {
            case .wait: sends = 8
            case .send(let index, let offset, let maxBytes):
                check(index < manifest.files.count && offset + maxBytes == manifest.files[index].size, "send \(index)@\(offset)+\(maxBytes)")
                if let start = asked, index == start.fileIndex { check(offset >= start.offset, "sent before where it was asked") }
                session.sent(min(maxBytes, 1 << 30))
            case .endFile:
                session.endedFile()
            }
        }
    }
}
