import CGio

/// One schema's settings (`GSettings`), in whatever backend GLib picks: dconf on a desktop, or the
/// keyfile that `GSETTINGS_BACKEND=keyfile` names. Writes reach the backend by `Settings.sync()`.
public final class Settings {
    private let pointer: UnsafeMutablePointer<GSettings>

    /// The settings of schema `id` (at `path`, for a relocatable schema), or nil when no such schema
    /// is installed: GLib would abort the whole process on an unknown schema.
    public init?(schema id: String, path: String? = nil) {
        guard let source = g_settings_schema_source_get_default(),
              let schema = g_settings_schema_source_lookup(source, id, 1) else { return nil }
        defer { g_settings_schema_unref(schema) }
        pointer = g_settings_new_full(schema, nil, path)
    }

    deinit { g_object_unref(pointer) }

    /// A string key's value.
    public func string(_ key: String) -> String {
        let value = g_settings_get_string(pointer, key)!
        defer { g_free(value) }
        return String(cString: value)
    }

    /// Sets a string key; false when the backend refuses it (a read-only key, say).
    @discardableResult
    public func set(_ key: String, _ value: String) -> Bool {
        g_settings_set_string(pointer, key, value) != 0
    }

    /// A string-array key's value.
    public func strings(_ key: String) -> [String] {
        let values = g_settings_get_strv(pointer, key)!
        defer { g_strfreev(values) }
        var strings: [String] = []
        var index = 0
        while let value = values[index] {
            strings.append(String(cString: value))
            index += 1
        }
        return strings
    }

    /// Sets a string-array key; false when the backend refuses it.
    @discardableResult
    public func set(_ key: String, strings: [String]) -> Bool {
        let copies = strings.map { strdup($0) } + [nil]
        defer { copies.forEach { free($0) } }
        return copies.map { UnsafePointer($0) }.withUnsafeBufferPointer { g_settings_set_strv(pointer, key, $0.baseAddress) != 0 }
    }

    /// Gives `key` back its schema default (which removes it from a keyfile or dconf).
    public func reset(_ key: String) {
        g_settings_reset(pointer, key)
    }

    /// Waits until every write of this process has reached the backend (before the program exits).
    public static func sync() {
        g_settings_sync()
    }
}
