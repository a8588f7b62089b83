import PeerVoiceCore
import SeededRandom

/// Stand-in primitives for the simulation: the real handshake, records and pinning run on them,
/// fast and the same on every run. Not cryptography: "X25519" is exponentiation modulo the prime
/// 2^61 - 1 (so both sides of a key exchange agree, and a key proves who holds its secret inside
/// the simulation), the hash is a 256-bit multiply-xorshift mix, and "sealing" appends a keyed
/// hash of nonce, associated data and plaintext as the tag (tampering is detected; nothing is
/// hidden). `@unchecked Sendable`: the simulation runs on one thread.
public final class DeterministicCrypto: CryptoPrimitives, @unchecked Sendable {
    private var random: SplitMix64
    private static let prime: UInt64 = (1 << 61) - 1

    public init(seed: UInt64) { random = SplitMix64(seed: seed) }

    public func randomBytes(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 8)
        while bytes.count < count { withUnsafeBytes(of: random.next()) { bytes.append(contentsOf: $0) } }
        return Array(bytes.prefix(count))
    }

    public func x25519KeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) {
        let secret = randomBytes(CryptoSize.secretKey)
        return (x25519(secret, [9] + [UInt8](repeating: 0, count: 31))!, secret)
    }

    public func x25519(_ secretKey: [UInt8], _ publicKey: [UInt8]) -> [UInt8]? {
        let base = Self.word(publicKey, at: 0) % Self.prime
        guard base > 1 else { return nil }  // the "low-order points"
        let exponent = Self.word(secretKey, at: 0) | 1
        var result: UInt64 = 1, power = base, e = exponent
        while e > 0 {
            if e & 1 == 1 { result = Self.multiply(result, power) }
            power = Self.multiply(power, power)
            e >>= 1
        }
        var out = [UInt8](repeating: 0, count: CryptoSize.publicKey)
        withUnsafeBytes(of: result.littleEndian) { out.replaceSubrange(0..<8, with: $0) }
        return out
    }

    public func hash(_ data: [UInt8], key: [UInt8]?) -> [UInt8] {
        var lanes = Lanes()
        // Each whole 8 bytes make one big-endian word; the tail is shifted in after the tag; then
        // the length. Words are loaded 8 bytes at a time (the simulation seals every byte a link
        // carries, file transfers included).
        func absorb(_ bytes: [UInt8], tag: UInt64) {
            bytes.withUnsafeBytes { raw in
                let whole = raw.count / 8 * 8
                var offset = 0
                while offset < whole {
                    lanes.mix(UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
                    offset += 8
                }
                var word = tag
                for index in whole..<raw.count { word = word << 8 | UInt64(raw[index]) }
                lanes.mix(word ^ UInt64(raw.count) << 32)
            }
        }
        if let key { absorb(key, tag: 0x4B45_5900) }
        absorb(data, tag: 0x4441_5400)
        for _ in 0..<4 { lanes.mix(0x9E37_79B9_7F4A_7C15) }
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for lane in [lanes.a, lanes.b, lanes.c, lanes.d] { withUnsafeBytes(of: lane.littleEndian) { out.append(contentsOf: $0) } }
        return out
    }

    public func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        plaintext + tag(key: key, nonce: nonce, plaintext: plaintext, associatedData: associatedData)
    }

    public func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], associatedData: [UInt8]) -> [UInt8]? {
        guard ciphertext.count >= CryptoSize.tag else { return nil }
        let plaintext = Array(ciphertext.dropLast(CryptoSize.tag))
        let expected = tag(key: key, nonce: nonce, plaintext: plaintext, associatedData: associatedData)
        // One comparison of the folded difference, not one per byte: the fuzz targets run on this
        // too (fuzz/crypto/), and libFuzzer's comparison tracing would hand them the expected tag.
        let difference = zip(ciphertext.suffix(CryptoSize.tag), expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) }
        guard difference == 0 else { return nil }
        return plaintext
    }

    public func wipe(_ bytes: inout [UInt8]) {
        for index in bytes.indices { bytes[index] = 0 }
    }

    private func tag(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        Array(hash(nonce + associatedData + plaintext, key: key).prefix(CryptoSize.tag))
    }

    /// The hash's state: four lanes, each mixed with the word and the next lane in turn.
    private struct Lanes {
        var a: UInt64 = 0x6A09_E667_F3BC_C908
        var b: UInt64 = 0xBB67_AE85_84CA_A73B
        var c: UInt64 = 0x3C6E_F372_FE94_F82B
        var d: UInt64 = 0xA54F_F53A_5F1D_36F1

        mutating func mix(_ word: UInt64) {
            a = Self.scramble(a ^ word) ^ b
            b = Self.scramble(b ^ (word &+ 0x9E37_79B9_7F4A_7C15)) ^ c
            c = Self.scramble(c ^ (word &+ 2 &* 0x9E37_79B9_7F4A_7C15)) ^ d
            d = Self.scramble(d ^ (word &+ 3 &* 0x9E37_79B9_7F4A_7C15)) ^ a
        }

        private static func scramble(_ value: UInt64) -> UInt64 {
            var x = (value ^ (value >> 31)) &* 0x7FB5_D329_728E_A185
            x = (x ^ (x >> 27)) &* 0x81DA_DEF4_BC2D_D44D
            return x ^ (x >> 33)
        }
    }

    private static func word(_ bytes: [UInt8], at offset: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in (offset..<offset + 8).reversed() { value = value << 8 | UInt64(bytes[index]) }
        return value
    }

    private static func multiply(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (high, low) = a.multipliedFullWidth(by: b)
        return reduce(high: high, low: low)
    }

    /// (high·2^64 + low) mod 2^61 − 1.
    private static func reduce(high: UInt64, low: UInt64) -> UInt64 {
        // 2^64 ≡ 2^3 (mod 2^61 − 1).
        var value = (low & prime) &+ (low >> 61) &+ ((high << 3) & prime) &+ (high >> 58)
        while value >= prime { value -= prime }
        return value
    }
}

extension DeterministicCrypto: AESGCMPrimitives {
    /// A stand-in with AES-256-GCM's nonce size: the stand-in seal under a key derived from `key`
    /// with a label, so a record sealed as one cipher does not open as the other (as with the real
    /// ones, when an edited preamble made two sides choose differently).
    public func aes256GCM(key: [UInt8]) -> any RecordAEAD {
        StandInAESGCM(key: hash(Array("stand-in AES-256-GCM".utf8), key: key), crypto: self)
    }
}

/// The stand-in's "AES-256-GCM": 12-byte nonces, 16-byte tags, nothing hidden.
struct StandInAESGCM: RecordAEAD {
    let key: [UInt8]
    let crypto: DeterministicCrypto

    var nonceBytes: Int { 12 }

    func seal(nonce: [UInt8], plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], into output: UnsafeMutableRawBufferPointer) {
        precondition(nonce.count == nonceBytes, "AES-GCM nonces have 12 bytes here")
        crypto.seal(key: key, nonce: nonce, plaintext: plaintext, associatedData: associatedData, into: output)
    }

    func open(nonce: [UInt8], ciphertext: UnsafeRawBufferPointer, associatedData: [UInt8], into output: UnsafeMutableRawBufferPointer) -> Bool {
        precondition(nonce.count == nonceBytes, "AES-GCM nonces have 12 bytes here")
        return crypto.open(key: key, nonce: nonce, ciphertext: ciphertext, associatedData: associatedData, into: output)
    }
}
