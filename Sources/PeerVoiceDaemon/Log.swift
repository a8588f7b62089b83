import Foundation
import Synchronization

/// One line per event on stderr. Under systemd (JOURNAL_STREAM set) lines carry the syslog
/// priority prefix journald understands; elsewhere a readable level word.
///
/// Never log message text or key material: callers pass ids, sizes and reasons only.
public enum Log {
    public enum Level: Int, Comparable, Sendable {
        case debug = 7, info = 6, warning = 4, error = 3
        public static func < (a: Level, b: Level) -> Bool { a.rawValue > b.rawValue }
        var word: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .warning: "warning"
            case .error: "error"
            }
        }
    }

    /// Set once at start-up (`--verbose`), read by every thread that logs.
    public static var threshold: Level {
        get { Level(rawValue: thresholdValue.load(ordering: .relaxed)) ?? .info }
        set { thresholdValue.store(newValue.rawValue, ordering: .relaxed) }
    }
    private static let thresholdValue = Atomic<Int>(Level.info.rawValue)
    private static let toJournal = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil

    public static func debug(_ message: @autoclosure () -> String) { write(.debug, message) }
    public static func info(_ message: @autoclosure () -> String) { write(.info, message) }
    public static func warning(_ message: @autoclosure () -> String) { write(.warning, message) }
    public static func error(_ message: @autoclosure () -> String) { write(.error, message) }

    private static func write(_ level: Level, _ message: () -> String) {
        guard level >= threshold else { return }
        let line = toJournal ? "<\(level.rawValue)>\(message())\n" : "peervoiced: \(level.word): \(message())\n"
        FileHandle.standardError.write(Data(line.utf8))
    }
}
