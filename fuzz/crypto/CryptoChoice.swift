// What the targets that run handshakes share (fuzz/run.sh compiles this file into handshake and
// dial-proof only, and links the simulation's Tests/Simulation/DeterministicCrypto.swift as the
// uninstrumented module SimulationCrypto): the primitives one input runs on, and keys and
// randomness every input replays exactly.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore
import SimulationCrypto
import Sodium

/// Which primitives an input runs on. libsodium (the production `LibSodium`) costs a few
/// milliseconds an input under AddressSanitizer (X25519 above all), which left the parsing and the
/// state machines a few hundred executions a second. The simulation's `DeterministicCrypto` keeps
/// what the targets check (a public key is derived from its secret, both sides of an exchange
/// agree, any change to a sealed message or a keyed hash's input is detected) at a fraction of the
/// cost. So most inputs run on the stand-in and one in `libsodiumShare` on libsodium, picked from
/// the input's bytes so that a reproducer replays the same way; `FUZZ_CRYPTO=libsodium` or
/// `FUZZ_CRYPTO=stand-in` puts every input on one of them.
enum CryptoChoice: String {
    case libsodium
    case standIn = "stand-in"

    static let libsodiumShare: UInt32 = 32

    static let forced: CryptoChoice? = getenv("FUZZ_CRYPTO").map { variable in
        guard let choice = CryptoChoice(rawValue: String(cString: variable)) else {
            fatalError("FUZZ_CRYPTO is libsodium or stand-in, not \(String(cString: variable))")
        }
        return choice
    }

    init(for bytes: [UInt8]) {
        if let forced = Self.forced {
            self = forced
            return
        }
        // FNV-1a: every byte counts, so the fuzzer's mutations move inputs between the two.
        var hash: UInt32 = 2_166_136_261
        for byte in bytes { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        self = hash % Self.libsodiumShare == 0 ? .libsodium : .standIn
    }

    /// The primitives themselves (keys and randomness through `ReplayableCrypto`).
    var primitives: any CryptoPrimitives {
        switch self {
        case .libsodium: libsodiumPrimitives
        case .standIn: standInPrimitives
        }
    }
}

let libsodiumPrimitives = LibSodium()
/// Its own randomness is never drawn: `ReplayableCrypto` derives keys and random bytes itself.
let standInPrimitives = DeterministicCrypto(seed: 0)

let x25519BasePoint: [UInt8] = [9] + [UInt8](repeating: 0, count: 31)

/// `base` with deterministic key generation and randomness: secret keys and random bytes are hashes
/// of a counter, public keys X25519 of the base point, all with `base`.
final class ReplayableCrypto: CryptoPrimitives, @unchecked Sendable {
    let base: any CryptoPrimitives
    private var counter: UInt64 = 0
    private let seed: UInt8

    init(_ base: any CryptoPrimitives, seed: UInt8) {
        self.base = base
        self.seed = seed
    }

    private func nextBytes() -> [UInt8] {
        counter += 1
        var input: [UInt8] = Array("fuzz".utf8) + [seed]
        for shift in stride(from: 56, through: 0, by: -8) { input.append(UInt8(truncatingIfNeeded: counter >> UInt64(shift))) }
        return base.hash(input, key: nil)
    }

    func randomBytes(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        while bytes.count < count { bytes += nextBytes() }
        return Array(bytes.prefix(count))
    }

    func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) {
        let secretKey = nextBytes()
        guard let publicKey = base.x25519(secretKey, x25519BasePoint) else { fatalError("X25519 of the base point is zero") }
        return (publicKey, secretKey)
    }

    func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]? { base.x25519(secretKey, publicKey) }
    func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8] { base.hash(data, key: key) }
    func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        base.seal(key: key, nonce: nonce, plaintext: plaintext, associatedData: associatedData)
    }
    func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        base.open(key: key, nonce: nonce, ciphertext: ciphertext, associatedData: associatedData)
    }
    func wipe(_ bytes: inout [UInt8]) { base.wipe(&bytes) }
}
