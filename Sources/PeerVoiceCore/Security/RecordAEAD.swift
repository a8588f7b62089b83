/// An AEAD keyed for one record stream: what ``RecordSealer`` and ``RecordOpener`` seal and open
/// with. XChaCha20-Poly1305 (through ``CryptoPrimitives``) everywhere up to protocol 10 and for
/// voice and channel datagrams; AES-256-GCM (``AESGCMPrimitives``) for a link's records from
/// protocol 11 on (``LinkCipher``, docs/SECURITY.md §4). The tag is always ``CryptoSize/tag`` bytes.
public protocol RecordAEAD: Sendable {
    /// Bytes of a nonce: 24 for XChaCha20-Poly1305, 12 for AES-256-GCM.
    var nonceBytes: Int { get }
    /// Ciphertext and tag of `plaintext` into `output`, which has room for `plaintext.count` +
    /// ``CryptoSize/tag`` bytes and may start where `plaintext` does (in place).
    func seal(nonce: [UInt8], plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], into output: UnsafeMutableRawBufferPointer)
    /// The plaintext of `ciphertext` (tag included) into `output` (`ciphertext.count` -
    /// ``CryptoSize/tag`` bytes); false, and nothing of the plaintext in `output`, if the tag does
    /// not verify.
    func open(nonce: [UInt8], ciphertext: UnsafeRawBufferPointer, associatedData: [UInt8], into output: UnsafeMutableRawBufferPointer) -> Bool
}

/// AES-256-GCM (NIST SP 800-38D): 32-byte keys, 12-byte nonces, 16-byte tags. The `OpenSSLCrypto`
/// module implements it with libcrypto (`OpenSSLAESGCM`, AES-NI and carry-less multiplication
/// where the CPU has them); the simulation has a stand-in.
public protocol AESGCMPrimitives: Sendable {
    /// AES-256-GCM keyed with `key` (``CryptoSize/key`` bytes), its key schedule computed once.
    func aes256GCM(key: [UInt8]) -> any RecordAEAD
}

/// XChaCha20-Poly1305 under one key, through ``CryptoPrimitives``.
public struct XChaCha20Poly1305Key: RecordAEAD {
    let key: [UInt8]
    let crypto: any CryptoPrimitives

    public init(key: [UInt8], crypto: any CryptoPrimitives) {
        self.key = key
        self.crypto = crypto
    }

    public var nonceBytes: Int { CryptoSize.nonce }

    public func seal(nonce: [UInt8], plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], into output: UnsafeMutableRawBufferPointer) {
        crypto.seal(key: key, nonce: nonce, plaintext: plaintext, associatedData: associatedData, into: output)
    }

    public func open(nonce: [UInt8], ciphertext: UnsafeRawBufferPointer, associatedData: [UInt8], into output: UnsafeMutableRawBufferPointer) -> Bool {
        crypto.open(key: key, nonce: nonce, ciphertext: ciphertext, associatedData: associatedData, into: output)
    }
}

/// The AEAD a link seals its records with (purpose ``RecordPurpose/link``, docs/SECURITY.md §4).
/// It must be known before the first record, so it follows the version the link runs at, which
/// both sides compute from the two preambles alone (PROTOCOL.md §3.1), not HELLO's capabilities:
/// AES-256-GCM from ``aes256GCMVersion`` on, XChaCha20-Poly1305 below it. An edited preamble that
/// made the two sides pick different ciphers only makes the records fail to open, and HELLO's
/// binding of the versions ends such a link before anything is sent (SECURITY.md §9.8).
public struct LinkCipher: Sendable {
    public enum Algorithm: Equatable, Sendable, CustomStringConvertible {
        case xChaCha20Poly1305
        case aes256GCM

        public var description: String {
            switch self {
            case .xChaCha20Poly1305: "XChaCha20-Poly1305"
            case .aes256GCM: "AES-256-GCM"
            }
        }
    }

    /// The first version whose links seal with AES-256-GCM.
    public static let aes256GCMVersion: UInt16 = 11

    /// Records an AES-256-GCM sealer seals under one key (``RecordSealer/rekeyLimit``; the link is
    /// replaced at half of it): 2^25 records of at most 70,024 bytes are under 2^37.1 AES blocks,
    /// which keeps GCM's bound on telling the ciphertext from random, about (blocks)^2 / 2^129,
    /// below 2^-54 (SECURITY.md §4). XChaCha20-Poly1305 has no such bound at these sizes.
    public static let aes256GCMRekeyLimit: UInt64 = 1 << 25

    public let algorithm: Algorithm
    /// Set whenever `algorithm` is AES-256-GCM.
    private let aesGCM: (any AESGCMPrimitives)?

    /// The cipher of a link at `version`; `aesGCM` implements AES-256-GCM when it is that.
    public init(version: UInt16, aesGCM: any AESGCMPrimitives) {
        algorithm = version >= Self.aes256GCMVersion ? .aes256GCM : .xChaCha20Poly1305
        self.aesGCM = aesGCM
    }

    /// The cipher of a link at version 10 or older.
    public static let xChaCha20Poly1305 = LinkCipher()

    private init() {
        algorithm = .xChaCha20Poly1305
        aesGCM = nil
    }

    /// How many records one key seals at most.
    public var rekeyLimit: UInt64 {
        algorithm == .aes256GCM ? Self.aes256GCMRekeyLimit : RecordSealer.defaultRekeyLimit
    }

    /// The cipher keyed with one direction's link key.
    func keyed(_ key: [UInt8], crypto: any CryptoPrimitives) -> any RecordAEAD {
        precondition(key.count == CryptoSize.key, "record keys have \(CryptoSize.key) bytes")
        switch algorithm {
        case .xChaCha20Poly1305: return XChaCha20Poly1305Key(key: key, crypto: crypto)
        case .aes256GCM: return aesGCM!.aes256GCM(key: key)
        }
    }
}
