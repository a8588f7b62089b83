/// Where incoming transfers are saved: `--download-dir`, else the person's download folder as the
/// desktop names it (`XDG_DOWNLOAD_DIR` in `$XDG_CONFIG_HOME/user-dirs.dirs`, the file
/// xdg-user-dirs writes and GLib's `g_get_user_special_dir` reads), else `~/Downloads`.
public enum DownloadFolder {
    /// The folder, from the override, the text of `user-dirs.dirs` (nil when there is none) and
    /// the home folder.
    public static func path(override: String?, userDirs: String?, home: String) -> String {
        if let override, !override.isEmpty { return override }
        if let userDirs, let folder = downloadDirectory(inUserDirs: userDirs, home: home) { return folder }
        return home + "/Downloads"
    }

    /// `XDG_DOWNLOAD_DIR` from a `user-dirs.dirs`: `"$HOME/yyy"` or `"/yyy"` in double quotes,
    /// backslash escaping the next character; `#` starts a comment. nil when the line is missing,
    /// malformed, or names the home folder itself (xdg-user-dirs' way of saying "none").
    static func downloadDirectory(inUserDirs text: String, home: String) -> String? {
        var found: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            guard trimmed.hasPrefix("XDG_DOWNLOAD_DIR") else { continue }
            var rest = trimmed.dropFirst("XDG_DOWNLOAD_DIR".count).drop { $0 == " " || $0 == "\t" }
            guard rest.first == "=" else { continue }
            rest = rest.dropFirst().drop { $0 == " " || $0 == "\t" }
            guard rest.first == "\"" else { continue }
            rest = rest.dropFirst()
            var value = ""
            var escaped = false
            var closed = false
            for character in rest {
                if escaped {
                    value.append(character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    closed = true
                    break
                } else {
                    value.append(character)
                }
            }
            guard closed else { continue }
            if value.hasPrefix("$HOME") {
                let tail = value.dropFirst("$HOME".count)
                guard tail.isEmpty || tail.hasPrefix("/") else { continue }
                let relative = tail.drop { $0 == "/" }
                found = relative.isEmpty ? nil : home + "/" + relative
            } else if value.hasPrefix("/") {
                found = value == home ? nil : value
            }
        }
        return found
    }
}
