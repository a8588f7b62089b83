// libFuzzer target: what arrives on a room's UDP socket (Sources/PeerVoiceCore/Rooms/): Mumble's
// OCB2 packet decryption with its nonce window, then the legacy UDP decoder (ping or voice) on
// what opens.
//
// The block cipher is a stand-in (a keyed byte permutation, invertible like AES; this target
// links no C): it exercises the mode, the window and the decoder, not AES.
//
// Input layout: byte 0 = how many of the following packets are sealed by a sender sharing the
// state (so the window and the decoder see authentic packets too); then packets, each a u8
// length and that many bytes: a sealed packet's bytes are its plaintext, the rest go in raw.
//
// Checked on every input:
//   - an authentic packet that opens gives back its plaintext (with the XEX* counter-measure's
//     flipped bit when its second-to-last block starts with 15 zero bytes), and never opens twice;
//   - refused packets leave the state as it was (the sender's next packet in order opens),
//     unless a raw packet opened (the stand-in is no real cipher: the fuzzer may forge);
//   - every decoded voice packet or ping re-encodes to bytes that decode to the same one.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

/// A keyed byte permutation per block: XOR with the key, then rotate the bytes by one. One array
/// a block: OCB2 calls it for every block, and allocations are what cost under AddressSanitizer.
struct StandInCipher: BlockCipher {
    static let key: [UInt8] = (0..<16).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
    func encrypt(_ block: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        for i in 0..<16 { out[(i + 15) & 15] = block[i] ^ Self.key[i] }
        return out
    }
    func decrypt(_ block: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        for i in 0..<16 { out[i] = block[(i + 15) & 15] ^ Self.key[i] }
        return out
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Input(Array(UnsafeBufferPointer(start: data, count: size)))
    var sealedLeft = Int(input.u8())
    let a = [UInt8](repeating: 0x55, count: 16), b = [UInt8](repeating: 0xAA, count: 16)
    var sender = MumbleCryptState(cipher: StandInCipher(), encryptNonce: a, decryptNonce: b)!
    var receiver = MumbleCryptState(cipher: StandInCipher(), encryptNonce: b, decryptNonce: a)!
    var opened = Set<[UInt8]>()
    var forged = false
    while !input.rest.isEmpty {
        let bytes = input.take(Int(input.u8()))
        let authentic = sealedLeft > 0
        let packet = authentic ? sender.encrypt(bytes) : bytes
        if authentic { sealedLeft -= 1 }
        trace("packet \(packet.count) bytes, authentic \(authentic)")
        guard let plain = receiver.decrypt(packet) else { continue }
        if authentic {
            check(plain == withXEXStarFlip(bytes), "an authentic packet opened to other bytes")
            check(opened.insert(packet).inserted, "a packet opened twice")
        } else {
            forged = true
        }
        switch try? MumbleUDPMessage(fromServer: plain[...]) {
        case .voice(let voice)?:
            let again = try? MumbleUDPMessage(fromServer: voice.fromServer[...])
            check(again == .voice(voice), "voice packet re-encodes to \(String(describing: again)), not \(voice)")
        case .ping(let timestamp)?:
            let again = try? MumbleUDPMessage(fromServer: MumbleUDPMessage.ping(timestamp: timestamp)[...])
            check(again == .ping(timestamp: timestamp), "ping re-encodes to \(String(describing: again)), not \(timestamp)")
        case .ignored?, nil:
            break
        }
    }
    // After anything refused, the sender's next packet in order still opens.
    let last = sender.encrypt([0x20, 1, 2, 3])
    check(forged || receiver.decrypt(last) == [0x20, 1, 2, 3], "the state did not survive refused packets")
    return 0
}

/// What an authentic packet opens to: the second-to-last block's first bit is flipped when its
/// first 15 bytes are zero (OCB2's XEX* counter-measure, docs/SECURITY.md).
func withXEXStarFlip(_ plain: [UInt8]) -> [UInt8] {
    guard plain.count > 16 else { return plain }
    let start = ((plain.count - 1) / 16 - 1) * 16
    guard plain[start..<start + 15].allSatisfy({ $0 == 0 }) else { return plain }
    var flipped = plain
    flipped[start] ^= 1
    return flipped
}
