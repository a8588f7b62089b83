import GIO

/// Avahi 0.8's names and numbers on the system bus (avahi-daemon's D-Bus API, `avahi-common/defs.h`).
enum Avahi {
    static let service = "org.freedesktop.Avahi"
    static let serverPath = "/"
    static let serverInterface = "org.freedesktop.Avahi.Server"
    static let server2Interface = "org.freedesktop.Avahi.Server2"
    static let entryGroupInterface = "org.freedesktop.Avahi.EntryGroup"
    static let serviceBrowserInterface = "org.freedesktop.Avahi.ServiceBrowser"

    /// `AVAHI_IF_UNSPEC`, `AVAHI_PROTO_UNSPEC`: every interface, both IPv4 and IPv6.
    static let anyInterface: Int32 = -1
    static let anyProtocol: Int32 = -1

    /// `AvahiEntryGroupState`.
    enum EntryGroupState: Int32 {
        case uncommitted = 0, registering = 1, established = 2, collision = 3, failure = 4
    }

    /// `AVAHI_LOOKUP_RESULT_OUR_OWN`: published by this host's avahi-daemon (any user's).
    static let lookupResultOurOwn: UInt32 = 16

    /// How long one call to avahi-daemon may take; resolving waits for the network.
    static let callTimeout: Duration = .seconds(10)
}

/// avahi-daemon on the system bus: asynchronous calls only, so the main loop never waits for it.
final class AvahiClient {
    let connection: DBusConnection

    init(connection: DBusConnection) {
        self.connection = connection
    }

    func call(_ path: String, _ interface: String, _ method: String, _ arguments: [Variant] = [],
              completion: @escaping (Result<Variant, BusError>) -> Void = { _ in }) {
        connection.callAsync(destination: Avahi.service, path: path, interface: interface, method: method,
                             arguments: Variant(tuple: arguments), timeout: Avahi.callTimeout, completion: completion)
    }

    /// Signals of one Avahi object (an entry group, a browser) from the daemon that owns it.
    func subscribe(owner: String, path: String, interface: String,
                   _ handler: @escaping (BusSignal) -> Void) -> SignalSubscription {
        connection.subscribe(sender: owner, interface: interface, path: path, handler)
    }
}
