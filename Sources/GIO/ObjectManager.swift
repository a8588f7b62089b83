import CGio

/// The objects a bus service exports through `org.freedesktop.DBus.ObjectManager` (BlueZ's
/// adapters and devices), with their properties, kept current: `GetManagedObjects` when the service
/// gets an owner, then `InterfacesAdded`, `InterfacesRemoved` and `PropertiesChanged` from that
/// owner. When the service loses its owner (it exited or restarted) the cache empties, and it fills
/// again from the next owner. Callbacks run on the main context, like every GDBus callback here.
public final class ObjectManagerClient {
    public typealias Properties = [String: Variant]

    public enum Change {
        /// The service has a new owner (unique name); its objects are being fetched.
        case appeared(owner: String)
        /// The objects of the current owner are known (`GetManagedObjects` answered).
        case ready
        /// `GetManagedObjects` failed: the cache stays empty until the service restarts.
        case failed(BusError)
        case interfacesAdded(path: String, interfaces: [String])
        /// `removed` holds the removed interfaces' last properties.
        case interfacesRemoved(path: String, removed: [String: Properties])
        case propertiesChanged(path: String, interface: String, changed: [String])
        /// The service lost its owner; the cache is empty.
        case vanished
    }

    public var onChange: (Change) -> Void = { _ in }

    /// The service's current unique name, nil while it has none.
    public private(set) var owner: String?
    /// The cache holds the current owner's objects.
    public private(set) var isReady = false

    private let connection: DBusConnection
    private let service: String
    private let managerPath: String
    private var objects: [String: [String: Properties]] = [:]
    private var watch: NameWatch?
    private var subscriptions: [SignalSubscription] = []
    /// Bumped on every owner change, so a late `GetManagedObjects` reply of an old owner is ignored.
    private var generation = 0

    public init(connection: DBusConnection, service: String, managerPath: String = "/") {
        self.connection = connection
        self.service = service
        self.managerPath = managerPath
    }

    /// Starts watching the service; the first `Change` reports its current state.
    public func start() {
        guard watch == nil else { return }
        watch = connection.watchName(service, appeared: { [weak self] owner in self?.appeared(owner) },
                                     vanished: { [weak self] in self?.vanished() })
    }

    public func stop() {
        watch = nil
        subscriptions = []
        objects = [:]
        owner = nil
        isReady = false
        generation += 1
    }

    /// Every object path that has `interface`, sorted.
    public func paths(implementing interface: String) -> [String] {
        objects.compactMap { $0.value[interface] == nil ? nil : $0.key }.sorted()
    }

    public func properties(of path: String, interface: String) -> Properties? {
        objects[path]?[interface]
    }

    public func interfaces(of path: String) -> [String]? {
        objects[path].map { Array($0.keys) }
    }

    // MARK: Owner changes

    private func appeared(_ newOwner: String) {
        if owner != nil { vanished() }
        generation += 1
        let current = generation
        owner = newOwner
        subscriptions = [
            connection.subscribe(sender: newOwner, interface: "org.freedesktop.DBus.ObjectManager",
                                 path: managerPath) { [weak self] signal in self?.managerSignal(signal) },
            connection.subscribe(sender: newOwner, interface: "org.freedesktop.DBus.Properties",
                                 member: "PropertiesChanged") { [weak self] signal in self?.propertiesChanged(signal) },
        ]
        onChange(.appeared(owner: newOwner))
        // Signals sent before the reply are already part of it: the cache ignores them until then.
        connection.callAsync(destination: newOwner, path: managerPath, interface: "org.freedesktop.DBus.ObjectManager",
                             method: "GetManagedObjects") { [weak self] result in
            guard let self, generation == current else { return }
            switch result {
            case .success(let reply):
                objects = Self.parseManagedObjects(reply[0])
                isReady = true
                onChange(.ready)
            case .failure(let error):
                onChange(.failed(error))
            }
        }
    }

    private func vanished() {
        generation += 1
        subscriptions = []
        objects = [:]
        owner = nil
        isReady = false
        onChange(.vanished)
    }

    // MARK: Signals

    private func managerSignal(_ signal: BusSignal) {
        guard isReady, signal.sender == owner else { return }
        let arguments = signal.arguments
        switch signal.member {
        case "InterfacesAdded" where arguments.typeString == "(oa{sa{sv}})":
            let path = arguments[0].string!
            let added = Self.parseInterfaces(arguments[1])
            objects[path, default: [:]].merge(added) { _, new in new }
            onChange(.interfacesAdded(path: path, interfaces: added.keys.sorted()))
        case "InterfacesRemoved" where arguments.typeString == "(oas)":
            let path = arguments[0].string!
            var removed: [String: Properties] = [:]
            for name in arguments[1].children.compactMap(\.string) {
                removed[name] = objects[path]?.removeValue(forKey: name) ?? [:]
            }
            if objects[path]?.isEmpty == true { objects[path] = nil }
            onChange(.interfacesRemoved(path: path, removed: removed))
        default:
            break
        }
    }

    private func propertiesChanged(_ signal: BusSignal) {
        guard isReady, signal.sender == owner, signal.arguments.typeString == "(sa{sv}as)" else { return }
        let interface = signal.arguments[0].string!
        guard objects[signal.path]?[interface] != nil else { return }
        var changed: [String] = []
        for entry in signal.arguments[1].children {
            guard let name = entry[0].string, let value = entry[1].unboxed else { continue }
            objects[signal.path]![interface]![name] = value
            changed.append(name)
        }
        for name in signal.arguments[2].children.compactMap(\.string) {
            objects[signal.path]![interface]![name] = nil
            changed.append(name)
        }
        onChange(.propertiesChanged(path: signal.path, interface: interface, changed: changed))
    }

