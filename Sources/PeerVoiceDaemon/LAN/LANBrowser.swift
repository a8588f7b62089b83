import GIO
import Glibc
import PeerVoiceCore

/// Browses `_peervoice._tcp` through Avahi and resolves what it finds: `Server2.ServiceBrowserPrepare`,
/// subscribe to the browser's signals, then `Start` (a browser made with `ServiceBrowserNew` may
/// report cached services before anyone listens, avahi issue #9); each service is resolved once
/// with `Server.ResolveService`, for an IPv4 and an IPv6 address at once. A service seen on several
/// interfaces or over IPv4 and IPv6 is one peer, reported once (IPv4 preferred: its route needs no
/// zone) and lost when its last sighting goes.
final class LANBrowser {
    /// A service instance as Avahi reports it (`ItemNew`/`ItemRemove`).
    private struct Sighting: Hashable {
        let interface: Int32
        let addressProtocol: Int32
        let name: String
        let domain: String
    }

    private struct Service {
        var sightings: Set<Sighting> = []
        var reported: (route: LANRoute, advertisement: LANAdvertisement)?
        /// An IPv6 route waiting `ipv6Grace` for an IPv4 one.
        var ipv6Candidate: EventSource?
    }

    /// How long an IPv6 answer waits for an IPv4 one before it is reported: a dual-stack host's
    /// A record usually answers from the cache within milliseconds, an IPv6-only host has none.
    static let ipv6Grace: Duration = .milliseconds(300)

    var onFound: (LANFoundService, LANAdvertisement) -> Void = { _, _ in }
    var onLost: (LANFoundService) -> Void = { _ in }

    private let avahi: AvahiClient
    private let owner: String
    private let excludedInterfaces: Set<String>
    /// Whether a resolved advertisement is our own (its fingerprint is ours).
    private let isOwn: (LANAdvertisement) -> Bool
    /// Our instance name as published, to skip resolving our own sighting.
    private let ownName: () -> String?
    private var browserPath: String?
    private var subscription: SignalSubscription?
    private var services: [String: Service] = [:]
    private var stopped = false

    init(avahi: AvahiClient, owner: String, excludedInterfaces: Set<String>,
         isOwn: @escaping (LANAdvertisement) -> Bool, ownName: @escaping () -> String?) {
        self.avahi = avahi
        self.owner = owner
        self.excludedInterfaces = excludedInterfaces
        self.isOwn = isOwn
        self.ownName = ownName
    }

    func start() {
        avahi.call(Avahi.serverPath, Avahi.server2Interface, "ServiceBrowserPrepare",
                   [Variant(Avahi.anyInterface), Variant(Avahi.anyProtocol), Variant(LANAdvertisement.serviceType),
                    Variant(""), Variant(UInt32(0))]) { [self] result in
            // Holds on to self until the reply: a browser stopped meanwhile must still be freed.
            switch result {
            case .success(let reply):
                guard let path = reply[0].string else { return }
                browserPath = path
                guard !stopped else { return free(path) }
                subscription = avahi.subscribe(owner: owner, path: path, interface: Avahi.serviceBrowserInterface) { [weak self] signal in
                    self?.browserSignal(signal)
                }
                // The subscription's AddMatch went out first on this connection: nothing is missed.
                avahi.call(path, Avahi.serviceBrowserInterface, "Start") { result in
                    if case .failure(let error) = result { Log.warning("cannot browse the LAN: \(error.message)") }
                }
            case .failure(let error):
                Log.warning("cannot browse the LAN: Avahi refused a service browser (\(error.message)); Avahi 0.8 or later is needed")
            }
        }
    }

    /// Stops browsing. With `reportingLost`, every peer reported is reported lost (Avahi went
    /// away, so nothing is known about them any more); otherwise they are forgotten quietly.
    func stop(reportingLost: Bool) {
        guard !stopped else { return }
        stopped = true
        subscription = nil
        if let browserPath { free(browserPath) }
        let reported = services.compactMap { name, service in service.reported.map { LANFoundService(instance: name, route: $0.route) } }
        services = [:]
        if reportingLost { reported.forEach(onLost) }
    }

