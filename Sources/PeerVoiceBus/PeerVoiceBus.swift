/// PeerVoice's names on the session bus, as `dbus/org.example.PeerVoice.xml` declares them: the one
/// place the service, peervoicectl and the tests take them from.
public enum PeerVoiceBus {
    /// The well-known name peervoiced owns.
    public static let name = "org.example.PeerVoice"
    /// The service's object.
    public static let path = "/org/example/PeerVoice"
    /// The interface of that object.
    public static let interface = "org.example.PeerVoice"
    /// The interface of each peer object (`path/peers/…`, `path/found/…`).
    public static let peerInterface = "org.example.PeerVoice.Peer"
    /// The interface of each Mumble room object (`path/rooms/<n>`, `dbus/org.example.PeerVoice.Room.xml`).
    public static let roomInterface = "org.example.PeerVoice.Room"
    /// The interface an app implements on the object it passes to `RegisterChannel`
    /// (`dbus/org.example.PeerVoice.ChannelHandler.xml`).
    public static let channelHandlerInterface = "org.example.PeerVoice.ChannelHandler"
    /// The interface of each transfer object (`path/transfers/<n>`,
    /// `dbus/org.example.PeerVoice.Transfer.xml`).
    public static let transferInterface = "org.example.PeerVoice.Transfer"
    /// The folder of the transfer objects.
    public static let transfersPath = path + "/transfers"
    /// Every error the service answers with: this, then `InvalidArgument`, `UnknownPeer`, … .
    public static let errorPrefix = "org.example.PeerVoice.Error."

    /// How long a person has to answer a pairing prompt (`PairingRequested`, answered with
    /// `ConfirmPairing`) before it counts as refused; `Connect` may wait this long for it.
    public static let pairingConfirmationWindow: Duration = .seconds(60)
    /// How long a client should let `Connect` take: the confirmation window, then the connection.
    public static let connectCallTimeout: Duration = pairingConfirmationWindow + .seconds(30)
}

