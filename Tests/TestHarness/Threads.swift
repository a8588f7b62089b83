import Foundation

/// Threads a test helper starts and waits for when it stops (a relay's pumps and loops).
final class Threads: Sendable {
    private let group = DispatchGroup()

    /// Runs `body` on a thread of its own.
    func spawn(_ body: @escaping @Sendable () -> Void) {
        group.enter()
        let thread = Thread { [group] in
            body()
            group.leave()
        }
        thread.start()
    }

    /// Whether every thread ended within `seconds`.
    @discardableResult
    func wait(seconds: Double) -> Bool {
        group.wait(timeout: .now() + seconds) == .success
    }
}
