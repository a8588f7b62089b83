/// The relative path of one entry of a transfer: names joined by `/`, every one checked, so that
/// joined under the destination folder it can only ever name something inside it
/// (docs/PROTOCOL.md §15.2). Paths come from peers: nothing about them is trusted before this.
public struct TransferPath: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The names from the top: `["Photos", "2024", "beach.jpg"]`.
    public let components: [String]

    /// Checks `text` (as a peer sent it) against the rules of docs/PROTOCOL.md §15.2.
    public init(_ text: String) throws(TransferPathError) {
        try self.init(utf8: Array(text.utf8))
    }

    /// Checks raw bytes from the wire: UTF-8 first, then the rules.
    public init(utf8 bytes: some Collection<UInt8>) throws(TransferPathError) {
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= TransferWire.maxPathBytes else { throw .pathTooLong(bytes: bytes.count) }
        guard bytes.first != UInt8(ascii: "/") else { throw .absolute }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .notUTF8 }
        // Split the bytes, not the characters: a character can hold a `/` (U+070F and other
        // prepended marks join the next scalar), and a file system splits at every one.
        let names = text.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map { String(Substring($0)) }
        guard names.count <= TransferWire.maxDepth else { throw .tooDeep(components: names.count) }
        for name in names { try Self.check(name: name) }
        components = names
    }

    /// One name as a file system takes it: the rules for a path component.
    public static func check(name: String) throws(TransferPathError) {
        let bytes = name.utf8.count
        guard bytes > 0 else { throw .emptyName }
        guard bytes <= TransferWire.maxNameBytes else { throw .nameTooLong(bytes: bytes) }
        guard name != ".", name != ".." else { throw .dotName(name) }
        for scalar in name.unicodeScalars {
            if scalar == "\0" { throw .nul }
            if scalar == "/" { throw .slash }
            if scalar.properties.generalCategory == .control { throw .controlCharacter(scalar.value) }
            if Self.bidiControls.contains(scalar.value) { throw .bidiControl(scalar.value) }
        }
    }

    /// Embeddings, overrides and isolates: they make a name read differently from what it is
    /// (`photo\u{202E}gpj.exe` shows as `photoexe.jpg`).
    static let bidiControls: Set<UInt32> = [0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069]

    /// The top-level name: the file or folder the entry belongs to as the sender chose it.
    public var topLevel: String { components[0] }

    /// The path as sent: names joined by `/`.
    public var description: String { components.joined(separator: "/") }

    /// The UTF-8 bytes as sent.
    public var utf8: [UInt8] { Array(description.utf8) }

    /// The folders above it, from the top (`a`, `a/b` for `a/b/c`).
    public var ancestors: [TransferPath] {
        (1..<components.count).map { TransferPath(trusted: Array(components[0..<$0])) }
    }

    /// `self` below another top-level name (the receiver saves a top-level item under a free name).
    public func renamingTopLevel(to name: String) -> TransferPath {
        TransferPath(trusted: [name] + components.dropFirst())
    }

    /// Components already checked.
    init(trusted components: [String]) {
        self.components = components
    }

    /// Sorts by component, so a folder comes right before what it holds.
    public static func < (lhs: TransferPath, rhs: TransferPath) -> Bool {
        lhs.components.lexicographicallyPrecedes(rhs.components) { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    }
}

/// Why a name from a peer is refused. The descriptions are for a person and quote no name.
public enum TransferPathError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case absolute
    case notUTF8
    case pathTooLong(bytes: Int)
    case tooDeep(components: Int)
    case emptyName
    case nameTooLong(bytes: Int)
    case dotName(String)
    case nul
    case slash
    case controlCharacter(UInt32)
    case bidiControl(UInt32)

    public var description: String {
        switch self {
        case .empty: "an empty path"
        case .absolute: "an absolute path (it starts with /)"
        case .notUTF8: "a name that is not UTF-8"
        case .pathTooLong(let bytes): "a path of \(bytes) bytes (at most \(TransferWire.maxPathBytes))"
        case .tooDeep(let components): "a path \(components) folders deep (at most \(TransferWire.maxDepth))"
        case .emptyName: "an empty name (// or a / at either end)"
        case .nameTooLong(let bytes): "a name of \(bytes) bytes (at most \(TransferWire.maxNameBytes))"
        case .dotName(let name): "the name \"\(name)\""
        case .nul: "a NUL character in a name"
        case .slash: "a / inside a name"
        case .controlCharacter(let value): "a control character (U+\(Self.hex(value))) in a name"
        case .bidiControl(let value): "a text-direction control (U+\(Self.hex(value))) in a name"
        }
    }

    private static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
