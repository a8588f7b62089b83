// libFuzzer target: the handshake state machine (Handshake) and the record layer (RecordSealer,
// RecordOpener, VoiceKeys). One input in 32 runs on the real cryptography, libsodium through the
// Sodium module (LibSodium), the others on the simulation's fast stand-in (fuzz/crypto/: tampering
// is detected the same way; FUZZ_CRYPTO=libsodium or stand-in puts every input on one). Key
// generation and randomness are deterministic (keys are hashes of a counter, public keys X25519 of
// them), so that every input replays exactly.
//
// Input layout (missing bytes read as 0):
//   byte 0  flags: bit 0 role of side A (0 initiator, 1 responder); bit 1 honest mode (both sides
//           are Handshakes, messages between them pass through input-driven tampering) else raw
//           mode (A alone, the peer's messages come from the input); bits 2-3 A's pinned peer key
//           (0/3 none, 1 the right one, 2 a wrong one); bits 4-5 the same for B; bit 6 payloads
//           are HELLO bodies; bit 7 records go B -> A (else A -> B)
//   byte 1  identities: bits 0-1 A's, bits 2-3 B's (of 4 fixed ones; equal is allowed); bits 4-7
//           the ephemeral-key seed
//   2 x u16 payload lengths of A and B (mod 1100: above 959 the Handshake must refuse it)
//   then    raw mode: steps `op [u16 length, bytes]`; honest mode: one tamper byte (and its
//           arguments) per message delivered; then, after a completed handshake, record ops.
//
// Properties checked:
//   - every error is final: nextAction is .failed(error) and every later call throws it again;
//   - writing when it is this side's turn never fails; messages have the documented sizes;
//   - honest mode: an untouched handshake always completes, both sides agree on the transcript
//     hash, verification code and keys (send = peer's receive), learn each other's static key and
//     payload; any change to any message makes it fail (it never completes on both sides); a
//     wrong pinned key fails with unexpectedRemoteKey, and an initiator never sends msg5 then;
//   - records (link: stream mode, voice: datagram mode): a reference model of the replay window
//     predicts every verdict of RecordOpener.open exactly (plaintext, error and counter values),
//     and the counters (acceptedCount, rejections, newestCounter); forged, truncated or modified
//     records are always rejected; RecordSealer's bytes match the documented record format.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

// MARK: - Cryptography

/// Four fixed long-term identities on each kind of primitives (computed once: X25519 is the slow
/// part of an input on libsodium).
let identitiesOn: [CryptoChoice: [StaticIdentity]] = Dictionary(uniqueKeysWithValues: [CryptoChoice.libsodium, .standIn].map { choice in
    let primitives = choice.primitives
    return (choice, (0..<4).map { index in
        let secret = primitives.hash(Array("fuzz identity".utf8) + [UInt8(index)], key: nil)
        do { return try StaticIdentity(secretKey: secret, using: primitives) } catch { fatalError("identity \(index): \(error)") }
    })
})

// MARK: - Handshake helpers

func sendsFirst(_ role: HandshakeRole) -> Bool { role == .initiator }

/// What a failed handshake must look like from then on.
func checkFailedForGood(_ handshake: Handshake, _ expected: HandshakeError) {
    check(handshake.nextAction == .failed(expected), "after \(expected) nextAction is \(handshake.nextAction)")
    for message: [UInt8] in [[], [0x21] + [UInt8](repeating: 0, count: 32)] {
        do throws(HandshakeError) {
            _ = try handshake.writeMessage()
            check(false, "writeMessage() succeeded after \(expected)")
        } catch {
            check(error == expected, "writeMessage() threw \(error) after \(expected)")
        }
        do throws(HandshakeError) {
            try handshake.readMessage(message)
            check(false, "readMessage() succeeded after \(expected)")
        } catch {
            check(error == expected, "readMessage() threw \(error) after \(expected)")
        }
    }
    _ = expected.description
}

