/// A candidate route to a peer from Avahi's resolver (`Server.ResolveService`): an address and
/// port someone on the LAN advertised. Only a candidate: the key exchange proves who answers.
public struct LANRoute: Equatable, Hashable, Sendable, CustomStringConvertible {
    /// The address literal; an IPv6 link-local one carries its zone (`fe80::1%eth0`), without
    /// which it cannot be dialled.
    public let host: String
    public let port: UInt16

    /// Avahi's protocol numbers (`AVAHI_PROTO_INET`, `AVAHI_PROTO_INET6`).
    public static let protocolIPv4: Int32 = 0
    public static let protocolIPv6: Int32 = 1

    /// Checks the resolver's answer: `addressProtocol` and `address` (Avahi's text form, never
    /// with a zone) must agree, `port` is not 0, and a link-local IPv6 address gets
    /// `interfaceName` (the interface it was seen on) as its zone.
    public init(addressProtocol: Int32, address: String, port: UInt16, interfaceName: String?) throws(LANRouteError) {
        guard port != 0 else { throw .zeroPort }
        let literal = Substring(address.lowercased())
        switch addressProtocol {
        case Self.protocolIPv4:
            guard PeerAddress.isIPv4Literal(literal) else { throw .malformedAddress }
            host = String(literal)
        case Self.protocolIPv6:
            // Avahi's text form never carries a zone; the interface it was seen on gives it.
            guard !literal.contains("%"), PeerAddress.isIPv6Literal(literal) else { throw .malformedAddress }
            if Self.isLinkLocal(literal) {
                guard let interfaceName, PeerAddress.isZone(interfaceName) else { throw .missingZone }
                host = "\(literal)%\(interfaceName)"
            } else {
                host = String(literal)
            }
        default:
            throw .unknownProtocol(addressProtocol)
        }
        self.port = port
    }

    /// As `Connect` takes it: `ip:192.168.1.20:47800`, `ip:[fe80::1%eth0]:47800`.
    public var description: String { host.contains(":") ? "ip:[\(host)]:\(port)" : "ip:\(host):\(port)" }

    public var isIPv6: Bool { host.contains(":") }

    /// fe80::/10.
    static func isLinkLocal(_ literal: Substring) -> Bool {
        guard let first = literal.split(separator: ":", omittingEmptySubsequences: false).first,
              first.count == 4, let group = UInt16(first, radix: 16) else { return false }
        return group & 0xFFC0 == 0xFE80
    }

}

/// Why a resolver answer is not a route.
public enum LANRouteError: Error, Equatable, Sendable, CustomStringConvertible {
    case zeroPort
    case malformedAddress
    case missingZone
    case unknownProtocol(Int32)

    public var description: String {
        switch self {
        case .zeroPort: "port 0"
        case .malformedAddress: "an address that is not a numeric literal of its protocol"
        case .missingZone: "a link-local IPv6 address without a usable interface name"
        case .unknownProtocol(let value): "address protocol \(value)"
        }
    }
}
