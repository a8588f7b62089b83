import GIO

/// BlueZ's names on the system bus (BlueZ 5 D-Bus API, doc/*-api.txt).
enum Bluez {
    static let service = "org.bluez"
    static let managerPath = "/org/bluez"
    static let adapterInterface = "org.bluez.Adapter1"
    static let deviceInterface = "org.bluez.Device1"
    static let agentManagerInterface = "org.bluez.AgentManager1"
    static let profileManagerInterface = "org.bluez.ProfileManager1"
    static let errorPrefix = "org.bluez.Error."
    static let rejected = "org.bluez.Error.Rejected"
    static let canceled = "org.bluez.Error.Canceled"
}

/// An `org.bluez.Adapter1` as last reported.
struct BluezAdapter {
    let path: String
    let properties: ObjectManagerClient.Properties

    /// `hci0` for `/org/bluez/hci0`.
    var name: String { String(path.split(separator: "/").last ?? "") }
    var address: String { properties["Address"]?.string ?? "" }
    var isPowered: Bool { properties["Powered"]?.bool ?? false }
    var isDiscoverable: Bool { properties["Discoverable"]?.bool ?? false }
    var isPairable: Bool { properties["Pairable"]?.bool ?? false }
    var discoverableTimeoutSeconds: UInt32 { properties["DiscoverableTimeout"]?.uint32 ?? 180 }
}

/// An `org.bluez.Device1` (a remote computer BlueZ knows) as last reported.
struct BluezDevice {
    let path: String
    let properties: ObjectManagerClient.Properties

    /// Upper case, as peer ids are written.
    var address: String { (properties["Address"]?.string ?? Self.address(fromPath: path) ?? "").uppercased() }
    /// What a person calls it: BlueZ's `Alias` (the remote name unless renamed locally).
    var name: String { properties["Alias"]?.string ?? properties["Name"]?.string ?? address }
    var adapterPath: String { properties["Adapter"]?.string ?? "" }
    var isPaired: Bool { properties["Paired"]?.bool ?? false }
    var isTrusted: Bool { properties["Trusted"]?.bool ?? false }
    /// Service UUIDs, lower case: from the inquiry (EIR) while discovering, complete once paired
    /// (BlueZ browses SDP after pairing).
    var uuids: [String] { (properties["UUIDs"]?.strings ?? []).map { $0.lowercased() } }

    /// `AA:BB:CC:DD:EE:FF` from `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF`.
    static func address(fromPath path: String) -> String? {
        guard let last = path.split(separator: "/").last, last.hasPrefix("dev_") else { return nil }
        return last.dropFirst(4).replacingOccurrences(of: "_", with: ":")
    }
}

/// BlueZ on the system bus: the object cache (adapters, devices) and calls to `org.bluez`.
final class BluezClient {
    let connection: DBusConnection
    let objects: ObjectManagerClient

    init(connection: DBusConnection) {
        self.connection = connection
        objects = ObjectManagerClient(connection: connection, service: Bluez.service)
    }

    var adapters: [BluezAdapter] {
        objects.paths(implementing: Bluez.adapterInterface).map(adapter(at:)).compactMap { $0 }
    }

    func adapter(at path: String) -> BluezAdapter? {
        objects.properties(of: path, interface: Bluez.adapterInterface).map { BluezAdapter(path: path, properties: $0) }
    }

    func device(at path: String) -> BluezDevice? {
        objects.properties(of: path, interface: Bluez.deviceInterface).map { BluezDevice(path: path, properties: $0) }
    }

    func devices(of adapterPath: String) -> [BluezDevice] {
        objects.paths(implementing: Bluez.deviceInterface).compactMap(device(at:)).filter { $0.adapterPath == adapterPath }
    }

    /// Calls BlueZ without blocking the main loop; `completion` runs on the main loop.
    func call(_ path: String, _ interface: String, _ method: String, _ arguments: [Variant] = [],
              timeout: Duration = .seconds(25), completion: @escaping (Result<Variant, BusError>) -> Void = { _ in }) {
        connection.callAsync(destination: Bluez.service, path: path, interface: interface, method: method,
                             arguments: Variant(tuple: arguments), timeout: timeout, completion: completion)
    }

    func call(_ step: BluezCall, timeout: Duration, completion: @escaping (Result<Variant, BusError>) -> Void = { _ in }) {
        call(step.path, step.interface, step.method, step.arguments, timeout: timeout, completion: completion)
    }

    /// Makes `steps` one after another, each once the one before succeeded; stops at the first
    /// failure and reports it with its step.
    func callInOrder(_ steps: [BluezCall], timeout: Duration,
                     completion: @escaping (Result<Void, BluezCallFailure>) -> Void) {
        guard let step = steps.first else { return completion(.success(())) }
        call(step, timeout: timeout) { [weak self] result in
            switch result {
            case .success:
                guard let self else { return completion(.failure(BluezCallFailure(step: step, error: Self.gone))) }
                callInOrder(Array(steps.dropFirst()), timeout: timeout, completion: completion)
            case .failure(let error):
                completion(.failure(BluezCallFailure(step: step, error: error)))
            }
        }
    }

    /// `org.freedesktop.DBus.Peer.Ping`, which D-Bus libraries answer by themselves: a timeout
    /// means bluetoothd is not reading its bus connection (hung or stopped).
    func ping(timeout: Duration, completion: @escaping (Result<Variant, BusError>) -> Void) {
        call("/", "org.freedesktop.DBus.Peer", "Ping", timeout: timeout, completion: completion)
    }

    private static let gone = BusError(name: "org.gtk.GDBus.Error.Local", message: "the BlueZ client was released")
}

/// One call to BlueZ, written down before it is made (so a chain of them reads as a list).
struct BluezCall {
    let path: String
    let interface: String
    let method: String
    var arguments: [Variant] = []

    /// What a log line or error message calls it, e.g. `Set(Discoverable)`.
    var description: String {
        interface == Self.properties && method == "Set" ? "Set(\(arguments[1].string ?? ""))" : method
    }

    /// `org.freedesktop.DBus.Properties.Set` of `property` on `path`.
    static func set(_ path: String, _ interface: String, _ property: String, _ value: Variant) -> BluezCall {
        BluezCall(path: path, interface: properties, method: "Set",
                  arguments: [Variant(interface), Variant(property), Variant(boxing: value)])
    }

    private static let properties = "org.freedesktop.DBus.Properties"
}

/// Which call of a chain failed, and how.
struct BluezCallFailure: Error {
    let step: BluezCall
    let error: BusError
}
