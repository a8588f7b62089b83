import Foundation
import Glibc
import GIO
@testable import PeerVoiceDaemon
import TestHarness
import XCTest

/// `StreamConnection` over a real TCP connection on loopback.
final class StreamConnectionTests: XCTestCase {
    /// A link closing in the middle of a bulk stream: the peer is not reading, so our last bytes
    /// and the goodbye wait in our send queue, and it sent bytes we never read. Closing such a
    /// socket at once answers with RST, which throws our send queue away; the goodbye must arrive
    /// whole, then the end of the stream.
    func testAGoodbyeReachesAPeerThatReadsLateThoughItsOwnBytesWereNeverRead() throws {
        let listener = try Socket.listening(on: IPEndpoint(host: "127.0.0.1", port: 0))
        let port = try XCTUnwrap(listener.localEndpoint?.port)
        let dialled = try Socket.connecting(to: IPEndpoint(host: "127.0.0.1", port: port))
        var accepted: Socket?
        XCTAssertTrue(eventually(timeout: 5) { accepted = try? listener.accept()?.0; return accepted != nil })
        let peer = try XCTUnwrap(accepted)
        // Blocking from here: the peer's side is this test's plain reader and writer.
        _ = fcntl(peer.fd, F_SETFL, fcntl(peer.fd, F_GETFL) & ~O_NONBLOCK)
        XCTAssertEqual(Glibc.write(peer.fd, "unread", 6), 6)

        let connection = StreamConnection(socket: dialled)
        let bulk = [UInt8](repeating: 0x5A, count: 8 << 20)
        let goodbye = Array("GOODBYE".utf8)
        connection.send(bulk)
        connection.send(goodbye)
        XCTAssertTrue(connection.hasPendingOutput, "8 MiB to a reader that has not started must wait in the queue")
        connection.closeAfterFlushing()
        XCTAssertTrue(connection.isClosed, "closed to its owner at once")

        // The peer starts reading only now, on its own thread, while the main loop runs.
        let received = ReceivedBytes()
        let peerFD = peer.fd  // `peer` stays open until the test ends
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(peerFD, $0.baseAddress, $0.count) }
                if count > 0 { received.append(buffer[0..<count]); continue }
                received.finish(count == 0 ? "end of stream" : "read failed: \(String(cString: strerror(errno)))")
                return
            }
        }
        reader.start()
        XCTAssertTrue(eventually(timeout: 20) { received.ending != nil }, "the stream never ended")
        let (count, tail, ending) = received.summary
        XCTAssertEqual(ending, "end of stream")
        XCTAssertEqual(count, bulk.count + goodbye.count, "every byte sent arrives")
        XCTAssertEqual(tail, goodbye, "the goodbye arrives last")
        withExtendedLifetime(peer) {}
    }
}

/// What the reader thread got, for the test's thread to check.
private final class ReceivedBytes: @unchecked Sendable {  // every field under `lock`
    private let lock = NSLock()
    private var count = 0
    private var tail: [UInt8] = []
    private var endedWith: String?

    func append(_ bytes: ArraySlice<UInt8>) {
        lock.withLock {
            count += bytes.count
            tail = Array((tail + bytes).suffix(7))
        }
    }

    func finish(_ how: String) { lock.withLock { endedWith = how } }
    var ending: String? { lock.withLock { endedWith } }
    var summary: (Int, [UInt8], String?) { lock.withLock { (count, tail, endedWith) } }
}
