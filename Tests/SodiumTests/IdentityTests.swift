import Foundation
import PeerVoiceCore
import Sodium
import XCTest

/// Long-term identities: serialisation and the key file.
final class IdentityTests: XCTestCase {
    let crypto = LibSodium()
    var directory = ""

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "peervoice-identity-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func mode(_ path: String) throws -> Int {
        try XCTUnwrap((FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue)
    }

    func testSerialisationRoundTrip() throws {
        let identity = StaticIdentity.generate(using: crypto)
        let bytes = identity.serialized()
        XCTAssertEqual(bytes.count, 72)
        XCTAssertEqual(Array(bytes.prefix(8)), [0x50, 0x56, 0x49, 0x44, 0x00, 0x01, 0x00, 0x00])
        XCTAssertEqual(Array(bytes.suffix(32)), identity.publicKey)
        let loaded = try StaticIdentity(serialized: bytes, using: crypto)
        XCTAssertEqual(loaded.publicKey, identity.publicKey)
        XCTAssertEqual(loaded.serialized(), bytes)
        XCTAssertEqual(identity.fingerprint.count, 64)
        // The secret key alone gives the same identity.
        XCTAssertEqual(try StaticIdentity(secretKey: Array(bytes[8..<40]), using: crypto).publicKey, identity.publicKey)
    }

    func testMalformedIdentitiesAreRefused() throws {
        let bytes = StaticIdentity.generate(using: crypto).serialized()
        var wrongMagic = bytes; wrongMagic[0] = 0x58
        var wrongVersion = bytes; wrongVersion[5] = 2
        var wrongPublic = bytes; wrongPublic[71] ^= 1
        var wrongSecret = bytes; wrongSecret[20] ^= 1
        for (candidate, reason) in [(Array(bytes.prefix(64)), "64 bytes"), (bytes + [0], "73 bytes"), (wrongMagic, "PVID"),
                                    (wrongVersion, "version 2"), (wrongPublic, "does not belong"), (wrongSecret, "does not belong")] {
            XCTAssertThrowsError(try StaticIdentity(serialized: candidate, path: "/x/identity.key", using: crypto)) { error in
                guard case .malformed(let path, let text)? = error as? IdentityError else { return XCTFail("\(error)") }
                XCTAssertEqual(path, "/x/identity.key")
                XCTAssertTrue(text.contains(reason), "\(text) should mention \(reason)")
                XCTAssertTrue("\(error)".contains("/x/identity.key"))
            }
        }
    }

    func testCreateThenLoad() throws {
        let path = directory + "/sub/dir/identity.key"
        let (created, wasCreated) = try IdentityFile.loadOrCreate(at: path, using: crypto)
        XCTAssertTrue(wasCreated)
        XCTAssertEqual(try mode(path), 0o600)
        XCTAssertEqual(try mode(directory + "/sub/dir") & 0o077, 0, "new directories are private")
        XCTAssertEqual(FileManager.default.contents(atPath: path).map { [UInt8]($0) }, created.serialized())
        // No temporary file left behind.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory + "/sub/dir"), ["identity.key"])

        let (loaded, wasCreatedAgain) = try IdentityFile.loadOrCreate(at: path, using: crypto)
        XCTAssertFalse(wasCreatedAgain)
        XCTAssertEqual(loaded.publicKey, created.publicKey)
        XCTAssertEqual(try IdentityFile.load(at: path, using: crypto).publicKey, created.publicKey)

        // create never replaces an existing identity.
        XCTAssertThrowsError(try IdentityFile.create(at: path, using: crypto))
        XCTAssertEqual(try IdentityFile.load(at: path, using: crypto).publicKey, created.publicKey)
    }

    func testReadableByOthersIsRefusedWithTheFix() throws {
        let path = directory + "/identity.key"
        _ = try IdentityFile.create(at: path, using: crypto)
        for badMode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o660] {
            try FileManager.default.setAttributes([.posixPermissions: badMode], ofItemAtPath: path)
            XCTAssertThrowsError(try IdentityFile.loadOrCreate(at: path, using: crypto)) { error in
                XCTAssertEqual(error as? IdentityError, .insecurePermissions(path: path, mode: badMode))
                let message = "\(error)"
                XCTAssertTrue(message.contains("chmod 600 \(path)"), message)
                XCTAssertTrue(message.contains(path), message)
            }
        }
        XCTAssertEqual("\(IdentityError.insecurePermissions(path: "/k", mode: 0o644))",
                       "identity key file /k is accessible by other users (mode 0644); it holds a secret key: run `chmod 600 /k` and start again")
        for goodMode in [0o600, 0o400] {
            try FileManager.default.setAttributes([.posixPermissions: goodMode], ofItemAtPath: path)
            XCTAssertNoThrow(try IdentityFile.load(at: path, using: crypto))
        }
    }

    func testSymbolicLinkIsFollowedAndItsTargetChecked() throws {
        let target = directory + "/real.key", link = directory + "/identity.key"
        let identity = try IdentityFile.create(at: target, using: crypto)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        XCTAssertEqual(try IdentityFile.load(at: link, using: crypto).publicKey, identity.publicKey)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: target)
        XCTAssertThrowsError(try IdentityFile.load(at: link, using: crypto)) { error in
            XCTAssertTrue("\(error)".contains("chmod 600 \(target)"), "\(error)")
        }
    }

    func testDirectoryIsNotAnIdentity() throws {
        let path = directory + "/identity.key"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        XCTAssertThrowsError(try IdentityFile.loadOrCreate(at: path, using: crypto)) { error in
            XCTAssertEqual(error as? IdentityError, .notARegularFile(path: path))
        }
    }

    func testGarbageFileIsRefused() throws {
        let path = directory + "/identity.key"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("not a key".utf8),
                                                    attributes: [.posixPermissions: 0o600]))
        XCTAssertThrowsError(try IdentityFile.loadOrCreate(at: path, using: crypto)) { error in
            guard case .malformed? = error as? IdentityError else { return XCTFail("\(error)") }
        }
    }
}
