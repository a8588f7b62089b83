import Foundation
import Glibc
import GIO
@testable import PeerVoiceDaemon
import XCTest

/// `StreamPipe` alone: the in-memory stream between the main loop and a transfer's thread.
final class StreamPipeTests: XCTestCase {
    func testARingHoldsAtMostItsCapacityAndWakesItsWriterOnlyWhenAQuarterIsFree() throws {
        let (writer, reader) = try StreamPipe.ends(toOwner: 64, fromOwner: 64)
        XCTAssertFalse(Self.isSignalled(reader.inbound.readable.fd), "nothing to read yet")
        let bytes = (0..<100).map { UInt8($0) }
        XCTAssertEqual(Self.write(bytes, to: writer), .wrote(64), "a write takes what fits")
        XCTAssertEqual(Self.write(bytes, to: writer), .wouldBlock)
        XCTAssertFalse(Self.isSignalled(writer.outbound.writable.fd), "a full ring does not wake its writer")
        XCTAssertTrue(Self.isSignalled(reader.inbound.readable.fd))

        XCTAssertEqual(Self.read(10, from: reader), .bytes(Array(bytes[0..<10])))
        XCTAssertFalse(Self.isSignalled(writer.outbound.writable.fd), "10 bytes free is under a quarter")
        XCTAssertEqual(Self.read(10, from: reader), .bytes(Array(bytes[10..<20])))
        XCTAssertTrue(Self.isSignalled(writer.outbound.writable.fd), "20 bytes free is over a quarter")

        // Around the ring's end: what comes out is what went in, in order.
        XCTAssertEqual(Self.write(Array(bytes[64..<84]), to: writer), .wrote(20))
        XCTAssertEqual(Self.read(100, from: reader), .bytes(Array(bytes[20..<84])))
        XCTAssertFalse(Self.isSignalled(reader.inbound.readable.fd), "an empty ring does not wake its reader")
        XCTAssertEqual(Self.read(100, from: reader), .wouldBlock)
    }

    func testTheServiceHearsWhatTheOwnerTookInStepsAndWhenItIsGone() throws {
        // The main loop credits the peer for what the owner took, not for what went into the ring.
        let (service, owner) = try StreamPipe.ends(toOwner: 1 << 20)
        var taken: [Int] = []
        let bytes = [UInt8](repeating: 7, count: 200 * 1024)
        XCTAssertEqual(Self.write(bytes, to: service), .wrote(bytes.count))
        XCTAssertEqual(service.creditable(afterWriting: bytes.count), 0, "no credit for bytes still in the ring")
        let watch = try XCTUnwrap(service.watchTaken { taken.append($0) })
        defer { watch.cancel() }
        XCTAssertEqual(Self.read(StreamPipe.takenStepBytes - 1, from: owner), .bytes(Array(bytes[0..<(StreamPipe.takenStepBytes - 1)])))
        XCTAssertFalse(Self.isSignalled(service.outbound.writable.fd), "less than a step taken: nothing to tell yet")
        XCTAssertEqual(Self.read(1, from: owner), .bytes([7]))
        XCTAssertTrue(iterateMainContext(timeout: 5) { taken == [StreamPipe.takenStepBytes] }, "a step taken is heard: \(taken)")
        XCTAssertEqual(Self.read(100, from: owner), .bytes(Array(repeating: 7, count: 100)))
        XCTAssertEqual(Self.read(bytes.count, from: owner), .bytes(Array(repeating: 7, count: bytes.count - StreamPipe.takenStepBytes - 100)))
        owner.close()
        XCTAssertTrue(iterateMainContext(timeout: 5) { taken.reduce(0, +) == bytes.count }, "the rest is heard when the owner closes: \(taken)")
    }

    func testEndOfFileComesAfterTheLastByteAndStaysReadable() throws {
        let (writer, reader) = try StreamPipe.ends(toOwner: 64, fromOwner: 64)
        XCTAssertEqual(Self.write(Array("hello".utf8), to: writer), .wrote(5))
        writer.shutdownWrite()
        XCTAssertEqual(Self.write(Array("late".utf8), to: writer), .failed(EPIPE), "no byte after the end")
        XCTAssertEqual(Self.read(64, from: reader), .bytes(Array("hello".utf8)))
        XCTAssertTrue(Self.isSignalled(reader.inbound.readable.fd), "the end wakes the reader")
        XCTAssertEqual(Self.read(64, from: reader), .endOfFile)
        XCTAssertEqual(Self.read(64, from: reader), .endOfFile)
        // The other direction is still open.
        XCTAssertEqual(Self.write(Array("reply".utf8), to: reader), .wrote(5))
        XCTAssertEqual(Self.read(64, from: writer), .bytes(Array("reply".utf8)))
    }

