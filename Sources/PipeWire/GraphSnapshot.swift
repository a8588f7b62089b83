import CPipeWire
import Glibc

/// One object of the PipeWire graph as the registry announces it.
public struct GraphObject: Sendable, Equatable {
    public let id: UInt32
    /// The interface, e.g. `PipeWire:Interface:Node` or `PipeWire:Interface:Link`.
    public let type: String
    /// Its global properties (`node.name`, `media.class`, `link.input.node`, ...).
    public let properties: [String: String]
}

extension GraphObject {
    /// A PipeWire property dictionary as Swift's.
    static func properties(_ dict: UnsafePointer<spa_dict>?) -> [String: String] {
        var properties = [String: String]()
        if let dict = dict?.pointee, let items = dict.items {
            for index in 0..<Int(dict.n_items) {
                guard let key = items[index].key, let value = items[index].value else { continue }
                properties[String(cString: key)] = String(cString: value)
            }
        }
        return properties
    }
}

extension PipeWireContext {
    /// Every object in the graph now: binds the registry, waits one roundtrip for its globals,
    /// drops it. Blocks the calling thread for that roundtrip (not for the real-time thread, nor
    /// the main loop).
    public func graphSnapshot(timeout: Double = 2) throws(PipeWireError) -> [GraphObject] {
        let collector = GraphCollector()
        return try locked { () throws(PipeWireError) -> [GraphObject] in
            guard let registry = pw_core_get_registry(core, UInt32(PW_VERSION_REGISTRY), 0) else {
                throw .connectionFailed("cannot bind PipeWire's registry: \(Self.errnoText(errno))")
            }
            peervoice_registry_add_listener(registry, collector.hook, collector.events, Unmanaged.passUnretained(collector).toOpaque())
            defer {
                spa_hook_remove(collector.hook)
                pw_proxy_destroy(registry)  // a pw_registry is a pw_proxy
            }
            try roundtrip(timeout: timeout)
            return collector.objects
        }
    }

    /// The nodes whose output is linked into node `id` (what a capture stream records from).
    public func nodesLinked(into id: UInt32, timeout: Double = 2) throws(PipeWireError) -> [GraphObject] {
        let objects = try graphSnapshot(timeout: timeout)
        let sources = Set(objects.filter { $0.type == "PipeWire:Interface:Link" && $0.properties["link.input.node"] == String(id) }
            .compactMap { $0.properties["link.output.node"] })
        return objects.filter { $0.type == "PipeWire:Interface:Node" && sources.contains(String($0.id)) }
    }
}

/// Collects the registry's globals; touched only on PipeWire's thread or under its lock.
private final class GraphCollector {
    let hook: UnsafeMutablePointer<spa_hook>
    let events: UnsafeMutablePointer<pw_registry_events>
    var objects: [GraphObject] = []

    init() {
        hook = .allocate(capacity: 1)
        hook.initialize(to: spa_hook())
        events = .allocate(capacity: 1)
        var table = pw_registry_events()
        table.version = UInt32(PW_VERSION_REGISTRY_EVENTS)
        table.global = { data, id, _, type, _, props in
            guard let data, let type else { return }
            Unmanaged<GraphCollector>.fromOpaque(data).takeUnretainedValue()
                .objects.append(GraphObject(id: id, type: String(cString: type), properties: GraphObject.properties(props)))
        }
        events.initialize(to: table)
    }

    deinit {
        hook.deinitialize(count: 1)
        hook.deallocate()
        events.deinitialize(count: 1)
        events.deallocate()
    }
}
