/// This installation's long-term X25519 key pair: the identity a peer pins after the first
/// confirmed contact.
///
/// Serialised form (``serialized()``, the content of the key file, 72 bytes):
///
/// | Offset | Size | Field |
/// |-------:|-----:|-------|
/// | 0 | 4 | magic, ASCII `PVID` |
/// | 4 | 2 | format version, `u16` = 1 |
/// | 6 | 2 | reserved, `00 00` |
/// | 8 | 32 | secret key |
/// | 40 | 32 | public key (must equal X25519(secret, 9)) |
public struct StaticIdentity: Sendable {
    /// The public key peers see and pin.
    public let publicKey: [UInt8]
    /// Never leaves this module except in ``serialized()``.
    let secretKey: [UInt8]

    public static let magic: [UInt8] = Array("PVID".utf8)
    public static let formatVersion: UInt16 = 1
    /// Size of ``serialized()``.
    public static let serializedByteCount = 72

    /// A new random identity.
    public static func generate(using crypto: any CryptoPrimitives) -> StaticIdentity {
        let pair = crypto.x25519KeyPair()
        return StaticIdentity(publicKey: pair.publicKey, secretKey: pair.secretKey)
    }

    private init(publicKey: [UInt8], secretKey: [UInt8]) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// The identity of a 32-byte secret key (its public key is computed).
    public init(secretKey: [UInt8], using crypto: any CryptoPrimitives) throws(IdentityError) {
        guard secretKey.count == CryptoSize.secretKey else {
            throw .malformed(path: nil, reason: "a secret key has \(CryptoSize.secretKey) bytes, not \(secretKey.count)")
        }
        guard let publicKey = crypto.x25519(secretKey, x25519BasePoint) else {
            throw .malformed(path: nil, reason: "the secret key is not usable (its public key is all zeros)")
        }
        self.init(publicKey: publicKey, secretKey: secretKey)
    }

    /// Parses ``serialized()`` bytes, checking the header and that the public key matches the secret.
    /// `path` only names the file in errors.
    public init(serialized bytes: some Collection<UInt8>, path: String? = nil,
                using crypto: any CryptoPrimitives) throws(IdentityError) {
        let bytes = Array(bytes)
        guard bytes.count == Self.serializedByteCount else {
            throw .malformed(path: path, reason: "it has \(bytes.count) bytes; a PeerVoice identity has \(Self.serializedByteCount)")
        }
        guard Array(bytes[0..<4]) == Self.magic else {
            throw .malformed(path: path, reason: "it does not start with \"PVID\"")
        }
        let version = UInt16(bytes[4]) << 8 | UInt16(bytes[5])
        guard version == Self.formatVersion else {
            throw .malformed(path: path, reason: "format version \(version) is not supported (this version reads \(Self.formatVersion))")
        }
        let identity: StaticIdentity
        do {
            identity = try StaticIdentity(secretKey: Array(bytes[8..<40]), using: crypto)
        } catch {
            throw .malformed(path: path, reason: "the secret key is not usable")
        }
        guard constantTimeEqual(identity.publicKey, Array(bytes[40..<72])) else {
            throw .malformed(path: path, reason: "the public key does not belong to the secret key")
        }
        self = identity
    }

    /// The 72-byte file form (contains the secret key: store it readable by the owner only).
    public func serialized() -> [UInt8] {
        var bytes = Self.magic
        bytes.appendBigEndian(Self.formatVersion)
        bytes.appendBigEndian(UInt16(0))
        bytes += secretKey
        bytes += publicKey
        return bytes
    }

    /// The public key as 64 lowercase hex digits (for logs and for comparing out of band).
    public var fingerprint: String { hexString(publicKey) }
}

/// Why an identity (key file) cannot be used; descriptions name the file and the fix.
public enum IdentityError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Group or other users have some access to the key file (mode shown in octal).
    case insecurePermissions(path: String, mode: Int)
    /// The path is not a regular file (a directory, a device, ...).
    case notARegularFile(path: String)
    /// The bytes are not a PeerVoice identity.
    case malformed(path: String?, reason: String)
    /// Reading or writing failed.
    case io(path: String, reason: String)

    public var description: String {
        switch self {
        case .insecurePermissions(let path, let mode):
            return "identity key file \(path) is accessible by other users (mode \(octal(mode))); "
                + "it holds a secret key: run `chmod 600 \(path)` and start again"
        case .notARegularFile(let path):
            return "identity key file \(path) is not a regular file"
        case .malformed(let path, let reason):
            if let path {
                return "identity key file \(path) is not a PeerVoice identity: \(reason); "
                    + "move it away to create a new identity (peers will then have to confirm the new key)"
            }
            return "not a PeerVoice identity: \(reason)"
        case .io(let path, let reason):
            return "identity key file \(path): \(reason)"
        }
    }
}

private func octal(_ mode: Int) -> String {
    let digits = String(mode & 0o7777, radix: 8)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}
