import CSodium
import PeerVoiceCore

/// PeerVoiceCore's ``CryptoPrimitives`` implemented with libsodium (1.0.18 or later).
///
/// - X25519: `crypto_box_keypair`, `crypto_scalarmult` (which fails on an all-zero result).
/// - BLAKE2b-256: `crypto_generichash`, keyed when a key is given.
/// - XChaCha20-Poly1305: `crypto_aead_xchacha20poly1305_ietf_encrypt` / `_decrypt`.
/// - Randomness: `randombytes_buf`; wiping: `sodium_memzero`.
///
/// Stateless and thread-safe once libsodium is initialised, which the first `init()` does
/// (`sodium_init`, once per process; a failure is fatal: there is no safe way on without it).
/// Wrong key, nonce or public-key sizes are programming errors and stop the process.
public struct LibSodium: CryptoPrimitives {
    private static let initialized: Bool = sodium_init() >= 0

    public init() {
        guard Self.initialized else { fatalError("libsodium failed to initialise (sodium_init() < 0)") }
    }

    /// The libsodium version string, e.g. "1.0.18".
    public static var version: String { String(cString: sodium_version_string()) }

    public func randomBytes(_ count: Int) -> [UInt8] {
        precondition(count >= 0)
        var bytes = [UInt8](repeating: 0, count: count)
        if count > 0 {
            bytes.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) }
        }
        return bytes
    }

    public func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) {
        var publicKey = [UInt8](repeating: 0, count: Int(crypto_box_PUBLICKEYBYTES))
        var secretKey = [UInt8](repeating: 0, count: Int(crypto_box_SECRETKEYBYTES))
        let result = publicKey.withUnsafeMutableBufferPointer { pk in
            secretKey.withUnsafeMutableBufferPointer { sk in
                crypto_box_keypair(pk.baseAddress!, sk.baseAddress!)
            }
        }
        precondition(result == 0, "crypto_box_keypair failed")
        return (publicKey, secretKey)
    }

    public func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]? {
        precondition(secretKey.count == Int(crypto_scalarmult_SCALARBYTES), "X25519 secret keys have 32 bytes")
        guard publicKey.count == Int(crypto_scalarmult_BYTES) else { return nil }
        var shared = [UInt8](repeating: 0, count: Int(crypto_scalarmult_BYTES))
        let result = shared.withUnsafeMutableBufferPointer { out in
            secretKey.withUnsafeBufferPointer { sk in
                publicKey.withUnsafeBufferPointer { pk in
                    crypto_scalarmult(out.baseAddress!, sk.baseAddress!, pk.baseAddress!)
                }
            }
        }
        // libsodium returns -1 when the result is all zeros (a low-order point).
        guard result == 0 else {
            wipe(&shared)
            return nil
        }
        return shared
    }

    public func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: CryptoSize.hash)
        if let key {
            precondition((Int(crypto_generichash_KEYBYTES_MIN)...Int(crypto_generichash_KEYBYTES_MAX)).contains(key.count),
                         "BLAKE2b keys have 16 to 64 bytes")
        }
        let result = digest.withUnsafeMutableBufferPointer { out in
            withPointer(data) { input, inputCount in
                withOptionalPointer(key) { keyPointer, keyCount in
                    crypto_generichash(out.baseAddress!, out.count, input, UInt64(inputCount), keyPointer, keyCount)
                }
            }
        }
        precondition(result == 0, "crypto_generichash failed")
        return digest
    }

    public func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        checkKeyAndNonce(key, nonce)
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + Int(crypto_aead_xchacha20poly1305_ietf_ABYTES))
        var written: UInt64 = 0
        let result = ciphertext.withUnsafeMutableBufferPointer { out in
            withPointer(plaintext) { message, messageCount in
                withPointer(associatedData) { ad, adCount in
                    key.withUnsafeBufferPointer { k in
                        nonce.withUnsafeBufferPointer { n in
                            crypto_aead_xchacha20poly1305_ietf_encrypt(
                                out.baseAddress!, &written, message, UInt64(messageCount), ad, UInt64(adCount),
                                nil, n.baseAddress!, k.baseAddress!)
                        }
                    }
                }
            }
        }
        precondition(result == 0 && written == UInt64(ciphertext.count), "XChaCha20-Poly1305 encryption failed")
        return ciphertext
    }

    public func seal(key: [UInt8], nonce: [UInt8], plaintext: UnsafeRawBufferPointer, associatedData: [UInt8],
                     into output: UnsafeMutableRawBufferPointer) {
        checkKeyAndNonce(key, nonce)
        let tagBytes = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
        precondition(output.count >= plaintext.count + tagBytes, "no room for the ciphertext")
        var written: UInt64 = 0
        // libsodium allows the ciphertext to start where the message does (in-place encryption).
        let result = withPointer(associatedData) { ad, adCount in
            key.withUnsafeBufferPointer { k in
                nonce.withUnsafeBufferPointer { n in
                    crypto_aead_xchacha20poly1305_ietf_encrypt(
                        output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written,
                        plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? ad, UInt64(plaintext.count),
                        ad, UInt64(adCount), nil, n.baseAddress!, k.baseAddress!)
                }
            }
        }
        precondition(result == 0 && written == UInt64(plaintext.count + tagBytes), "XChaCha20-Poly1305 encryption failed")
    }

    public func open(key: [UInt8], nonce: [UInt8], ciphertext: UnsafeRawBufferPointer, associatedData: [UInt8],
                     into output: UnsafeMutableRawBufferPointer) -> Bool {
        checkKeyAndNonce(key, nonce)
        let tagBytes = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
        guard ciphertext.count >= tagBytes, output.count >= ciphertext.count - tagBytes, let input = ciphertext.baseAddress else { return false }
        var placeholder: UInt8 = 0
        var written: UInt64 = 0
        let result = withPointer(associatedData) { ad, adCount in
            key.withUnsafeBufferPointer { k in
                nonce.withUnsafeBufferPointer { n in
                    // An empty plaintext still needs a valid pointer.
                    withUnsafeMutablePointer(to: &placeholder) { empty in
                    crypto_aead_xchacha20poly1305_ietf_decrypt(
                        output.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? empty, &written, nil,
                        input.assumingMemoryBound(to: UInt8.self), UInt64(ciphertext.count), ad, UInt64(adCount),
                        n.baseAddress!, k.baseAddress!)
                    }
                }
            }
        }
        return result == 0 && written == UInt64(ciphertext.count - tagBytes)
    }

    public func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        checkKeyAndNonce(key, nonce)
        let tagBytes = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
        guard ciphertext.count >= tagBytes else { return nil }
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count - tagBytes)
        var written: UInt64 = 0
        let result = withMutablePointer(&plaintext) { out in
            ciphertext.withUnsafeBufferPointer { c in
                withPointer(associatedData) { ad, adCount in
                    key.withUnsafeBufferPointer { k in
                        nonce.withUnsafeBufferPointer { n in
                            crypto_aead_xchacha20poly1305_ietf_decrypt(
                                out, &written, nil, c.baseAddress!, UInt64(c.count), ad, UInt64(adCount),
                                n.baseAddress!, k.baseAddress!)
                        }
                    }
                }
            }
        }
        guard result == 0, written == UInt64(plaintext.count) else { return nil }
        return plaintext
    }

    public func wipe(_ bytes: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeMutableBytes { sodium_memzero($0.baseAddress!, $0.count) }
    }

    private func checkKeyAndNonce(_ key: [UInt8], _ nonce: [UInt8]) {
        precondition(key.count == Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES), "XChaCha20-Poly1305 keys have 32 bytes")
        precondition(nonce.count == Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES), "XChaCha20-Poly1305 nonces have 24 bytes")
    }
}

/// A valid pointer even for an empty array (libsodium is given a length of 0 with it).
private func withPointer<R>(_ bytes: [UInt8], _ body: (UnsafePointer<UInt8>, Int) -> R) -> R {
    if bytes.isEmpty {
        var placeholder: UInt8 = 0
        return withUnsafePointer(to: &placeholder) { body($0, 0) }
    }
    return bytes.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
}

private func withOptionalPointer<R>(_ bytes: [UInt8]?, _ body: (UnsafePointer<UInt8>?, Int) -> R) -> R {
    guard let bytes else { return body(nil, 0) }
    return withPointer(bytes) { body($0, $1) }
}

private func withMutablePointer<R>(_ bytes: inout [UInt8], _ body: (UnsafeMutablePointer<UInt8>) -> R) -> R {
    if bytes.isEmpty {
        var placeholder: UInt8 = 0
        return withUnsafeMutablePointer(to: &placeholder) { body($0) }
    }
    return bytes.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
}
