import PeerVoiceCore
import XCTest

/// Passes messages between the two sides until both are complete (failing the test if neither
/// can send); returns the messages in order.
@discardableResult
public func exchange(_ initiator: Handshake, _ responder: Handshake) throws -> [[UInt8]] {
    var messages: [[UInt8]] = []
    while !(initiator.isComplete && responder.isComplete) {
        if case .send = initiator.nextAction {
            messages.append(try initiator.writeMessage())
            try responder.readMessage(messages.last!)
        } else if case .send = responder.nextAction {
            messages.append(try responder.writeMessage())
            try initiator.readMessage(messages.last!)
        } else {
            XCTFail("nobody can send: \(initiator.nextAction) / \(responder.nextAction)")
            break
        }
    }
    return messages
}
