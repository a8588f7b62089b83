import GIO
import Glibc
import PeerVoiceBus
import PeerVoiceCore

/// What the Bluetooth transport tells the service, always on the main loop.
protocol BluetoothTransportDelegate: AnyObject {
    /// `Adapter` or `Discovering` changed.
    func bluetoothStateChanged(_ properties: [ServiceProperty])
    func bluetoothFound(_ peer: PeerAddress, name: String)
    func bluetoothLost(_ peer: PeerAddress)
    /// BlueZ asks a person about pairing with `peer`: compare `passkey` ("" = nothing to compare)
    /// and answer with ConfirmPairing; `needsAnswer` is false when the code is only shown.
    func bluetoothPairingPrompt(_ peer: PeerAddress, name: String, passkey: String, needsAnswer: Bool)
    func bluetoothPairingPromptEnded(_ peer: PeerAddress, outcome: BluezAgent.Outcome)
    /// The other computer opened an RFCOMM channel to us (ours arrive through `connect`'s
    /// completion). Returns whether the service takes it (and the descriptor); a refused channel
    /// is closed.
    func bluetoothIncomingChannel(_ channel: BluetoothChannel) -> Bool
    /// Someone other than us asked BlueZ to close the channel to `peer`.
    func bluetoothChannelCloseRequested(_ peer: PeerAddress)
}

/// An RFCOMM channel BlueZ handed over: its descriptor (now the taker's to close) and the device.
struct BluetoothChannel {
    let peer: PeerAddress
    /// The device's name as BlueZ knows it.
    let name: String
    let fd: Int32
}

/// Bluetooth through BlueZ: the adapter in use, discovery, pairing (through `BluezAgent`) and
/// RFCOMM channels (through `BluezProfile`) that carry peer links. Follows org.bluez as it comes
/// and goes: when bluetoothd restarts, the profile and agent are registered again and discovery
/// resumes. Without a system bus or BlueZ it stays idle and says why (`unavailableReason`).
final class BluetoothTransport {
    /// How long `Device1.Pair` may take: both people may each take the confirmation window, and
    /// the radios some seconds more.
    static let pairTimeout = PeerVoiceBus.pairingConfirmationWindow * 2 + .seconds(10)
    /// Paging, SDP and the RFCOMM connection.
    static let connectProfileTimeout: Duration = .seconds(60)
    /// After a person accepted a pairing the other computer started, how long to wait for its channel.
    static let incomingChannelWait: Duration = .seconds(30)

    weak var delegate: BluetoothTransportDelegate?

    /// The adapter in use (`hci0`), "" when there is none.
    private(set) var adapterName = ""
    private(set) var isDiscovering = false

    private let requestedAdapter: String?
    private let isDefaultAgent: Bool
    private var bluez: BluezClient?
    private var profile: BluezProfile?
    private var agent: BluezAgent?
    private var systemBusError: String?
    private var adapterPath: String?
    /// The org.bluez owner our profile and agent are registered with.
    private var registeredWith: String?
    private var everRegistered = false
    /// The name watch has said whether org.bluez has an owner (it asks the bus without blocking).
    private var ownerReported = false
    /// `stop()` was called: a system-bus connection that arrives later is not used.
    private var stopped = false
    /// StartDiscovery was called and StopDiscovery not yet: resumed when BlueZ comes back.
    private var discoveryWanted = false
    /// The adapter's settings before we made it discoverable, restored by StopDiscovery.
    private var savedAdapterSettings: (path: String, discoverable: Bool, timeoutSeconds: UInt32, pairable: Bool)?
    /// Devices reported with PeerFound (device path → address and name), for PeerLost.
    private var reported: [String: (address: String, name: String)] = [:]
    /// Devices reported since discovery last started: found again (a new RSSI) is not news.
    private var foundThisTime: Set<String> = []
    /// Our dials, by address, until BlueZ has answered them (a cancelled one too: its channel,
    /// if one still comes, is refused).
    private var dials: [String: OutgoingDial] = [:]
    /// Addresses whose channel BlueZ handed over and the service has not released
    /// (`channelEnded`): BlueZ keeps a copy of each socket until DisconnectProfile.
    private var channels: Set<String> = []
    /// Our DisconnectProfile calls in progress, by address, with what waits for them.
    private var disconnecting: [String: [() -> Void]] = [:]
    /// Peers whose pairing a person accepted here, waiting for their channel.
    private var awaitingChannel: [String: EventSource] = [:]

    init(adapter: String?, defaultAgent: Bool) {
        requestedAdapter = adapter
        isDefaultAgent = defaultAgent
    }

