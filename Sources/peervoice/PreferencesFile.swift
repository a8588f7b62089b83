import Foundation
import PeerVoiceAppModel

/// The app's own preferences (push to talk, light or dark) in
/// `$XDG_CONFIG_HOME/peervoice/app.json` (`~/.config/…` by default). The service keeps its
/// settings itself; these are only how this app behaves.
struct PreferencesFile {
    let path: String

    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let config = environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.config"
        path = config + "/peervoice/app.json"
    }

    /// What was saved; the defaults when nothing was (or the file is unreadable: it is rewritten
    /// with the next change).
    func load() -> AppPreferences {
        guard let data = FileManager.default.contents(atPath: path) else { return AppPreferences() }
        do {
            return try JSONDecoder().decode(AppPreferences.self, from: data)
        } catch {
            print("peervoice: \(path) is not readable, using the default preferences: \(error)")
            return AppPreferences()
        }
    }

    func save(_ preferences: AppPreferences) {
        do {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(preferences).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            print("peervoice: the preferences could not be saved to \(path): \(error)")
        }
    }
}
