import Foundation
import GIO
import PeerVoiceCore

/// The sync thread (`peervoice-sync`): runs the message store's sync batches (fdatasync of the
/// journals written since the last one) so the main loop never waits on the disk, and reports
/// each one back on the main loop. One batch at a time; what is written meanwhile goes in the
/// next (group commit), so a burst of messages costs a sync or two, not one each.
final class JournalSyncer {
    private let queue = SyncQueue()
    private var thread: NamedThread?

    /// Syncs `batch` on the sync thread, then calls `done` on the main loop with the error, if any.
    func sync(_ batch: MessageStoreSyncBatch, then done: @escaping (StorageError?) -> Void) {
        if thread == nil {
            thread = NamedThread(name: "peervoice-sync") { [queue] in queue.serve() }
        }
        let callback = MainContextBound(done)
        queue.push {
            let error = batch.run()
            runOnMainContext { callback.value(error) }
        }
    }

    /// Jobs for the sync thread. `@unchecked Sendable`: the jobs are only touched under `condition`.
    private final class SyncQueue: @unchecked Sendable {
        private let condition = NSCondition()
        private var jobs: [@Sendable () -> Void] = []

        func push(_ job: @escaping @Sendable () -> Void) {
            condition.lock()
            jobs.append(job)
            condition.signal()
            condition.unlock()
        }

        /// The sync thread's body: runs jobs as they come, for the life of the process.
        func serve() {
            while true {
                condition.lock()
                while jobs.isEmpty { condition.wait() }
                let job = jobs.removeFirst()
                condition.unlock()
                job()
            }
        }
    }
}
