// libFuzzer target: handshake message 1's dial proof field (docs/SECURITY.md §3.4) as a responder
// reads it, and the responder's decision on it (DialGate, §11.2). One input in 32 runs on
// libsodium's BLAKE2b and X25519, the others on the simulation's fast stand-in (fuzz/crypto/;
// FUZZ_CRYPTO=libsodium or stand-in puts every input on one); keys and randomness are deterministic.
//
// Input layout (missing bytes read as 0):
//   byte 0  flags: bit 0 the responder is open to strangers (discoverable); bit 1 the agreed
//           version has no proof field; bits 2-3 how many older secrets the responder accepts
//           (0-2); bits 4-5 the first dial: 0 raw bytes from the input, 1 an initiator proving
//           with the current secret, 2 with the first older one, 3 without a secret (random)
//   byte 1  the secrets' seed
//   u64     the responder's clock (unix seconds, from 1,000,000 on)
//   then    dials: `kind [i8 epoch offset] [u16 length, bytes]`: kind bit 0 raw (the bytes) or an
//           honest initiator (its key as bits 4-5 above, from bits 1-2 here) proving for the
//           responder's epoch plus the offset; kind bit 3 replays the previous dial's message 1
//           instead; kind bits 4-7 move the clock by that many minutes first.
//
// Properties checked:
//   - a responder accepts exactly the documented message 1: type 0x21, 49 bytes with the field,
//     33 without; otherwise the documented error, final; the claim it hands over is the message's
//     commitment (bytes 1-32) and proof (bytes 33-48);
//   - every decision of DialGate equals a reference model written from the document: open to
//     strangers: answer; no field: refuse; a proof equal to the first 16 bytes of BLAKE2b keyed
//     with an accepted secret over the label, an epoch within one of the responder's and the
//     commitment: answered the first time, refused as replayed while it could still hold; any
//     other: refused;
//   - an honest initiator's proof with the current or an accepted older secret, one epoch off at
//     most, is answered; without the secret, two epochs off or under another secret, refused.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

let label = Array("PeerVoice dial proof".utf8)

func secret(_ seed: UInt8, _ index: UInt8, _ crypto: any CryptoPrimitives) -> PresenceSecret {
    PresenceSecret(bytes: crypto.hash(Array("fuzz presence secret".utf8) + [seed, index], key: nil))!
}

/// The responder's identity on each kind of primitives (computed once).
let identityOn: [CryptoChoice: StaticIdentity] = Dictionary(uniqueKeysWithValues: [CryptoChoice.libsodium, .standIn].map { choice in
    let primitives = choice.primitives
    return (choice, try! StaticIdentity(secretKey: primitives.hash(Array("fuzz identity".utf8), key: nil), using: primitives))
})