/// State that must hold whatever happened.
func checkConsistent(_ handshake: Handshake) {
    check(handshake.isComplete == (handshake.result != nil), "isComplete disagrees with result")
    if handshake.nextAction == .complete { check(handshake.isComplete, "nextAction .complete without a result") }
    if let code = handshake.verificationCode {
        check(code.utf8.count == 6 && code.utf8.allSatisfy { (0x30...0x39).contains($0) }, "verification code \(code)")
    }
    if let result = handshake.result {
        check(result.verificationCode == handshake.verificationCode, "result's code differs from verificationCode")
        check(result.remoteStaticKey == handshake.remoteStaticKey, "result's remote key differs")
        check(result.remotePayload == handshake.remotePayload, "result's payload differs")
        check(result.handshakeHash == handshake.transcriptHash, "result's hash differs from the transcript hash")
        check(result.sendKey.count == 32 && result.receiveKey.count == 32 && result.exporterKey.count == 32, "key sizes")
        check(result.sendKey != result.receiveKey, "send and receive keys are equal")
    }
}

/// Writes A's message when it is A's turn; checks what it wrote.
func writeInTurn(_ handshake: Handshake, payloadCount: Int) -> [UInt8]? {
    guard case .send(let expected) = handshake.nextAction else { return nil }
    do throws(HandshakeError) {
        let message = try handshake.writeMessage()
        check(message.first == expected.rawValue, "\(expected) starts with \(String(describing: message.first))")
        switch expected {
        case .commitment, .responderEphemeral, .initiatorEphemeral:
            check(message.count == 33, "\(expected) has \(message.count) bytes")
        case .responderIdentity, .initiatorIdentity:
            check(message.count == Handshake.identityMessageOverhead + payloadCount, "\(expected) has \(message.count) bytes")
        }
        check(expected.allowedByteCounts(withDialProof: false).contains(message.count), "\(expected) size outside its allowed sizes")
        return message
    } catch {
        check(false, "writing \(expected) in turn failed: \(error)")
        return nil
    }
}

func makePayload(_ input: inout Input, length: Int, hello: Bool) -> [UInt8] {
    if hello, let helloFrame = try? Hello(
        instanceID: InstanceID(bytes: input.fill(16))!, capabilities: Capabilities(rawValue: UInt32(input.u8())),
        listenPort: UInt16(input.u16()), voicePort: UInt16(input.u16()),
        name: String(decoding: input.take(length % 64), as: UTF8.self)) {
        return Frame.hello(helloFrame).encodedBody()
    }
    return [UInt8](repeating: UInt8(truncatingIfNeeded: length), count: length)
}

// MARK: - Records

/// Seals like RecordSealer, at any counter (docs/SECURITY.md §4): what a peer holding the key can do.
func sealRecord(aead: any RecordAEAD, direction: RecordDirection, purpose: RecordPurpose, counter: UInt64, plaintext: [UInt8]) -> [UInt8] {
    var counterBytes: [UInt8] = []
    for shift in stride(from: 56, through: 0, by: -8) { counterBytes.append(UInt8(truncatingIfNeeded: counter >> UInt64(shift))) }
    // 14 zero bytes in XChaCha20-Poly1305's 24-byte nonce, 2 in AES-256-GCM's 12.
    let nonce = [direction.rawValue, purpose.rawValue] + [UInt8](repeating: 0, count: aead.nonceBytes - 10) + counterBytes
    let associatedData = [direction.rawValue, purpose.rawValue] + counterBytes
    var sealed = [UInt8](repeating: 0, count: plaintext.count + 16)
    plaintext.withUnsafeBytes { plaintext in
        sealed.withUnsafeMutableBytes { aead.seal(nonce: nonce, plaintext: plaintext, associatedData: associatedData, into: $0) }
    }
    return counterBytes + sealed
}

/// The replay window as docs/SECURITY.md §4 describes it.
struct WindowModel {
    /// 0: stream mode.
    let size: UInt64
    var newest: UInt64?
    var accepted: Set<UInt64> = []

