import PeerVoiceAppModel
import XCTest

/// Transfers in a peer's conversation: placed among the messages by when the app first saw
/// them, their rate from the bytes reported over time, and a change only when one moved.
final class TransferModelTests: XCTestCase {
    private let peer = "pv:bravo"
    private let path = "/org/example/PeerVoice/transfers/1"

    private func transfer(_ state: TransferState, transferred: UInt64, size: UInt64 = 10_000_000) -> TransferRow {
        TransferRow(path: path, peer: peer, incoming: true, state: state, files: [("Photos/a.jpg", size / 2), ("Photos/b.jpg", size / 2)],
                    size: size, transferred: transferred, error: "")
    }

    func testATransferSitsAmongTheMessagesByWhenItWasFirstSeen() {
        let model = AppModel()
        model.messageReceived(from: peer, id: "m1", text: "before", timeMs: 1_000)
        model.objectsListed([path: .transfer(transfer(.waiting, transferred: 0))], nowMs: 2_000)
        model.messageReceived(from: peer, id: "m2", text: "after", timeMs: 3_000)
        // A later report keeps its place: the object carries no time, the first sight does.
        model.objectsListed([path: .transfer(transfer(.active, transferred: 5))], nowMs: 4_000)
        let items = model.conversation(with: peer).map { item -> String in
            switch item {
            case .message(let message): message.text
            case .transfer(let row): "transfer \(row.items) \(row.state) at \(row.timeMs)"
            }
        }
        XCTAssertEqual(items, ["before", "transfer [\"Photos\"] active at 2000", "after"])
        XCTAssertEqual(model.conversation(with: "pv:someone-else"), [])
    }

    func testTheRateComesFromTheBytesReportedOverTheLastSeconds() {
        let model = AppModel()
        var changes: [AppModel.Change] = []
        model.onChange = { changes.append($0) }
        model.objectsListed([path: .transfer(transfer(.active, transferred: 0))], nowMs: 10_000)
        XCTAssertNil(model.rate(of: path), "one report tells no rate")
        model.objectsListed([path: .transfer(transfer(.active, transferred: 1_000_000))], nowMs: 11_000)
        XCTAssertEqual(model.rate(of: path), TransferRate(bytesPerSecond: 1_000_000, secondsLeft: 9))
        changes = []
        model.objectsListed([path: .transfer(transfer(.active, transferred: 1_000_000))], nowMs: 11_500)
        XCTAssertEqual(changes.filter { $0 == .chat(peer: peer) }, [], "nothing moved, nothing to render")
        // Reports older than five seconds drop out of the window.
        model.objectsListed([path: .transfer(transfer(.active, transferred: 5_000_000))], nowMs: 12_000)
        model.objectsListed([path: .transfer(transfer(.active, transferred: 9_000_000))], nowMs: 13_000)
        model.objectsListed([path: .transfer(transfer(.active, transferred: 9_500_000))], nowMs: 17_000)
        XCTAssertEqual(model.rate(of: path)?.bytesPerSecond ?? 0, 4_500_000 / 5, accuracy: 1, "from 12 s to 17 s")
        XCTAssertTrue(changes.contains(.chat(peer: peer)))
        model.objectsListed([path: .transfer(transfer(.complete, transferred: 10_000_000))], nowMs: 18_000)
        XCTAssertNil(model.rate(of: path), "a finished transfer has no rate")
        XCTAssertEqual(model.transfers[path]?.fraction, 1)
    }

    /// The items are the names before the first `/` byte, as the service splits them: a `/`
    /// followed by a combining mark is one Character, and a split by Characters kept it whole.
    func testItemsAreSplitAtTheSlashByteNotByCharacter() {
        let row = TransferRow(path: path, peer: peer, incoming: true, state: .waiting,
                              files: [("Photos/\u{301}a.jpg", 1), ("Photos/b.jpg", 1), ("notes.txt", 1)],
                              size: 3, transferred: 0, error: "")
        XCTAssertEqual(row.items, ["Photos", "notes.txt"])
    }
}
