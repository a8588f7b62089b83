/// One AES-128 key applied to single 16-byte blocks: what OCB2 needs from a cipher. The
/// daemon's adapter (`OpenSSLCrypto`) implements it with libcrypto; the core imports no C.
public protocol BlockCipher {
    /// Encrypts one 16-byte block.
    func encrypt(_ block: [UInt8]) -> [UInt8]
    /// Decrypts one 16-byte block.
    func decrypt(_ block: [UInt8]) -> [UInt8]
}

/// OCB2 with a 128-bit block cipher, as Mumble's voice over UDP uses it (Mumble's
/// `CryptStateOCB2`; Rogaway's OCB 2.0, draft-krovetz-ocb-00), with Mumble's counter-measure
/// against the XEX* attack on OCB2 (Inoue–Minematsu, eprint 2019/311 §9): the encrypter flips
/// the lowest bit of a second-to-last block whose first 15 bytes are zero, and the decrypter
/// refuses a message whose padded last block equals the offset in its first 15 bytes.
public struct OCB2 {
    public static let blockSize = 16
    let cipher: any BlockCipher

    public init(cipher: any BlockCipher) { self.cipher = cipher }

    /// Doubling in GF(2^128) (the paper's `L·x`): a left shift, reduced by 0x87.
    public static func double(_ block: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: blockSize)
        for i in 0..<blockSize {
            let next: UInt8 = i + 1 < blockSize ? block[i + 1] >> 7 : 0
            out[i] = (block[i] << 1) | next
        }
        if block[0] & 0x80 != 0 { out[blockSize - 1] ^= 0x87 }
        return out
    }

    static func xor(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var out = a
        for i in 0..<blockSize { out[i] ^= b[i] }
        return out
    }

    /// The offset block that carries the last block's length in bits (its last byte: at most 128).
    static func lengthBlock(_ count: Int) -> [UInt8] {
        var block = [UInt8](repeating: 0, count: blockSize)
        block[blockSize - 1] = UInt8(count * 8)
        return block
    }

    /// Encrypts `plain` under `nonce`; returns the ciphertext (as long as `plain`) and the
    /// 16-byte tag. A second-to-last block open to the XEX* attack has its first bit flipped
    /// (digital silence produces such blocks; the flip is inaudible).
    public func seal(_ plain: [UInt8], nonce: [UInt8]) -> (ciphertext: [UInt8], tag: [UInt8]) {
        let result = run(plain, nonce: nonce, sealing: true)
        return (result.output, result.tag)
    }

    /// Decrypts `ciphertext` under `nonce`; returns the plaintext and the tag the caller compares
    /// with the one received, or nil when the last block is the XEX* attack's forgery.
    public func open(_ ciphertext: [UInt8], nonce: [UInt8]) -> (plain: [UInt8], tag: [UInt8])? {
        let result = run(ciphertext, nonce: nonce, sealing: false)
        return result.forgery ? nil : (result.output, result.tag)
    }

    /// One pass of OCB2 either way: the full blocks, then the last one, then the tag.
    private func run(_ input: [UInt8], nonce: [UInt8], sealing: Bool)
        -> (output: [UInt8], tag: [UInt8], forgery: Bool) {
        precondition(nonce.count == Self.blockSize)
        var delta = cipher.encrypt(nonce)
        var checksum = [UInt8](repeating: 0, count: Self.blockSize)
        var out = [UInt8]()
        out.reserveCapacity(input.count)
        var offset = 0
        while input.count - offset > Self.blockSize {
            var block = Array(input[offset..<offset + Self.blockSize])
            delta = Self.double(delta)
            let plain: [UInt8]
            if sealing {
                if input.count - offset - Self.blockSize <= Self.blockSize, block[0..<15].allSatisfy({ $0 == 0 }) {
                    block[0] ^= 1
                }
                plain = block
                out += Self.xor(delta, cipher.encrypt(Self.xor(delta, block)))
            } else {
                plain = Self.xor(delta, cipher.decrypt(Self.xor(delta, block)))
                out += plain
            }
            checksum = Self.xor(checksum, plain)
            offset += Self.blockSize
        }
        let (last, lastDelta) = finalBlock(Array(input[offset...]), delta: delta, ciphertext: !sealing)
        out += last.output
        checksum = Self.xor(checksum, last.padded)
        let forgery = !sealing && last.padded[0..<15] == lastDelta[0..<15]
        let tag = cipher.encrypt(Self.xor(Self.xor(lastDelta, Self.double(lastDelta)), checksum))
        return (out, tag, forgery)
    }

    /// The last (possibly short or empty) block: XORed with the pad E(δ·2 ⊕ len). `padded` is
    /// the plaintext block completed with the pad's tail, which goes into the checksum.
    private func finalBlock(_ input: [UInt8], delta: [UInt8], ciphertext: Bool)
        -> ((output: [UInt8], padded: [UInt8]), [UInt8]) {
        let lastDelta = Self.double(delta)
        let pad = cipher.encrypt(Self.xor(Self.lengthBlock(input.count), lastDelta))
        var output = [UInt8](repeating: 0, count: input.count)
        for i in 0..<input.count { output[i] = input[i] ^ pad[i] }
        let plain = ciphertext ? output : input
        let padded = plain + pad[input.count...]
        return ((output, padded), lastDelta)
    }
}

