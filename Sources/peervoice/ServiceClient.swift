import Foundation
import GIO
import PeerVoiceBus
import PeerVoiceAppModel

/// org.example.PeerVoice on the session bus, through its public API only: reaches the service by
/// bus activation, feeds its answers and signals into the model, and carries out what a person
/// asks for. Every call is asynchronous: the window never waits for the service.
final class ServiceClient {
    static let name = PeerVoiceBus.name
    static let path = PeerVoiceBus.path
    static let interface = PeerVoiceBus.interface
    static let peerInterface = PeerVoiceBus.peerInterface

    private let connection: DBusConnection
    private let model: AppModel
    private var subscriptions: [SignalSubscription] = []
    private var nameWatch: NameWatch?
    /// The service's objects (peer objects today: known peers, and devices found or dialled whose
    /// key is not known yet), kept current by their ObjectManager's signals: nothing is polled.
    private let objectManager: ObjectManagerClient
    /// A pending update of the model's objects: the service replaces a found object by its peer
    /// object in one turn (InterfacesRemoved, then InterfacesAdded), which the model gets as one
    /// change, so the row (and its selection) never goes away in between.
    private var objectsUpdate: EventSource?
    /// Set once the service has sent a `PairingPrompt`: it then also sends `PairingRequested`
    /// for every prompt, which carries less and is ignored.
    private var serviceSendsPrompts = false
    /// The paths each transfer this app started sent, by its object path (for Retry).
    private var sentFiles: [String: [String]] = [:]

    init(connection: DBusConnection, model: AppModel) {
        self.connection = connection
        self.model = model
        objectManager = ObjectManagerClient(connection: connection, service: Self.name, managerPath: Self.path)
    }

    /// Starts watching for the service and asks the bus to start it.
    func start() {
        subscriptions = [
            connection.subscribe(sender: Self.name, interface: Self.interface, path: Self.path) { [unowned self] in handle($0) },
            connection.subscribe(sender: Self.name, interface: "org.freedesktop.DBus.Properties",
                                 member: "PropertiesChanged", path: Self.path) { [unowned self] in propertiesChanged($0.arguments[1]) },
            connection.subscribe(sender: Self.name, interface: PeerVoiceBus.roomInterface, member: "MessageReceived") { [unowned self] signal in
                guard signal.arguments.count == 2 else { return }
                model.roomMessage(in: signal.path, from: signal.arguments[0].string ?? "",
                                  text: MumbleText.plain(signal.arguments[1].string ?? ""), timeMs: Self.nowMs())
            },
        ]
        nameWatch = connection.watchName(Self.name, appeared: { [unowned self] _ in serviceAppeared() },
                                         vanished: { [unowned self] in model.serviceVanished() })
        objectManager.onChange = { [unowned self] change in
            switch change {
            case .ready, .interfacesAdded, .interfacesRemoved, .propertiesChanged:
                if objectsUpdate == nil {
                    objectsUpdate = Timer.after(.milliseconds(10)) { [unowned self] in
                        objectsUpdate = nil
                        showObjects()
                    }
                }
            case .failed(let error): print("peervoice: the service's objects could not be read: \(error.message)")
            case .appeared, .vanished: break
            }
        }
        objectManager.start()
        activate()
    }

    /// Retry: asks the bus to start the service again.
    func retryActivation() {
        model.activationRetried()
        activate()
    }

    /// `StartServiceByName`: the bus starts peervoiced from its .service file (or it already runs).
    func activate() {
        connection.callAsync(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                             interface: "org.freedesktop.DBus", method: "StartServiceByName",
                             arguments: Variant(tuple: [Variant(Self.name), Variant(UInt32(0))]), timeout: .seconds(30)) { [unowned self] result in
            if case .failure(let error) = result {
                model.activationFailed(errorName: error.name, message: error.message)
            }
        }
    }

    private func serviceAppeared() {
        model.serviceAppeared()
        call("GetAll", interface: "org.freedesktop.DBus.Properties", [Variant(Self.interface)], action: nil) { [unowned self] reply in
            propertiesChanged(reply[0])
        }
        // An older service has no prompt handlers: it then keeps showing its notifications.
        connection.callAsync(destination: Self.name, path: Self.path, interface: Self.interface,
                             method: "RegisterPromptHandler", arguments: Variant(tuple: []), timeout: .seconds(10)) { result in
            if case .failure(let error) = result { print("peervoice: prompts also go to notifications: \(error.message)") }
        }
        if let peer = model.selectedPeer { loadHistory(of: peer) }
    }