    private func browserSignal(_ signal: BusSignal) {
        guard !stopped else { return }
        let arguments = signal.arguments
        switch signal.member {
        case "ItemNew", "ItemRemove":
            guard let interface = arguments[0].int32, let addressProtocol = arguments[1].int32,
                  let name = arguments[2].string, let domain = arguments[4].string, let flags = arguments[5].uint32 else { return }
            let sighting = Sighting(interface: interface, addressProtocol: addressProtocol, name: name, domain: domain)
            if signal.member == "ItemNew" {
                itemNew(sighting, flags: flags)
            } else {
                itemRemoved(sighting)
            }
        case "Failure":
            Log.warning("browsing the LAN failed: \(arguments[0].string ?? "")")
        default:
            break  // AllForNow, CacheExhausted: nothing to do.
        }
    }

    private func itemNew(_ sighting: Sighting, flags: UInt32) {
        if flags & Avahi.lookupResultOurOwn != 0 && sighting.name == ownName() { return }
        if let interface = Self.interfaceName(sighting.interface), excludedInterfaces.contains(interface) { return }
        services[sighting.name, default: Service()].sightings.insert(sighting)
        resolve(sighting)
    }

    private func itemRemoved(_ sighting: Sighting) {
        guard var service = services[sighting.name], service.sightings.remove(sighting) != nil else { return }
        if !service.sightings.isEmpty {
            services[sighting.name] = service
            return
        }
        services[sighting.name] = nil
        if let reported = service.reported {
            Log.debug("LAN: '\(sighting.name)' withdrawn (\(reported.route))")
            onLost(LANFoundService(instance: sighting.name, route: reported.route))
        }
    }

    private func resolve(_ sighting: Sighting) {
        for addressProtocol in [LANRoute.protocolIPv4, LANRoute.protocolIPv6] {
            avahi.call(Avahi.serverPath, Avahi.serverInterface, "ResolveService",
                       [Variant(sighting.interface), Variant(sighting.addressProtocol), Variant(sighting.name),
                        Variant(LANAdvertisement.serviceType), Variant(sighting.domain),
                        Variant(addressProtocol), Variant(UInt32(0))]) { [weak self] result in
                guard let self, !stopped, services[sighting.name]?.sightings.contains(sighting) == true else { return }
                switch result {
                case .success(let reply):
                    resolved(sighting, reply)
                case .failure(let error):
                    // An IPv4-only host has no IPv6 address and the other way round: only the log hears of it.
                    Log.debug("LAN: no address of protocol \(addressProtocol) for '\(sighting.name)': \(error.message)")
                }
            }
        }
    }

    /// `(iissssisqaayu)`: interface, protocol, name, type, domain, host, address protocol,
    /// address, port, TXT, flags. Everything in it came from the network.
    private func resolved(_ sighting: Sighting, _ reply: Variant) {
        guard reply.typeString == "(iissssisqaayu)", services[sighting.name]?.reported == nil else { return }
        let route: LANRoute
        let advertisement: LANAdvertisement
        do {
            route = try LANRoute(addressProtocol: reply[6].int32!, address: reply[7].string!, port: reply[8].uint16!,
                                 interfaceName: Self.interfaceName(sighting.interface))
            advertisement = try LANAdvertisement(txtEntries: reply[9].children.map { $0.bytes ?? [] })
        } catch {
            Log.debug("LAN: ignoring '\(sighting.name)': \(error)")
            return
        }
        // Without a name it is not meant to be found, unless it is a presence tag for known peers.
        guard advertisement.name != nil || advertisement.tag != nil, !isOwn(advertisement) else { return }
        guard route.isIPv6 else { return report(sighting.name, route, advertisement) }
        guard services[sighting.name]?.ipv6Candidate == nil else { return }
        services[sighting.name]?.ipv6Candidate = Timer.after(Self.ipv6Grace) { [weak self] in
            self?.report(sighting.name, route, advertisement)
        }
    }

    private func report(_ name: String, _ route: LANRoute, _ advertisement: LANAdvertisement) {
        guard !stopped, services[name] != nil, services[name]?.reported == nil else { return }
        services[name]?.reported = (route, advertisement)
        services[name]?.ipv6Candidate = nil
        Log.debug("LAN: found '\(name)' at \(route)")
        onFound(LANFoundService(instance: name, route: route), advertisement)
    }

    private func free(_ path: String) {
        avahi.call(path, Avahi.serviceBrowserInterface, "Free")
    }

    /// `eth0` for an interface index (Avahi's are the kernel's), nil for `anyInterface` or one gone.
    static func interfaceName(_ index: Int32) -> String? {
        guard index > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard if_indextoname(UInt32(index), &buffer) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// One advertisement a browser reports: its instance name (two of one host may share a route,
/// e.g. the named and the presence one while they change over) and the route it resolved to.
struct LANFoundService: Hashable {
    let instance: String
    let route: LANRoute
}
