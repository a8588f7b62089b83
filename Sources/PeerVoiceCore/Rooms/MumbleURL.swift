/// A room's address: `mumble://[user@]host[:port][/channel/sub]` (Mumble's own URL form; a
/// `?query` such as `?version=1.2.0` is accepted and ignored).
public struct MumbleURL: Sendable, Equatable, CustomStringConvertible {
    public static let defaultPort: UInt16 = 64738

    public var user: String?
    public var host: String
    public var port: UInt16
    /// Channel names from the root channel down; empty: the server's default channel.
    public var channelPath: [String]

    public enum ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        case notMumble
        case missingHost
        case invalidPort(String)
        case invalidEscape

        public var description: String {
            switch self {
            case .notMumble: "the address must start with mumble://"
            case .missingHost: "the address names no server"
            case .invalidPort(let port): "\"\(port)\" is not a port number"
            case .invalidEscape: "the address has a broken %-escape"
            }
        }
    }

    public init(parsing text: String) throws(ParseError) {
        guard text.lowercased().hasPrefix("mumble://") else { throw .notMumble }
        var rest = Substring(text.dropFirst("mumble://".count))
        if let query = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<query] }
        let authority = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(authority.count)
        var hostPort = authority
        if let at = authority.lastIndex(of: "@") {
            let user = try Self.unescape(authority[..<at])
            self.user = user.isEmpty ? nil : user
            hostPort = authority[authority.index(after: at)...]
        }
        var portText: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { throw .missingHost }
            host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw .invalidPort(String(after)) }
        } else if let colon = hostPort.lastIndex(of: ":") {
            host = String(hostPort[..<colon])
            portText = hostPort[hostPort.index(after: colon)...]
        } else {
            host = String(hostPort)
        }
        guard !host.isEmpty else { throw .missingHost }
        if let portText {
            guard let port = UInt16(portText), port != 0 else { throw .invalidPort(String(portText)) }
            self.port = port
        } else {
            port = Self.defaultPort
        }
        channelPath = try path.split(separator: "/").map { (part) throws(ParseError) in try Self.unescape(part) }
    }

    public var description: String {
        let userPart = user.map { Self.escape($0) + "@" } ?? ""
        let hostPart = host.contains(":") ? "[\(host)]" : host
        let pathPart = channelPath.map { "/" + Self.escape($0) }.joined()
        return "mumble://\(userPart)\(hostPart):\(port)\(pathPart)"
    }

    /// A user name Mumble's default `username=` rule accepts (`[-=\w\[\]\{\}\(\)\@\|\.]+`),
    /// made from a display name: every other character becomes `_`; "PeerVoice" if nothing is left.
    public static func username(from name: String) -> String {
        let allowed = Set("-=[]{}()@|._")
        let mapped = String(name.prefix(64).map { $0.isLetter || $0.isNumber || allowed.contains($0) ? $0 : "_" })
        return mapped.allSatisfy({ $0 == "_" }) ? "PeerVoice" : mapped
    }

    private static func unescape(_ text: Substring) throws(ParseError) -> String {
        var bytes: [UInt8] = []
        var utf8 = text.utf8[...]
        while let byte = utf8.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            let hex = utf8.prefix(2)
            guard hex.count == 2, let value = UInt8(String(decoding: hex, as: UTF8.self), radix: 16) else { throw .invalidEscape }
            bytes.append(value)
            utf8 = utf8.dropFirst(2)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func escape(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            let scalar = Unicode.Scalar(byte)
            if byte < 0x80 && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "-._~".unicodeScalars.contains(scalar)) {
                out.unicodeScalars.append(scalar)
            } else {
                out += "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true)
            }
        }
        return out
    }
}
