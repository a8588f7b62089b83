import Foundation
import GIO
import Glibc
import Synchronization
import TestHarness
import XCTest

/// The main context's owner is the thread that made the `MainLoop`; `MainContextBound` values are
/// reached from other threads by hopping there, and a debug build stops a process that touches one
/// from another thread.
final class MainContextBoundTests: XCTestCase {
    /// Set in the environment of the child process that is meant to break the rule.
    private static let breakTheRule = "PEERVOICE_TEST_TOUCH_OFF_MAIN_CONTEXT"

    private func onAnotherThread<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
        let result = Mutex<T?>(nil)
        let thread = NamedThread(name: "gio-test") { result.withLock { $0 = body() } }
        thread.join()
        return result.withLock { $0! }
    }

    func testTheThreadThatMadeTheLoopOwnsTheContextAndOthersHopThere() {
        XCTAssertFalse(isOnMainContext, "nobody owns the default context before a MainLoop exists")
        let loop = MainLoop()
        defer { withExtendedLifetime(loop) {} }
        XCTAssertTrue(isOnMainContext)
        XCTAssertFalse(onAnotherThread { isOnMainContext })

        let count = MainContextBound(0)
        let ranOnMainContext = onAnotherThread { () -> Bool in
            // Queued for the owner, not run here: this thread does not own the context.
            runOnMainContext { count.value += 1 }
            return isOnMainContext
        }
        XCTAssertFalse(ranOnMainContext)
        XCTAssertEqual(count.value, 0, "the hop ran before the main context dispatched it")
        XCTAssertTrue(iterateMainContext(timeout: 5) { count.value == 1 })
    }

    func testTouchingABoundValueOffTheMainContextStopsTheProcess() throws {
        if ProcessInfo.processInfo.environment[Self.breakTheRule] != nil {
            let loop = MainLoop()
            let bound = MainContextBound(0)
            _ = onAnotherThread { bound.value + 1 }
            withExtendedLifetime(loop) {}
            return
        }
        #if DEBUG
        let directory = try TemporaryDirectory("peervoice-gio-test")
        defer { directory.remove() }
        let child = try ChildProcess(CommandLine.arguments[0], ["GIOTests.MainContextBoundTests/testTouchingABoundValueOffTheMainContextStopsTheProcess"],
                                     environment: [Self.breakTheRule: "1"], logPath: directory.path + "/child.log")
        let status = try XCTUnwrap(child.wait(timeout: 60), "the child did not end")
        XCTAssertGreaterThan(status, 128, "the child was not stopped by a signal (status \(status)): \(child.log)")
        XCTAssertTrue(child.log.contains("a MainContextBound value used off the main context's thread"), child.log)
        #else
        throw XCTSkip("the check exists in debug builds only")
        #endif
    }
}