    /// Every object of an interface the app shows, decoded for the model.
    private func showObjects() {
        guard objectManager.isReady else { return }
        var listed: [String: ServiceObject] = [:]
        for interface in [Self.peerInterface, PeerVoiceBus.transferInterface, PeerVoiceBus.roomInterface] {
            for path in objectManager.paths(implementing: interface) {
                guard let properties = objectManager.properties(of: path, interface: interface),
                      let object = Self.decode(interface, path, properties) else { continue }
                listed[path] = object
            }
        }
        model.objectsListed(listed, nowMs: Self.nowMs())
    }

    /// An object's properties as the model's value for `interface` (a transfer's or a room's
    /// interface gets its case here); nil when they do not make one.
    private static func decode(_ interface: String, _ path: String, _ properties: ObjectManagerClient.Properties) -> ServiceObject? {
        switch interface {
        case PeerVoiceBus.roomInterface:
            return .room(RoomRow(path: path, url: properties["Url"]?.string ?? "", state: properties["State"]?.string ?? "",
                                 error: properties["Error"]?.string ?? "", channel: properties["Channel"]?.string ?? "",
                                 users: properties["Users"]?.children.map {
                                     RoomRow.User(session: $0[0].string ?? "", name: $0[1].string ?? "", speaking: $0[2].bool ?? false,
                                                  muted: $0[3].bool ?? false)
                                 } ?? []))
        case PeerVoiceBus.transferInterface:
            guard let peer = properties["Peer"]?.string, !peer.isEmpty else { return nil }
            return .transfer(TransferRow(path: path, peer: peer, incoming: properties["Direction"]?.string == "incoming",
                                         state: TransferState(service: properties["State"]?.string ?? ""),
                                         files: properties["Files"]?.children.map { ($0[0].string ?? "", $0[1].uint64 ?? 0) } ?? [],
                                         size: properties["Size"]?.uint64 ?? 0, transferred: properties["Transferred"]?.uint64 ?? 0,
                                         error: properties["Error"]?.string ?? "", destination: properties["Destination"]?.string ?? ""))
        case peerInterface:
            // A peer by its id; a device not keyed yet by its address.
            let id = properties["Id"]?.string ?? ""
            let ref = id.isEmpty ? properties["Routes"]?.children.first?[1].string ?? "" : id
            guard !ref.isEmpty else { return nil }
            return .peer(PeerRow(id: ref, name: properties["Name"]?.string ?? "", transport: properties["Transport"]?.string ?? "",
                                 state: PeerState(service: properties["State"]?.string ?? ""),
                                 voiceActive: properties["Voice"]?.string == "active", speaking: properties["Speaking"]?.bool ?? false,
                                 volume: properties["Volume"]?.double ?? 1, mutedHere: properties["Muted"]?.bool ?? false,
                                 isPaired: properties["Paired"]?.bool ?? false))
        default:
            return nil
        }
    }

    func loadHistory(of peer: String) {
        call("History", [Variant(peer), Variant(UInt32(200))], action: nil) { [unowned self] reply in
            model.history(of: peer, reply[0].children.map { row in
                ChatMessage(historyID: row[0].string ?? "", status: row[1].string ?? "", timeMs: row[2].uint64 ?? 0,
                            text: row[3].string ?? "")
            })
        }
    }

    // MARK: What a person asks for

    func setDiscovery(_ on: Bool) { call(on ? "StartDiscovery" : "StopDiscovery", action: "Search nearby") }

    /// Dials `target` (a peer id or an address). The reply comes once connected, which may wait for
    /// pairing; a newer service returns the peer's id, which replaces an address.
    func connect(_ target: String) {
        call("Connect", [Variant(target)], timeout: PeerVoiceBus.connectCallTimeout, action: "Connect", peer: target, then: { [unowned self] reply in
            if reply.count > 0, let id = reply[0].string, !id.isEmpty, id != target {
                model.peerIdentified(address: target, as: id)
            }
            showObjects()
        }, otherwise: { [unowned self] in
            // A typed address the service refused leaves no row behind.
            showObjects()
        })
    }

    func disconnect(_ peer: String) { call("Disconnect", [Variant(peer)], action: "Disconnect", peer: peer) }

    /// Forgets a peer whose key changed, then dials the address it was reached at, so that the
    /// device there (its new key) pairs anew and both people compare codes.
    func forgetAndPairAgain(_ peer: String) {
        let route = objectManager.paths(implementing: Self.peerInterface).lazy
            .compactMap { [objectManager] in objectManager.properties(of: $0, interface: Self.peerInterface) }
            .first { $0["Id"]?.string == peer }?["Routes"]?.children.first?[1].string
        call("RemovePeer", [Variant(peer)], action: "Forget and pair again", peer: peer) { [unowned self] _ in
            // Without a route there is nothing to dial: Connect then says the id is unknown.
            connect(route ?? peer)
        }
    }

