import GIO
import Glibc

/// `peervoicectl shortcut install KEYS` / `remove`: a GNOME custom keyboard shortcut that runs
/// `peervoicectl mute toggle`, for GNOME 43–47, whose desktop portal has no GlobalShortcuts. It is
/// what Settings › Keyboard › Custom Shortcuts writes: a path in media-keys' `custom-keybindings`
/// list and a relocatable `custom-keybinding` (name, command, binding) at that path. The list is
/// appended to and taken from, never replaced: the person's other shortcuts stay.
enum GnomeShortcut {
    static let mediaKeys = "org.gnome.settings-daemon.plugins.media-keys"
    static let customKeybinding = "org.gnome.settings-daemon.plugins.media-keys.custom-keybinding"
    static let listKey = "custom-keybindings"
    /// Ours: one shortcut, always at this path, so installing twice changes it in place.
    static let path = "/org/gnome/settings-daemon/plugins/media-keys/custom-keybindings/peervoice-mute/"
    static let name = "PeerVoice: mute or unmute"

    static func install(keys: String) throws(Exit) {
        let binding = try accelerator(keys)
        let (list, shortcut) = try settings()
        let command = "\(executable) mute toggle"
        guard shortcut.set("name", name), shortcut.set("command", command), shortcut.set("binding", binding) else {
            throw Exit(status: Exit.serviceError, message: "peervoicectl: shortcut: GNOME's settings refused the shortcut (are they read-only here?)")
        }
        let paths = list.strings(listKey)
        if !paths.contains(path) {
            guard list.set(listKey, strings: paths + [path]) else {
                throw Exit(status: Exit.serviceError, message: "peervoicectl: shortcut: GNOME's settings refused the list of custom shortcuts")
            }
        }
        Settings.sync()
        Output.line("\(binding) runs `\(command)` (GNOME Settings › Keyboard › Custom Shortcuts: \"\(name)\")")
    }

    static func remove() throws(Exit) {
        let (list, shortcut) = try settings()
        let paths = list.strings(listKey)
        if paths.contains(path) {
            list.set(listKey, strings: paths.filter { $0 != path })
        }
        for key in ["name", "command", "binding"] { shortcut.reset(key) }
        Settings.sync()
        Output.line(paths.contains(path) ? "removed the GNOME shortcut \"\(name)\"" : "no GNOME shortcut of PeerVoice was installed")
    }

    private static func settings() throws(Exit) -> (list: Settings, shortcut: Settings) {
        guard let list = Settings(schema: mediaKeys), let shortcut = Settings(schema: customKeybinding, path: path) else {
            throw Exit(status: Exit.serviceError, message: """
                peervoicectl: shortcut: GNOME's media-keys settings are not installed here (Debian: gnome-settings-daemon-common); \
                on another desktop, bind a key to `peervoicectl mute toggle` in its keyboard settings
                """)
        }
        return (list, shortcut)
    }

    /// This program, as the shortcut will run it: the path it was started from.
    private static var executable: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return count > 0 ? String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "peervoicectl"
    }

    /// "ctrl+alt+m" → GTK's accelerator "<Control><Alt>m", as GNOME stores bindings: modifiers
    /// (ctrl, alt, shift, super) and then one key, a letter, a digit or a key name such as F8.
    static func accelerator(_ keys: String) throws(Exit) -> String {
        let modifiers = ["ctrl": "<Control>", "control": "<Control>", "alt": "<Alt>", "shift": "<Shift>",
                         "super": "<Super>", "logo": "<Super>", "meta": "<Super>"]
        let parts = keys.lowercased().split(separator: "+", omittingEmptySubsequences: false).map(String.init)
        let problem = "shortcut: KEYS is modifiers and one key joined by +, e.g. ctrl+alt+m, not '\(keys)'"
        guard let key = parts.last, !key.isEmpty, modifiers[key] == nil,
              key.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else { throw Exit.usage(problem) }
        var accelerator = ""
        for part in parts.dropLast() {
            guard let modifier = modifiers[part] else { throw Exit.usage(problem) }
            if !accelerator.contains(modifier) { accelerator += modifier }
        }
        guard !accelerator.isEmpty else { throw Exit.usage("shortcut: a key without ctrl, alt or super would fire while people type: '\(keys)'") }
        // Key names are GDK's: F8, not f8.
        return accelerator + (key.count > 1 && key.hasPrefix("f") && Int(key.dropFirst()) != nil ? key.uppercased() : key)
    }
}
