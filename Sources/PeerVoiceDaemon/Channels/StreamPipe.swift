import GIO
import Glibc
import PeerVoiceCore
import Synchronization

/// A channel stream between the main loop and a component of the service that runs it on a thread
/// of its own (a file transfer), held in memory instead of a loopback TCP connection: per
/// direction, a bounded ring of bytes (`Direction`) and two wake-up descriptors, one its reader
/// waits on and one its writer waits on. The main loop reads the component's bytes straight into
/// the buffer it seals, and writes what it opened straight into the ring; each byte is copied once
/// in and once out, with no system call but at the moments a ring fills or runs dry.
///
/// It keeps what the socket gave, and bounds better: the ring towards the owner holds a whole
/// stream window, and the main loop gives the peer credit only for what the owner took from it
/// (`takeConsumed`), so the peer's bytes wait in the ring and nowhere else (with a socket, credit
/// went back when the kernel took the bytes, and a slow owner left a window's worth queued in the
/// service, copied twice); each direction ends cleanly (`shutdownWrite`: end of file after
/// the last byte) or abruptly (`abort`: the other end's next read or write fails with
/// ECONNRESET, bytes still in the rings thrown away); closing an end with bytes unread resets, as
/// TCP does.
enum StreamPipe {
    /// Bytes the direction from the owner holds at most.
    static let fromOwnerBytes = 1 << 20
    /// How much the owner takes before the main loop hears of it (the stream's WINDOW updates
    /// go in steps of this size too).
    static let takenStepBytes = 64 * 1024

    /// A new stream's two ends, each reading what the other writes: the service's (reads
    /// `fromOwner` bytes at most in its ring, wakes its writer each quarter of it) and the
    /// owner's (reads `toOwner` bytes at most: a stream window).
    static func ends(toOwner: Int, fromOwner: Int = StreamPipe.fromOwnerBytes) throws(SystemError) -> (service: End, owner: End) {
        let toService = try Direction(capacity: fromOwner, writerWakeBytes: fromOwner / 4)
        let toOwner = try Direction(capacity: toOwner, writerWakeBytes: min(takenStepBytes, toOwner / 4))
        return (End(inbound: toService, outbound: toOwner), End(inbound: toOwner, outbound: toService))
    }

    /// One end: reads `inbound`, writes `outbound`. Either thread may hold it; the main loop's end
    /// is driven as any `StreamIO`, the component's thread polls `inbound.readable` and
    /// `outbound.writable` with its other descriptors.
    final class End: StreamIO, Sendable {
        let inbound: Direction
        let outbound: Direction
        private let closed = Atomic<Bool>(false)

        fileprivate init(inbound: Direction, outbound: Direction) {
            (self.inbound, self.outbound) = (inbound, outbound)
        }

        deinit { close() }

        var mode: StreamMode { .stream }

        func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult { inbound.read(into: buffer) }

        func write(_ bytes: UnsafeRawBufferPointer) -> StreamWriteResult { outbound.write(bytes) }

        func watchReadable(_ action: @escaping () -> Bool) -> EventSource {
            FDWatch.add(fd: inbound.readable.fd, events: .readable) { _ in action() }
        }

        func watchWritable(_ action: @escaping () -> Bool) -> EventSource {
            FDWatch.add(fd: outbound.writable.fd, events: .readable) { _ in action() }
        }

        func shutdownWrite() { outbound.endWriting() }

        /// Credit for what the owner took from the ring, not for what went into it.
        func creditable(afterWriting count: Int) -> Int { 0 }

        func watchTaken(_ action: @escaping (Int) -> Void) -> EventSource? {
            FDWatch.add(fd: outbound.writable.fd, events: .readable) { [outbound] _ in
                let (taken, readerGone) = outbound.takeConsumed()
                action(taken)
                return !readerGone
            }
        }

        func abort() {
            guard !closed.exchange(true, ordering: .relaxed) else { return }
            inbound.reset()
            outbound.reset()
        }

        func close() {
            guard !closed.exchange(true, ordering: .relaxed) else { return }
            if inbound.stopReading() {
                outbound.endWriting()
            } else {
                inbound.reset()
                outbound.reset()
            }
        }
    }

    /// One direction: a ring of `capacity` bytes with one writer and one reader, each on one
    /// thread (checked in debug builds). The counts and flags live under one lock, held only to
    /// look and to advance; the bytes are copied outside it, the writer only into the free part
    /// and the reader only out of the filled part, so the two never touch the same byte. The two
    /// wake-ups mirror the state, level-triggered like a socket's: `readable` while bytes or an
    /// end wait; `writable` once the reader took `writerWakeBytes` since the writer last looked
    /// (a write that found the ring full, or `takeConsumed`), so a writer wakes to a useful amount
    /// of room, not to every read, or when the reader is gone.
    ///
    /// `@unchecked Sendable`: `storage` is shared as described, everything else is in the `Mutex`
    /// or immutable.
    final class Direction: @unchecked Sendable {
        let capacity: Int
        private let writerWakeBytes: Int
        /// Readable while a read would not block.
        let readable: EventFD
        /// Readable (a descriptor to poll for input) while a write would not block.
        let writable: EventFD
        private let storage: UnsafeMutableRawPointer
        private let state = Mutex(State())

