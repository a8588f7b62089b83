/// What a transfer holds, as its OFFER announces it (docs/PROTOCOL.md §15.2): files and folders
/// by relative path, with each file's size. Valid by construction: every path checked, no two
/// entries alike, nothing inside a file, sizes that add up without overflow.
///
/// The files' data travels in the order of the file entries; a file's place among them is its
/// index (``files``) in ACCEPT and FILE_END.
public struct TransferManifest: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        case file = 0
        /// A folder, sent so that empty ones arrive too (those with files arrive anyway).
        case folder = 1
    }

    public struct Entry: Equatable, Sendable {
        public let kind: Kind
        public let path: TransferPath
        /// The file's size in bytes; 0 for a folder.
        public let size: UInt64

        public init(kind: Kind, path: TransferPath, size: UInt64) {
            self.kind = kind
            self.path = path
            self.size = size
        }

        public static func file(_ path: TransferPath, size: UInt64) -> Entry { Entry(kind: .file, path: path, size: size) }
        public static func folder(_ path: TransferPath) -> Entry { Entry(kind: .folder, path: path, size: 0) }
    }

    /// In the order the sender listed them.
    public let entries: [Entry]
    /// The file entries, in the order their data travels.
    public let files: [Entry]
    /// The sum of the files' sizes.
    public let totalBytes: UInt64
    /// The top-level names, in the order they first appear: each is one file or folder the
    /// sender chose, saved under that name (or a free one like it) by the receiver.
    public let topLevelNames: [String]

    public init(entries: [Entry]) throws(TransferManifestError) {
        guard !entries.isEmpty else { throw .empty }
        guard entries.count <= TransferWire.maxEntries else { throw .tooManyEntries(entries.count) }
        var kinds: [TransferPath: Kind] = [:]
        kinds.reserveCapacity(entries.count)
        var total: UInt64 = 0
        var topLevel: [String] = []
        var seenTopLevel: Set<String> = []
        for (index, entry) in entries.enumerated() {
            guard kinds.updateValue(entry.kind, forKey: entry.path) == nil else { throw .duplicate(index: index) }
            switch entry.kind {
            case .folder:
                guard entry.size == 0 else { throw .folderWithSize(index: index) }
            case .file:
                let (sum, overflow) = total.addingReportingOverflow(entry.size)
                guard !overflow else { throw .sizesOverflow }
                total = sum
            }
            if seenTopLevel.insert(entry.path.topLevel).inserted { topLevel.append(entry.path.topLevel) }
        }
        // Something inside a file would be written through it (or fail half-way): refused.
        for (index, entry) in entries.enumerated() where entry.path.components.count > 1 {
            for ancestor in entry.path.ancestors where kinds[ancestor] == .file {
                throw .insideFile(index: index)
            }
        }
        self.entries = entries
        files = entries.filter { $0.kind == .file }
        totalBytes = total
        topLevelNames = topLevel
    }

    /// The entries under the top-level name `name`.
    public func entries(under name: String) -> [Entry] { entries.filter { $0.path.topLevel == name } }

    /// The indices in ``files`` of the files under the top-level name `name`.
    public func fileIndices(under name: String) -> [Int] {
        files.indices.filter { files[$0].path.topLevel == name }
    }

    /// Bytes of every file before the one at `position.fileIndex`, plus `position.offset`: how
    /// much of the transfer lies before `position`.
    public func bytes(before position: TransferPosition) -> UInt64 {
        files.prefix(position.fileIndex).reduce(0) { $0 + $1.size } + position.offset
    }

    /// Whether `position` can be where data resumes: a file and an offset within it (its end
    /// included), or just past the last file with offset 0.
    public func contains(_ position: TransferPosition) -> Bool {
        if position.fileIndex == files.count { return position.offset == 0 }
        return position.fileIndex < files.count && position.offset <= files[position.fileIndex].size
    }
}

/// Where data stands in a transfer: the index of a file (among ``TransferManifest/files``) and
/// a byte offset in it. Every file before `fileIndex` is whole.
public struct TransferPosition: Equatable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var fileIndex: Int
    public var offset: UInt64

    public init(fileIndex: Int, offset: UInt64) {
        self.fileIndex = fileIndex
        self.offset = offset
    }

    public static let start = TransferPosition(fileIndex: 0, offset: 0)

    public var description: String { "file \(fileIndex) at byte \(offset)" }
}

/// Why a manifest is refused; for a person (and the log), quoting no name.
public enum TransferManifestError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case tooManyEntries(Int)
    case invalidPath(index: Int, TransferPathError)
    case duplicate(index: Int)
    case insideFile(index: Int)
    case folderWithSize(index: Int)
    case sizesOverflow
    case unknownKind(index: Int, UInt8)

    public var description: String {
        switch self {
        case .empty: "a transfer with nothing in it"
        case .tooManyEntries(let count): "\(count) files and folders (at most \(TransferWire.maxEntries))"
        case .invalidPath(let index, let error): "entry \(index + 1) has \(error)"
        case .duplicate(let index): "entry \(index + 1) is listed twice"
        case .insideFile(let index): "entry \(index + 1) lies inside a file"
        case .folderWithSize(let index): "entry \(index + 1) is a folder with a size"
        case .sizesOverflow: "sizes that add up to more than 2^64 bytes"
        case .unknownKind(let index, let kind): "entry \(index + 1) of unknown kind \(kind)"
        }
    }
}
