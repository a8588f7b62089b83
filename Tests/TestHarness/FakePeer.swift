import Foundation
import GIO
import PeerVoiceCore

/// A peer built from the core (`SecureLink`) and paired with a daemon: it sends what no
/// PeerVoice would, and shows what reaches the wire.
extension SecureLink {
    /// Dials `peer`'s daemon as "mallory" announcing `capabilities`, and pairs (B's person and
    /// mallory accept); returns the link and mallory's id.
    public static func pairedFake(with peer: TestPeer, capabilities: Capabilities) throws -> (link: SecureLink, id: String) {
        let identity = newIdentity()
        let id = peerID(of: identity)
        // Like every side since protocol 7, its HELLO names the highest version its preamble announces.
        let hello = try Hello(instanceID: .random(), capabilities: capabilities.union(.highestVersion(Wire.protocolVersion)),
                              listenPort: 0, voicePort: 0, name: "mallory")
        let mark = peer.mark
        let link = try connect(port: peer.port, identity: identity, hello: hello)
        try link.runHandshake()
        guard peer.pairingRequest(for: id, after: mark) != nil else { throw HarnessError("\(peer.name) did not ask to pair with mallory") }
        try peer.client.call("ConfirmPairing", [Variant(id), Variant(true)])
        try link.sendPairing(.asking)
        try link.sendPairing(.accept)
        guard try link.awaitPairing(timeout: 5).decision == .accept else { throw HarnessError("\(peer.name) refused mallory") }
        guard peer.waitForState("connected", of: id, after: mark) != nil else { throw HarnessError("mallory never connected to \(peer.name)") }
        return (link, id)
    }

    /// The next channel frame from the daemon (other frames skipped), within `timeout`.
    public func nextChannelFrame(timeout: Double = 5) throws -> ChannelFrame? {
        let deadline = Date().addingTimeInterval(timeout)
        while let record = try receiveRecord(timeout: max(0, deadline.timeIntervalSinceNow)) {
            let body = try openBody(record)
            if ChannelFrame.isChannelFrame(body) { return try ChannelFrame(body: body) }
        }
        return nil
    }
}