    func send(_ text: String, to peer: String) {
        call("Send", [Variant(peer), Variant(text)], action: "Send", peer: peer) { [unowned self] reply in
            model.messageQueued(to: peer, id: reply[0].string ?? "", text: text, timeMs: Self.nowMs())
        }
    }

    /// Sends a failed message's text again (Retry); the new message takes its place.
    func resend(_ failed: ChatMessage, to peer: String) {
        call("Send", [Variant(peer), Variant(failed.text)], action: "Retry sending", peer: peer) { [unowned self] reply in
            model.messageResent(to: peer, failedID: failed.id, as: reply[0].string ?? "", timeMs: Self.nowMs())
        }
    }

    /// `SendFiles`: the transfer object it makes shows in the conversation (InterfacesAdded);
    /// what was sent is kept for Retry.
    func sendFiles(_ paths: [String], to peer: String) {
        call("SendFiles", [Variant(peer), Variant(array: paths.map { Variant($0) }, elementType: "s"), Variant(dictionary: [])],
             action: "Send files", peer: peer) { [unowned self] reply in
            if let transfer = reply[0].string { sentFiles[transfer] = paths }
        }
    }

    /// Sends again what a failed transfer of ours sent (a new transfer; the failed row stays).
    /// Only transfers this app started know their files' paths.
    func canRetry(_ transfer: TransferRow) -> Bool { sentFiles[transfer.path] != nil }

    func retry(_ transfer: TransferRow) {
        if let paths = sentFiles[transfer.path] { sendFiles(paths, to: transfer.peer) }
    }

    /// `Accept`, `Decline` or `Cancel` on a transfer object; a refusal (no room on the disk) is a
    /// notice in the service's words.
    func transfer(_ transfer: TransferRow, _ method: String) {
        call(method, interface: PeerVoiceBus.transferInterface, path: transfer.path, action: method, peer: transfer.peer)
    }

    /// `JoinRoom`: the room's object appears at once (InterfacesAdded) and the reply comes once
    /// it is in the channel. A server whose certificate changed is asked about
    /// (`changedCertificate`): its room object stays, failed, with the certificate it presented
    /// in `ServerFingerprint` (sent before the reply); it is left once read.
    func joinRoom(_ url: String, password: String, acceptCertificate: String? = nil,
                  changedCertificate: @escaping (_ fingerprint: String) -> Void) {
        let options = (password.isEmpty ? [] : [("password", Variant(password))])
            + (acceptCertificate.map { [("accept-certificate", Variant($0))] } ?? [])
        let roomsBefore = Set(objectManager.paths(implementing: PeerVoiceBus.roomInterface))
        connection.callAsync(destination: Self.name, path: Self.path, interface: Self.interface, method: "JoinRoom",
                             arguments: Variant(tuple: [Variant(url), Variant(dictionary: options)]), timeout: .seconds(40)) { [unowned self] result in
            switch result {
            case .success(let reply): if let room = reply[0].string { model.select(room: room) }
            case .failure(let error):
                if error.name == PeerVoiceBus.errorPrefix + "Rejected", acceptCertificate == nil,
                   let (room, fingerprint) = refusedCertificate(notAmong: roomsBefore) {
                    leaveRoom(room)
                    changedCertificate(fingerprint)
                } else {
                    model.callFailed("Join a room", peer: nil, errorName: error.name, message: error.message)
                }
            }
        }
    }

    /// A room object that appeared since `before` and failed on the certificate its server presented.
    private func refusedCertificate(notAmong before: Set<String>) -> (room: String, fingerprint: String)? {
        for path in objectManager.paths(implementing: PeerVoiceBus.roomInterface) where !before.contains(path) {
            guard let properties = objectManager.properties(of: path, interface: PeerVoiceBus.roomInterface),
                  properties["State"]?.string == "failed", let fingerprint = properties["ServerFingerprint"]?.string,
                  !fingerprint.isEmpty else { continue }
            return (path, fingerprint)
        }
        return nil
    }

    func leaveRoom(_ room: String) {
        call("Leave", interface: PeerVoiceBus.roomInterface, path: room, action: "Leave")
    }

    /// The room's `Send`; Mumble echoes nothing back, so the line is ours once the service took it.
    func send(_ text: String, toRoom room: String) {
        call("Send", interface: PeerVoiceBus.roomInterface, path: room, [Variant(text)], action: "Send to the room") { [unowned self] _ in
            model.roomMessage(in: room, from: nil, text: text, timeMs: Self.nowMs())
        }
    }

    func setMuted(_ muted: Bool) { call("Mute", [Variant(muted)], action: "Mute") }

    func setVoice(_ on: Bool, with peer: String) {
        call(on ? "StartVoice" : "StopVoice", [Variant(peer)], action: on ? "Start voice" : "Stop voice", peer: peer)
    }