    func verdict(_ counter: UInt64) -> RecordError? {
        guard let newest, counter <= newest else { return nil }
        if size == 0 { return .replayed(counter: counter) }
        if newest - counter >= size { return .tooOld(counter: counter, newest: newest) }
        return accepted.contains(counter) ? .replayed(counter: counter) : nil
    }

    mutating func accept(_ counter: UInt64) {
        accepted.insert(counter)
        if newest.map({ counter > $0 }) ?? true { newest = counter }
    }
}

struct RecordHarness {
    var opener: RecordOpener
    /// What both ends seal and open with, keyed with the sender's key.
    let aead: any RecordAEAD
    let direction: RecordDirection
    let purpose: RecordPurpose
    var model: WindowModel
    /// Every authentic record sealed so far: bytes -> (counter, plaintext).
    var authentic: [[UInt8]: (UInt64, [UInt8])] = [:]
    var sent: [[UInt8]] = []
    var acceptedCount: UInt64 = 0
    var rejections = RecordRejections()

    mutating func deliver(_ record: [UInt8]) {
        let before = (opener.newestCounter, opener.acceptedCount)
        count(.open)
        let result = Result { () throws(RecordError) in try opener.open(record) }
        trace("record of \(record.count) bytes (counter \(record.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })): \(result)")
        let expected: Result<[UInt8], RecordError>
        if record.count < 24 {
            expected = .failure(.truncated(bytes: record.count))
            rejections.truncated += 1
        } else if let (counter, plaintext) = authentic[record] {
            if let error = model.verdict(counter) {
                expected = .failure(error)
                if case .replayed = error { rejections.replayed += 1 } else { rejections.tooOld += 1 }
            } else {
                expected = .success(plaintext)
                model.accept(counter)
                acceptedCount += 1
            }
        } else {
            var counter: UInt64 = 0
            for byte in record.prefix(8) { counter = counter << 8 | UInt64(byte) }
            expected = .failure(.tampered(counter: counter))
            rejections.tampered += 1
        }
        check(result == expected, "open(\(record.count) bytes) gave \(result), the model \(expected)")
        check(opener.acceptedCount == acceptedCount, "acceptedCount \(opener.acceptedCount), model \(acceptedCount)")
        check(opener.rejections == rejections, "rejections \(opener.rejections), model \(rejections)")
        check(opener.newestCounter == model.newest, "newestCounter \(String(describing: opener.newestCounter)), model \(String(describing: model.newest))")
        if case .failure(let error) = result {
            check(opener.newestCounter == before.0 && opener.acceptedCount == before.1, "a rejected record moved the window")
            _ = error.description
        }
    }

    mutating func sealAuthentic(counter: UInt64, plaintext: [UInt8]) -> [UInt8] {
        let record = sealRecord(aead: aead, direction: direction, purpose: purpose, counter: counter, plaintext: plaintext)
        check(record.count == plaintext.count + SealedRecord.overheadBytes, "record size")
        authentic[record] = (counter, plaintext)
        if sent.count < 64 { sent.append(record) }
        return record
    }

