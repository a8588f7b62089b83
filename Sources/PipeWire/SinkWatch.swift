import CPipeWire
import Glibc
import Synchronization

/// A sink a playback stream plays into, as PipeWire describes it.
public struct SinkDescription: Sendable, Equatable {
    public let nodeID: UInt32
    /// The node's own properties (`node.name`, `device.form-factor`, `device.icon-name`,
    /// `device.id`, `card.profile.device`, ...): all of them, not the few the registry announces.
    public let node: [String: String]
    /// Its device's properties (`device.form-factor`, `device.bus`, `device.icon-name`, ...);
    /// empty for a sink without a device (a virtual one) or before PipeWire has said.
    public let device: [String: String]
    /// The `info` of each active output route of that device that serves this node (`port.type`
    /// and the port's own properties): which jack or connector plays now.
    public let routes: [[String: String]]
}

/// The sinks a playback stream plays into, followed as PipeWire changes them: links made and
/// broken (the session manager moving the stream), the nodes' and devices' properties, and the
/// devices' active routes (headphones plugged into a laptop's jack change the route, not the
/// node). Everything arrives as PipeWire's events on its loop thread, so nothing waits for a
/// roundtrip; ``sinks`` and ``generation`` are read from any thread.
///
/// `@unchecked Sendable`: the bookkeeping is touched only on PipeWire's thread or under its lock;
/// what other threads read is in the `Mutex` and the atomic.
public final class SinkWatch: @unchecked Sendable {
    private let context: PipeWireContext
    private let playbackNode: String
    private let registry: OpaquePointer
    private let hook: UnsafeMutablePointer<spa_hook>
    private let events: UnsafeMutablePointer<pw_registry_events>
    /// Links out of the playback node: link id → the node it goes into.
    private var links: [UInt32: UInt32] = [:]
    /// Node and device globals: id → the version the registry offers.
    private var nodes: [UInt32: UInt32] = [:]
    private var devices: [UInt32: UInt32] = [:]
    private var boundNodes: [UInt32: BoundObject] = [:]
    private var boundDevices: [UInt32: BoundObject] = [:]
    private let published = Mutex<[SinkDescription]>([])
    private let changes = Atomic<UInt64>(0)

