import OpenSSLCrypto
import PeerVoiceCore
import Sodium
import XCTest

/// A fixed handshake (fixed secret keys) whose bytes are published in docs/SECURITY.md §8, so a
/// second implementation can check itself. The values were cross-checked with an independent
/// implementation of docs/SECURITY.md (Python: hashlib BLAKE2b, `cryptography` X25519 and
/// ChaCha20-Poly1305, HChaCha20 by hand).
final class HandshakeVectorTests: XCTestCase {
    static let initiatorStatic = Array(UInt8(0x00)...UInt8(0x1f))
    static let responderStatic = Array(UInt8(0x20)...UInt8(0x3f))
    static let initiatorEphemeral = Array(UInt8(0x40)...UInt8(0x5f))
    static let responderEphemeral = Array(UInt8(0x60)...UInt8(0x7f))

    func testPublishedVector() throws {
        XCTAssertEqual(try vector(dialProof: .absent), Self.expected)
    }

    /// The same keys at a version whose message 1 carries the dial proof (§3.4): the responder's
    /// presence secret is 32 bytes 0x42, the epoch 1960644.
    func testPublishedVectorWithADialProof() throws {
        // SECURITY.md §8 publishes the handshake's part of it (the sealed PAIRING examples and the
        // peer-id hashes after it belong to the first vector).
        XCTAssertEqual(Array(try vector(dialProof: .present(Self.dialProofKey)).prefix(Self.expectedWithDialProof.count)),
                       Self.expectedWithDialProof)
    }

    /// The records of a link at version 11 (AES-256-GCM) after the same handshake: the KEEPALIVE
    /// and the PAIRING exchange. The values were computed from SECURITY.md §4 alone with Python's
    /// `cryptography` (`AESGCM(k).encrypt(d || p || 00 00 || u64be(c), body, d || p || u64be(c))`).
    func testPublishedRecordsAtVersion11() throws {
        let lines = try vector(dialProof: .present(Self.dialProofKey), cipher: LinkCipher(version: 11, aesGCM: OpenSSLAESGCM()))
        XCTAssertEqual(lines.filter { $0.hasPrefix("record ") || $0.hasPrefix("pairing_") }, Self.expectedAtVersion11)
    }

    private static let dialProofKey = DialProofKey(secret: PresenceSecret(bytes: [UInt8](repeating: 0x42, count: 32))!, epoch: 1_960_644)