    /// Record ops until the input runs out (at most 200).
    mutating func run(_ input: inout Input, sealer: inout RecordSealer) {
        var operations = 0
        while !input.isEmpty && operations < 200 {
            operations += 1
            let op = input.u8()
            switch op % 8 {
            case 0, 1:
                // The real sealer (next counter), checked against the documented format.
                let plaintext = input.take(Int(op >> 3))
                let counter = sealer.nextCounter
                do throws(RecordError) {
                    let record = try sealer.seal(plaintext)
                    check(record == sealAuthentic(counter: counter, plaintext: plaintext), "RecordSealer's bytes differ from the documented format")
                    check(sealer.nextCounter == counter + 1, "nextCounter did not advance")
                    deliver(record)
                } catch {
                    check(error == .needsRekey(counter: counter) && counter >= sealer.rekeyLimit, "seal failed: \(error)")
                }
            case 2:
                // An authentic record at a counter of the input's choosing.
                let newest = model.newest ?? 0
                let counter: UInt64
                switch op >> 3 & 3 {
                case 0: counter = input.u64()
                case 1: counter = newest &+ UInt64(input.u8())
                case 2: counter = newest &- UInt64(input.u16())
                default: counter = UInt64.max &- UInt64(input.u8())
                }
                deliver(sealAuthentic(counter: counter, plaintext: input.take(Int(op >> 5))))
            case 3:
                // Replay (or reorder) a record sealed earlier.
                if !sent.isEmpty { deliver(sent[Int(input.u8()) % sent.count]) }
            case 4:
                // Modify a record: flip bits, at a position of the input's choosing.
                guard !sent.isEmpty else { break }
                var record = sent[Int(input.u8()) % sent.count]
                let position = input.u16() % record.count
                record[position] ^= input.u8() | 1
                deliver(record)
            case 5:
                // Truncate or extend a record.
                guard !sent.isEmpty else { break }
                let record = sent[Int(input.u8()) % sent.count]
                if op & 8 != 0 { deliver(record + input.take(1 + Int(op >> 4))) } else { deliver(Array(record.prefix(input.u16() % record.count))) }
            case 6:
                // Bytes from the input: a forgery, unless they happen to be a record sealed here.
                deliver(input.take(input.u16() % 256))
            default:
                // The sealer refuses at its rekey limit.
                let limit = UInt64(op >> 3)
                var small = RecordSealer(aead: aead, direction: direction, purpose: purpose, rekeyLimit: limit)
                for counter in 0...limit {
                    check(small.needsRekey == (counter >= limit), "needsRekey at \(counter) of \(limit)")
                    check(small.shouldRekey == (counter >= limit / 2), "shouldRekey at \(counter) of \(limit)")
                    do throws(RecordError) {
                        _ = try small.seal([])
                        check(counter < limit, "sealed at the rekey limit")
                    } catch {
                        check(error == .needsRekey(counter: limit) && counter == limit, "seal at \(counter) of \(limit): \(error)")
                    }
                }
            }
        }
    }
}

// MARK: - Modes

/// The peer's messages come from the input: A alone.
func runRaw(_ input: inout Input, role: HandshakeRole, identity: StaticIdentity, payload: [UInt8],
            pinned: [UInt8]?, crypto: ReplayableCrypto) {
    let handshake: Handshake
    do throws(HandshakeError) {
        handshake = try Handshake(role: role, identity: identity, payload: payload, expectedRemoteStaticKey: pinned, crypto: crypto)
    } catch {
        check(error == .payloadTooLarge(bytes: payload.count) && payload.count > Handshake.maxPayloadBytes, "init: \(error)")
        return
    }
    check(payload.count <= Handshake.maxPayloadBytes, "a \(payload.count)-byte payload was accepted")
    var steps = 0
    while !input.isEmpty && steps < 12 {
        steps += 1
        let op = input.u8()
        var thrown: HandshakeError?
        let actionBefore = handshake.nextAction
        switch op % 4 {
        case 0:
            // The natural next step.
            switch actionBefore {
            case .send: _ = writeInTurn(handshake, payloadCount: payload.count)
            case .receive:
                let message = input.take(input.u16() % 1100)
                count(.readMessage)
                do throws(HandshakeError) { try handshake.readMessage(message) } catch { thrown = error }
            case .complete, .failed: break
            }
        case 1:
            // Write whatever the turn.
            do throws(HandshakeError) {
                _ = try handshake.writeMessage()
                guard case .send = actionBefore else { check(false, "writeMessage() succeeded at \(actionBefore)"); break }
            } catch { thrown = error }
        case 2:
            // Read whatever the turn.
            let message = input.take(input.u16() % 1100)
            count(.readMessage)
            do throws(HandshakeError) {
                try handshake.readMessage(message)
                guard case .receive = actionBefore else { check(false, "readMessage() succeeded at \(actionBefore)"); break }
            } catch { thrown = error }
        default:
            // The expected type byte and an allowed size, so that the content is what gets tested.
            guard case .receive(let expected) = actionBefore else { break }
            let size = expected.allowedByteCounts(withDialProof: false).count == 1 ? 33 : Handshake.identityMessageOverhead + Int(op >> 2) * 4
            let message = [expected.rawValue] + input.fill(size - 1)
            count(.readMessage)
            do throws(HandshakeError) { try handshake.readMessage(message) } catch { thrown = error }
        }
        checkConsistent(handshake)
        trace("raw op \(op % 4): \(handshake.nextAction)")
        if let thrown {
            checkFailedForGood(handshake, thrown)
            break
        }
    }
    // Records under a key nobody sealed with: everything is refused.
    let key = crypto.hash(input.take(8), key: nil)
    for mode in [RecordOpener.Mode.stream, .datagram(windowSize: 64)] {
        var opener = RecordOpener(key: key, direction: .initiatorToResponder, purpose: .link, mode: mode, crypto: crypto)
        for _ in 0..<4 where !input.isEmpty {
            let record = input.take(input.u16() % 300)
            count(.open)
            do throws(RecordError) {
                _ = try opener.open(record)
                check(false, "a record from the input opened under a random key")
            } catch {
                check(record.count < 24 ? error == .truncated(bytes: record.count) : error == .tampered(counter: record.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }),
                      "forged record: \(error)")
            }
        }
    }
}