/// Mumble's UDP packet crypto (the server's `CryptSetup`: key, client nonce, server nonce).
/// A packet is 1 nonce byte (the low byte of the sender's 128-bit counter nonce), 3 tag bytes
/// (the first of the OCB2 tag), then the ciphertext. The receiver accepts packets up to 30 late,
/// any number lost ahead (up to wrap-around of the low byte), and each nonce once.
public struct MumbleCryptState {
    public static let headerBytes = 4
    private let ocb: OCB2
    private var encryptNonce: [UInt8]
    private var decryptNonce: [UInt8]
    /// For each low nonce byte, the second byte last accepted with it (replay detection).
    private var history = [UInt8](repeating: 0, count: 256)
    public private(set) var good = 0
    public private(set) var late = 0
    public private(set) var lost = 0

    /// `encryptNonce` is the server's client_nonce (what we send with), `decryptNonce` its
    /// server_nonce; nil unless the key and both nonces are 16 bytes.
    public init?(cipher: any BlockCipher, encryptNonce: [UInt8], decryptNonce: [UInt8]) {
        guard encryptNonce.count == OCB2.blockSize, decryptNonce.count == OCB2.blockSize else { return nil }
        ocb = OCB2(cipher: cipher)
        self.encryptNonce = encryptNonce
        self.decryptNonce = decryptNonce
    }

    /// The server's resync: a `CryptSetup` with only server_nonce replaces the decrypt nonce.
    public mutating func setDecryptNonce(_ nonce: [UInt8]) -> Bool {
        guard nonce.count == OCB2.blockSize else { return false }
        decryptNonce = nonce
        return true
    }

    /// The encrypt nonce, which the client sends back when the server asks to resync.
    public var currentEncryptNonce: [UInt8] { encryptNonce }

    static func increment(_ nonce: inout [UInt8], from start: Int) {
        for i in start..<OCB2.blockSize {
            nonce[i] &+= 1
            if nonce[i] != 0 { break }
        }
    }

    static func decrement(_ nonce: inout [UInt8], from start: Int) {
        for i in start..<OCB2.blockSize {
            nonce[i] &-= 1
            if nonce[i] != 0xFF { break }
        }
    }

    public mutating func encrypt(_ plain: [UInt8]) -> [UInt8] {
        Self.increment(&encryptNonce, from: 0)
        let (ciphertext, tag) = ocb.seal(plain, nonce: encryptNonce)
        return [encryptNonce[0], tag[0], tag[1], tag[2]] + ciphertext
    }

    /// The plaintext, or nil for a packet too short, replayed, too late, or failing its tag;
    /// a refused packet leaves the state as it was.
    public mutating func decrypt(_ packet: [UInt8]) -> [UInt8]? {
        guard packet.count >= Self.headerBytes else { return nil }
        let saved = decryptNonce
        let byte = packet[0]
        let current = decryptNonce[0]
        var restore = false
        var packetLate = 0
        var packetLost = 0
        if current &+ 1 == byte {
            if byte > current {
                decryptNonce[0] = byte
            } else {
                decryptNonce[0] = byte
                Self.increment(&decryptNonce, from: 1)
            }
        } else {
            var diff = Int(byte) - Int(current)
            if diff > 128 { diff -= 256 } else if diff < -128 { diff += 256 }
            if byte < current, diff > -30, diff < 0 {
                packetLate = 1; packetLost = -1; restore = true
                decryptNonce[0] = byte
            } else if byte > current, diff > -30, diff < 0 {
                packetLate = 1; packetLost = -1; restore = true
                decryptNonce[0] = byte
                Self.decrement(&decryptNonce, from: 1)
            } else if byte > current, diff > 0 {
                packetLost = Int(byte) - Int(current) - 1
                decryptNonce[0] = byte
            } else if byte < current, diff > 0 {
                packetLost = 256 - Int(current) + Int(byte) - 1
                decryptNonce[0] = byte
                Self.increment(&decryptNonce, from: 1)
            } else {
                return nil
            }
            if history[Int(decryptNonce[0])] == decryptNonce[1] {
                decryptNonce = saved
                return nil
            }
        }
        guard let (plain, tag) = ocb.open(Array(packet[Self.headerBytes...]), nonce: decryptNonce),
              tag[0] == packet[1], tag[1] == packet[2], tag[2] == packet[3] else {
            decryptNonce = saved
            return nil
        }
        history[Int(decryptNonce[0])] = decryptNonce[1]
        if restore { decryptNonce = saved }
        good += 1
        late += packetLate
        lost += packetLost
        return plain
    }
}