    /// The lines SECURITY.md §8 publishes; records sealed with `cipher` (that of a link at 10 or older unless given).
    private func vector(dialProof: DialProofField, cipher: LinkCipher = .xChaCha20Poly1305) throws -> [String] {
        let crypto = LibSodium()
        let responderField: DialProofField = if case .present = dialProof { .present(nil) } else { .absent }
        let initiator = try Handshake(role: .initiator,
                                      identity: StaticIdentity(secretKey: Self.initiatorStatic, using: crypto),
                                      payload: Array("alice".utf8), dialProof: dialProof,
                                      crypto: SodiumWithKeyPair(fixedSecretKey: Self.initiatorEphemeral))
        let responder = try Handshake(role: .responder,
                                      identity: StaticIdentity(secretKey: Self.responderStatic, using: crypto),
                                      payload: Array("bob".utf8), dialProof: responderField,
                                      crypto: SodiumWithKeyPair(fixedSecretKey: Self.responderEphemeral))
        var messages: [[UInt8]] = []
        for index in 0..<5 {
            let (from, to) = index % 2 == 0 ? (initiator, responder) : (responder, initiator)
            messages.append(try from.writeMessage())
            try to.readMessage(messages.last!)
        }
        let i = try XCTUnwrap(initiator.result)
        let r = try XCTUnwrap(responder.result)
        var sealer = i.makeLinkSealer(cipher)
        let record = try sealer.seal(Frame.keepalive.encodedBody())
        // PROTOCOL.md §7.3's example: I known, R asking, both accept; each side's records from counter 0.
        var initiatorSealer = i.makeLinkSealer(cipher), responderSealer = r.makeLinkSealer(cipher)
        let pairing = [
            try initiatorSealer.seal(Frame.pairing(.known).encodedBody()),
            try responderSealer.seal(Frame.pairing(.asking).encodedBody()),
            try responderSealer.seal(Frame.pairing(.accept).encodedBody()),
            try initiatorSealer.seal(Frame.pairing(.accept).encodedBody()),
        ]
        var openerAtR = r.makeLinkOpener(cipher), openerAtI = i.makeLinkOpener(cipher)
        XCTAssertEqual(try openerAtR.open(pairing[0]), [0x06, 0x03])
        XCTAssertEqual(try openerAtI.open(pairing[1]), [0x06, 0x02])
        XCTAssertEqual(try openerAtI.open(pairing[2]), [0x06, 0x01])
        XCTAssertEqual(try openerAtR.open(pairing[3]), [0x06, 0x01])
        let initiatorKey = try XCTUnwrap(PublicKey(bytes: r.remoteStaticKey))
        let responderKey = try XCTUnwrap(PublicKey(bytes: i.remoteStaticKey))
        let voice = VoiceKeys.key(exporterKey: i.exporterKey, direction: .initiatorToResponder,
                                  sessionID: [UInt8](repeating: 0, count: 16), crypto: crypto)

        return [
            "msg1 " + hexString(messages[0]),
            "msg2 " + hexString(messages[1]),
            "msg3 " + hexString(messages[2]),
            "msg4 " + hexString(messages[3]),
            "msg5 " + hexString(messages[4]),
            "code " + i.verificationCode,
            "h " + hexString(i.handshakeHash),
            "k_ir " + hexString(i.initiatorToResponderKey),
            "k_ri " + hexString(i.responderToInitiatorKey),
            "k_exp " + hexString(i.exporterKey),
            "record " + hexString(record),
            "voice " + hexString(voice),
            "pairing_I_known " + hexString(pairing[0]),
            "pairing_R_asking " + hexString(pairing[1]),
            "pairing_R_accept " + hexString(pairing[2]),
            "pairing_I_accept " + hexString(pairing[3]),
            "id_hash_i " + hexString(crypto.hash(PeerID.domainLabel + initiatorKey.bytes, key: nil)),
            "id_i " + PeerID(key: initiatorKey, using: crypto).description,
            "id_hash_r " + hexString(crypto.hash(PeerID.domainLabel + responderKey.bytes, key: nil)),
            "id_r " + PeerID(key: responderKey, using: crypto).description,
        ]
    }

    /// Every value above is the one docs/SECURITY.md publishes (§7.1 and §8), so the document
    /// cannot drift from what the code computes.
    func testTheDocumentPublishesTheseValues() throws {
        let document = try String(contentsOfFile: URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().appendingPathComponent("../../docs/SECURITY.md").path, encoding: .utf8)
        for line in Self.expected + Self.expectedWithDialProof + Self.expectedAtVersion11 {
            let value = try XCTUnwrap(line.split(separator: " ").last)
            XCTAssertTrue(document.contains(value), "SECURITY.md lacks \(line)")
        }
    }

