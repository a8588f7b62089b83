import GIO
import PeerVoiceBus
import PeerVoiceCore

/// The transfer objects below `/org/example/PeerVoice/transfers/` (the obexd `Transfer1` way),
/// published through the ObjectManager of `/org/example/PeerVoice` next to the peer objects:
/// `InterfacesAdded` when one appears, `PropertiesChanged` with only what changed. They stay
/// until the service exits. Their methods go to `Transfers.perform`. Main loop only.
final class TransferObjects {
    static let interface = PeerVoiceBus.transferInterface
    static let root = PeerVoiceBus.transfersPath

    /// The interface as written in dbus/org.example.PeerVoice.Transfer.xml, embedded at build time.
    static let introspectionXML = String(decoding: PackageResources.org_example_PeerVoice_Transfer_xml, as: UTF8.self)

    static func path(_ number: Int) -> String { root + "/\(number)" }

    private struct Exported {
        var snapshot: TransferObjectSnapshot
        let registration: ObjectRegistration
    }

    /// `Accept`, `Decline` or `Cancel` (the method's name) on the object of transfer `number`.
    typealias Perform = (_ method: String, _ number: Int, _ completion: @escaping (Result<Void, ServiceError>) -> Void) -> Void

    private let connection: DBusConnection
    private var objects: [String: Exported] = [:]
    private let perform: Perform

    init(connection: DBusConnection, perform: @escaping Perform) {
        self.connection = connection
        self.perform = perform
    }

    /// Exports the object (then `InterfacesAdded`), or signals what changed on it.
    func show(_ snapshot: TransferObjectSnapshot) {
        let path = snapshot.path
        if let old = objects[path]?.snapshot {
            objects[path]!.snapshot = snapshot
            let changed = snapshot.properties(changedFrom: old)
            guard !changed.isEmpty else { return }
            do {
                try connection.emitPropertiesChanged(path: path, interface: Self.interface,
                                                     changed: changed.map { ($0.rawValue, snapshot.value(of: $0)) })
            } catch {
                Log.warning("could not emit PropertiesChanged on \(path): \(error)")
            }
            return
        }
        do {
            let registration = try connection.registerObject(
                path: path, introspectionXML: Self.introspectionXML, interface: Self.interface,
                methods: { [weak self] call in
                    let number = Int(path.dropFirst(Self.root.count + 1)) ?? 0
                    self?.perform(call.method, number) { result in
                        switch result {
                        case .success: call.reply()
                        case .failure(let error): call.fail(name: PeerVoiceBus.errorPrefix + error.name, message: error.message)
                        }
                    }
                },
                properties: { [weak self] name in
                    guard let property = TransferProperty(rawValue: name) else { return nil }
                    return self?.objects[path]?.snapshot.value(of: property)
                })
            objects[path] = Exported(snapshot: snapshot, registration: registration)
            try connection.emitInterfacesAdded(managerPath: PeerObjects.managerPath, object: path, interfaces: Self.interfaces(of: snapshot))
        } catch {
            Log.warning("could not export \(path): \(error)")
        }
    }

    /// Every object with its properties, for `GetManagedObjects`.
    var managedObjects: [(path: String, interfaces: ManagedInterfaces)] {
        objects.sorted { $0.key < $1.key }.map { ($0.key, Self.interfaces(of: $0.value.snapshot)) }
    }

    /// Unexports everything, without signals: the service is leaving the bus.
    func unregister() { objects = [:] }

    private static func interfaces(of snapshot: TransferObjectSnapshot) -> ManagedInterfaces {
        [(interface, TransferProperty.allCases.map { ($0.rawValue, snapshot.value(of: $0)) })]
    }
}