    /// Starts following what `playbackNode` (a stream's node id) plays into.
    public init(context: PipeWireContext, playbackNode: UInt32) throws(PipeWireError) {
        self.context = context
        self.playbackNode = String(playbackNode)
        hook = .allocate(capacity: 1)
        hook.initialize(to: spa_hook())
        events = .allocate(capacity: 1)
        events.initialize(to: Self.makeRegistryEvents())
        // One hold of the lock from the registry's creation to its listener: the registry
        // announces every global as soon as it exists, and those would be lost in between.
        pw_thread_loop_lock(context.loop)
        defer { pw_thread_loop_unlock(context.loop) }
        guard let registry = pw_core_get_registry(context.core, UInt32(PW_VERSION_REGISTRY), 0) else {
            let error = errno
            Self.release(hook, events)
            throw .connectionFailed("cannot bind PipeWire's registry: \(PipeWireContext.errnoText(error))")
        }
        self.registry = registry
        _ = peervoice_registry_add_listener(registry, hook, events, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit {
        context.locked {
            for object in Array(boundNodes.values) + Array(boundDevices.values) { object.unbind() }
            spa_hook_remove(hook)
            pw_proxy_destroy(registry)  // a pw_registry is a pw_proxy
        }
        Self.release(hook, events)
    }

    /// What the stream plays into now (empty while it is linked to nothing, or before PipeWire
    /// has said), in node id order.
    public var sinks: [SinkDescription] { published.withLock { $0 } }

    /// Moves each time ``sinks`` changes.
    public var generation: UInt64 { changes.load(ordering: .acquiring) }

    // MARK: PipeWire's thread (or under its lock)

    fileprivate func global(id: UInt32, type: String, version: UInt32, properties: [String: String]) {
        switch type {
        case "PipeWire:Interface:Link":
            guard properties["link.output.node"] == playbackNode, let input = properties["link.input.node"].flatMap(UInt32.init) else { return }
            links[id] = input
        case "PipeWire:Interface:Node": nodes[id] = version
        case "PipeWire:Interface:Device": devices[id] = version
        default: return
        }
        update()
    }

    fileprivate func globalRemoved(id: UInt32) {
        links[id] = nil
        nodes[id] = nil
        devices[id] = nil
        update()
    }

    /// Binds what is played into and the devices behind it, lets go of the rest, publishes.
    fileprivate func update() {
        let wantedNodes = Set(links.values).filter { nodes[$0] != nil }
        sync(&boundNodes, wanted: wantedNodes) { id in
            BoundObject(.node, id: id, version: nodes[id]!, registry: registry, watch: self)
        }
        let wantedDevices = Set(wantedNodes.compactMap { boundNodes[$0]?.properties["device.id"].flatMap(UInt32.init) })
            .filter { devices[$0] != nil }
        sync(&boundDevices, wanted: wantedDevices) { id in
            BoundObject(.device, id: id, version: devices[id]!, registry: registry, watch: self)
        }
        let sinks = wantedNodes.sorted().compactMap { id -> SinkDescription? in
            guard let node = boundNodes[id] else { return nil }
            let device = node.properties["device.id"].flatMap(UInt32.init).flatMap { boundDevices[$0] }
            // A device's routes name the profile device each serves; a node says which it is.
            let profileDevice = node.properties["card.profile.device"].flatMap(Int32.init)
            let routes = (device?.routes ?? []).filter {
                $0.direction == SPA_DIRECTION_OUTPUT.rawValue && (profileDevice == nil || $0.device < 0 || $0.device == profileDevice)
            }
            return SinkDescription(nodeID: id, node: node.properties, device: device?.properties ?? [:], routes: routes.map(\.info))
        }
        let changed = published.withLock { current in
            guard current != sinks else { return false }
            current = sinks
            return true
        }
        if changed { changes.add(1, ordering: .releasing) }
    }

    private func sync(_ bound: inout [UInt32: BoundObject], wanted: Set<UInt32>, bind: (UInt32) -> BoundObject?) {
        for (id, object) in bound where !wanted.contains(id) {
            object.unbind()
            bound[id] = nil
        }
        for id in wanted where bound[id] == nil {
            bound[id] = bind(id)
        }
    }

    private static func makeRegistryEvents() -> pw_registry_events {
        var table = pw_registry_events()
        table.version = UInt32(PW_VERSION_REGISTRY_EVENTS)
        table.global = { data, id, _, type, version, props in
            guard let data, let type else { return }
            Unmanaged<SinkWatch>.fromOpaque(data).takeUnretainedValue()
                .global(id: id, type: String(cString: type), version: version, properties: GraphObject.properties(props))
        }
        table.global_remove = { data, id in
            guard let data else { return }
            Unmanaged<SinkWatch>.fromOpaque(data).takeUnretainedValue().globalRemoved(id: id)
        }
        return table
    }

    private static func release(_ hook: UnsafeMutablePointer<spa_hook>, _ events: UnsafeMutablePointer<pw_registry_events>) {
        hook.deinitialize(count: 1)
        hook.deallocate()
        events.deinitialize(count: 1)
        events.deallocate()
    }
}

/// A node or device bound from the registry to hear its own events: its properties (info) and,
/// for a device, its active routes (Route params, enumerated again whenever its params change).
/// Touched only on PipeWire's thread or under its lock.
private final class BoundObject {
    enum Kind { case node, device }

    struct Route {
        let direction: UInt32
        let device: Int32
        let info: [String: String]
    }

    let proxy: OpaquePointer
    private let hook: UnsafeMutablePointer<spa_hook>
    /// A `pw_node_events` or a `pw_device_events` (plain C structs), as `kind` says.
    private let events: UnsafeMutableRawPointer
    private unowned let watch: SinkWatch
    var properties: [String: String] = [:]
    var routes: [Route] = []
    /// The sequence number of the latest route enumeration, and of the routes held.
    private var routeRequest: Int32 = 0
    private var routesOf: Int32 = 0

    init?(_ kind: Kind, id: UInt32, version: UInt32, registry: OpaquePointer, watch: SinkWatch) {
        let (type, newest) = kind == .node ? ("PipeWire:Interface:Node", PW_VERSION_NODE) : ("PipeWire:Interface:Device", PW_VERSION_DEVICE)
        guard let proxy = pw_registry_bind(registry, id, type, min(version, UInt32(newest)), 0) else { return nil }
        self.proxy = OpaquePointer(proxy)
        self.watch = watch
        hook = .allocate(capacity: 1)
        hook.initialize(to: spa_hook())
        switch kind {
        case .node:
            let table = UnsafeMutablePointer<pw_node_events>.allocate(capacity: 1)
            table.initialize(to: Self.nodeEvents())
            events = UnsafeMutableRawPointer(table)
            _ = peervoice_node_add_listener(self.proxy, hook, table, Unmanaged.passUnretained(self).toOpaque())
        case .device:
            let table = UnsafeMutablePointer<pw_device_events>.allocate(capacity: 1)
            table.initialize(to: Self.deviceEvents())
            events = UnsafeMutableRawPointer(table)
            _ = peervoice_device_add_listener(self.proxy, hook, table, Unmanaged.passUnretained(self).toOpaque())
        }
    }

    private static func nodeEvents() -> pw_node_events {
        var table = pw_node_events()
        table.version = UInt32(PW_VERSION_NODE_EVENTS)
        table.info = { data, info in
            guard let data, let info, info.pointee.change_mask & UInt64(PW_NODE_CHANGE_MASK_PROPS) != 0 else { return }
            let object = Unmanaged<BoundObject>.fromOpaque(data).takeUnretainedValue()
            object.properties = GraphObject.properties(UnsafePointer(info.pointee.props))
            object.watch.update()
        }
        return table
    }

    private static func deviceEvents() -> pw_device_events {
        var table = pw_device_events()
        table.version = UInt32(PW_VERSION_DEVICE_EVENTS)
        table.info = { data, info in
            guard let data, let info else { return }
            let object = Unmanaged<BoundObject>.fromOpaque(data).takeUnretainedValue()
            if info.pointee.change_mask & UInt64(PW_DEVICE_CHANGE_MASK_PROPS) != 0 {
                object.properties = GraphObject.properties(UnsafePointer(info.pointee.props))
                object.watch.update()
            }
            if info.pointee.change_mask & UInt64(PW_DEVICE_CHANGE_MASK_PARAMS) != 0 {
                object.routeRequest += 1
                _ = peervoice_device_enum_routes(object.proxy, object.routeRequest)
            }
        }
        table.param = { data, seq, id, _, _, param in
            guard let data, let param, id == SPA_PARAM_Route.rawValue else { return }
            let object = Unmanaged<BoundObject>.fromOpaque(data).takeUnretainedValue()
            guard seq == object.routeRequest else { return }
            // The first route of an enumeration replaces those of the one before.
            if object.routesOf != seq {
                object.routes = []
                object.routesOf = seq
            }
            if let route = BoundObject.route(param) { object.routes.append(route) }
            object.watch.update()
        }
        return table
    }

    private static func route(_ param: UnsafePointer<spa_pod>) -> Route? {
        var direction: UInt32 = 0, device: Int32 = -1
        var info: UnsafeMutablePointer<spa_pod>?
        guard peervoice_route_parse(param, &direction, &device, &info) >= 0 else { return nil }
        var strings = [UnsafePointer<CChar>?](repeating: nil, count: 64)
        let count = Int(peervoice_pod_struct_strings(info, &strings, Int32(strings.count)))
        var pairs = [String: String]()
        for index in stride(from: 0, to: count - 1, by: 2) {
            guard let key = strings[index], let value = strings[index + 1] else { continue }
            pairs[String(cString: key)] = String(cString: value)
        }
        return Route(direction: direction, device: device, info: pairs)
    }

    /// Removes the listener and the proxy; the object is done.
    func unbind() {
        spa_hook_remove(hook)
        pw_proxy_destroy(proxy)
        hook.deinitialize(count: 1)
        hook.deallocate()
        events.deallocate()  // C structs of pointers: nothing to deinitialize
    }
}
