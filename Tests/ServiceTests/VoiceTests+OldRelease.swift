import Foundation
import TestHarness
import XCTest

extension VoiceTests {
    /// Voice with the real previous release (make old-release; OldReleaseTests has the rest): this
    /// build dials the old peervoiced, both confirm, voice comes up by itself, and speech said
    /// into each mic comes out of the other's speaker with the usual bounds. Skipped, saying so,
    /// when the old release is not built.
    func testSpeechGoesBothWaysWithThePreviousRelease() throws {
        guard let old = OldRelease.binary else { throw XCTSkip(OldRelease.notBuilt) }
        let (rig, _) = try makeRig(bBinary: old)
        XCTAssertTrue(rig.a.log.contains("\(rig.link.bOnA) connected (dialled over ip, protocol 6"), rig.a.log)
        try checkSpeechBothWays(rig)
    }
}
