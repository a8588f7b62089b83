/// The names a receiver saves under (docs/PROTOCOL.md §15.2, reference implementation): a free
/// name beside what is there (`photo.jpg`, then `photo (1).jpg`, `photo (2).jpg`, …), never an
/// existing one, and the hidden part name the data grows under until it is whole and verified.
public enum DestinationNames {
    /// Extensions kept whole when a number goes in (`backup (1).tar.gz`, not `backup.tar (1).gz`).
    static let doubleExtensions = ["tar.gz", "tar.bz2", "tar.xz", "tar.zst", "tar.lz", "tar.Z"]

    /// `name` itself if `isTaken` says it is free, else the first free `stem (n).ext`, n from 1.
    /// The result is a valid name of at most 255 bytes (the stem is shortened if need be).
    public static func freeName(for name: String, isTaken: (String) -> Bool) -> String {
        if !isTaken(name) { return name }
        let (stem, suffix) = split(name)
        var number = 1
        while true {
            let tail = " (\(number))" + suffix
            let candidate = truncated(stem, toBytes: TransferWire.maxNameBytes - tail.utf8.count) + tail
            if !isTaken(candidate) { return candidate }
            number += 1
        }
    }

    /// The stem and the extension (with its dot): `photo.jpg` → (`photo`, `.jpg`); a leading dot
    /// is not an extension (`.bashrc`), nor is one of over 16 bytes.
    static func split(_ name: String) -> (stem: String, suffix: String) {
        let lower = name.lowercased()
        for double in doubleExtensions where lower.hasSuffix("." + double.lowercased()) && name.utf8.count > double.utf8.count + 1 {
            let cut = name.index(name.endIndex, offsetBy: -(double.count + 1))
            return (String(name[..<cut]), String(name[cut...]))
        }
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        let suffix = String(name[dot...])
        guard suffix.utf8.count <= 16, !suffix.contains(" ") else { return (name, "") }
        return (String(name[..<dot]), suffix)
    }

    /// Where a top-level item of transfer `id` grows: hidden (a leading dot) beside where it will
    /// be saved, named after it and the transfer: `.photo.jpg.0123456789abcdef.part`.
    public static func partName(for name: String, id: TransferID) -> String {
        let tail = "." + String(id.hex.prefix(16)) + ".part"
        return "." + truncated(name, toBytes: TransferWire.maxNameBytes - 1 - tail.utf8.count) + tail
    }

    /// `text` cut to at most `bytes` bytes of UTF-8 at a character boundary.
    static func truncated(_ text: String, toBytes bytes: Int) -> String {
        guard text.utf8.count > bytes else { return text }
        var result = ""
        var used = 0
        for character in text {
            used += character.utf8.count
            guard used <= bytes else { break }
            result.append(character)
        }
        return result
    }
}
