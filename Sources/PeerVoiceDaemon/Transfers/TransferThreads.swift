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
/// pipe and on `wakeFD`: posting a command signals the eventfd behind `wakeFD`.
final class StreamMailbox<Command: Sendable>: Sendable {
    private let wake: EventFD
    private let commands = Mutex<[Command]>([])

    init() {
        guard let wake = EventFD() else { fatalError("eventfd: \(String(cString: strerror(errno)))") }
        self.wake = wake
    }

    var wakeFD: Int32 { wake.fd }

    func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        wake.signal()
    }

    /// The commands posted since the last call, oldest first; clears the wake-up.
    func take() -> [Command] {
        wake.clear()
        return commands.withLock { queued in
            defer { queued = [] }
            return queued
        }
    }
}