/// Both sides are real; every message passes through input-driven tampering.
func runHonest(_ input: inout Input, roleA: HandshakeRole, identityA: StaticIdentity, identityB: StaticIdentity,
               payloadA: [UInt8], payloadB: [UInt8], pinA: [UInt8]?, pinB: [UInt8]?, wrongPinA: Bool, wrongPinB: Bool,
               recordsFromB: Bool, crypto: ReplayableCrypto) {
    let roleB: HandshakeRole = roleA == .initiator ? .responder : .initiator
    let a: Handshake
    let b: Handshake
    do throws(HandshakeError) {
        a = try Handshake(role: roleA, identity: identityA, payload: payloadA, expectedRemoteStaticKey: pinA, crypto: crypto)
    } catch {
        check(payloadA.count > Handshake.maxPayloadBytes, "init A: \(error)")
        return
    }
    do throws(HandshakeError) {
        b = try Handshake(role: roleB, identity: identityB, payload: payloadB, expectedRemoteStaticKey: pinB, crypto: crypto)
    } catch {
        check(payloadB.count > Handshake.maxPayloadBytes, "init B: \(error)")
        return
    }
    var tampered = false
    var duplicated = false
    var history: [[UInt8]] = []
    var failure: (Handshake, HandshakeError)?
    var initiatorSentIdentity = false
    let initiator = roleA == .initiator ? a : b

    exchange: while true {
        let (writer, reader, writerPayload) = sendsFirstNow(a, b) ? (a, b, payloadA.count) : (b, a, payloadB.count)
        guard case .send = writer.nextAction else { break }
        guard let original = writeInTurn(writer, payloadCount: writerPayload) else { break }
        if writer === initiator && original.first == HandshakeMessage.initiatorIdentity.rawValue { initiatorSentIdentity = true }
        var message = original
        let op = input.u8()
        switch op % 8 {
        case 3:
            let position = input.u16() % message.count
            message[position] ^= input.u8() | 1
        case 4:
            message = Array(message.prefix(input.u16() % message.count))
        case 5:
            message += input.take(1 + Int(input.u8()))
        case 6:
            message = input.take(input.u16() % 1100)
        case 7:
            if !history.isEmpty { message = history[Int(input.u8()) % history.count] }
        default:
            break
        }
        if message != original { tampered = true }
        trace("\(writer === a ? "A" : "B") sends \(original.count) bytes, delivered \(message == original ? "as is" : "changed to \(message.count) bytes")\(op & 8 != 0 ? ", twice" : "")")
        history.append(original)
        for delivery in 0..<(op & 8 != 0 ? 2 : 1) {
            if delivery == 1 { duplicated = true }
            count(.readMessage)
            do throws(HandshakeError) {
                try reader.readMessage(message)
            } catch {
                failure = (reader, error)
                break exchange
            }
        }
        checkConsistent(a)
        checkConsistent(b)
    }
    checkConsistent(a)
    checkConsistent(b)
    trace("A (\(roleA)): \(a.nextAction), B: \(b.nextAction)")
    if let (side, error) = failure {
        checkFailedForGood(side, error)
        check(tampered || duplicated || wrongPinA || wrongPinB, "an untouched handshake failed: \(error)")
        if !tampered && !duplicated {
            check(error == .unexpectedRemoteKey, "a wrong pinned key failed with \(error)")
        }
        if error == .unexpectedRemoteKey && side === initiator {
            check(!initiatorSentIdentity, "the initiator sent msg5 to a peer with the wrong key")
        }
        return
    }
    // No error: both must be complete, unless the exchange stopped for another reason.
    check(!tampered, "a tampered handshake completed")
    check(!wrongPinA && !wrongPinB, "a handshake with a wrong pinned key completed")
    guard let resultA = a.result, let resultB = b.result else {
        check(false, "an untouched handshake stopped: \(a.nextAction) / \(b.nextAction)")
        return
    }
    check(resultA.handshakeHash == resultB.handshakeHash, "transcript hashes differ")
    check(resultA.verificationCode == resultB.verificationCode, "verification codes differ")
    check(resultA.sendKey == resultB.receiveKey && resultA.receiveKey == resultB.sendKey, "link keys do not pair up")
    check(resultA.exporterKey == resultB.exporterKey, "exporter keys differ")
    check(resultA.initiatorToResponderKey == resultB.initiatorToResponderKey, "directional keys differ")
    check(resultA.remoteStaticKey == identityB.publicKey && resultB.remoteStaticKey == identityA.publicKey, "static keys")
    check(resultA.remotePayload == payloadB && resultB.remotePayload == payloadA, "payloads")
    check(resultA.sendDirection == resultB.receiveDirection && resultA.sendDirection != resultA.receiveDirection, "directions")
    // What the daemon does with the payload.
    _ = try? Frame(body: resultA.remotePayload)
    // A completed handshake refuses to write more; the result stays.
    do throws(HandshakeError) {
        _ = try a.writeMessage()
        check(false, "writeMessage() succeeded after completion")
    } catch {
        check(error == .outOfTurn(attempted: "writeMessage()", next: nil), "writeMessage() after completion: \(error)")
        check(a.result != nil && a.nextAction == .failed(error), "after completion: \(a.nextAction)")
        _ = error.description
    }
    check(VoiceKeys.makeSessionID(crypto: crypto).count == VoiceKeys.sessionIDBytes, "session id size")

    // Records between the two.
    let (sender, receiver) = recordsFromB ? (resultB, resultA) : (resultA, resultB)
    let purposeOp = input.u8()
    if purposeOp & 1 == 0 {
        // A link at protocol 10 (XChaCha20-Poly1305) or 11 (AES-256-GCM, the stand-in's on either primitives).
        let cipher = LinkCipher(version: purposeOp & 2 == 0 ? 10 : 11, aesGCM: standInPrimitives)
        trace("link records: \(cipher.algorithm)")
        check(cipher.rekeyLimit == (cipher.algorithm == .aes256GCM ? LinkCipher.aes256GCMRekeyLimit : RecordSealer.defaultRekeyLimit), "rekey limit")
        let aead: any RecordAEAD = cipher.algorithm == .aes256GCM
            ? standInPrimitives.aes256GCM(key: sender.sendKey) : XChaCha20Poly1305Key(key: sender.sendKey, crypto: crypto)
        var sealer = sender.makeLinkSealer(cipher)
        var harness = RecordHarness(opener: receiver.makeLinkOpener(cipher), aead: aead, direction: sender.sendDirection,
                                    purpose: .link, model: WindowModel(size: 0))
        harness.run(&input, sealer: &sealer)
    } else {
        let senderSession = input.fill(16)
        let receiverSession = input.fill(16)
        let wrongSize = Int(purposeOp >> 1 & 31)
        if wrongSize != 16 {
            do throws(VoiceKeyError) {
                _ = try sender.voiceKeys(localSessionID: [UInt8](repeating: 1, count: wrongSize), remoteSessionID: receiverSession)
                check(false, "a \(wrongSize)-byte session id was accepted")
            } catch {
                check(error == .wrongSessionIDSize(bytes: wrongSize), "\(error)")
                _ = error.description
            }
        }
        let senderKeys: VoiceKeys
        let receiverKeys: VoiceKeys
        do throws(VoiceKeyError) {
            senderKeys = try sender.voiceKeys(localSessionID: senderSession, remoteSessionID: receiverSession)
            receiverKeys = try receiver.voiceKeys(localSessionID: receiverSession, remoteSessionID: senderSession)
        } catch {
            check(false, "voice keys: \(error)")
            return
        }
        check(senderKeys.sendKey == receiverKeys.receiveKey && senderKeys.receiveKey == receiverKeys.sendKey, "voice keys do not pair up")
        check(senderKeys.sendKey != sender.sendKey && senderKeys.sendKey != sender.exporterKey, "voice key equals a link key")
        // Window sizes as documented: a multiple of 64, at least 64 (sizes from 1 up).
        let requested = purposeOp & 64 != 0 ? 1 + input.u16() % 2048 : RecordOpener.defaultWindowSize
        let mode: RecordOpener.Mode = purposeOp & 128 != 0 && purposeOp & 64 == 0 ? .stream : .datagram(windowSize: requested)
        let size: UInt64 = mode == .stream ? 0 : UInt64(max(64, (requested + 63) / 64 * 64))
        var sealer = senderKeys.makeSealer()
        var harness = RecordHarness(opener: receiverKeys.makeOpener(mode: mode), aead: XChaCha20Poly1305Key(key: senderKeys.sendKey, crypto: crypto),
                                    direction: senderKeys.sendDirection, purpose: .voice, model: WindowModel(size: size))
        harness.run(&input, sealer: &sealer)
    }
}

