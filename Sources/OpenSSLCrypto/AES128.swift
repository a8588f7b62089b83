import COpenSSL
import PeerVoiceCore

/// PeerVoiceCore's ``BlockCipher`` with OpenSSL's libcrypto: AES-128 in ECB mode without
/// padding, one 16-byte block per call (`EVP_aes_128_ecb`). Two contexts keyed once, one per
/// direction; not `Sendable`: one thread uses it. A key not 16 bytes long is refused.
public final class OpenSSLAES128: BlockCipher {
    private let encryptContext: OpaquePointer
    private let decryptContext: OpaquePointer

    public init?(key: [UInt8]) {
        guard key.count == 16, let enc = EVP_CIPHER_CTX_new(), let dec = EVP_CIPHER_CTX_new() else { return nil }
        encryptContext = enc
        decryptContext = dec
        guard EVP_EncryptInit_ex(enc, EVP_aes_128_ecb(), nil, key, nil) == 1,
              EVP_DecryptInit_ex(dec, EVP_aes_128_ecb(), nil, key, nil) == 1 else { return nil }
        EVP_CIPHER_CTX_set_padding(enc, 0)
        EVP_CIPHER_CTX_set_padding(dec, 0)
    }

    deinit {
        EVP_CIPHER_CTX_free(encryptContext)
        EVP_CIPHER_CTX_free(decryptContext)
    }

    public func encrypt(_ block: [UInt8]) -> [UInt8] { run(encryptContext, block, EVP_EncryptUpdate) }

    public func decrypt(_ block: [UInt8]) -> [UInt8] { run(decryptContext, block, EVP_DecryptUpdate) }

    private func run(_ context: OpaquePointer, _ block: [UInt8],
                     _ update: (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int32>?,
                                UnsafePointer<UInt8>?, Int32) -> Int32) -> [UInt8] {
        precondition(block.count == 16, "AES works on 16-byte blocks")
        var out = [UInt8](repeating: 0, count: 32)
        var written: Int32 = 0
        let result = update(context, &out, &written, block, 16)
        precondition(result == 1 && written == 16, "EVP cipher update failed")
        return Array(out[0..<16])
    }
}
