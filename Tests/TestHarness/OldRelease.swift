import Foundation

/// The previous release's peervoiced, for the old <-> new tests: the commit tests/old-release/COMMIT
/// records, built by tests/old-release/build.sh (make old-release) into .build/old-release/COMMIT/.
public enum OldRelease {
    /// This checkout's root.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The commit the old release is built from ("" if tests/old-release/COMMIT cannot be read).
    public static let commit: String = {
        let text = (try? String(contentsOf: root.appendingPathComponent("tests/old-release/COMMIT"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").first { $0.hasPrefix("commit ") }.map { String($0.dropFirst(7)) } ?? ""
    }()

    /// Its peervoiced, if it has been built.
    public static var binary: String? {
        let path = root.appendingPathComponent(".build/old-release/\(commit)/peervoiced").path
        return FileManager.default.isExecutableFile(atPath: path) ? path : nil
    }

    /// Why the old <-> new tests do not run, for their skip message.
    public static var notBuilt: String {
        "OLD <-> NEW NOT RUN: the previous release (commit \(commit)) is not built: run make old-release "
            + "(tests/old-release/build.sh; in a shallow clone, git fetch --depth=1 origin \(commit) first)"
    }

    /// The one description of this build's bus API (dbus/org.example.PeerVoice.xml), to tell which
    /// methods it has that the old release may not.
    public static var busAPI: String {
        (try? String(contentsOf: root.appendingPathComponent("dbus/org.example.PeerVoice.xml"), encoding: .utf8)) ?? ""
    }
}
