import Foundation
import GIO
import Glibc

public struct HarnessError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A fresh directory under /tmp, removed by `remove()`.
public final class TemporaryDirectory {
    public let path: String

    public init(_ prefix: String = "peervoice-test") throws {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed") }
        path = String(cString: made)
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Waits until `condition` holds or `timeout` seconds pass, and says whether it holds. Meanwhile
/// it dispatches the main context, so bus signals and asynchronous replies arrive, and checks
/// again at least every 5 ms, so it also sees what no event announces (a file, a process ending).
/// The one way the tests wait.
@discardableResult
public func eventually(timeout: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0 else { return false }
        _ = iterateMainContext(timeout: min(remaining, 0.005), until: condition)
    }
    return true
}

/// Lets signals and replies already on their way arrive while `seconds` pass.
public func dispatchEvents(for seconds: Double) {
    eventually(timeout: seconds) { false }
}
