/// How a peer is reached.
public enum Transport: String, Sendable {
    case bluetooth
    case ip
}

/// Where a device can be reached: `AA:BB:CC:DD:EE:FF` (Bluetooth, upper case) or `ip:HOST:PORT`
/// (`ip:127.0.0.1:47800`, `ip:[::1]:47800`). An address is a route to a peer, never who it is
/// (that is its key, `PeerID`). Parsing normalises, so two spellings of one address compare equal.
public struct PeerAddress: Hashable, Sendable, Codable, CustomStringConvertible {
    public let transport: Transport
    /// The normalised text form.
    public let description: String

    /// For IP addresses: the address literal (without brackets) and port.
    public let host: String
    public let port: UInt16

    public init(parsing text: String) throws(ServiceError) {
        if text.hasPrefix("ip:") {
            let (host, port) = try Self.parseIP(String(text.dropFirst(3)), original: text)
            self.init(ipHost: host, port: port)
        } else if let address = PeerAddress(bluetoothAddress: text) {
            self = address
        } else {
            throw .invalidArgument("'\(text.prefix(80))' is not a peer id or address: use an id like pv:\(String(repeating: "a", count: PeerID.base32Characters)), a Bluetooth address like AA:BB:CC:DD:EE:FF or ip:HOST:PORT like ip:192.168.1.20:47800")
        }
    }

    // Stored as its text form (peers.json routes).
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do {
            self = try PeerAddress(parsing: text)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    /// An IP address from an address literal (IPv6 without brackets) and a port.
    public init(ipHost host: String, port: UInt16) {
        // The address is case-insensitive, a link-local zone (an interface name) is not.
        let zone = host.firstIndex(of: "%")
        let host = host[..<(zone ?? host.endIndex)].lowercased() + (zone.map { String(host[$0...]) } ?? "")
        self.init(transport: .ip, description: host.contains(":") ? "ip:[\(host)]:\(port)" : "ip:\(host):\(port)",
                  host: host, port: port)
    }

    /// A Bluetooth address from BlueZ's `Device1.Address`.
    public init?(bluetoothAddress: String) {
        guard let address = Self.normalisedBluetoothAddress(bluetoothAddress) else { return nil }
        self.init(transport: .bluetooth, description: address, host: "", port: 0)
    }

    private init(transport: Transport, description: String, host: String, port: UInt16) {
        self.transport = transport
        self.description = description
        self.host = host
        self.port = port
    }

    private static func normalisedBluetoothAddress(_ text: String) -> String? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) }) else { return nil }
        return text.uppercased()
    }

    private static func parseIP(_ rest: String, original: String) throws(ServiceError) -> (String, UInt16) {
        let hostPart: Substring, portPart: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]"), rest[rest.index(after: close)...].hasPrefix(":") else {
                throw .invalidArgument("'\(original.prefix(80))' is not an address: write IPv6 peers as ip:[ADDRESS]:PORT")
            }
            hostPart = rest[rest.index(after: rest.startIndex)..<close]
            portPart = rest[rest.index(close, offsetBy: 2)...]
            guard isIPv6Literal(hostPart) else {
                throw .invalidArgument("'\(hostPart.prefix(60))' in \(original.prefix(80)) is not an IPv6 address")
            }
        } else {
            guard let colon = rest.lastIndex(of: ":") else {
                throw .invalidArgument("'\(original.prefix(80))' has no port: use ip:HOST:PORT")
            }
            hostPart = rest[..<colon]
            portPart = rest[rest.index(after: colon)...]
            guard isIPv4Literal(hostPart) else {
                throw .invalidArgument("'\(hostPart.prefix(60))' in \(original.prefix(80)) is not an IPv4 address: use a numeric address such as 192.168.1.20 (or ip:[::1]:PORT for IPv6)")
            }
        }
        guard portPart.count <= 5, portPart.allSatisfy(\.isASCIIDigit), let port = UInt16(portPart), port != 0 else {
            throw .invalidArgument("'\(portPart.prefix(20))' in \(original.prefix(80)) is not a port: use 1-65535")
        }
        return (String(hostPart), port)
    }

    static func isIPv4Literal(_ text: Substring) -> Bool {
        let octets = text.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets.allSatisfy { octet in
            octet.count >= 1 && octet.count <= 3 && octet.allSatisfy(\.isASCIIDigit) && Int(octet)! <= 255
        }
    }

    static func isIPv6Literal(_ text: Substring) -> Bool {
        // Shape check only; the transport's inet_pton has the last word. A link-local address
        // may carry its zone, the interface it is reached on: fe80::1%eth0.
        let parts = text.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)
        let address = parts[0]
        guard address.count >= 2, address.count <= 45, address.contains(":"),
              address.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { return false }
        return parts.count == 1 || isZone(parts[1])
    }

    /// A link-local zone: an interface name as Linux allows it (1–15 bytes of printable ASCII
    /// without `/`), less what would make an address ambiguous (`%`, `:`, `[`, `]`).
    public static func isZone(_ name: some StringProtocol) -> Bool {
        let bytes = Array(name.utf8)
        return (1...15).contains(bytes.count) && bytes.allSatisfy { byte in
            byte > 0x20 && byte < 0x7F && !"/%:[]".utf8.contains(byte)
        }
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isWholeNumber }
}
