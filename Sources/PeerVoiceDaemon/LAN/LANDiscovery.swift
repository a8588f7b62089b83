import GIO
import Glibc
import PeerVoiceCore

/// What LAN discovery tells the service, always on the main loop.
protocol LANDiscoveryDelegate: AnyObject {
    /// Avahi appeared or went away (`isAvailable` changed).
    func lanAvailabilityChanged()
    func lanFound(_ route: LANRoute, advertisement: LANAdvertisement)
    func lanLost(_ route: LANRoute)
}

/// Finding and being found on the LAN through avahi-daemon (`org.freedesktop.Avahi` on the system
/// bus): while discovery is on, publishes `_peervoice._tcp` (`LANAdvertiser`) and browses for
/// others (`LANBrowser`). Follows avahi-daemon as it comes and goes: when it restarts, the service
/// is published and browsed again. Without a system bus or Avahi it stays idle and says why.
final class LANDiscovery {
    weak var delegate: LANDiscoveryDelegate?

    /// avahi-daemon is running and reachable.
    var isAvailable: Bool { owner != nil }
    /// Discovery is on (it resumes by itself when Avahi comes back).
    var isDiscovering: Bool { wanted != nil }

    private let excludedInterfaces: Set<String>
    private let ownFingerprint: String?
    private var avahi: AvahiClient?
    private var systemBusError: String?
    /// The unique name of the avahi-daemon we talk to.
    private var owner: String?
    private var watch: NameWatch?
    /// What discovery publishes while it is on (nil: discovery is off).
    private var wanted: LANServiceInfo?
    private var advertiser: LANAdvertiser?
    private var browser: LANBrowser?
    private var stopped = false

    init(excludedInterfaces: Set<String>, ownFingerprint: String?) {
        self.excludedInterfaces = excludedInterfaces
        self.ownFingerprint = ownFingerprint
    }

    /// Why LAN discovery cannot run now, in words a person can act on; nil when it can.
    var unavailableReason: String? {
        if let systemBusError { return "the system bus cannot be reached (\(systemBusError))" }
        return owner == nil ? "Avahi is not running (start avahi-daemon)" : nil
    }

    /// Connects to the system bus and starts following org.freedesktop.Avahi. Never fails.
    func start() {
        DBusConnection.system { [weak self] result in
            guard let self, !stopped else { return }
            switch result {
            case .success(let connection):
                avahi = AvahiClient(connection: connection)
                watch = connection.watchName(Avahi.service, appeared: { [weak self] owner in
                    self?.avahiAppeared(owner)
                }, vanished: { [weak self] in
                    self?.avahiVanished()
                })
            case .failure(let error):
                systemBusError = error.message
                Log.info("LAN discovery is off: cannot use the system bus (\(error.message))")
            }
        }
    }

    /// At exit: takes the advertisement off the LAN (Avahi would drop it with our connection anyway).
    func stop() {
        stopped = true
        stopDiscovery()
        watch = nil
    }

    /// Publishes `service` and browses, now if Avahi is there, else as soon as it appears.
    func startDiscovery(_ service: LANServiceInfo) {
        guard wanted != service || advertiser == nil else { return }
        wanted = service
        guard owner != nil else { return }
        advertiser?.withdraw()
        advertise(service)
        if browser == nil { browse() }
    }

    /// While discovering: publishes `advertisement` as the TXT record from now on.
    func updateAdvertisement(_ advertisement: LANAdvertisement) {
        guard wanted != nil else { return }
        wanted?.advertisement = advertisement
        advertiser?.updateTXT(advertisement)
    }

    func stopDiscovery() {
        wanted = nil
        advertiser?.withdraw()
        advertiser = nil
        browser?.stop(reportingLost: false)
        browser = nil
    }

    private func avahiAppeared(_ newOwner: String) {
        guard owner != newOwner else { return }
        let restarted = owner != nil
        if restarted { forgetAvahi() }
        owner = newOwner
        Log.info(restarted || wanted != nil ? "Avahi is back: LAN discovery resumes" : "Avahi is running: LAN discovery is available")
        delegate?.lanAvailabilityChanged()
        if let wanted {
            advertise(wanted)
            browse()
        }
    }

    private func avahiVanished() {
        guard owner != nil else { return }
        forgetAvahi()
        Log.info("Avahi went away: LAN discovery waits for it to come back")
        delegate?.lanAvailabilityChanged()
    }

    /// The old avahi-daemon's entry group and browser died with it.
    private func forgetAvahi() {
        owner = nil
        advertiser = nil
        browser?.stop(reportingLost: true)
        browser = nil
    }

    private func advertise(_ service: LANServiceInfo) {
        guard let avahi, let owner else { return }
        let interfaces = publishingInterfaces()
        guard !interfaces.isEmpty else { return Log.warning("not advertising on the LAN: every interface is excluded (--lan-exclude)") }
        let advertiser = LANAdvertiser(avahi: avahi, owner: owner, service: service, interfaces: interfaces)
        self.advertiser = advertiser
        advertiser.start()
    }

    private func browse() {
        guard let avahi, let owner else { return }
        let fingerprint = ownFingerprint
        let browser = LANBrowser(avahi: avahi, owner: owner, excludedInterfaces: excludedInterfaces,
                                 isOwn: { $0.fingerprint != nil && $0.fingerprint == fingerprint },
                                 ownName: { [weak self] in self?.advertiser?.publishedName })
        browser.onFound = { [weak self] route, advertisement in self?.delegate?.lanFound(route, advertisement: advertisement) }
        browser.onLost = { [weak self] route in self?.delegate?.lanLost(route) }
        self.browser = browser
        browser.start()
    }

    /// Every interface (one `AddService` on `anyInterface`) unless some are excluded; then each
    /// interface up now but those (and loopback), one `AddService` each.
    private func publishingInterfaces() -> [Int32] {
        guard !excludedInterfaces.isEmpty else { return [Avahi.anyInterface] }
        guard let list = if_nameindex() else { return [Avahi.anyInterface] }
        defer { if_freenameindex(list) }
        var indexes: [Int32] = []
        var entry = list
        while entry.pointee.if_index != 0 {
            let name = String(cString: entry.pointee.if_name)
            if name != "lo" && !excludedInterfaces.contains(name) { indexes.append(Int32(entry.pointee.if_index)) }
            entry += 1
        }
        return indexes
    }
}