    // MARK: Parsing

    /// `a{oa{sa{sv}}}` into path → interface → property → value.
    static func parseManagedObjects(_ value: Variant) -> [String: [String: Properties]] {
        var result: [String: [String: Properties]] = [:]
        for entry in value.children {
            guard let path = entry[0].string else { continue }
            result[path] = parseInterfaces(entry[1])
        }
        return result
    }

    /// `a{sa{sv}}` into interface → property → value.
    static func parseInterfaces(_ value: Variant) -> [String: Properties] {
        var result: [String: Properties] = [:]
        for entry in value.children {
            guard let name = entry[0].string else { continue }
            var properties: Properties = [:]
            for property in entry[1].children {
                if let key = property[0].string, let value = property[1].unboxed { properties[key] = value }
            }
            result[name] = properties
        }
        return result
    }
}

// The few GVariant types BlueZ uses beyond those in Variant.swift.
extension Variant {
    /// A `q` (uint16), e.g. BlueZ's RFCOMM `Channel` option.
    public convenience init(uint16 value: UInt16) { self.init(adopting: g_variant_new_uint16(value)) }

    public var uint16: UInt16? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("q")) != 0 else { return nil }
        return g_variant_get_uint16(pointer)
    }

    /// An `n` (int16), e.g. `Device1.RSSI`.
    public var int16: Int16? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("n")) != 0 else { return nil }
        return g_variant_get_int16(pointer)
    }

    /// An `h`: the index of a file descriptor in the message (see `MethodCall.fileDescriptor(handle:)`).
    public var handle: Int32? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("h")) != 0 else { return nil }
        return g_variant_get_handle(pointer)
    }

    /// An `as` (or `ao`) as strings.
    public var strings: [String]? {
        guard typeString == "as" || typeString == "ao" else { return nil }
        return children.compactMap(\.string)
    }
}

/// An object's interfaces with their properties, in the order given: `a{sa{sv}}` on the bus.
public typealias ManagedInterfaces = [(interface: String, properties: [(String, Variant)])]

/// The service side of `org.freedesktop.DBus.ObjectManager` (the interface `ObjectManagerClient`
/// reads): `GetManagedObjects` and the two signals. The caller owns the objects; this only speaks
/// the standard interface for them.
extension DBusConnection {
    public static let objectManagerInterface = "org.freedesktop.DBus.ObjectManager"

    /// The interface as the D-Bus specification defines it.
    private static let objectManagerXML = """
        <node>
          <interface name="org.freedesktop.DBus.ObjectManager">
            <method name="GetManagedObjects">
              <arg name="objects" type="a{oa{sa{sv}}}" direction="out"/>
            </method>
            <signal name="InterfacesAdded">
              <arg name="object" type="o"/>
              <arg name="interfaces" type="a{sa{sv}}"/>
            </signal>
            <signal name="InterfacesRemoved">
              <arg name="object" type="o"/>
              <arg name="interfaces" type="as"/>
            </signal>
          </interface>
        </node>
        """

    /// Exports `org.freedesktop.DBus.ObjectManager` at `path`, alongside any other interface
    /// registered there. `managedObjects` answers `GetManagedObjects` with the objects below `path`.
    public func registerObjectManager(
        path: String, managedObjects: @escaping () -> [(path: String, interfaces: ManagedInterfaces)]
    ) throws(BusError) -> ObjectRegistration {
        try registerObject(path: path, introspectionXML: Self.objectManagerXML, interface: Self.objectManagerInterface,
                           methods: { call in
                               // GDBus dispatches only the one method the XML declares.
                               let objects = managedObjects().map { object in
                                   Variant(dictionaryEntry: Variant(objectPath: object.path), Self.variant(object.interfaces))
                               }
                               call.reply(Variant(tuple: [Variant(array: objects, elementType: "{oa{sa{sv}}}")]))
                           },
                           properties: { _ in nil })
    }

    /// `InterfacesAdded(o object, a{sa{sv}} interfaces)` from the manager at `managerPath`.
    public func emitInterfacesAdded(managerPath: String, object: String, interfaces: ManagedInterfaces) throws(BusError) {
        try emitSignal(path: managerPath, interface: Self.objectManagerInterface, name: "InterfacesAdded",
                       arguments: Variant(tuple: [Variant(objectPath: object), Self.variant(interfaces)]))
    }

    /// `InterfacesRemoved(o object, as interfaces)` from the manager at `managerPath`.
    public func emitInterfacesRemoved(managerPath: String, object: String, interfaces: [String]) throws(BusError) {
        try emitSignal(path: managerPath, interface: Self.objectManagerInterface, name: "InterfacesRemoved",
                       arguments: Variant(tuple: [Variant(objectPath: object),
                                                  Variant(array: interfaces.map { Variant($0) }, elementType: "s")]))
    }

    private static func variant(_ interfaces: ManagedInterfaces) -> Variant {
        Variant(array: interfaces.map { Variant(dictionaryEntry: Variant($0.interface), Variant(dictionary: $0.properties)) },
                elementType: "{sa{sv}}")
    }
}
