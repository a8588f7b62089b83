import CoreTestSupport
import PeerVoiceCore
import Sodium
import XCTest

/// The dial proof in message 1 and the responder's gate (docs/SECURITY.md §3.4, §11.2), with
/// libsodium: who gets message 2 from a responder that is not discoverable, and who gets the
/// stranger's silence.
final class DialProofTests: XCTestCase {
    private let crypto = LibSodium()
    private let secret = PresenceSecret(bytes: Array(repeating: UInt8(0x42), count: 32))!
    private let older = PresenceSecret(bytes: Array(repeating: UInt8(0x43), count: 32))!
    private let now: UInt64 = 1_764_580_000
    private var epoch: UInt64 { PresenceTag.epoch(unixSeconds: now) }

    /// A dial's message 1 as the responder reads it: from a real initiator proving with `key`
    /// (random bytes when nil).
    private func dial(proving key: DialProofKey?) throws -> DialProofClaim {
        let initiator = try Handshake(role: .initiator, identity: .generate(using: crypto), payload: [],
                                      dialProof: .present(key), crypto: crypto)
        let responder = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [],
                                      dialProof: .present(nil), crypto: crypto)
        let message1 = try initiator.writeMessage()
        XCTAssertEqual(message1.count, 1 + 32 + DialProof.byteCount)
        try responder.readMessage(message1)
        return try XCTUnwrap(responder.receivedDialProof)
    }

    private func decide(_ gate: inout DialGate, _ claim: DialProofClaim?, open: Bool = false,
                        secrets: [PresenceSecret]? = nil, at time: UInt64? = nil) -> DialGate.Decision {
        gate.decide(claim, openToStrangers: open, secrets: secrets ?? [secret], unixSeconds: time ?? now, crypto: crypto)
    }

    /// docs/SECURITY.md §3.4's example, as Python's hashlib computes it.
    func testTheProofIsKeyedBLAKE2bOverTheEpochAndTheCommitment() throws {
        // e_i of the test vector (§8).
        let ephemeral = try XCTUnwrap(crypto.x25519(HandshakeVectorTests.initiatorEphemeral, [9] + [UInt8](repeating: 0, count: 31)))
        let commitment = Handshake.commitment(to: ephemeral, crypto: crypto)
        let proof = DialProof.make(secret: secret, epoch: 1_960_644, commitment: commitment, crypto: crypto)
        XCTAssertEqual(proof.count, 16)
        XCTAssertEqual(hexString(proof), "1f0ef376a73ec371a31b119a47eb913d")
        XCTAssertNotEqual(proof, DialProof.make(secret: secret, epoch: 1_960_645, commitment: commitment, crypto: crypto))
        XCTAssertNotEqual(proof, DialProof.make(secret: older, epoch: 1_960_644, commitment: commitment, crypto: crypto))
    }

    func testAPairedPeersDialIsAnsweredOnceAndItsReplayGetsTheStrangersAnswer() throws {
        var gate = DialGate()
        let claim = try dial(proving: DialProofKey(secret: secret, epoch: epoch))
        XCTAssertEqual(decide(&gate, claim), .answer)
        XCTAssertEqual(decide(&gate, claim), .refuse(.replayed))
        XCTAssertEqual(decide(&gate, claim, at: now + 900), .refuse(.replayed), "still remembered in the next epoch")
        XCTAssertEqual(gate.rememberedCount, 1)
    }

    func testAStrangerWithoutTheSecretIsRefusedWhileHiddenAndAnsweredWhileDiscoverable() throws {
        var gate = DialGate()
        let stranger = try dial(proving: nil)
        XCTAssertEqual(decide(&gate, stranger), .refuse(.notProven))
        let wrongSecret = try dial(proving: DialProofKey(secret: older, epoch: epoch))
        XCTAssertEqual(decide(&gate, wrongSecret), .refuse(.notProven))
        // An older protocol has no proof field: refused while hidden, as a stranger.
        XCTAssertEqual(decide(&gate, nil), .refuse(.noProofField))
        for claim in [stranger, wrongSecret, nil] {
            XCTAssertEqual(decide(&gate, claim, open: true), .answer)
        }
        XCTAssertEqual(gate.rememberedCount, 0, "nothing refused is remembered")
    }

    /// Clocks differ: the responder accepts the epochs next to its own, not two away; and a proof
    /// from another epoch replayed later fails.
    func testAProofHoldsForItsEpochAndTheNeighbouringOnes() throws {
        for (offset, answered) in [(-2, false), (-1, true), (0, true), (1, true), (2, false)] {
            var gate = DialGate()
            let claim = try dial(proving: DialProofKey(secret: secret, epoch: UInt64(Int(epoch) + offset)))
            XCTAssertEqual(decide(&gate, claim) == .answer, answered, "epoch offset \(offset)")
        }
        var gate = DialGate()
        let claim = try dial(proving: DialProofKey(secret: secret, epoch: epoch))
        XCTAssertEqual(decide(&gate, claim), .answer)
        XCTAssertEqual(decide(&gate, claim, at: now + 2 * 900), .refuse(.notProven), "a capture two epochs old")
        XCTAssertEqual(gate.rememberedCount, 0, "forgotten once it cannot hold any more")
    }

    /// The proof binds the commitment, hence the ephemeral key: moved onto another message 1, it fails.
    func testAProofOnAnotherCommitmentFails() throws {
        var gate = DialGate()
        let claim = try dial(proving: DialProofKey(secret: secret, epoch: epoch))
        let other = try dial(proving: nil)
        XCTAssertEqual(decide(&gate, DialProofClaim(commitment: other.commitment, proof: claim.proof)), .refuse(.notProven))
        var flipped = claim.proof
        flipped[15] ^= 1
        XCTAssertEqual(decide(&gate, DialProofClaim(commitment: claim.commitment, proof: flipped)), .refuse(.notProven))
        XCTAssertEqual(decide(&gate, claim), .answer)
    }

    /// While a rotation is under way, older secrets prove too; the unused slot's key proves nothing.
    func testOlderSecretsProveWhileTheyAreAcceptedAndTheUnusedSlotNever() throws {
        var gate = DialGate()
        let byOlder = try dial(proving: DialProofKey(secret: older, epoch: epoch))
        XCTAssertEqual(decide(&gate, byOlder, secrets: [secret]), .refuse(.notProven))
        XCTAssertEqual(decide(&gate, byOlder, secrets: [secret, older]), .answer)
        let zero = PresenceSecret(bytes: [UInt8](repeating: 0, count: 32))!
        let byZero = try dial(proving: DialProofKey(secret: zero, epoch: epoch))
        XCTAssertEqual(decide(&gate, byZero, secrets: [secret]), .refuse(.notProven))
        XCTAssertEqual(decide(&gate, byZero, secrets: [secret, older]), .refuse(.notProven))
    }

    func testTheReplayMemoryIsBoundedOldestFirst() throws {
        var gate = DialGate(replayCapacity: 2)
        let first = try dial(proving: DialProofKey(secret: secret, epoch: epoch - 1))
        let second = try dial(proving: DialProofKey(secret: secret, epoch: epoch))
        let third = try dial(proving: DialProofKey(secret: secret, epoch: epoch))
        for claim in [first, second, third] { XCTAssertEqual(decide(&gate, claim), .answer) }
        XCTAssertEqual(gate.rememberedCount, 2)
        XCTAssertEqual(decide(&gate, second), .refuse(.replayed))
        XCTAssertEqual(decide(&gate, third), .refuse(.replayed))
    }

    /// With the field, the handshake still completes and both sides agree; the proof is in the
    /// transcript, so a message 1 changed on the way (even only its proof) gives another code.
    func testTheProofIsInTheTranscript() throws {
        let key = DialProofKey(secret: secret, epoch: epoch)
        let initiator = try Handshake(role: .initiator, identity: .generate(using: crypto), payload: [1], dialProof: .present(key), crypto: crypto)
        let responder = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [2], dialProof: .present(nil), crypto: crypto)
        let messages = try exchange(initiator, responder)
        XCTAssertEqual(messages.map(\.count), [49, 33, 33, 66, 66])
        XCTAssertEqual(try XCTUnwrap(initiator.result).handshakeHash, try XCTUnwrap(responder.result).handshakeHash)

        let plain = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [], crypto: crypto)
        assertThrows(HandshakeError.wrongMessageSize(.commitment, bytes: 49, allowed: 33...33)) { try plain.readMessage(messages[0]) }
        let expecting = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [], dialProof: .present(nil), crypto: crypto)
        assertThrows(HandshakeError.wrongMessageSize(.commitment, bytes: 33, allowed: 49...49)) { try expecting.readMessage(messages[0].prefix(33)) }

        let sender = try Handshake(role: .initiator, identity: .generate(using: crypto), payload: [1], dialProof: .present(key), crypto: crypto)
        let honest = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [2], dialProof: .present(nil), crypto: crypto)
        let changed = try Handshake(role: .responder, identity: .generate(using: crypto), payload: [2], dialProof: .present(nil), crypto: crypto)
        var message1 = try sender.writeMessage()
        try honest.readMessage(message1)
        message1[48] ^= 1
        try changed.readMessage(message1)
        XCTAssertNotEqual(honest.transcriptHash, changed.transcriptHash)
    }

    func testOlderSecretsStayUntilTheirHoldersHaveTheCurrentOne() {
        let carol = PeerID("pv:" + String(repeating: "c", count: 26))!
        let dave = PeerID("pv:" + String(repeating: "d", count: 26))!
        let s1 = PresenceSecret(bytes: [UInt8](repeating: 1, count: 32))!
        let s2 = PresenceSecret(bytes: [UInt8](repeating: 2, count: 32))!
        var secrets = PresenceSecrets(current: secret)
        // Bob removed: Carol and Dave hold the old one.
        secrets.rotate(to: s1, paired: [carol, dave], unixSeconds: now)
        XCTAssertEqual(secrets.accepted(unixSeconds: now), [s1, secret])
        XCTAssertTrue(secrets.awaitsCurrent(dave))
        // Carol reconnects and is sent s1; then Carol is removed too: Dave still holds the first.
        secrets.holdsCurrent(carol, unixSeconds: now)
        secrets.rotate(to: s2, paired: [dave], unixSeconds: now + 60)
        XCTAssertEqual(secrets.accepted(unixSeconds: now + 60), [s2, secret], "s1's holders were all removed")
        XCTAssertEqual(PresenceSecrets.older(fromFileContents: secrets.olderFileContents), secrets.older)
        // Dave is sent s2: nothing older is accepted any more.
        secrets.holdsCurrent(dave, unixSeconds: now + 120)
        XCTAssertEqual(secrets.accepted(unixSeconds: now + 120), [s2])
        XCTAssertEqual(secrets.olderFileContents, "")

        // A holder never reached: its secret goes after a week.
        var unreached = PresenceSecrets(current: secret)
        unreached.rotate(to: s1, paired: [dave], unixSeconds: now)
        XCTAssertEqual(unreached.accepted(unixSeconds: now + PresenceSecrets.olderLifetimeSeconds - 1), [s1, secret])
        XCTAssertEqual(unreached.accepted(unixSeconds: now + PresenceSecrets.olderLifetimeSeconds), [s1])
        XCTAssertNil(PresenceSecrets.older(fromFileContents: "zz 1 pv:x\n"))
    }
}