/// Whether A writes next (else B).
func sendsFirstNow(_ a: Handshake, _ b: Handshake) -> Bool {
    if case .send = a.nextAction { return true }
    return false
}

func run(_ bytes: [UInt8]) {
    var input = Input(bytes)
    let flags = input.u8()
    let keys = input.u8()
    let roleA: HandshakeRole = flags & 1 == 0 ? .initiator : .responder
    let choice = CryptoChoice(for: bytes)
    trace("primitives: \(choice.rawValue)")
    let identities = identitiesOn[choice]!
    let identityA = identities[Int(keys & 3)]
    let identityB = identities[Int(keys >> 2 & 3)]
    let crypto = ReplayableCrypto(choice.primitives, seed: keys >> 4)
    let hello = flags & 64 != 0
    let lengthA = input.u16() % 1100
    let lengthB = input.u16() % 1100
    let payloadA = makePayload(&input, length: lengthA, hello: hello)
    let payloadB = makePayload(&input, length: lengthB, hello: hello)
    func pin(_ mode: UInt8, peer: StaticIdentity) -> [UInt8]? {
        switch mode {
        case 1: return peer.publicKey
        case 2: return identities.first { $0.publicKey != peer.publicKey }!.publicKey
        default: return nil
        }
    }
    let pinModeA = flags >> 2 & 3
    let pinModeB = flags >> 4 & 3
    if flags & 2 == 0 {
        runRaw(&input, role: roleA, identity: identityA, payload: payloadA, pinned: pin(pinModeA, peer: identityB), crypto: crypto)
    } else {
        runHonest(&input, roleA: roleA, identityA: identityA, identityB: identityB, payloadA: payloadA, payloadB: payloadB,
                  pinA: pin(pinModeA, peer: identityB), pinB: pin(pinModeB, peer: identityA),
                  wrongPinA: pinModeA == 2, wrongPinB: pinModeB == 2, recordsFromB: flags & 128 != 0, crypto: crypto)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
