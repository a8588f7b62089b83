/// A problem on screen, in words a person can act on, with the one action that helps (if any).
public struct Notice: Equatable, Sendable {
    public enum Remedy: Equatable, Sendable {
        case none
        /// Start the service again (`StartServiceByName`).
        case retryActivation
        /// The peer's key is not the one paired with: forget it (`RemovePeer`) and pair again.
        case forgetAndPairAgain(peer: String)
    }

    public let text: String
    public let remedy: Remedy

    public init(text: String, remedy: Remedy = .none) {
        self.text = text
        self.remedy = remedy
    }

    static func serviceUnavailable(_ reason: String) -> Notice { Notice(text: reason, remedy: .retryActivation) }

    /// The notice for `action` (e.g. "Connect") failing with D-Bus error `errorName`. PeerVoice's
    /// own errors carry messages written for people; the bus's errors mean the service is gone.
    static func from(action: String, peer: String?, errorName: String, message: String,
                     localize: (String) -> String) -> Notice {
        let peerVoice = "org.example.PeerVoice.Error."
        let bus = "org.freedesktop.DBus.Error."
        switch errorName {
        case peerVoice + "Rejected" where message.contains("identity key other than the pinned one"):
            return Notice(text: localize("This peer's key is not the one you paired with: it may be another device. If it was reinstalled, forget it and pair again to compare codes."),
                          remedy: peer.map { .forgetAndPairAgain(peer: $0) } ?? .none)
        case let name where name.hasPrefix(peerVoice):
            return Notice(text: localize(action) + ": " + message)
        case bus + "ServiceUnknown", bus + "NameHasNoOwner", bus + "NoReply", bus + "Disconnected":
            return serviceUnavailable(localize("The PeerVoice service is not running."))
        default:
            return Notice(text: localize(action) + ": " + message)
        }
    }
}