    func testAnAbortIsSeenAtOnceByTheOtherEndAndDropsWhatWasHeld() throws {
        let (one, other) = try StreamPipe.ends(toOwner: 64, fromOwner: 64)
        XCTAssertEqual(Self.write(Array("unread".utf8), to: one), .wrote(6))
        XCTAssertEqual(Self.write(Array(repeating: 1, count: 64), to: other), .wrote(64))
        XCTAssertFalse(Self.isSignalled(other.outbound.writable.fd))
        other.abort()
        XCTAssertTrue(Self.isSignalled(one.inbound.readable.fd), "a reader waiting wakes")
        XCTAssertTrue(Self.isSignalled(one.outbound.writable.fd), "a writer waiting wakes")
        XCTAssertEqual(Self.read(64, from: one), .failed(ECONNRESET), "bytes held are not read after a reset")
        XCTAssertEqual(Self.write([1], to: one), .failed(ECONNRESET))
    }

    func testClosingCleanlyEndsBothDirectionsButClosingWithBytesUnreadResets() throws {
        let (client, server) = try StreamPipe.ends(toOwner: 64, fromOwner: 64)
        XCTAssertEqual(Self.write(Array("bye".utf8), to: server), .wrote(3))
        XCTAssertEqual(Self.read(64, from: client), .bytes(Array("bye".utf8)))
        client.close()
        XCTAssertEqual(Self.read(64, from: server), .endOfFile, "a clean close ends its writing")
        XCTAssertEqual(Self.write([1], to: server), .failed(EPIPE), "nobody reads any more")

        let (sender, receiver) = try StreamPipe.ends(toOwner: 64, fromOwner: 64)
        XCTAssertEqual(Self.write(Array("never read".utf8), to: sender), .wrote(10))
        receiver.close()
        XCTAssertEqual(Self.read(64, from: sender), .failed(ECONNRESET), "as TCP does, bytes left unread reset the stream")
    }

    func testAProducerAndAConsumerOnTwoThreadsMoveEveryByteInOrder() throws {
        // An odd capacity and uneven writes and reads: every copy wraps somewhere new.
        let (producer, consumer) = try StreamPipe.ends(toOwner: 65_537)
        let total = 48 << 20
        let thread = Thread {
            var sent = 0
            var chunk = [UInt8](repeating: 0, count: 100_003)
            while sent < total {
                let count = min(chunk.count, total - sent)
                for index in 0..<count { chunk[index] = Self.pattern(sent + index) }
                var offset = 0
                while offset < count {
                    switch chunk.withUnsafeBytes({ producer.write(UnsafeRawBufferPointer(rebasing: $0[offset..<count])) }) {
                    case .wrote(let written): offset += written
                    case .wouldBlock: Self.waitFor(producer.outbound.writable.fd)
                    case .failed: return
                    }
                }
                sent += count
            }
            producer.shutdownWrite()
        }
        thread.start()
        var received = 0
        var mismatches = 0
        var buffer = [UInt8](repeating: 0, count: 77_777)
        reading: while true {
            switch buffer.withUnsafeMutableBytes({ consumer.read(into: $0) }) {
            case .bytes(let count):
                for index in 0..<count where buffer[index] != Self.pattern(received + index) { mismatches += 1 }
                received += count
            case .wouldBlock:
                Self.waitFor(consumer.inbound.readable.fd)
            case .endOfFile:
                break reading
            case .failed(let code):
                return XCTFail("the read failed: \(String(cString: strerror(code)))")
            case .tooLarge:
                return XCTFail("a byte stream has no messages")
            }
        }
        XCTAssertEqual(received, total, "every byte arrives, then the end")
        XCTAssertEqual(mismatches, 0, "each byte where it was written")
    }

    // MARK: Helpers

    private enum Read: Equatable {
        case bytes([UInt8])
        case wouldBlock, endOfFile
        case failed(Int32)
    }

    private static func read(_ count: Int, from end: StreamPipe.End) -> Read {
        var buffer = [UInt8](repeating: 0, count: count)
        switch buffer.withUnsafeMutableBytes({ end.read(into: $0) }) {
        case .bytes(let count): return .bytes(Array(buffer[0..<count]))
        case .wouldBlock, .tooLarge: return .wouldBlock
        case .endOfFile: return .endOfFile
        case .failed(let code): return .failed(code)
        }
    }

    private static func write(_ bytes: [UInt8], to end: StreamPipe.End) -> StreamWriteResult {
        bytes.withUnsafeBytes { end.write($0) }
    }

    private static func isSignalled(_ fd: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) == 1
    }

    private static func waitFor(_ fd: Int32) {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        _ = poll(&entry, 1, 5_000)
    }

    private static func pattern(_ index: Int) -> UInt8 { UInt8(truncatingIfNeeded: index &* 31 &+ index >> 11) }
}
