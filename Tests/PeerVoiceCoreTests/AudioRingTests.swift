import Foundation
import PeerVoiceCore
import XCTest

final class AudioRingTests: XCTestCase {

    private func read(_ ring: AudioRing, _ count: Int) -> [Int16] {
        var out = [Int16](repeating: -1, count: count)
        let n = out.withUnsafeMutableBufferPointer { ring.read(into: $0) }
        return Array(out.prefix(n))
    }

    func testCapacityRoundsUpToPowerOfTwo() {
        XCTAssertEqual(AudioRing(minimumCapacity: 1).capacity, 2)
        XCTAssertEqual(AudioRing(minimumCapacity: 960).capacity, 1024)
        XCTAssertEqual(AudioRing(minimumCapacity: 1024).capacity, 1024)
        let ring = AudioRing(minimumCapacity: 100)
        XCTAssertEqual(ring.availableToRead, 0)
        XCTAssertEqual(ring.availableToWrite, 128)
    }

    func testWriteThenReadInOrder() {
        let ring = AudioRing(minimumCapacity: 16)
        XCTAssertEqual(ring.write([1, 2, 3, 4, 5]), 5)
        XCTAssertEqual(ring.availableToRead, 5)
        XCTAssertEqual(read(ring, 3), [1, 2, 3])
        XCTAssertEqual(ring.availableToRead, 2)
        XCTAssertEqual(read(ring, 10), [4, 5])
        XCTAssertEqual(ring.availableToRead, 0)
        XCTAssertEqual(read(ring, 4), [])
    }

    func testWrapsAround() {
        let ring = AudioRing(minimumCapacity: 8)
        var next: Int16 = 0
        var expected: Int16 = 0
        // Chunks of 5 through a ring of 8 cross the end at every offset.
        for _ in 0..<50 {
            let chunk = (0..<5).map { _ -> Int16 in defer { next &+= 1 }; return next }
            XCTAssertEqual(ring.write(chunk), 5)
            for value in read(ring, 5) {
                XCTAssertEqual(value, expected)
                expected &+= 1
            }
        }
        XCTAssertEqual(expected, 250)
        XCTAssertEqual(ring.droppedSamples, 0)
    }

    func testOverflowDropsNewestAndCounts() {
        let ring = AudioRing(minimumCapacity: 8)
        XCTAssertEqual(ring.write([1, 2, 3, 4, 5, 6]), 6)
        XCTAssertEqual(ring.write([7, 8, 9, 10]), 2, "only two fit")
        XCTAssertEqual(ring.droppedSamples, 2)
        XCTAssertEqual(ring.availableToWrite, 0)
        XCTAssertEqual(ring.write([11]), 0)
        XCTAssertEqual(ring.droppedSamples, 3)
        XCTAssertEqual(read(ring, 8), [1, 2, 3, 4, 5, 6, 7, 8])
    }

    func testUnderflowIsCountedAndFillPads() {
        let ring = AudioRing(minimumCapacity: 8)
        ring.write([5, 6])
        var out = [Int16](repeating: 99, count: 5)
        let n = out.withUnsafeMutableBufferPointer { ring.read(into: $0, fillingWith: 0) }
        XCTAssertEqual(n, 2)
        XCTAssertEqual(out, [5, 6, 0, 0, 0])
        XCTAssertEqual(ring.missingSamples, 3)
    }

    func testDiscardDropsOldest() {
        let ring = AudioRing(minimumCapacity: 8)
        ring.write([1, 2, 3, 4])
        XCTAssertEqual(ring.discard(3), 3)
        XCTAssertEqual(ring.discard(3), 1)
        XCTAssertEqual(ring.discard(3), 0)
        ring.write([9])
        XCTAssertEqual(read(ring, 4), [9])
    }

    func testEmptyBuffersAreHarmless() {
        let ring = AudioRing(minimumCapacity: 8)
        XCTAssertEqual(ring.write([]), 0)
        XCTAssertEqual(read(ring, 0), [])
        XCTAssertEqual(ring.droppedSamples, 0)
        XCTAssertEqual(ring.missingSamples, 0)
    }

    /// One producer thread and one consumer thread, chunks of varying sizes through a small ring:
    /// every sample arrives, in order, exactly once.
    func testTwoThreadStress() {
        let ring = AudioRing(minimumCapacity: 256)
        let total = 10_000_000
        let done = DispatchGroup()
        let failures = Failures()

        done.enter()
        Thread.detachNewThread {
            var value: Int16 = 0
            var sent = 0
            var chunk = [Int16](repeating: 0, count: 97)
            var size = 1
            let deadline = Date().addingTimeInterval(60)
            while sent < total && Date() < deadline {
                size = size % 97 + 1  // 1...97
                let count = min(size, total - sent)
                for i in 0..<count { chunk[i] = value &+ Int16(truncatingIfNeeded: i) }
                let written = chunk.withUnsafeBufferPointer { ring.write(UnsafeBufferPointer(rebasing: $0[0..<count])) }
                // The ring drops what does not fit: resend the rest next time.
                value &+= Int16(truncatingIfNeeded: written)
                sent += written
                if written < count { sched_yield() }
            }
            done.leave()
        }

        done.enter()
        Thread.detachNewThread {
            var expected: Int16 = 0
            var received = 0
            var buffer = [Int16](repeating: 0, count: 61)
            var size = 1
            let deadline = Date().addingTimeInterval(60)
            while received < total {
                size = size % 61 + 1
                let n = buffer.withUnsafeMutableBufferPointer {
                    ring.read(into: UnsafeMutableBufferPointer(rebasing: $0[0..<size]))
                }
                for i in 0..<n {
                    if buffer[i] != expected {
                        failures.record("sample \(received + i): got \(buffer[i]), expected \(expected)")
                        done.leave()
                        return
                    }
                    expected &+= 1
                }
                received += n
                if n == 0 {
                    if Date() > deadline {
                        failures.record("timed out after \(received) samples")
                        break
                    }
                    sched_yield()
                }
            }
            done.leave()
        }

        XCTAssertEqual(done.wait(timeout: .now() + 90), .success, "threads did not finish")
        XCTAssertEqual(failures.messages, [])
        XCTAssertEqual(ring.availableToRead, 0)
    }
}

/// Failure messages collected from other threads.
private final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [String] = []
    func record(_ message: String) { lock.lock(); list.append(message); lock.unlock() }
    var messages: [String] { lock.lock(); defer { lock.unlock() }; return list }
}
