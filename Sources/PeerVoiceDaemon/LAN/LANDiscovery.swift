import GIO
import Glibc
import PeerVoiceCore

/// What LAN discovery tells the service, always on the main loop.
protocol LANDiscoveryDelegate: AnyObject {
    /// Avahi appeared or went away (`isAvailable` changed).
    func lanAvailabilityChanged()
    func lanFound(_ service: LANFoundService, advertisement: LANAdvertisement)
    func lanLost(_ service: LANFoundService)
}

/// Finding and being found on the LAN through avahi-daemon (`org.freedesktop.Avahi` on the system
/// bus): publishes the `_peervoice._tcp` service it is given (`LANAdvertiser`) and browses for
/// others (`LANBrowser`) while asked to (`want`). Follows avahi-daemon as it comes and goes: when it
/// restarts, the service is published and browsed again. Without a system bus or Avahi it stays
/// idle and says why.
final class LANDiscovery {
    weak var delegate: LANDiscoveryDelegate?

    /// avahi-daemon is running and reachable.
    var isAvailable: Bool { owner != nil }

    private let excludedInterfaces: Set<String>
    private let ownFingerprint: String?
    private var avahi: AvahiClient?
    private var systemBusError: String?
    /// The unique name of the avahi-daemon we talk to.
    private var owner: String?
    private var watch: NameWatch?
    /// What to publish (nil: nothing), and whether to browse; both resume when Avahi comes back.
    private var wantedService: LANServiceInfo?
    private var wantsBrowsing = false
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
        want(advertising: nil, browsing: false)
        watch = nil
    }

    /// Publishes `service` (nil: withdraws what is published) and browses or stops browsing, now
    /// if Avahi is there, else as soon as it appears. A browser stopped here reports nothing lost.
    /// A service that differs only in its TXT record (a rename) is updated in place.
    func want(advertising service: LANServiceInfo?, browsing: Bool) {
        if let service, let advertiser, let wanted = wantedService, service != wanted,
           service.displayName == wanted.displayName, service.port == wanted.port {
            wantedService = service
            advertiser.updateTXT(service.advertisement)
        } else if service != wantedService || (service != nil && advertiser == nil) {
            wantedService = service
            advertiser?.withdraw()
            advertiser = nil
            if let service { advertise(service) }
        }
        wantsBrowsing = browsing
        if !browsing {
            browser?.stop(reportingLost: false)
            browser = nil
        } else if browser == nil {
            browse()
        }
    }

    private func avahiAppeared(_ newOwner: String) {
        guard owner != newOwner else { return }
        let restarted = owner != nil
        if restarted { forgetAvahi() }
        owner = newOwner
        Log.info(restarted || wantsBrowsing ? "Avahi is back: LAN discovery resumes" : "Avahi is running: LAN discovery is available")
        delegate?.lanAvailabilityChanged()
        if let wantedService { advertise(wantedService) }
        if wantsBrowsing { browse() }
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
        browser.onFound = { [weak self] service, advertisement in self?.delegate?.lanFound(service, advertisement: advertisement) }
        browser.onLost = { [weak self] service in self?.delegate?.lanLost(service) }
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
