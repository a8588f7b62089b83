/// The TXT record of a `_peervoice._tcp` advertisement (docs/PROTOCOL.md, "LAN discovery"): what a
/// browser learns before it connects. Each entry is one `key=value` string of at most 255 bytes;
/// entries come in any order (mDNS keeps none).
///
/// | key | value |
/// | --- | --- |
/// | `pv` | protocol version, `1` (required, first when encoded) |
/// | `n` | display name, UTF-8, 1 to 250 bytes (optional) |
/// | `c` | capabilities, comma-separated: `text`, `voice` (optional; unknown ones are skipped) |
/// | `fp` | identity fingerprint: the static public key, 64 lower-case hex digits (optional) |
/// | `t` | presence tag, 16 lower-case hex digits (`PresenceTag`; optional, only without `n` and `fp`) |
///
/// Advertisements come from anyone on the LAN: decoding is strict about everything it reads and
/// ignores keys it does not know (a later version may add some).
public struct LANAdvertisement: Equatable, Sendable {
    public enum Capability: String, CaseIterable, Sendable {
        case text
        case voice
    }

    /// The only protocol version this decoder reads.
    public static let version = 1
    /// The DNS-SD service type.
    public static let serviceType = "_peervoice._tcp"
    /// RFC 6763 §6.1: one TXT string is at most 255 bytes.
    public static let maxEntryBytes = 255
    /// `n=` plus the name fits one entry with room to spare.
    public static let maxNameBytes = 250
    public static let fingerprintLength = 64
    /// More entries than any version of us writes: a record with more is not ours.
    public static let maxEntries = 32

    public var name: String?
    public var capabilities: Set<Capability>
    public var fingerprint: String?
    public var tag: String?

    /// Checks what will be encoded: a name that does not fit or a malformed fingerprint is a bug
    /// in the caller (`advertisableName` makes any name fit).
    public init(name: String?, capabilities: Set<Capability>, fingerprint: String?) throws(LANAdvertisementError) {
        if let name { try Self.checkName(Array(name.utf8)) }
        if let fingerprint { try Self.checkFingerprint(Array(fingerprint.utf8)) }
        self.name = name
        self.capabilities = capabilities
        self.fingerprint = fingerprint
    }

    /// A presence advertisement: the version and the tag, nothing that names anyone.
    public init(presenceTag tag: String) throws(LANAdvertisementError) {
        try Self.checkTag(Array(tag.utf8))
        name = nil
        capabilities = []
        fingerprint = nil
        self.tag = tag
    }

    /// The TXT entries, `pv` first, then the others in a fixed order.
    public var txtEntries: [[UInt8]] {
        var entries = [Array("pv=\(Self.version)".utf8)]
        if let name { entries.append(Array("n=".utf8) + Array(name.utf8)) }
        if !capabilities.isEmpty {
            let list = Capability.allCases.filter(capabilities.contains).map(\.rawValue).joined(separator: ",")
            entries.append(Array("c=\(list)".utf8))
        }
        if let fingerprint { entries.append(Array("fp=\(fingerprint)".utf8)) }
        if let tag { entries.append(Array("t=\(tag)".utf8)) }
        return entries
    }

