import Foundation
import GIO
import TestHarness
import XCTest

/// Voice on the link (how Bluetooth peers always talk; here over TCP with --voice-over-link) while
/// an app's stream on the same link is stopped by its reader: the stream holds only its own
/// window, and speech and text go on.
extension VoiceTests {
    func testVoiceAndTextOnTheLinkGoOnWhileAChannelsReaderStops() throws {
        let (rig, _) = try makeRig(extraArguments: ["--voice-over-link"])
        let app = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("tests/channels/app.py").path
        func start(_ peer: TestPeer, _ arguments: [String], _ name: String) throws -> ChildProcess {
            try ChildProcess("/usr/bin/python3", [app] + arguments, environment: ["DBUS_SESSION_BUS_ADDRESS": peer.bus.address],
                             logPath: rig.directory + "/\(name).log")
        }
        // B's app takes the stream and reads nothing for 10 s; A's writes 64 MiB into it.
        let reader = try start(rig.b, ["listen", "org.example.Slow", "stall", "10", rig.directory + "/slow"], "reader")
        defer { reader.kill() }
        XCTAssertTrue(eventually(timeout: 15) { reader.log.contains("registered") }, reader.log)
        let writer = try start(rig.a, ["open", rig.link.bOnA, "org.example.Slow", "stream", "write", "\(64 << 20)", rig.directory + "/written"], "writer")
        defer { writer.kill() }
        XCTAssertTrue(eventually(timeout: 10) { writer.log.contains("opened") }, writer.log)
        dispatchEvents(for: 1)

        let mark = rig.b.mark
        let messageID = try rig.a.client.call("Send", [Variant(rig.link.bOnA), Variant("over the stopped stream")])[0].string!
        let speech = try speakOneWay(from: rig.pwA, to: rig.pwB, seconds: 3.2, directory: rig.directory)
        XCTAssertNotNil(rig.b.client.waitForSignal("MessageReceived", after: mark, timeout: 2) { $0.string(1) == messageID },
                        "the text arrived while the stream was stopped")
        XCTAssertTrue(FileManager.default.fileExists(atPath: rig.directory + "/slow") == false, "the reader was still stopped")
        print("A→B over the link beside a stopped stream: \(speech.transfer)")
        XCTAssertGreaterThanOrEqual(VoiceAnalysis.medianCorrelation(diagnose("A→B", speech)), 0.5, "the speech did not come through")
        XCTAssertLessThanOrEqual(speech.transfer.latencyMs, 150)

        // Then the reader catches up and gets all of it.
        XCTAssertEqual(writer.wait(timeout: 60), 0, writer.log)
        XCTAssertTrue(eventually(timeout: 60) { FileManager.default.fileExists(atPath: rig.directory + "/slow") })
        XCTAssertEqual(try String(contentsOfFile: rig.directory + "/slow", encoding: .utf8),
                       try String(contentsOfFile: rig.directory + "/written", encoding: .utf8))
    }
}
