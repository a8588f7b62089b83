import PeerVoiceCore
import Sodium

/// Real libsodium whose key pairs come from `keyPair`: a fixed ephemeral key (for a test vector),
/// or a low-order point a dishonest peer would present as its key.
struct SodiumWithKeyPair: CryptoPrimitives {
    let keyPair: @Sendable () -> (publicKey: [UInt8], secretKey: [UInt8])
    private let real = LibSodium()

    init(keyPair: @escaping @Sendable () -> (publicKey: [UInt8], secretKey: [UInt8])) {
        self.keyPair = keyPair
    }

    /// The key pair of a fixed secret key.
    init(fixedSecretKey secretKey: [UInt8]) {
        let publicKey = LibSodium().x25519(secretKey, [9] + [UInt8](repeating: 0, count: 31))!
        self.init { (publicKey, secretKey) }
    }

    func randomBytes(_ count: Int) -> [UInt8] { real.randomBytes(count) }
    func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) { keyPair() }
    func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]? { real.x25519(secretKey, publicKey) }
    func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8] { real.hash(data, key: key) }
    func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        real.seal(key: key, nonce: nonce, plaintext: plaintext, associatedData: associatedData)
    }
    func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        real.open(key: key, nonce: nonce, ciphertext: ciphertext, associatedData: associatedData)
    }
    func wipe(_ bytes: inout [UInt8]) { real.wipe(&bytes) }
}