    /// Connects to the system bus (without waiting for it) and starts following org.bluez. Never
    /// fails: without BlueZ the service runs on IP alone.
    func start() {
        DBusConnection.system { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(let connection): start(on: connection)
            case .failure(let error):
                systemBusError = error.message
                Log.info("Bluetooth is off: cannot use the system bus (\(error.message))")
            }
        }
    }

    private func start(on connection: DBusConnection) {
        guard !stopped else { return }
        do {
            let profile = try BluezProfile(connection: connection)
            let agent = try BluezAgent(connection: connection)
            self.profile = profile
            self.agent = agent
        } catch {
            systemBusError = error.message
            Log.info("Bluetooth is off: cannot use the system bus (\(error.message))")
            return
        }
        let bluez = BluezClient(connection: connection)
        self.bluez = bluez
        profile?.isFromBluez = { [unowned self] sender in sender == self.bluez?.objects.owner }
        profile?.onNewConnection = { [unowned self] path, fd in channelOpened(devicePath: path, fd: fd) }
        profile?.onRequestDisconnection = { [unowned self] path in closeRequested(devicePath: path) }
        agent?.isFromBluez = profile!.isFromBluez
        agent?.onPrompt = { [unowned self] path, passkey, needsAnswer in
            guard let peer = peerID(devicePath: path) else { return }
            delegate?.bluetoothPairingPrompt(peer, name: deviceName(path), passkey: passkey, needsAnswer: needsAnswer)
        }
        agent?.onPromptEnded = { [unowned self] path, outcome in promptEnded(devicePath: path, outcome: outcome) }
        agent?.mayUseService = { [unowned self] path, uuid in
            uuid.lowercased() == BluezProfile.uuid && (self.bluez?.device(at: path)?.isPaired ?? false)
        }
        bluez.objects.onChange = { [unowned self] change in bluezChanged(change) }
        bluez.objects.start()
    }

    /// At exit: restores the adapter's discoverability. BlueZ drops our profile, agent and
    /// discovery session by itself when our connection closes.
    func stop() {
        stopped = true
        if let bluez, isDiscovering || savedAdapterSettings != nil {
            // The main loop has ended: send the calls without waiting for replies. BlueZ handles
            // them in order, also after our connection is gone.
            var steps = restoringSteps()
            if isDiscovering, let adapterPath { steps.insert(Self.stopDiscoveryCall(adapterPath), at: 0) }
            savedAdapterSettings = nil
            sendWithoutWaiting(steps)
            bluez.connection.flush()
            Log.info("stopped discovering Bluetooth peers")
        }
        bluez?.objects.stop()
    }

    /// Why Bluetooth cannot be used now, in words a person can act on; nil when it can.
    var unavailableReason: String? {
        if let systemBusError {
            return "Bluetooth is not available: BlueZ is not running (cannot reach the system bus: \(systemBusError))"
        }
        guard let bluez else { return "Bluetooth is not available yet: BlueZ is not running, or has not answered yet; try again in a moment" }
        guard bluez.objects.owner != nil else {
            if !ownerReported { return "Bluetooth is not available yet: BlueZ is not running, or has not answered yet; try again in a moment" }
            return "Bluetooth is not available: BlueZ is not running (nothing owns org.bluez on the system bus; start it, e.g. sudo systemctl start bluetooth)"
        }
        guard bluez.objects.isReady else {
            return "Bluetooth is not available yet: BlueZ is starting or not answering; try again in a moment"
        }
        guard let adapterPath, let adapter = bluez.adapter(at: adapterPath) else {
            let names = bluez.adapters.map(\.name)
            if let requestedAdapter {
                return "Bluetooth is not available: BlueZ has no adapter \(requestedAdapter) (--adapter); it has \(names.isEmpty ? "none" : names.joined(separator: ", "))"
            }
            return names.isEmpty ? "Bluetooth is not available: BlueZ has no adapter (is a Bluetooth controller plugged in?)"
                : "Bluetooth is not available: no adapter is powered on (\(names.joined(separator: ", "))); switch one on, e.g. bluetoothctl power on"
        }
        guard adapter.isPowered else {
            return "Bluetooth is not available: adapter \(adapter.name) is powered off; switch it on, e.g. bluetoothctl power on"
        }
        return nil
    }

    // MARK: Devices

    /// The device BlueZ knows at `address` on our adapter.
    func device(_ address: String) -> BluezDevice? {
        guard let bluez, let adapterPath else { return nil }
        return bluez.device(at: adapterPath + "/dev_" + address.uppercased().replacingOccurrences(of: ":", with: "_"))
    }

    /// Devices on our adapter that offer PeerVoice (BlueZ knows their UUIDs).
    var peerVoiceDevices: [BluezDevice] {
        guard let bluez, let adapterPath else { return [] }
        return bluez.devices(of: adapterPath).filter { $0.uuids.contains(BluezProfile.uuid) }
    }

    // MARK: Discovery

    /// Makes the adapter discoverable and pairable and searches for BR/EDR devices. Shared by all
    /// callers: a second call while discovering does nothing. `completion` runs once BlueZ has
    /// answered every call, or one failed or timed out.
    func startDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        if let reason = unavailableReason { return completion(.failure(.notAvailable(reason))) }
        discoveryWanted = true
        inDiscoveryOrder { [unowned self] done in
            guard !isDiscovering else {
                completion(.success(()))
                return done()
            }
            startDiscoveryNow(completion: completion, done: done)
        }
    }

    /// Stops searching and restores the adapter's discoverability as it was before StartDiscovery.
    func stopDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        discoveryWanted = false
        inDiscoveryOrder { [unowned self] done in
            if !isDiscovering && savedAdapterSettings == nil {
                completion(unavailableReason.map { .failure(.notAvailable($0)) } ?? .success(()))
                return done()
            }
            stopDiscoveryNow { result in
                completion(result)
                done()
            }
        }
    }

    /// Starting and stopping discovery each take several BlueZ calls: one runs at a time, in the
    /// order asked for. `operation` calls its argument when it is over.
    private func inDiscoveryOrder(_ operation: @escaping (_ done: @escaping () -> Void) -> Void) {
        guard !discoveryBusy else { return discoveryQueue.append(operation) }
        discoveryBusy = true
        operation { [weak self] in
            guard let self else { return }
            discoveryBusy = false
            if !discoveryQueue.isEmpty { inDiscoveryOrder(discoveryQueue.removeFirst()) }
        }
    }

    private var discoveryBusy = false
    private var discoveryQueue: [(_ done: @escaping () -> Void) -> Void] = []

    /// Replies through `completion` as soon as the outcome is known; calls `done` once the adapter
    /// is settled (after restoring its settings on failure).
    private func startDiscoveryNow(completion: @escaping (Result<Void, ServiceError>) -> Void, done: @escaping () -> Void) {
        guard let bluez, let adapterPath, let adapter = bluez.adapter(at: adapterPath) else {
            completion(.failure(.notAvailable(unavailableReason ?? "Bluetooth is not available: the adapter went away")))
            return done()
        }
        if savedAdapterSettings?.path != adapterPath {
            savedAdapterSettings = (adapterPath, adapter.isDiscoverable, adapter.discoverableTimeoutSeconds, adapter.isPairable)
        }
        let steps: [BluezCall] = [
            // No timeout while we search; StopDiscovery puts the old one back.
            .set(adapterPath, Bluez.adapterInterface, "DiscoverableTimeout", Variant(UInt32(0))),
            .set(adapterPath, Bluez.adapterInterface, "Pairable", Variant(true)),
            .set(adapterPath, Bluez.adapterInterface, "Discoverable", Variant(true)),
            // Inquiry results seldom carry our 128-bit UUID, so the filter names only the transport
            // (ConnectProfile is BR/EDR only); devices are sorted out in `shouldReport`.
            BluezCall(path: adapterPath, interface: Bluez.adapterInterface, method: "SetDiscoveryFilter",
                      arguments: [Variant(dictionary: [("Transport", Variant("bredr"))])]),
            BluezCall(path: adapterPath, interface: Bluez.adapterInterface, method: "StartDiscovery"),
        ]
        bluez.callInOrder(steps, timeout: Self.adapterCallTimeout) { [weak self] result in
            guard let self else { return }
            switch result {
            case .failure(let failure):
                completion(.failure(Self.discoveryError(failure, adapter: adapter.name)))
                restoreAdapterSettings(waiting: !failure.error.isNoReply, then: done)
            case .success:
                Log.info("discovering Bluetooth peers on \(adapter.name) (discoverable and pairable meanwhile)")
                foundThisTime = []
                setDiscovering(true)
                for device in bluez.devices(of: adapterPath) where device.properties["RSSI"] != nil {
                    report(device)
                }
                completion(.success(()))
                done()
            }
        }
    }

    /// Adapter settings and discovery calls are answered at once by a working bluetoothd: no answer
    /// in this time means it is hung (or stopped), and the caller hears so.
    static let adapterCallTimeout: Duration = .seconds(5)
    /// What a person can do about a BlueZ that does not answer.
    static let hungAdvice = "is bluetoothd hung? restart it, e.g. sudo systemctl restart bluetooth"

    static func discoveryError(_ failure: BluezCallFailure, adapter: String) -> ServiceError {
        if failure.error.isNoReply {
            return .notAvailable("Bluetooth is not available: BlueZ did not answer \(failure.step.description) on \(adapter) within \(adapterCallTimeout.components.seconds) s (\(Self.hungAdvice))")
        }
        return .failed("could not start Bluetooth discovery on \(adapter): \(failure.step.description): \(failure.error.message)")
    }

    /// Succeeds unless BlueZ did not answer StopDiscovery: discovery is off here all the same, and
    /// the adapter's settings are put back once BlueZ answers again.
    private func stopDiscoveryNow(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        let finish = { [weak self] (result: Result<Void, ServiceError>) in
            guard let self else { return }
            setDiscovering(false)
            Log.info("stopped discovering Bluetooth peers")
            completion(result)
        }
        guard isDiscovering, let bluez, let adapterPath else { return restoreAdapterSettings { finish(.success(())) } }
        let adapter = adapterName
        bluez.call(Self.stopDiscoveryCall(adapterPath), timeout: Self.adapterCallTimeout) { [weak self] result in
            var hung = false
            if case .failure(let error) = result {
                Log.debug("StopDiscovery on \(adapter): \(error.message)")
                hung = error.isNoReply
            }
            self?.restoreAdapterSettings(waiting: !hung) {
                finish(hung ? .failure(.notAvailable("Bluetooth is not available: BlueZ did not answer StopDiscovery on \(adapter) within \(Self.adapterCallTimeout.components.seconds) s (\(Self.hungAdvice)); discovery is off here, and the adapter's settings are put back once BlueZ answers")) : .success(()))
            }
        }
    }

    private static func stopDiscoveryCall(_ adapterPath: String) -> BluezCall {
        BluezCall(path: adapterPath, interface: Bluez.adapterInterface, method: "StopDiscovery")
    }

    /// The calls that put the adapter's settings back as they were before StartDiscovery.
    private func restoringSteps() -> [BluezCall] {
        guard let saved = savedAdapterSettings, bluez?.adapter(at: saved.path) != nil else { return [] }
        return [
            .set(saved.path, Bluez.adapterInterface, "Discoverable", Variant(saved.discoverable)),
            .set(saved.path, Bluez.adapterInterface, "DiscoverableTimeout", Variant(saved.timeoutSeconds)),
            .set(saved.path, Bluez.adapterInterface, "Pairable", Variant(saved.pairable)),
        ]
    }

    /// Puts the adapter's settings back, then calls `done`. Without `waiting` (BlueZ just missed
    /// a reply) the calls are only sent: BlueZ handles them in order once it answers again. The
    /// saved settings are kept until BlueZ confirmed them, so a StartDiscovery meanwhile does not
    /// take our own settings (in the cache, or still queued in BlueZ) for the adapter's.
    private func restoreAdapterSettings(waiting: Bool = true, then done: @escaping () -> Void) {
        let steps = restoringSteps()
        guard let bluez, !steps.isEmpty else {
            savedAdapterSettings = nil
            return done()
        }
        guard waiting else {
            sendWithoutWaiting(steps)
            return done()
        }
        let saved = savedAdapterSettings
        bluez.callInOrder(steps, timeout: Self.adapterCallTimeout) { [weak self] result in
            switch result {
            case .success:
                if self?.savedAdapterSettings?.path == saved?.path { self?.savedAdapterSettings = nil }
            case .failure(let failure):
                Log.warning("could not restore the discoverability of \(failure.step.path): \(failure.step.description): \(failure.error.message)")
            }
            done()
        }
    }

    /// Sends `steps` at once, in order, without waiting for their replies.
    private func sendWithoutWaiting(_ steps: [BluezCall]) {
        for step in steps { bluez?.call(step, timeout: Self.adapterCallTimeout) }
    }

    private func setDiscovering(_ discovering: Bool) {
        guard discovering != isDiscovering else { return }
        isDiscovering = discovering
        delegate?.bluetoothStateChanged([.discovering])
    }

    /// Every device found, except paired ones whose services BlueZ knows without ours: a device
    /// not yet paired has at most the UUIDs of its inquiry response, which seldom lists ours.
    private func shouldReport(_ device: BluezDevice) -> Bool {
        device.adapterPath == adapterPath && (device.uuids.contains(BluezProfile.uuid) || !device.isPaired)
    }

    private func report(_ device: BluezDevice) {
        guard shouldReport(device), let peer = PeerAddress(bluetoothAddress: device.address) else { return }
        let isNews = !foundThisTime.contains(device.path) || reported[device.path]?.name != device.name
        reported[device.path] = (device.address, device.name)
        foundThisTime.insert(device.path)
        guard isNews else { return }
        delegate?.bluetoothFound(peer, name: device.name)
    }

    private func reportLost(_ path: String) {
        foundThisTime.remove(path)
        guard let address = reported.removeValue(forKey: path)?.address, let peer = PeerAddress(bluetoothAddress: address) else { return }
        delegate?.bluetoothLost(peer)
    }

    // MARK: BlueZ coming and going

    private func bluezChanged(_ change: ObjectManagerClient.Change) {
        guard let bluez else { return }
        if case .appeared = change { ownerReported = true }
        if case .vanished = change { ownerReported = true }
        switch change {
        case .appeared(let owner):
            register(with: owner, attempt: 1)
        case .ready:
            selectAdapter()
        case .failed(let error):
            Log.warning("BlueZ does not list its objects (\(error.message)): Bluetooth is unavailable until it restarts")
        case .vanished:
            if registeredWith != nil {
                Log.info("BlueZ went away (org.bluez has no owner): Bluetooth is unavailable until it is back")
            }
            registeredWith = nil
            agent?.cancelAll()
            for path in reported.keys.sorted() { reportLost(path) }
            disconnecting.values.forEach { $0.forEach { $0() } }
            disconnecting = [:]
            savedAdapterSettings = nil
            selectAdapter()
        case .interfacesAdded(let path, let interfaces):
            if interfaces.contains(Bluez.adapterInterface) { selectAdapter() }
            if interfaces.contains(Bluez.deviceInterface), isDiscovering, let device = bluez.device(at: path) {
                report(device)
            }
        case .interfacesRemoved(let path, let removed):
            if removed[Bluez.adapterInterface] != nil { selectAdapter() }
            if removed[Bluez.deviceInterface] != nil { reportLost(path) }
        case .propertiesChanged(let path, let interface, let changed):
            if interface == Bluez.adapterInterface && changed.contains("Powered") {
                selectAdapter()
            } else if interface == Bluez.deviceInterface, let device = bluez.device(at: path) {
                // Found again (RSSI), renamed, or its services became known.
                let found = isDiscovering && changed.contains("RSSI")
                let renamed = reported[path] != nil && (changed.contains("Alias") || changed.contains("Name"))
                let resolved = changed.contains("UUIDs") && (isDiscovering || reported[path] != nil)
                if found || renamed || resolved {
                    if shouldReport(device) { report(device) } else { reportLost(path) }
                }
            }
        }
    }

    private func register(with owner: String, attempt: Int) {
        guard let bluez, let profile, let agent, bluez.objects.owner == owner else { return }
        profile.register(with: bluez) { [weak self] result in
            guard let self, bluez.objects.owner == owner else { return }
            if case .failure(let error) = result, error.name != Self.alreadyExists {
                return registrationFailed(owner: owner, attempt: attempt, "the profile", error)
            }
            agent.register(with: bluez, asDefault: isDefaultAgent) { [weak self] result in
                guard let self, bluez.objects.owner == owner else { return }
                if case .failure(let error) = result, error.name != Self.alreadyExists {
                    return registrationFailed(owner: owner, attempt: attempt, "the pairing agent", error)
                }
                registeredWith = owner
                let what = "the PeerVoice profile (UUID \(BluezProfile.uuid), RFCOMM channel \(BluezProfile.channel)) and pairing agent\(isDefaultAgent ? " (default)" : "")"
                Log.info(everRegistered ? "re-registered \(what) with BlueZ (\(owner)) after it restarted"
                                        : "registered \(what) with BlueZ (\(owner))")
                everRegistered = true
            }
        }
    }

    private func registrationFailed(owner: String, attempt: Int, _ what: String, _ error: BusError) {
        guard attempt < 3 else {
            Log.warning("could not register \(what) with BlueZ (\(owner)): \(error.message); Bluetooth peers cannot connect")
            return
        }
        Log.debug("registering \(what) with BlueZ failed (\(error.message)); trying again")
        retryTimer = Timer.after(.seconds(1)) { [weak self] in self?.register(with: owner, attempt: attempt + 1) }
    }

    private var retryTimer: EventSource?
    /// Our registration with this bluetoothd is still there: fine.
    private static let alreadyExists = "org.bluez.Error.AlreadyExists"

    /// `--adapter`, else the adapter in use while it stays powered, else the first powered one.
    private func selectAdapter() {
        let adapters = bluez?.objects.isReady == true ? bluez!.adapters : []
        let chosen: BluezAdapter?
        if let requestedAdapter {
            chosen = adapters.first { $0.name == requestedAdapter }
        } else {
            chosen = adapters.first { $0.path == adapterPath && $0.isPowered } ?? adapters.first(where: \.isPowered)
        }
        let usable = chosen?.isPowered == true
        if chosen?.path != adapterPath {
            if let old = adapterPath {
                for (path, _) in reported where path.hasPrefix(old + "/") { reportLost(path) }
                savedAdapterSettings = nil
            }
            adapterPath = chosen?.path
            setDiscovering(false)
        }
        let name = chosen?.name ?? ""
        if name != adapterName {
            adapterName = name
            Log.info(name.isEmpty ? "no Bluetooth adapter in use" : "using Bluetooth adapter \(name) (\(chosen?.address ?? ""))")
            delegate?.bluetoothStateChanged([.adapter])
        }
        if !usable { setDiscovering(false) }
        if usable && discoveryWanted && !isDiscovering && !discoveryBusy {
            inDiscoveryOrder { [unowned self] done in
                guard discoveryWanted && !isDiscovering else { return done() }
                startDiscoveryNow(completion: { result in
                    if case .failure(let error) = result { Log.warning("could not resume Bluetooth discovery: \(error.message)") }
                }, done: done)
            }
        }
    }

    // MARK: Channels

    /// Dials `peer`: pairs first if needed (and `mayPair`: a person is waiting in Connect), then
    /// `ConnectProfile`. `completion` gets the channel as soon as BlueZ hands it over (before
    /// `ConnectProfile` answers), or the error; never after the returned attempt is cancelled,
    /// which also cancels a pairing under way and refuses a channel that still comes.
    func connect(_ peer: PeerAddress, mayPair: Bool,
                 completion: @escaping (Result<BluetoothChannel, ServiceError>) -> Void) -> DialAttempt {
        let address = peer.description
        let dial = OutgoingDial(completion)
        let attempt = DialAttempt { [weak self] in self?.cancel(dial, to: address) }
        let fail = { [unowned self] (error: ServiceError) in
            // Reported from the main loop, like every other outcome, so callers see one order of events.
            later(.zero) { dial.finish(.failure(error)) }
        }
        if let reason = unavailableReason {
            fail(.notAvailable(reason))
            return attempt
        }
        guard device(address) != nil else {
            fail(.unknownPeer("\(address) has not been seen over Bluetooth: StartDiscovery here while the other computer is discoverable (its PeerVoice discovering), then Connect"))
            return attempt
        }
        guard dials[address] == nil else {
            fail(.failed("\(address) is being dialled over Bluetooth already"))
            return attempt
        }
        dials[address] = dial
        whileWaiting({ dial.isPending }) { [weak self] in
            self?.end(dial, to: address, .failure(.notAvailable("Bluetooth is not available: BlueZ stopped answering while connecting to \(address) (\(Self.hungAdvice))")))
        }
        afterDisconnecting(address) { [weak self] in
            guard let self else { return }
            guard dial.isPending else { return end(dial, to: address, .failure(.failed("cancelled"))) }
            guard let device = device(address) else {
                return end(dial, to: address, .failure(.failed("BlueZ forgot \(address) while connecting")))
            }
            // The channel ends the dial before BlueZ answers: an answer that finds it still
            // pending saw no channel.
            let answered = { [weak self] (result: Result<Void, ServiceError>) -> Void in
                self?.end(dial, to: address, result.flatMap { .failure(.failed("BlueZ connected \(address) but handed over no channel")) })
            }
            if device.isPaired {
                connectProfile(device, retries: 2, dial: dial, completion: answered)
            } else if !mayPair {
                end(dial, to: address, .failure(.failed("\(address) is not paired: Connect to it to pair")))
            } else {
                dial.isPairing = true
                pair(device, dial: dial, completion: answered)
            }
        }
        return attempt
    }

    /// `dial` is over: BlueZ answered (or will not), or its channel came.
    private func end(_ dial: OutgoingDial, to address: String, _ result: Result<BluetoothChannel, ServiceError>) {
        if dials[address] === dial { dials[address] = nil }
        dial.isPairing = false
        dial.finish(result)
    }

    /// Nobody waits for `dial` any more. It stays among the dials until BlueZ answers, so that
    /// its channel, if one comes, is refused rather than taken for the other computer's.
    private func cancel(_ dial: OutgoingDial, to address: String) {
        guard dial.isPending else { return }
        dial.abandon()
        Log.debug("dial of \(address) over Bluetooth cancelled")
        guard dial.isPairing, let bluez, let device = device(address) else { return }
        bluez.call(device.path, Bluez.deviceInterface, "CancelPairing", timeout: Self.adapterCallTimeout) { result in
            if case .failure(let error) = result { Log.debug("CancelPairing \(address): \(error.message)") }
        }
    }

    /// Pair and ConnectProfile may rightly take a minute or two (people confirm, radios page), so
    /// while `pending()` holds BlueZ is pinged: one that stops answering is reported through
    /// `hung` within a ping's timeout.
    private func whileWaiting(_ pending: @escaping () -> Bool, hung: @escaping () -> Void) {
        guard let bluez, pending() else { return }
        bluez.ping(timeout: Self.adapterCallTimeout) { [weak self] result in
            guard let self, pending() else { return }
            if case .failure(let error) = result, error.isNoReply { return hung() }
            later(Self.pingInterval) { [weak self] in self?.whileWaiting(pending, hung: hung) }
        }
    }

    static let pingInterval: Duration = .seconds(2)

    private var deferred: [Int: EventSource] = [:]
    private var nextDeferredKey = 0

    /// Runs `action` on the main loop after `delay` (kept until then, unlike a bare Timer).
    private func later(_ delay: Duration, _ action: @escaping () -> Void) {
        let key = nextDeferredKey
        nextDeferredKey += 1
        deferred[key] = Timer.after(delay) { [weak self] in
            self?.deferred[key] = nil
            action()
        }
    }

    private func pair(_ device: BluezDevice, dial: OutgoingDial, completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard let bluez else { return completion(.failure(.notAvailable(unavailableReason ?? "BlueZ went away"))) }
        Log.info("pairing with \(device.address) (\(device.name))")
        bluez.call(device.path, Bluez.deviceInterface, "Pair", timeout: Self.pairTimeout) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success:
                Log.info("paired with \(device.address)")
                markTrusted(device.path)
                dial.isPairing = false
                connectProfile(device, retries: 2, dial: dial, completion: completion)
            case .failure(let error) where error.name == "org.bluez.Error.AlreadyExists":
                dial.isPairing = false
                connectProfile(device, retries: 2, dial: dial, completion: completion)
            case .failure(let error):
                Log.info("pairing with \(device.address) failed: \(error.name): \(error.message)")
                completion(.failure(Self.pairingError(error, address: device.address)))
            }
        }
    }

    /// Asks BlueZ for the channel (unless the dial was cancelled meanwhile); `completion` gets
    /// BlueZ's answer, after the channel if one came.
    private func connectProfile(_ device: BluezDevice, retries: Int, dial: OutgoingDial,
                                completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard dial.isPending else { return completion(.failure(.failed("cancelled"))) }
        guard let bluez else { return completion(.failure(.notAvailable(unavailableReason ?? "BlueZ went away"))) }
        bluez.call(device.path, Bluez.deviceInterface, "ConnectProfile", [Variant(BluezProfile.uuid)],
                   timeout: Self.connectProfileTimeout) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success:
                completion(.success(()))
            case .failure(let error) where retries > 0 && (error.name == "org.bluez.Error.AlreadyConnected"
                                                             || error.name == "org.bluez.Error.InProgress"):
                // BlueZ still holds an old channel of ours: close it, then dial again.
                disconnectProfile(device.address)
                afterDisconnecting(device.address) { [weak self] in
                    self?.connectProfile(device, retries: retries - 1, dial: dial, completion: completion)
                }
            case .failure(let error) where retries > 0 && error.message.hasSuffix("connection-refused"):
                // The other side refused the channel right after the link was encrypted: Linux
                // 6.1 may answer "security block" before it knows the key size. Once more, later.
                Log.debug("\(device.address) refused the channel (\(error.message)); trying once more")
                later(.seconds(1)) { [weak self] in
                    self?.connectProfile(device, retries: retries - 1, dial: dial, completion: completion)
                }
            case .failure(let error):
                Log.info("connecting to \(device.address) over Bluetooth failed: \(error.name): \(error.message)")
                completion(.failure(Self.connectError(error, address: device.address)))
            }
        }
    }

    static func pairingError(_ error: BusError, address: String) -> ServiceError {
        switch error.name {
        case "org.bluez.Error.AuthenticationRejected", "org.bluez.Error.AuthenticationCanceled",
             "org.bluez.Error.AuthenticationFailed", "org.bluez.Error.AuthenticationTimeout",
             "org.bluez.Error.Canceled", Bluez.rejected:
            return .rejected("pairing with \(address) was refused or not confirmed in time (on this computer or the other): \(error.message)")
        case "org.bluez.Error.ConnectionAttemptFailed":
            return .failed("cannot reach \(address) over Bluetooth (out of range or switched off?): \(error.message)")
        default:
            return .failed("pairing with \(address) failed: \(error.message)")
        }
    }

    static func connectError(_ error: BusError, address: String) -> ServiceError {
        switch error.name {
        case "org.bluez.Error.NotAvailable", "org.bluez.Error.NotSupported":
            return .failed("\(address) does not offer PeerVoice over Bluetooth (is peervoiced running there?): \(error.message)")
        default:
            return .failed("cannot connect to \(address) over Bluetooth: \(error.message)")
        }
    }

    /// A channel BlueZ hands over: the one our dial of that device waits for, else the other
    /// computer's. Returns whether it was taken (a refused one is closed).
    private func channelOpened(devicePath: String, fd: Int32) -> Bool {
        guard let peer = peerID(devicePath: devicePath) else { return false }
        let address = peer.description
        awaitingChannel[address] = nil
        let channel = BluetoothChannel(peer: peer, name: deviceName(devicePath), fd: fd)
        if let dial = dials[address] {
            Log.debug("RFCOMM channel with \(peer) (dialled\(dial.isPending ? "" : ", cancelled: refused"))")
            guard dial.isPending else { return false }
            channels.insert(address)
            end(dial, to: address, .success(channel))
            return true
        }
        Log.debug("RFCOMM channel with \(peer) (incoming)")
        guard delegate?.bluetoothIncomingChannel(channel) == true else { return false }
        channels.insert(address)
        return true
    }

    private func closeRequested(devicePath: String) {
        guard let peer = peerID(devicePath: devicePath) else { return }
        // Our own DisconnectProfile comes back this way; our side is closed already.
        guard disconnecting[peer.description] == nil else { return }
        delegate?.bluetoothChannelCloseRequested(peer)
    }

    /// The service is done with its channel to `peer` (the link over it ended, or it did not
    /// want it): BlueZ still holds its copy of the socket, so it is asked to close the channel
    /// (the other side then sees it end).
    func channelEnded(_ peer: PeerAddress) {
        guard channels.remove(peer.description) != nil else { return }
        disconnectProfile(peer.description)
    }

    private func disconnectProfile(_ address: String) {
        guard let bluez, let device = device(address), disconnecting[address] == nil else { return }
        disconnecting[address] = []
        bluez.call(device.path, Bluez.deviceInterface, "DisconnectProfile", [Variant(BluezProfile.uuid)],
                   timeout: .seconds(10)) { [weak self] result in
            if case .failure(let error) = result { Log.debug("DisconnectProfile \(address): \(error.message)") }
            guard let waiters = self?.disconnecting.removeValue(forKey: address) else { return }
            waiters.forEach { $0() }
        }
    }

    private func afterDisconnecting(_ address: String, _ action: @escaping () -> Void) {
        if disconnecting[address] != nil {
            disconnecting[address]!.append(action)
        } else {
            action()
        }
    }

    // MARK: Pairing prompts

    /// Answers BlueZ's pending question about `peer`; false if none is pending.
    func answerPairing(_ peer: PeerAddress, accept: Bool) -> Bool {
        guard let agent, let path = agent.promptedDevices.first(where: { self.peerID(devicePath: $0) == peer }) else {
            return false
        }
        Log.info("\(accept ? "accepted" : "refused") Bluetooth pairing with \(peer)")
        if accept { markTrusted(path) }
        return agent.answer(path, accept: accept)
    }

    private func promptEnded(devicePath: String, outcome: BluezAgent.Outcome) {
        guard let peer = peerID(devicePath: devicePath) else { return }
        if outcome != .accepted { Log.info("Bluetooth pairing with \(peer) ended: \(outcome)") }
        if (outcome == .rejected || outcome == .timedOut) && dials[peer.description] == nil && !channels.contains(peer.description) {
            // Refused a computer that wanted to pair with us: drop its connection too, so its Pair
            // ends now (btvirt's controllers never tell the initiator otherwise).
            bluez?.call(devicePath, Bluez.deviceInterface, "Disconnect") { result in
                if case .failure(let error) = result { Log.debug("Disconnect \(peer) after the refusal: \(error.message)") }
            }
        }
        delegate?.bluetoothPairingPromptEnded(peer, outcome: outcome)
    }

    /// Calls `action` unless a channel to `peer` opens within `incomingChannelWait`.
    func expectChannel(from peer: PeerAddress, orElse action: @escaping () -> Void) {
        awaitingChannel[peer.description] = Timer.after(Self.incomingChannelWait) { [weak self] in
            self?.awaitingChannel[peer.description] = nil
            action()
        }
    }

    /// A person accepted this device: it may reconnect without asking (`Device1.Trusted`).
    private func markTrusted(_ devicePath: String) {
        bluez?.call(.set(devicePath, Bluez.deviceInterface, "Trusted", Variant(true)), timeout: Self.adapterCallTimeout) { result in
            if case .failure(let error) = result { Log.debug("Trusted on \(devicePath): \(error.message)") }
        }
    }

    private func peerID(devicePath: String) -> PeerAddress? {
        let address = bluez?.device(at: devicePath)?.address ?? BluezDevice.address(fromPath: devicePath) ?? ""
        return PeerAddress(bluetoothAddress: address)
    }

    private func deviceName(_ devicePath: String) -> String {
        bluez?.device(at: devicePath)?.name ?? ""
    }
}

/// One dial of `BluetoothTransport.connect`: who waits for its channel, until it has it, failed
/// or was cancelled.
private final class OutgoingDial {
    private var completion: ((Result<BluetoothChannel, ServiceError>) -> Void)?
    /// `Device1.Pair` is under way (a cancel cancels it too).
    var isPairing = false

    init(_ completion: @escaping (Result<BluetoothChannel, ServiceError>) -> Void) {
        self.completion = completion
    }

    /// Someone still waits for the outcome.
    var isPending: Bool { completion != nil }

    /// Reports the outcome, once; nothing after `abandon()`.
    func finish(_ result: Result<BluetoothChannel, ServiceError>) {
        let waiting = completion
        completion = nil
        waiting?(result)
    }

    func abandon() {
        completion = nil
    }
}
