import Foundation
import PeerVoiceCore
import XCTest

/// `ServiceSettings`: which names SetName takes, and what a new instance reads back from the file.
final class ServiceSettingsTests: XCTestCase {
    private var path = ""

    override func setUpWithError() throws {
        path = NSTemporaryDirectory() + "settings-\(UUID().uuidString).json"
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: path)
    }

    func testNamesAreCheckedAndTrimmed() throws {
        let refused = ["", " \t", "a\u{7}b", "line\nbreak", String(repeating: "é", count: 65)]
        for name in refused {
            XCTAssertThrowsError(try ServiceSettings.validatedName(name), name) { error in
                XCTAssertEqual((error as? ServiceError)?.name, "InvalidArgument")
            }
        }
        XCTAssertEqual(try ServiceSettings.validatedName("  Ana’s laptop\n"), "Ana’s laptop")
        XCTAssertEqual(try ServiceSettings.validatedName(String(repeating: "x", count: 128)).count, 128)
    }

    func testChoicesSurviveANewInstanceAndWinOverTheDefaultName() throws {
        let settings = try ServiceSettings(path: path, defaultName: "host")
        XCTAssertEqual(settings.name, "host")
        XCTAssertEqual(settings.visible, [.bluetooth, .lan])
        XCTAssertTrue(try settings.setName("Kitchen"))
        XCTAssertFalse(try settings.setName("Kitchen"), "the same name again changes nothing")
        XCTAssertTrue(try settings.setVisible(.lan, false))
        XCTAssertFalse(try settings.setVisible(.lan, false))

        let reopened = try ServiceSettings(path: path, defaultName: "other-host")
        XCTAssertEqual(reopened.name, "Kitchen")
        XCTAssertEqual(reopened.visible, [.bluetooth])
    }

    func testAFileWithANameSetNameWouldRefuseFallsBackToTheDefault() throws {
        try Data(#"{"name": "bad\nname", "hidden": []}"#.utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(try ServiceSettings(path: path, defaultName: "host").name, "host")
    }
}
