import GIO
import PeerVoiceCore

/// What we publish: `_peervoice._tcp` on `port` with `advertisement` as its TXT record, under an
/// instance name made from `displayName`.
struct LANServiceInfo: Equatable {
    var displayName: String
    var port: UInt16
    var advertisement: LANAdvertisement
}

/// One published `_peervoice._tcp` service: an Avahi entry group (`EntryGroupNew`, `AddService`,
/// `Commit`) that lives until `withdraw()` or until avahi-daemon goes away. On a name collision
/// (another host has the instance name) it takes the next name, `NAME #2`, then further on; the TXT
/// record keeps the display name (`n=`), whatever the instance name became.
final class LANAdvertiser {
    /// After this many collisions in a row something else is wrong (a reflector echoing us back).
    static let maxCollisions = 32

    /// The instance name Avahi last confirmed (state established), nil until then.
    private(set) var publishedName: String?
    private(set) var service: LANServiceInfo

    private let avahi: AvahiClient
    private let owner: String
    private let interfaces: [Int32]
    private var groupPath: String?
    private var stateSubscription: SignalSubscription?
    /// Which name `LANServiceName.candidate` gives: 1 the display name, then `NAME #attempt`.
    private var attempt = 1
    private var collisions = 0
    private var withdrawn = false

    /// `interfaces`: Avahi interface indexes to publish on (`[Avahi.anyInterface]`: all).
    init(avahi: AvahiClient, owner: String, service: LANServiceInfo, interfaces: [Int32]) {
        self.avahi = avahi
        self.owner = owner
        self.service = service
        self.interfaces = interfaces
    }

    private var instanceName: String { LANServiceName.candidate(for: service.displayName, attempt: attempt) }

    func start() {
        // Holds on to self until the reply: a group withdrawn meanwhile must still be freed.
        avahi.call(Avahi.serverPath, Avahi.serverInterface, "EntryGroupNew") { [self] result in
            switch result {
            case .success(let reply):
                guard let path = reply[0].string else { return }
                groupPath = path
                // Freed as soon as it exists when withdraw() came first.
                guard !withdrawn else { return free(path) }
                stateSubscription = avahi.subscribe(owner: owner, path: path, interface: Avahi.entryGroupInterface) { [weak self] signal in
                    guard signal.member == "StateChanged", let state = signal.arguments[0].int32 else { return }
                    self?.stateChanged(Avahi.EntryGroupState(rawValue: state), error: signal.arguments[1].string ?? "")
                }
                addAndCommit()
            case .failure(let error):
                Log.warning("cannot advertise on the LAN: Avahi refused an entry group (\(error.message))")
            }
        }
    }

    /// A new TXT record for the published service (`UpdateServiceTxt`, asynchronous); the instance
    /// name stays until the next advertisement, so browsers keep following the same service.
    func updateTXT(_ advertisement: LANAdvertisement) {
        service.advertisement = advertisement
        // Without a group yet, addAndCommit publishes the new record.
        guard let groupPath, !withdrawn else { return }
        for interface in interfaces {
            avahi.call(groupPath, Avahi.entryGroupInterface, "UpdateServiceTxt",
                       [Variant(interface), Variant(Avahi.anyProtocol), Variant(UInt32(0)), Variant(instanceName),
                        Variant(LANAdvertisement.serviceType), Variant(""), txt]) { result in
                if case .failure(let error) = result { Log.info("LAN advertisement's TXT not updated: \(error.message)") }
            }
        }
    }

    /// Takes the advertisement off the LAN (Avahi sends goodbye packets).
    func withdraw() {
        guard !withdrawn else { return }
        withdrawn = true
        stateSubscription = nil
        if let groupPath { free(groupPath) }
    }

    private var txt: Variant {
        Variant(array: service.advertisement.txtEntries.map { Variant(bytes: $0) }, elementType: "ay")
    }

    private func addAndCommit() {
        guard let groupPath, !withdrawn else { return }
        let name = instanceName
        for interface in interfaces {
            avahi.call(groupPath, Avahi.entryGroupInterface, "AddService",
                       [Variant(interface), Variant(Avahi.anyProtocol), Variant(UInt32(0)), Variant(name),
                        Variant(LANAdvertisement.serviceType), Variant(""), Variant(""), Variant(uint16: service.port), txt]) { [weak self] result in
                guard case .failure(let error) = result, let self, !withdrawn, name == instanceName else { return }
                // A service of this host's (another user's PeerVoice) already has the name.
                if error.name == "org.freedesktop.Avahi.CollisionError" { return nextName(after: name) }
                Log.warning("cannot advertise on the LAN: AddService failed (\(error.message))")
            }
        }
        avahi.call(groupPath, Avahi.entryGroupInterface, "Commit") { [weak self] result in
            guard case .failure(let error) = result, let self, !withdrawn, name == instanceName else { return }
            Log.info("LAN advertisement '\(name)' not committed: \(error.message)")
        }
    }

    private func stateChanged(_ state: Avahi.EntryGroupState?, error: String) {
        guard !withdrawn else { return }
        switch state {
        case .established:
            publishedName = instanceName
            Log.info("advertising '\(instanceName)' (\(LANAdvertisement.serviceType), port \(service.port)) on the LAN")
        case .collision:
            nextName(after: instanceName)
        case .failure:
            Log.warning("Avahi could not publish the LAN advertisement: \(error)")
        case .uncommitted, .registering, nil:
            break
        }
    }

    private func nextName(after name: String) {
        guard name == instanceName, let groupPath else { return }
        publishedName = nil
        collisions += 1
        guard collisions < Self.maxCollisions else {
            return Log.warning("not advertising on the LAN: \(Self.maxCollisions) names in a row were taken")
        }
        // Two computers that chose one name both hear of the collision at once when their probes
        // overlapped, and would then take each next name in lockstep (seen here about one time in
        // three): after the first collision, the number jumps ahead by a random step.
        attempt += collisions == 1 ? 1 : Int.random(in: 1...9)
        Log.info("the LAN name '\(name)' is taken: trying '\(instanceName)'")
        avahi.call(groupPath, Avahi.entryGroupInterface, "Reset") { [weak self] _ in self?.addAndCommit() }
    }

    private func free(_ path: String) {
        avahi.call(path, Avahi.entryGroupInterface, "Free")
    }
}
