/// Limits on the text a message carries.
public enum MessageText {
    /// Largest text `Send` accepts, in bytes of UTF-8.
    public static let maxBytes = 65_536

    /// Checks `text` for `Send`: 1 to 65536 bytes of UTF-8 (D-Bus strings are always valid UTF-8).
    public static func validate(_ text: String) throws(ServiceError) {
        let bytes = text.utf8.count
        if bytes == 0 { throw .invalidArgument("the message is empty: send 1 to \(maxBytes) bytes of text") }
        if bytes > maxBytes { throw .tooLarge("the message is \(bytes) bytes; the limit is \(maxBytes) bytes of UTF-8") }
    }
}
