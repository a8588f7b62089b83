/// The protocol versions one side speaks, as its preamble announces them (docs/PROTOCOL.md §3):
/// every version from ``lowest`` to ``highest``.
public struct VersionRange: Hashable, Sendable, CustomStringConvertible {
    public let lowest: UInt16
    public let highest: UInt16

    /// Nil when `highest` is below `lowest`.
    public init?(lowest: UInt16, highest: UInt16) {
        guard lowest <= highest else { return nil }
        self.lowest = lowest
        self.highest = highest
    }

    /// One version only (every side up to version 6).
    public init(only version: UInt16) {
        lowest = version
        highest = version
    }

    /// What this implementation speaks: ``Wire/minimumProtocolVersion`` to ``Wire/protocolVersion``.
    public static let supported = VersionRange(lowest: Wire.minimumProtocolVersion, highest: Wire.protocolVersion)!

    public func contains(_ version: UInt16) -> Bool { lowest <= version && version <= highest }

    /// The version a link between a side speaking these versions and one speaking `other` runs
    /// at: the highest both speak; nil when they share none.
    public func agreed(with other: VersionRange) -> UInt16? {
        let version = min(highest, other.highest)
        return version >= max(lowest, other.lowest) ? version : nil
    }

    /// `6`, or `6-7`.
    public var description: String { lowest == highest ? "\(lowest)" : "\(lowest)-\(highest)" }

    /// Why a link with a side that runs `peer` (named `who`) cannot be, in words a person can act
    /// on: which side to update. Only for two ranges that share no version.
    public func refusal(of peer: VersionRange, who: String) -> String {
        if peer.highest < lowest {
            return "\(who) runs PeerVoice protocol \(peer); this one needs \(lowest) or later: update it"
        }
        return "\(who) runs PeerVoice protocol \(peer) only; this one speaks \(self): update this one"
    }
}

/// What an open link runs at: the version both sides agreed on from their preambles, and the
/// features (``Capabilities``) both have at that version. A frame of a feature the link does not
/// carry is never sent on it, and one received is a protocol error.
public struct LinkProtocol: Equatable, Sendable {
    /// The highest version both sides speak.
    public let version: UInt16
    /// What the peer's preamble announced (and its authenticated HELLO confirmed).
    public let peerVersions: VersionRange
    /// The features both sides announced (a version-6 peer, which announces only text and voice,
    /// has presence and hosted calls by its version) that exist at ``version``.
    public let capabilities: Capabilities

    /// The link's terms once the key exchange is done: the version agreed from both preambles and
    /// the features both HELLOs name. The highest version the peer's HELLO names must be the one
    /// its preamble announced: the preamble travels in the clear, the HELLO authenticated, so a
    /// man in the middle who lowered the preamble's to force an older version is found out here
    /// (docs/SECURITY.md §10).
    ///
    /// - Throws: ``WireError/versionsAltered(preamble:hello:)`` when they differ;
    ///   ``WireError/unsupportedVersions(_:)`` when the versions share none (the preamble check
    ///   has refused that already on a stream).
    public static func negotiate(local: VersionRange, localCapabilities: Capabilities, peerPreamble: VersionRange,
                                 peerCapabilities: Capabilities) throws(WireError) -> LinkProtocol {
        let announced = peerCapabilities.highestVersion ?? Wire.lastVersionWithoutRange
        guard announced == peerPreamble.highest else {
            throw .versionsAltered(preamble: peerPreamble.highest, hello: announced)
        }
        guard let version = local.agreed(with: peerPreamble) else { throw .unsupportedVersions(peerPreamble) }
        var peer = peerCapabilities.features
        if peerPreamble.highest == Wire.lastVersionWithoutRange { peer.formUnion(.impliedByVersion6) }
        return LinkProtocol(version: version, peerVersions: peerPreamble,
                            capabilities: localCapabilities.features.intersection(peer).intersection(.available(atVersion: version)))
    }

    public init(version: UInt16, peerVersions: VersionRange, capabilities: Capabilities) {
        self.version = version
        self.peerVersions = peerVersions
        self.capabilities = capabilities
    }

    /// Why `feature` is off on this link, in words for a person (`who` names the peer); nil when
    /// the link carries it. `feature` is one capability bit.
    public func whyOff(_ feature: Capabilities, who: String) -> String? {
        guard !capabilities.contains(feature) else { return nil }
        let name = feature.featureNames.first ?? "capability 0x\(String(feature.rawValue, radix: 16))"
        if let needed = feature.introducedIn, needed > peerVersions.highest {
            return "\(who) runs PeerVoice protocol \(peerVersions.highest); \(name) came with protocol \(needed): update it"
        }
        return "\(who) runs a PeerVoice without \(name) (its service does not offer it)"
    }
}

extension Capabilities {
    /// Bits 0-15 of HELLO's capabilities field are features; bits 16-31 carry the highest
    /// protocol version the sender speaks (0 from a version-6 sender).
    public static let featureBits: UInt32 = 0xFFFF

    /// The feature bits alone.
    public var features: Capabilities { Capabilities(rawValue: rawValue & Self.featureBits) }

    /// The highest protocol version the sender announces in bits 16-31; nil for 0 (version 6).
    public var highestVersion: UInt16? {
        let version = UInt16(truncatingIfNeeded: rawValue >> 16)
        return version == 0 ? nil : version
    }

    /// Bits 16-31 set to `version`: what a HELLO announces besides its features.
    public static func highestVersion(_ version: UInt16) -> Capabilities { Capabilities(rawValue: UInt32(version) << 16) }

    /// What a version-6 peer has without announcing it: its version brought them.
    public static let impliedByVersion6: Capabilities = [.presence, .hostedCalls]

    /// Each feature, the version it came with, and its name in messages for a person, kept only
    /// here (``TransferWire`` reads its own from it). (Versions 8 and 11 brought no feature bit:
    /// the dial proof in handshake message 1, ``DialProof/protocolVersion``; link records sealed
    /// with AES-256-GCM, ``LinkCipher/aes256GCMVersion``.)
    static let catalogue: [(feature: Capabilities, version: UInt16, name: String)] = [
        (.text, 1, "text messages"),
        (.voice, 1, "voice"),
        (.presence, 5, "presence"),
        (.hostedCalls, 6, "hosted calls"),
        (.channels, 7, "app channels"),
        (.transfers, 9, "file transfers"),
        (.sha256FileHashes, 10, "SHA-256 file hashes"),
    ]

    /// The features that exist at `version` (every unknown bit counts as newer than it).
    public static func available(atVersion version: UInt16) -> Capabilities {
        Capabilities(catalogue.filter { $0.version <= version }.map(\.feature))
    }

    /// The version the (single) feature came with; nil for a bit this implementation does not know.
    public var introducedIn: UInt16? { Self.catalogue.first { $0.feature == self }?.version }

    /// The names of the known features in the set, for messages and logs.
    public var featureNames: [String] { Self.catalogue.filter { contains($0.feature) }.map(\.name) }
}

extension FrameType {
    /// The feature a link must carry for frames of this type; none for the link's own frames
    /// (HELLO, KEEPALIVE, GOODBYE, PAIRING).
    public var capability: Capabilities {
        switch self {
        case .hello, .keepalive, .goodbye, .pairing: []
        case .text, .ack: .text
        case .voiceStart, .voiceStop, .voiceReport, .voice: .voice
        case .presence: .presence
        case .participants, .relayReport, .relayedVoice: .hostedCalls
        }
    }
}