    static let expected: [String] = [
        "msg1 21354879cf771ae27bdd1b7c3f36c4afa0eef8b11058269ca65ca91044a478a012",
        "msg2 22675dd574ed7789310b3d2e7681f3790b466c773b1521fecf36577958371ea52f",
        "msg3 2379a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a",
        "msg4 240ab3b17845163cc23044935481fcacd0b169d357749343cdf957acf7bfe537825adb57d8e4132c01041b5bccd0b49a26c2594876ea87431ccf939e01792c9eedf22ea0",
        "msg5 2523b0ef1d26d690dc4e75568c5a8b451e80fcca25dd0c52bda2e738014f47ed07dfc11530e9cac9ec5e81d960a98cb11f4f4619345651fa0489b20f641e28e08b5ed595fa88",
        "code 274232",
        "h 7a1cd78892d6bb24af7f941b1ed8604824f90370ea8658ad3045572fd1e3846e",
        "k_ir c5ac2afe95d01ae97b4287f710b945a3d711914f3afc41a8ed0f9106a61cc7c3",
        "k_ri 66135ec2f56b4f66f0fe2494ef57f6526f782a0b248fb8a9220cbe1270ad476b",
        "k_exp 1e81bfba1efa34f140a7d5b98b753325bf4daf3c6b53580023a11994e601dd0b",
        "record 00000000000000009486320acaf8409cd577c3895814575c53",
        "voice 3e2c6b3ca72a990b291194e8a1dda7f656f331bacbed0e7271bb1c25e0034d36",
        "pairing_I_known 0000000000000000966d1c6f7b9fe90ac3166326f9ee79f20a3f",
        "pairing_R_asking 00000000000000004c49f90d674f503f4b2bd040b6a3d5539d11",
        "pairing_R_accept 0000000000000001d385964b9b676d9275f278f7539ffc6f8d42",
        "pairing_I_accept 0000000000000001064802c84e0dd80f55720e1f79aa9fac013f",
        "id_hash_i b1080d61ade76c03c89595f3cda9600c3824c2a889415475c4d6b931e6c52990",
        "id_i pv:weea2ynn45wahsevsxz43klabq",
        "id_hash_r b7c798b77e4a9b55a4bbf87d4c867ac04b6af13f2f7ad6169247740e6708fb37",
        "id_r pv:w7dzrn36jknvljf37b6uzbt2yb",
    ]

    static let expectedWithDialProof: [String] = [
        "msg1 21354879cf771ae27bdd1b7c3f36c4afa0eef8b11058269ca65ca91044a478a0121f0ef376a73ec371a31b119a47eb913d",
        "msg2 22675dd574ed7789310b3d2e7681f3790b466c773b1521fecf36577958371ea52f",
        "msg3 2379a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a",
        "msg4 240ab3b17845163cc23044935481fcacd0b169d357749343cdf957acf7bfe53782d61bafb925cb98e686c8b2f7ec3b5214c25948cd5eb38cb1274793b2d7faaa92233553",
        "msg5 2523b0ef1d26d690dc4e75568c5a8b451e80fcca25dd0c52bda2e738014f47ed078013def69017dfff1fa27b32d7b5afd64f46193456d573ccc7f9ed1ae1de79f10a46498a34",
        "code 191631",
        "h 87ed62cc912ca6f0e89f13c410666760f1a940f188c9b677d9ea14d0ffcd3666",
        "k_ir 449d1a8fba88e5db7e0c69cb2a2e1c02fbfcfaaa94ea5bde774c8ef017ed31ed",
        "k_ri 4054a211256a6c04732a298ffb7ed1e43614903b148ea2b2f0d27cb81bddb84d",
        "k_exp fa84a7653807874e4e102bbd0f2b7c5435bc708c19c2abdbfd6a4f6c9475f9c4",
        "record 0000000000000000a4c8710ebe78cf686d891b6cbe8714a46f",
        "voice 2b5d8e26ce8bf784357757f9e73a95139a17003e15cd0c2634d70ede4a8f995a",
    ]

    static let expectedAtVersion11: [String] = [
        "record 00000000000000007e2e4776578810345d55b7f96b520b688e",
        "pairing_I_known 00000000000000007c4d0b29626feebe05f0d3d7c35d363ab7ac",
        "pairing_R_asking 0000000000000000742af084c584531e925207120665a19cf5f0",
        "pairing_R_accept 00000000000000019a6b2f8e28a73f99657e2f8bbc6ffece1fa8",
        "pairing_I_accept 0000000000000001ff79b83be15bc21ae503badc8e097f5edcb6",
    ]
}
