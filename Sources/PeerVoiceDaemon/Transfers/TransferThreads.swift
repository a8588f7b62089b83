import Dispatch
import GIO
import Glibc
import Synchronization

/// A thread that runs jobs one after another, in order, named for `top -H`. The transfers have
/// two kinds: their disk thread (`peervoice-files`: records saved, folders scanned for
/// `SendFiles`, free space looked up, partial data cleared, so that the main loop never waits for
/// the disk) and each incoming stream's position saver (`peervoice-sync`: flushes data and then
/// records how far it reached, while the stream's thread goes on receiving).
final class SerialThread {
    /// What the thread and its users share.
    private final class Queue: Sendable {
        let jobs = Mutex<[@Sendable () -> Void]>([])
        let wake = DispatchSemaphore(value: 0)
        let stopping = Atomic<Bool>(false)

        func runJobs() {
            while true {
                wake.wait()
                let batch = jobs.withLock { pending in
                    defer { pending = [] }
                    return pending
                }
                batch.forEach { $0() }
                if stopping.load(ordering: .acquiring) && jobs.withLock({ $0.isEmpty }) { return }
            }
        }

        func add(_ job: @escaping @Sendable () -> Void) {
            jobs.withLock { $0.append(job) }
            wake.signal()
        }
    }

    private let queue = Queue()
    private var thread: NamedThread?

    init(name: String) {
        thread = NamedThread(name: name) { [queue] in queue.runJobs() }
    }

    /// Runs `job` on the thread after every job queued before it.
    func run(_ job: @escaping @Sendable () -> Void) { queue.add(job) }

    /// Waits until every job queued so far has run (from another thread than this one's).
    func waitUntilIdle() {
        let done = DispatchSemaphore(value: 0)
        queue.add { done.signal() }
        done.wait()
    }

    /// Runs what is queued, then ends the thread and waits for it.
    func finish() {
        queue.stopping.store(true, ordering: .releasing)
        queue.wake.signal()
        thread?.join()
        thread = nil
    }
}

/// Commands from the main loop to one transfer stream's thread, which sleeps in `poll` on its
/// socket and on `wakeFD`: posting a command writes a byte to the pipe behind `wakeFD`.
final class StreamMailbox<Command: Sendable>: Sendable {
    let wakeFD: Int32
    private let postFD: Int32
    private let commands = Mutex<[Command]>([])

    init() {
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) != 0 { fatalError("pipe: \(String(cString: strerror(errno)))") }
        for end in ends {
            _ = fcntl(end, F_SETFL, O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        (wakeFD, postFD) = (ends[0], ends[1])
    }

    deinit {
        close(wakeFD)
        close(postFD)
    }

    func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        var byte: UInt8 = 1
        _ = write(postFD, &byte, 1)
    }

    /// The commands posted since the last call, oldest first; empties the pipe.
    func take() -> [Command] {
        var sink = [UInt8](repeating: 0, count: 64)
        while read(wakeFD, &sink, sink.count) > 0 {}
        return commands.withLock { queued in
            defer { queued = [] }
            return queued
        }
    }
}
