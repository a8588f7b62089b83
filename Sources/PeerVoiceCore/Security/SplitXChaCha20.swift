/// ChaCha20-Poly1305 with a 12-byte nonce (RFC 8439): ciphertext followed by the 16-byte tag.
/// Another library's implementation of it can seal bulk data faster than the one behind
/// ``CryptoPrimitives`` (``SplitXChaCha20``).
public protocol ChaCha20Poly1305IETF: Sendable {
    /// `output` has room for `plaintext.count` + 16 bytes and may start where `plaintext` does.
    func seal(key: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer, plaintext: UnsafeRawBufferPointer,
              associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer)
    /// False if the tag does not verify (what was written to `output` must then not be used).
    func open(key: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer,
              associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Bool
}

/// HChaCha20 (draft-irtf-cfrg-xchacha §2.2): a 32-byte subkey from a 32-byte key and 16 bytes.
public protocol HChaCha20: Sendable {
    func hChaCha20(key: [UInt8], input: ArraySlice<UInt8>) -> [UInt8]
}

/// ``CryptoPrimitives`` whose in-memory XChaCha20-Poly1305 (sealed records: a link's bulk channel
/// data) is computed as the draft defines it: the subkey HChaCha20(key, nonce[0..<16]) from `base`,
/// then `bulk`'s ChaCha20-Poly1305 with that subkey and the nonce 0x00000000 || nonce[16..<24]
/// (draft-irtf-cfrg-xchacha §2.3). The bytes are the same as `base`'s; only the speed differs.
/// Everything else is `base`'s.
public struct SplitXChaCha20<Base: CryptoPrimitives & HChaCha20>: CryptoPrimitives {
    public let base: Base
    public let bulk: any ChaCha20Poly1305IETF

    public init(base: Base, bulk: any ChaCha20Poly1305IETF) {
        self.base = base
        self.bulk = bulk
    }

    public func randomBytes(_ count: Int) -> [UInt8] { base.randomBytes(count) }
    public func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) { base.x25519KeyPair() }
    public func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]? { base.x25519(secretKey, publicKey) }
    public func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8] { base.hash(data, key: key) }
    public func wipe(_ bytes: inout [UInt8]) { base.wipe(&bytes) }

    public func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        base.seal(key: key, nonce: nonce, plaintext: plaintext, associatedData: associatedData)
    }

    public func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        base.open(key: key, nonce: nonce, ciphertext: ciphertext, associatedData: associatedData)
    }

    public func seal(key: [UInt8], nonce: [UInt8], plaintext: UnsafeRawBufferPointer, associatedData: [UInt8],
                     into output: UnsafeMutableRawBufferPointer) {
        withSubkey(key, nonce) { subkey, shortNonce in
            associatedData.withUnsafeBytes { bulk.seal(key: subkey, nonce: shortNonce, plaintext: plaintext, associatedData: $0, into: output) }
        }
    }

    public func open(key: [UInt8], nonce: [UInt8], ciphertext: UnsafeRawBufferPointer, associatedData: [UInt8],
                     into output: UnsafeMutableRawBufferPointer) -> Bool {
        withSubkey(key, nonce) { subkey, shortNonce in
            associatedData.withUnsafeBytes { bulk.open(key: subkey, nonce: shortNonce, ciphertext: ciphertext, associatedData: $0, into: output) }
        }
    }

    private func withSubkey<Result>(_ key: [UInt8], _ nonce: [UInt8],
                                    _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Result) -> Result {
        precondition(key.count == CryptoSize.key && nonce.count == CryptoSize.nonce, "XChaCha20-Poly1305: wrong sizes")
        var subkey = base.hChaCha20(key: key, input: nonce[0..<16])
        defer { base.wipe(&subkey) }
        let shortNonce = [0, 0, 0, 0] + nonce[16..<24]
        return subkey.withUnsafeBytes { subkey in shortNonce.withUnsafeBytes { body(subkey, $0) } }
    }
}
