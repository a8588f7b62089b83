/// Why a request to the service failed, in words a person can act on.
///
/// Each case is one of the API's documented errors; the bus layer sends it as
/// `org.example.PeerVoice.Error.<name>` with `message` as the D-Bus error message.
public enum ServiceError: Error, Equatable, Sendable {
    case invalidArgument(String)
    case unknownPeer(String)
    case notConnected(String)
    case notAvailable(String)
    case tooLarge(String)
    case rejected(String)
    case failed(String)
    /// Someone else holds it (another client's channel registration).
    case inUse(String)

    /// The last component of the D-Bus error name, e.g. `NotConnected`.
    public var name: String {
        switch self {
        case .invalidArgument: "InvalidArgument"
        case .unknownPeer: "UnknownPeer"
        case .notConnected: "NotConnected"
        case .notAvailable: "NotAvailable"
        case .tooLarge: "TooLarge"
        case .rejected: "Rejected"
        case .failed: "Failed"
        case .inUse: "InUse"
        }
    }

    public var message: String {
        switch self {
        case .invalidArgument(let m), .unknownPeer(let m), .notConnected(let m), .notAvailable(let m),
             .tooLarge(let m), .rejected(let m), .failed(let m), .inUse(let m): m
        }
    }
}

extension ServiceError: CustomStringConvertible {
    public var description: String { "\(name): \(message)" }
}