    /// Decodes the entries Avahi's resolver returned (`aay`).
    public init(txtEntries entries: [[UInt8]]) throws(LANAdvertisementError) {
        guard entries.count <= Self.maxEntries else { throw .tooManyEntries(entries.count) }
        var values: [String: ArraySlice<UInt8>] = [:]
        for entry in entries {
            let (key, value) = try Self.split(entry)
            guard values.updateValue(value ?? [], forKey: key) == nil else { throw .duplicateKey(key) }
        }
        guard let version = values["pv"] else { throw .missingVersion }
        guard version.count <= 5, !version.isEmpty, version.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let number = Int(String(decoding: version, as: UTF8.self)) else {
            throw .malformedValue(key: "pv")
        }
        guard number == Self.version else { throw .unsupportedVersion(number) }
        if let name = values["n"] {
            try Self.checkName(Array(name))
            self.name = String(decoding: name, as: UTF8.self)
        } else {
            self.name = nil
        }
        var capabilities: Set<Capability> = []
        if let list = values["c"] {
            guard list.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { throw .malformedValue(key: "c") }
            for token in list.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                guard !token.isEmpty else { throw .malformedValue(key: "c") }
                if let capability = Capability(rawValue: String(decoding: token, as: UTF8.self)) {
                    capabilities.insert(capability)
                }
            }
        }
        self.capabilities = capabilities
        if let fingerprint = values["fp"] {
            try Self.checkFingerprint(Array(fingerprint))
            self.fingerprint = String(decoding: fingerprint, as: UTF8.self)
        } else {
            self.fingerprint = nil
        }
        if let tag = values["t"] {
            try Self.checkTag(Array(tag))
            // A tag names nobody; one beside a name or a key is not a record we write.
            guard name == nil, fingerprint == nil else { throw .malformedValue(key: "t") }
            self.tag = String(decoding: tag, as: UTF8.self)
        } else {
            self.tag = nil
        }
    }

    /// `name` without control characters, cut to at most `maxNameBytes` bytes at a character
    /// boundary; nil when nothing is left.
    public static func advertisableName(_ name: String) -> String? {
        let printable = String(String.UnicodeScalarView(name.unicodeScalars.filter { $0.properties.generalCategory != .control }))
        let result = truncated(printable, toBytes: maxNameBytes)
        return result.isEmpty ? nil : result
    }

    /// RFC 6763 §6.4: a key is 1 to 9 printable ASCII characters other than `=`, compared without
    /// regard to case (lower-cased here); an entry without `=` is a boolean key (nil value).
    private static func split(_ entry: [UInt8]) throws(LANAdvertisementError) -> (String, ArraySlice<UInt8>?) {
        guard entry.count <= maxEntryBytes else { throw .entryTooLong(entry.count) }
        guard !entry.isEmpty else { throw .emptyEntry }
        let equals = entry.firstIndex(of: UInt8(ascii: "="))
        let keyBytes = entry[..<(equals ?? entry.endIndex)]
        guard !keyBytes.isEmpty, keyBytes.count <= 9, keyBytes.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
            throw .malformedKey
        }
        let key = String(decoding: keyBytes, as: UTF8.self).lowercased()
        return (key, equals.map { entry[($0 + 1)...] })
    }

    private static func checkName(_ bytes: [UInt8]) throws(LANAdvertisementError) {
        guard !bytes.isEmpty, bytes.count <= maxNameBytes else { throw .malformedValue(key: "n") }
        guard String(validating: bytes, as: UTF8.self) != nil else { throw .invalidUTF8(key: "n") }
        // Control characters would let a name rewrite a terminal line or a log line.
        guard !String(decoding: bytes, as: UTF8.self).unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw .malformedValue(key: "n")
        }
    }

    private static func checkFingerprint(_ bytes: [UInt8]) throws(LANAdvertisementError) {
        guard bytes.count == fingerprintLength, bytes.allSatisfy(isLowerHex) else { throw .malformedValue(key: "fp") }
    }

    private static func checkTag(_ bytes: [UInt8]) throws(LANAdvertisementError) {
        guard bytes.count == PresenceTag.hexLength, bytes.allSatisfy(isLowerHex) else { throw .malformedValue(key: "t") }
    }

    private static func isLowerHex(_ byte: UInt8) -> Bool { (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) }
}

/// Why a TXT record was not accepted.
public enum LANAdvertisementError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooManyEntries(Int)
    case entryTooLong(Int)
    case emptyEntry
    case malformedKey
    case duplicateKey(String)
    case missingVersion
    case unsupportedVersion(Int)
    case malformedValue(key: String)
    case invalidUTF8(key: String)

    public var description: String {
        switch self {
        case .tooManyEntries(let count): "\(count) TXT entries (at most \(LANAdvertisement.maxEntries))"
        case .entryTooLong(let bytes): "a TXT entry of \(bytes) bytes (at most \(LANAdvertisement.maxEntryBytes))"
        case .emptyEntry: "an empty TXT entry"
        case .malformedKey: "a TXT key that is not 1-9 printable ASCII characters"
        case .duplicateKey(let key): "TXT key '\(key)' appears twice"
        case .missingVersion: "no protocol version (pv=)"
        case .unsupportedVersion(let version): "protocol version \(version) (this PeerVoice speaks \(LANAdvertisement.version))"
        case .malformedValue(let key): "a malformed '\(key)=' value"
        case .invalidUTF8(let key): "'\(key)=' is not UTF-8"
        }
    }
}

/// DNS-SD instance names (RFC 6763 §4.1.1): one DNS label, 1 to 63 bytes of UTF-8.
public enum LANServiceName {
    public static let maxBytes = 63

    /// The instance name for display name `name`, the `attempt`th choice (1 = the name itself;
    /// after a collision `NAME #2`, `NAME #3`, … as Avahi's own tools do), always within 63 bytes.
    public static func candidate(for name: String, attempt: Int) -> String {
        let base = name.isEmpty ? "PeerVoice" : name
        guard attempt > 1 else { return truncated(base, toBytes: maxBytes) }
        let suffix = " #\(attempt)"
        return truncated(base, toBytes: maxBytes - suffix.utf8.count) + suffix
    }
}

/// `text` cut to at most `bytes` UTF-8 bytes without splitting a character.
func truncated(_ text: String, toBytes bytes: Int) -> String {
    guard text.utf8.count > bytes else { return text }
    var result = ""
    var used = 0
    for character in text {
        let size = character.utf8.count
        guard used + size <= bytes else { break }
        result.append(character)
        used += size
    }
    return result
}