        private struct State {
            /// Bytes ever written and read: the ring holds `written - read`, from `read % capacity`.
            var written = 0
            var read = 0
            /// `read` when the writer last looked.
            var readSeenByWriter = 0
            /// The writer shut its side down: end of file after the last byte.
            var writerDone = false
            /// The reader closed: writes fail (EPIPE).
            var readerGone = false
            /// Either end aborted: reads and writes fail (ECONNRESET).
            var reset = false
            var readableSignalled = false
            var writableSignalled = false
            /// The threads that read and write (debug builds' check).
            var reader: pthread_t?
            var writer: pthread_t?
        }

        fileprivate init(capacity: Int, writerWakeBytes: Int) throws(SystemError) {
            precondition(capacity >= 4 && writerWakeBytes > 0 && writerWakeBytes <= capacity)
            guard let readable = EventFD(), let writable = EventFD() else { throw SystemError(call: "eventfd", code: errno) }
            (self.capacity, self.writerWakeBytes, self.readable, self.writable) = (capacity, writerWakeBytes, readable, writable)
            storage = .allocate(byteCount: capacity, alignment: 16)
            state.withLock { updateReadiness(&$0) }
        }

        deinit { storage.deallocate() }

        /// Reader's thread: up to `buffer.count` bytes, end of file, or ECONNRESET.
        func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
            let span: Span<StreamReadResult> = state.withLock { state in
                assert(Self.claim(&state.reader), "a stream pipe read from a second thread")
                if state.reset { return .none(.failed(ECONNRESET)) }
                let held = state.written - state.read
                if held == 0 { return .none(state.writerDone ? .endOfFile : .wouldBlock) }
                return .bytes(start: state.read % capacity, count: min(held, buffer.count))
            }
            guard case .bytes(let start, let count) = span else {
                if case .none(let result) = span { return result }
                return .wouldBlock
            }
            let first = min(count, capacity - start)
            buffer.baseAddress!.copyMemory(from: storage + start, byteCount: first)
            if count > first { (buffer.baseAddress! + first).copyMemory(from: storage, byteCount: count - first) }
            state.withLock { state in
                state.read += count
                updateReadiness(&state)
            }
            return .bytes(count)
        }

        /// Writer's thread: as many of `bytes` as fit, or why none can go.
        func write(_ bytes: UnsafeRawBufferPointer) -> StreamWriteResult {
            let span: Span<StreamWriteResult> = state.withLock { state in
                assert(Self.claim(&state.writer), "a stream pipe written from a second thread")
                if state.reset { return .none(.failed(ECONNRESET)) }
                if state.readerGone || state.writerDone { return .none(.failed(EPIPE)) }
                let free = capacity - (state.written - state.read)
                if free == 0 {
                    // Woken once the reader has made room enough.
                    state.readSeenByWriter = state.read
                    updateReadiness(&state)
                    return .none(.wouldBlock)
                }
                return .bytes(start: state.written % capacity, count: min(free, bytes.count))
            }
            guard case .bytes(let start, let count) = span else {
                if case .none(let result) = span { return result }
                return .wouldBlock
            }
            let first = min(count, capacity - start)
            (storage + start).copyMemory(from: bytes.baseAddress!, byteCount: first)
            if count > first { storage.copyMemory(from: bytes.baseAddress! + first, byteCount: count - first) }
            state.withLock { state in
                state.written += count
                updateReadiness(&state)
            }
            return .wrote(count)
        }

        /// Writer's thread: bytes the reader took since the writer last looked (after a reset,
        /// what was dropped too), and whether the reader is gone (closed, or reset): nothing
        /// more will be taken.
        func takeConsumed() -> (taken: Int, readerGone: Bool) {
            state.withLock { state in
                let taken = state.read - state.readSeenByWriter
                state.readSeenByWriter = state.read
                updateReadiness(&state)
                return (taken, state.readerGone || state.reset)
            }
        }

        /// The writer is done: the reader gets end of file after the last byte.
        func endWriting() {
            state.withLock { state in
                state.writerDone = true
                updateReadiness(&state)
            }
        }

        /// The reader closes: true when it had read everything (a clean close), false when bytes
        /// were left (the caller resets, as TCP does).
        func stopReading() -> Bool {
            state.withLock { state in
                guard state.written == state.read || state.reset else { return false }
                state.readerGone = true
                updateReadiness(&state)
                return true
            }
        }

        /// An abrupt end: both sides fail from their next call, whatever is held is dropped.
        func reset() {
            state.withLock { state in
                state.reset = true
                state.read = state.written
                updateReadiness(&state)
            }
        }

        /// Brings the wake-ups in line with the state (a system call only when one flips).
        private func updateReadiness(_ state: inout State) {
            let canRead = state.written > state.read || state.writerDone || state.reset
            if canRead != state.readableSignalled {
                if canRead { readable.signal() } else { readable.clear() }
                state.readableSignalled = canRead
            }
            let canWrite = state.read - state.readSeenByWriter >= writerWakeBytes || state.readerGone || state.reset
            if canWrite != state.writableSignalled {
                if canWrite { writable.signal() } else { writable.clear() }
                state.writableSignalled = canWrite
            }
        }

        /// What a read or write may do, decided under the lock: copy `count` bytes at `start` of
        /// the ring, or return `result` without touching it.
        private enum Span<Result> {
            case bytes(start: Int, count: Int)
            case none(Result)
        }

        /// Whether the calling thread is the one that first did this (and now owns it).
        private static func claim(_ owner: inout pthread_t?) -> Bool {
            let me = pthread_self()
            guard let owner else {
                owner = me
                return true
            }
            return pthread_equal(owner, me) != 0
        }
    }
}