/// The document's proof, written out here rather than through DialProof.make.
func referenceProof(_ secret: PresenceSecret, epoch: UInt64, commitment: [UInt8], crypto: any CryptoPrimitives) -> [UInt8] {
    var message = label
    for shift in stride(from: 56, through: 0, by: -8) { message.append(UInt8(truncatingIfNeeded: epoch >> UInt64(shift))) }
    return Array(crypto.hash(message + commitment, key: secret.bytes).prefix(16))
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var input = Input(bytes)
    let choice = CryptoChoice(for: bytes)
    trace("primitives: \(choice.rawValue)")
    let identity = identityOn[choice]!
    let flags = input.u8()
    let open = flags & 1 != 0
    let carried = flags & 2 == 0
    let olderCount = min(Int(flags >> 2 & 3), 2)
    let seed = input.u8()
    let crypto = ReplayableCrypto(choice.primitives, seed: seed)
    // Far from 1970, so that the epochs around it exist.
    var now = 1_000_000 + input.u64() % (1 << 40)
    let accepted = [secret(seed, 0, crypto)] + (0..<olderCount).map { secret(seed, UInt8($0 + 1), crypto) }
    var gate = DialGate()
    /// The reference model's memory: accepted commitments and the epoch their proof was for.
    var remembered: [[UInt8]: UInt64] = [:]
    var previous: [UInt8]?
    // The first dial's kind comes from the flags (bit 0: honest; bits 1-2: its key).
    var kind = (flags >> 4 & 3) == 0 ? UInt8(0) : (flags >> 4 & 3) << 1 | 1
    var first = true

    while first || !input.isEmpty {
        if !first { kind = input.u8() }
        first = false
        now += UInt64(kind >> 4) * 60
        let message: [UInt8]
        /// An honest initiator's dial that must be answered (true) or refused (false) while hidden.
        var honestlyProven: Bool?
        if kind & 8 != 0, let previous {
            message = previous
        } else if kind & 1 == 0 {
            message = input.take(input.u16() % 80)
        } else {
            let offset = Int(Int8(bitPattern: input.u8()) % 4)
            let epoch = UInt64(Int(PresenceTag.epoch(unixSeconds: now)) + offset)
            let key: DialProofKey? = switch kind >> 1 & 3 {
            case 1: DialProofKey(secret: accepted[0], epoch: epoch)
            case 2: DialProofKey(secret: secret(seed, 1, crypto), epoch: epoch)
            case 3: DialProofKey(secret: secret(seed, 9, crypto), epoch: epoch)
            default: nil
            }
            let initiator = try! Handshake(role: .initiator, identity: identity, payload: [],
                                           dialProof: carried ? .present(key) : .absent, crypto: crypto)
            message = try! initiator.writeMessage()
            let keyAccepted = kind >> 1 & 3 == 1 || (kind >> 1 & 3 == 2 && olderCount > 0)
            honestlyProven = keyAccepted && abs(offset) <= 1
            trace("honest message 1, key \(kind >> 1 & 3), epoch offset \(offset)")
        }
        previous = message

        let responder = try! Handshake(role: .responder, identity: identity, payload: [],
                                       dialProof: carried ? .present(nil) : .absent, crypto: crypto)
        let size = carried ? 49 : 33
        count(.readMessage)
        do throws(HandshakeError) {
            try responder.readMessage(message)
            check(message.count == size && message.first == 0x21, "accepted a message 1 of \(message.count) bytes")
        } catch {
            check(message.count != size || message.first != 0x21 || message.count > 1024, "refused a well-formed message 1: \(error)")
            check(responder.nextAction == .failed(error), "not final: \(error)")
            continue
        }
        let claim = responder.receivedDialProof
        if carried {
            check(claim == DialProofClaim(commitment: Array(message[1..<33]), proof: Array(message[33..<49])), "claim differs from the bytes")
        } else {
            check(claim == nil, "a claim without the field")
        }

        let epochNow = PresenceTag.epoch(unixSeconds: now)
        remembered = remembered.filter { $0.value + 1 >= epochNow }
        let expected: DialGate.Decision
        if open {
            expected = .answer
        } else if let claim {
            let proven = accepted.flatMap { secret in
                [epochNow - 1, epochNow, epochNow + 1].filter { referenceProof(secret, epoch: $0, commitment: claim.commitment, crypto: crypto) == claim.proof }
            }.first
            if let proven {
                if remembered[claim.commitment] != nil {
                    expected = .refuse(.replayed)
                } else {
                    expected = .answer
                    remembered[claim.commitment] = proven
                }
            } else {
                expected = .refuse(.notProven)
            }
        } else {
            expected = .refuse(.noProofField)
        }
        if let honestlyProven, carried, !open {
            if honestlyProven {
                check(expected == .answer, "the model refuses an honest proof: \(expected)")
            } else {
                check(expected == .refuse(.notProven), "the model answers a dial without an accepted proof: \(expected)")
            }
        }
        count(.decide)
        let decision = gate.decide(claim, openToStrangers: open, secrets: accepted, unixSeconds: now, crypto: crypto)
        trace("decision \(decision), expected \(expected)")
        check(decision == expected, "decided \(decision), the document says \(expected)")
        check(gate.rememberedCount == remembered.count, "remembers \(gate.rememberedCount), the model \(remembered.count)")
    }
    return 0
}
