import PeerVoiceCore
import Sodium
import XCTest

/// Presence tags with libsodium's BLAKE2b: what paired peers recognise and strangers cannot link.
final class PresenceTagTests: XCTestCase {
    private let crypto = LibSodium()
    private let secret = PresenceSecret(bytes: Array(repeating: UInt8(0x42), count: 32))!
    private let otherSecret = PresenceSecret(bytes: Array(repeating: UInt8(0x43), count: 32))!

    func testATagIsSixteenHexDigitsAndChangesEveryEpoch() {
        let epoch = PresenceTag.epoch(unixSeconds: 1_764_580_000)
        XCTAssertEqual(epoch, 1_764_580_000 / 900)
        let tag = PresenceTag.tag(secret: secret, epoch: epoch, crypto: crypto)
        // docs/PROTOCOL.md §12.1's example, as Python's hashlib computes it.
        XCTAssertEqual(tag, "13e51a312bd3feff")
        XCTAssertNoThrow(try LANAdvertisement(presenceTag: tag))
        XCTAssertEqual(tag, PresenceTag.tag(secret: secret, epoch: epoch, crypto: crypto), "not a function of the secret and epoch")
        XCTAssertNotEqual(tag, PresenceTag.tag(secret: secret, epoch: epoch + 1, crypto: crypto))
        XCTAssertNotEqual(tag, PresenceTag.tag(secret: otherSecret, epoch: epoch, crypto: crypto))
        XCTAssertEqual(PresenceTag.end(of: epoch), (epoch + 1) * 900)
    }

    /// A peer whose clock is off by up to an epoch still recognises the tag; two epochs away, not.
    func testATagMatchesItsEpochAndTheNeighbouringOnes() {
        let now: UInt64 = 1_764_580_000
        let epoch = PresenceTag.epoch(unixSeconds: now)
        for (offset, matches) in [(-2, false), (-1, true), (0, true), (1, true), (2, false)] {
            let tag = PresenceTag.tag(secret: secret, epoch: UInt64(Int(epoch) + offset), crypto: crypto)
            XCTAssertEqual(PresenceTag.matches(tag, secret: secret, unixSeconds: now, crypto: crypto), matches, "epoch offset \(offset)")
        }
        let other = PresenceTag.tag(secret: otherSecret, epoch: epoch, crypto: crypto)
        XCTAssertFalse(PresenceTag.matches(other, secret: secret, unixSeconds: now, crypto: crypto))
    }
}
