/// The cryptographic primitives the security layer is built from, so that the core stays pure
/// Swift: the `Sodium` module implements them with libsodium (`LibSodium`), tests may use a double.
///
/// Sizes are fixed (see ``CryptoSize``); the security layer always passes correct sizes, and an
/// implementation may treat anything else as a programming error.
public protocol CryptoPrimitives: Sendable {
    /// `count` bytes from a cryptographically secure random source.
    func randomBytes(_ count: Int) -> [UInt8]
    /// A fresh X25519 key pair (32-byte public key, 32-byte secret key).
    func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8])
    /// X25519(secretKey, publicKey): the 32-byte shared secret, or nil if it is all zeros
    /// (the public key is a low-order point).
    func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]?
    /// BLAKE2b with a 32-byte output; keyed (a PRF/MAC) when `key` is not nil (32-byte keys here).
    func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8]
    /// XChaCha20-Poly1305 (IETF): ciphertext followed by the 16-byte tag. Key 32, nonce 24 bytes.
    func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8]
    /// The inverse of ``seal(key:nonce:plaintext:associatedData:)``; nil if the tag does not verify.
    func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]?
    /// ``seal(key:nonce:plaintext:associatedData:)`` on memory, for bulk data: `output` has room
    /// for `plaintext.count` + ``CryptoSize/tag`` bytes and may start where `plaintext` does (in
    /// place), which saves the copies of the array version.
    func seal(key: [UInt8], nonce: [UInt8], plaintext: UnsafeRawBufferPointer, associatedData: [UInt8],
              into output: UnsafeMutableRawBufferPointer)
    /// ``open(key:nonce:ciphertext:associatedData:)`` on memory: the plaintext goes to `output`
    /// (`ciphertext.count` - ``CryptoSize/tag`` bytes); false if the tag does not verify.
    func open(key: [UInt8], nonce: [UInt8], ciphertext: UnsafeRawBufferPointer, associatedData: [UInt8],
              into output: UnsafeMutableRawBufferPointer) -> Bool
    /// Overwrites `bytes` with zeros in a way the optimiser keeps (best effort: copies made
    /// elsewhere by copy-on-write or earlier reallocation are not reached).
    func wipe(_ bytes: inout [UInt8])
}

extension CryptoPrimitives {
    /// Through the array versions: for implementations (test doubles) that have no faster way.
    public func seal(key: [UInt8], nonce: [UInt8], plaintext: UnsafeRawBufferPointer, associatedData: [UInt8],
                     into output: UnsafeMutableRawBufferPointer) {
        let sealed = seal(key: key, nonce: nonce, plaintext: Array(plaintext), associatedData: associatedData)
        output.copyBytes(from: sealed)
    }

    public func open(key: [UInt8], nonce: [UInt8], ciphertext: UnsafeRawBufferPointer, associatedData: [UInt8],
                     into output: UnsafeMutableRawBufferPointer) -> Bool {
        guard let opened = open(key: key, nonce: nonce, ciphertext: Array(ciphertext), associatedData: associatedData) else { return false }
        output.copyBytes(from: opened)
        return true
    }
}

/// Sizes of the primitives' inputs and outputs, in bytes.
public enum CryptoSize {
    /// X25519 public key.
    public static let publicKey = 32
    /// X25519 secret key.
    public static let secretKey = 32
    /// BLAKE2b output used everywhere (BLAKE2b-256).
    public static let hash = 32
    /// XChaCha20-Poly1305 key.
    public static let key = 32
    /// XChaCha20-Poly1305 nonce.
    public static let nonce = 24
    /// Poly1305 tag appended to every ciphertext.
    public static let tag = 16
}

/// The X25519 base point (u = 9), so `x25519(secret, basePoint)` is the public key of `secret`.
let x25519BasePoint: [UInt8] = [9] + [UInt8](repeating: 0, count: 31)

/// Equality whose time depends only on the lengths, not on where the bytes differ.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
}

/// Lowercase hexadecimal, two digits a byte.
func hexString(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var text: [UInt8] = []
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: text, as: UTF8.self)
}

extension Collection where Element == UInt8 {
    /// The first 8 bytes as a big-endian `u64` (the collection holds at least 8).
    func bigEndianUInt64() -> UInt64 {
        var value: UInt64 = 0
        for byte in prefix(8) { value = value << 8 | UInt64(byte) }
        return value
    }
}
