/// The keys that seal an app channel's datagrams in UDP (docs/SECURITY.md §5.1), one per
/// direction, derived from the link's export key:
///
///     key = BLAKE2b-256(key: link exporter key, "PeerVoice channel datagrams" || direction)
///
/// so they are fresh for every link and independent of its own keys and of voice's. Records use
/// ``RecordPurpose/channelDatagram`` and ``RecordOpener/Mode/datagram(windowSize:)``.
public struct ChannelDatagramKeys: Sendable {
    static let label = Array("PeerVoice channel datagrams".utf8)

    public let sendKey: [UInt8]
    public let receiveKey: [UInt8]
    private let sendDirection: RecordDirection
    private let receiveDirection: RecordDirection
    private let crypto: any CryptoPrimitives

    public init(link: HandshakeResult) {
        crypto = link.crypto
        sendDirection = link.sendDirection
        receiveDirection = link.receiveDirection
        sendKey = crypto.hash(Self.label + [sendDirection.rawValue], key: link.exporterKey)
        receiveKey = crypto.hash(Self.label + [receiveDirection.rawValue], key: link.exporterKey)
    }

    public func makeSealer() -> RecordSealer {
        RecordSealer(key: sendKey, direction: sendDirection, purpose: .channelDatagram, crypto: crypto)
    }

    public func makeOpener() -> RecordOpener {
        RecordOpener(key: receiveKey, direction: receiveDirection, purpose: .channelDatagram,
                     mode: .datagram(windowSize: RecordOpener.defaultWindowSize), crypto: crypto)
    }
}
