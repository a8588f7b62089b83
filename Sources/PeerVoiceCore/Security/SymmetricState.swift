/// The Noise-style symmetric state of a handshake: chaining key `ck`, transcript hash `h`, and
/// the current handshake cipher key `k` with its nonce counter `n`. See docs/SECURITY.md §3.
struct SymmetricState {
    private let crypto: any CryptoPrimitives
    private(set) var chainingKey: [UInt8]
    private(set) var transcriptHash: [UInt8]
    private var cipherKey: [UInt8]?
    private var nonceCounter: UInt64 = 0

    init(protocolName: String, crypto: any CryptoPrimitives) {
        self.crypto = crypto
        transcriptHash = crypto.hash(Array(protocolName.utf8), key: nil)
        chainingKey = transcriptHash
    }

    /// h = H(h || data)
    mutating func mixHash(_ data: [UInt8]) {
        transcriptHash = crypto.hash(transcriptHash + data, key: nil)
    }

    /// (ck, k) = KDF(ck, inputKeyMaterial); n = 0. Wipes the input and the replaced keys.
    mutating func mixKey(_ inputKeyMaterial: inout [UInt8]) {
        let outputs = keyDerivation(chainingKey: chainingKey, inputKeyMaterial: inputKeyMaterial, outputs: 2, crypto: crypto)
        crypto.wipe(&inputKeyMaterial)
        crypto.wipe(&chainingKey)
        if var old = cipherKey { crypto.wipe(&old) }
        chainingKey = outputs[0]
        cipherKey = outputs[1]
        nonceCounter = 0
    }

    /// c = AEAD(k, n++, plaintext, ad: h); h = H(h || c). Requires a key (after the first mixKey).
    mutating func encryptAndHash(_ plaintext: [UInt8]) -> [UInt8] {
        guard let key = cipherKey else { preconditionFailure("encryptAndHash before mixKey") }
        let ciphertext = crypto.seal(key: key, nonce: handshakeNonce(nonceCounter), plaintext: plaintext,
                                     associatedData: transcriptHash)
        nonceCounter += 1
        mixHash(ciphertext)
        return ciphertext
    }

    /// The inverse of ``encryptAndHash(_:)``; nil (and nothing changed) if the tag does not verify.
    mutating func decryptAndHash(_ ciphertext: [UInt8]) -> [UInt8]? {
        guard let key = cipherKey else { preconditionFailure("decryptAndHash before mixKey") }
        guard let plaintext = crypto.open(key: key, nonce: handshakeNonce(nonceCounter), ciphertext: ciphertext,
                                          associatedData: transcriptHash) else { return nil }
        nonceCounter += 1
        mixHash(ciphertext)
        return plaintext
    }

    /// Three keys from the final chaining key and transcript hash: KDF(ck, h).
    func split() -> [[UInt8]] {
        keyDerivation(chainingKey: chainingKey, inputKeyMaterial: transcriptHash, outputs: 3, crypto: crypto)
    }

    /// Best-effort erasure of the secrets (chaining key and cipher key).
    mutating func wipe() {
        crypto.wipe(&chainingKey)
        if var key = cipherKey { crypto.wipe(&key) }
        cipherKey = nil
    }

    /// 16 zero bytes, then `n` as a big-endian u64.
    private func handshakeNonce(_ n: UInt64) -> [UInt8] {
        var nonce = [UInt8](repeating: 0, count: CryptoSize.nonce - 8)
        nonce.appendBigEndian(n)
        return nonce
    }
}

/// HKDF with keyed BLAKE2b-256 in place of HMAC:
/// prk = H_key=ck(ikm); T1 = H_key=prk(0x01); Ti = H_key=prk(T(i-1) || i).
func keyDerivation(chainingKey: [UInt8], inputKeyMaterial: [UInt8], outputs: Int,
                   crypto: any CryptoPrimitives) -> [[UInt8]] {
    precondition((1...3).contains(outputs))
    var pseudorandomKey = crypto.hash(inputKeyMaterial, key: chainingKey)
    var results: [[UInt8]] = []
    var previous: [UInt8] = []
    for index in 1...outputs {
        previous = crypto.hash(previous + [UInt8(index)], key: pseudorandomKey)
        results.append(previous)
    }
    crypto.wipe(&pseudorandomKey)
    return results
}