    /// `SetVolume`: `peer`'s voice plays at `volume` (0.0–2.0) here; the peer object's `Volume`
    /// shows it once set.
    func setVolume(_ volume: Double, for peer: String) {
        call("SetVolume", [Variant(peer), Variant(volume)], action: "Volume", peer: peer,
             otherwise: { [unowned self] in model.volumeNotSet(for: peer) })
    }

    /// `SetPeerMuted`: `peer`'s voice is not played here (its peer object's `Muted` shows it).
    func setPeerMuted(_ muted: Bool, peer: String) {
        call("SetPeerMuted", [Variant(peer), Variant(muted)], action: "Mute this peer", peer: peer)
    }

    /// `SetName`: the service checks the name; a refusal is a notice in its words.
    func setName(_ name: String) { call("SetName", [Variant(name)], action: "Rename") }

    /// `SetVisible` for "bluetooth" or "lan".
    func setVisible(_ visible: Bool, on method: String) {
        call("SetVisible", [Variant(method), Variant(visible)], action: method == "lan" ? "Visible on the LAN" : "Visible over Bluetooth")
    }

    func confirmPairing(_ peer: String, accept: Bool) {
        call("ConfirmPairing", [Variant(peer), Variant(accept)], action: accept ? "Accept" : "Reject", peer: peer)
    }

    /// Calls a PeerVoice method; a failure becomes the model's notice (when `action` names what the
    /// person did) or a line on stderr.
    private func call(_ method: String, interface: String = ServiceClient.interface, path: String = ServiceClient.path,
                      _ arguments: [Variant] = [], timeout: Duration = .seconds(25), action: String?, peer: String? = nil,
                      then: @escaping (Variant) -> Void = { _ in }, otherwise: @escaping () -> Void = {}) {
        connection.callAsync(destination: Self.name, path: path, interface: interface, method: method,
                             arguments: Variant(tuple: arguments), timeout: timeout) { [unowned self] result in
            switch result {
            case .success(let reply): then(reply)
            case .failure(let error):
                if let action {
                    model.callFailed(action, peer: peer, errorName: error.name, message: error.message)
                } else {
                    print("peervoice: \(method) failed: \(error)")
                }
                otherwise()
            }
        }
    }

    private static func nowMs() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }

    // MARK: What the service says

    private func handle(_ signal: BusSignal) {
        let arguments = signal.arguments
        func string(_ index: Int) -> String { index < arguments.count ? arguments[index].string ?? "" : "" }
        switch signal.member {
        case "PeerFound":
            model.peerFound(string(0), name: string(1), transport: "")
        case "PeerLost":
            model.peerLost(string(0))
        case "PeerStateChanged":
            model.peerStateChanged(string(0), state: PeerState(service: string(1)), transport: "")
        case "PeerIdentified":
            model.peerIdentified(address: string(0), as: string(1))
        case "PairingPrompt":
            serviceSendsPrompts = true
            model.pairingRequested(peer: string(0), name: string(1), passkey: string(2),
                                   kind: string(3) == "display" ? .show : .confirm)
        case "PairingRequested" where !serviceSendsPrompts:
            model.pairingRequested(peer: string(0), name: string(1), passkey: string(2), kind: .confirm)
        case "PairingSettled":
            model.pairingSettled(peer: string(0), accepted: arguments.count > 1 && arguments[1].bool == true)
        case "MessageReceived":
            model.messageReceived(from: string(0), id: string(1), text: string(2), timeMs: Self.nowMs())
        case "MessageDelivered":
            model.messageDelivered(to: string(0), id: string(1))
        case "MessageFailed":
            model.messageFailed(to: string(0), id: string(1), reason: string(2))
        case "MuteChanged":
            model.muteChanged(arguments.count > 0 && arguments[0].bool == true)
        case "VoiceStateChanged":
            model.voiceStateChanged(string(0), active: string(1) == "active")
        default:
            break
        }
    }

    /// An `a{sv}` of the service's properties (`GetAll`, `PropertiesChanged`).
    private func propertiesChanged(_ properties: Variant) {
        if let muted = properties.lookup("Muted")?.bool { model.muteChanged(muted) }
        if let discovering = properties.lookup("Discovering")?.bool { model.discoveringChanged(discovering) }
        if let speaking = properties.lookup("Speaking")?.bool { model.microphoneSpeakingChanged(speaking) }
        model.settingsChanged(name: properties.lookup("Name")?.string, visible: properties.lookup("Visible")?.strings)
        model.capabilitiesChanged(discoveryMethods: properties.lookup("DiscoveryMethods")?.strings,
                                  audioProcessing: properties.lookup("AudioProcessing")?.strings)
    }
}
