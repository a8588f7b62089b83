import GIO
import PeerVoiceCore

/// Desktop notifications (`org.freedesktop.Notifications` on the session bus, Desktop
/// Notifications Specification 1.2) for what a person should see without watching the bus: an
/// incoming message, and a pairing request with Accept/Reject buttons that answer it like
/// `ConfirmPairing`.
///
/// Everything is asynchronous: without a notification server (nothing owns the name and nothing
/// can be activated) a notification is dropped with a debug line and the service carries on.
/// Closing a pairing notification without choosing leaves the request open (`peervoicectl
/// confirm` still answers it, and it times out as usual); one still showing when the peer stops
/// pairing (answered elsewhere, timed out, connected: `PairingSettled`) is withdrawn. While a client
/// shows prompts itself (`RegisterPromptHandler`), prompts are not notified.
final class DesktopNotifications {
    static let service = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"
    static let interface = "org.freedesktop.Notifications"
    static let appName = "PeerVoice"
    /// The .desktop file (desktop/peervoiced.desktop) servers take the icon and app settings from.
    static let desktopEntry = "peervoiced"
    /// Longest message body shown; the whole text stays in History.
    static let maxBodyCharacters = 1_000

    private let connection: DBusConnection
    private unowned let service: PeerVoiceService
    /// While a client shows prompts itself, they are not notified.
    private let promptHandlers: PromptHandlers
    private var subscriptions: [SignalSubscription] = []
    private var serverWatch: NameWatch?
    /// The server's unique name, while it has one.
    private var serverOwner: String?
    /// The server's capabilities (`GetCapabilities`); nil until asked, and again when the server changes.
    private var capabilities: Set<String>?
    /// Notifications waiting for the capabilities; nil when no `GetCapabilities` is in flight.
    private var waitingForCapabilities: [(Set<String>) -> Void]?
    /// Pairing notifications on screen: notification id → peer.
    private var pairingNotifications: [UInt32: PeerRef] = [:]
    /// Peers whose pairing notification is on its way to the server, and those of them whose
    /// question was settled meanwhile (withdrawn as soon as the server names it).
    private var pairingNotificationsInFlight: Set<PeerRef> = []
    private var withdrawWhenShown: Set<PeerRef> = []

    init(connection: DBusConnection, service: PeerVoiceService, promptHandlers: PromptHandlers) {
        self.connection = connection
        self.service = service
        self.promptHandlers = promptHandlers
        subscriptions = [
            connection.subscribe(sender: Self.service, interface: Self.interface, member: "ActionInvoked", path: Self.path) { [unowned self] signal in
                guard let id = signal.arguments[0].uint32, let action = signal.arguments[1].string else { return }
                actionInvoked(id: id, action: action)
            },
            connection.subscribe(sender: Self.service, interface: Self.interface, member: "NotificationClosed", path: Self.path) { [unowned self] signal in
                guard let id = signal.arguments[0].uint32 else { return }
                pairingNotifications[id] = nil
            },
        ]
        // A new server knows nothing of the old one's notifications and may differ in capabilities.
        serverWatch = connection.watchName(Self.service, appeared: { [unowned self] owner in serverChanged(to: owner) },
                                           vanished: { [unowned self] in serverChanged(to: nil) })
    }

    /// Raises a notification for the events a person should see; ignores the rest.
    func handle(_ event: ServiceEvent) {
        switch event {
        case .messageReceived(let peer, _, let text):
            notifyMessage(from: .id(peer), text: text)
        case .pairingRequested(let peer, let name, let passkey, _) where promptHandlers.isEmpty:
            notifyPairing(with: peer, name: name, passkey: passkey)
        case .peerStateChanged(let peer, let state) where state != .pairing:
            withdrawPairing(for: peer)
        case .pairingSettled(let peer, _):
            withdrawPairing(for: peer)
        default:
            break
        }
    }

    // MARK: Notifications

    private func notifyMessage(from peer: PeerRef, text: String) {
        let name = displayName(of: peer)
        withCapabilities { [unowned self] capabilities in
            var body = String(text.prefix(Self.maxBodyCharacters))
            if body.count < text.count { body += "…" }
            notify(summary: "Message from \(name)", body: Self.body(body, capabilities: capabilities), actions: [],
                   hints: [("category", Variant("im.received"))]) { _ in }
        }
    }

    private func notifyPairing(with peer: PeerRef, name: String, passkey: String) {
        let name = name.isEmpty ? displayName(of: peer) : name
        // One prompt per peer on screen: a second request (Bluetooth asks twice) replaces the first.
        let previous = pairingNotifications.first { $0.value == peer }?.key
        pairingNotificationsInFlight.insert(peer)
        withdrawWhenShown.remove(peer)
        withCapabilities { [unowned self] capabilities in
            var body = passkey.isEmpty ? "\(name) (\(peer)) asks to pair" : "Compare the code \(passkey) with the other screen"
            if !capabilities.contains("actions") {
                body += "\nAnswer with: peervoicectl confirm \(peer) yes|no"
            }
            notify(summary: "Pair with \(name)?", body: Self.body(body, capabilities: capabilities),
                   actions: ["accept", "Accept", "reject", "Reject"],
                   hints: [("urgency", Variant(parsing: "byte 2")!)], replaces: previous ?? 0) { [weak self] id in
                guard let self else { return }
                if let previous { pairingNotifications[previous] = nil }
                pairingNotifications[id] = peer
                pairingNotificationsInFlight.remove(peer)
                if withdrawWhenShown.remove(peer) != nil { withdrawPairing(for: peer) }
            }
        }
    }

    private func withdrawPairing(for peer: PeerRef) {
        if pairingNotificationsInFlight.contains(peer) { withdrawWhenShown.insert(peer) }
        for (id, shown) in pairingNotifications where shown == peer {
            pairingNotifications[id] = nil
            connection.callAsync(destination: Self.service, path: Self.path, interface: Self.interface,
                                 method: "CloseNotification", arguments: Variant(tuple: [Variant(id)]), timeout: .seconds(5)) { result in
                if case .failure(let error) = result { Log.debug("could not withdraw the pairing notification for \(peer): \(error)") }
            }
        }
    }

    private func actionInvoked(id: UInt32, action: String) {
        guard let peer = pairingNotifications[id], action == "accept" || action == "reject" else { return }
        pairingNotifications[id] = nil
        let accept = action == "accept"
        Log.info("pairing with \(peer) \(accept ? "accepted" : "refused") in its notification")
        do {
            try service.confirmPairing(peer, accept: accept)
        } catch {
            Log.info("could not answer the pairing with \(peer) from its notification: \(error.message)")
        }
    }

    /// `Notify(app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout)`;
    /// `shown` gets the notification id.
    private func notify(summary: String, body: String, actions: [String], hints: [(String, Variant)],
                        replaces: UInt32 = 0, shown: @escaping (UInt32) -> Void) {
        let arguments = Variant(tuple: [
            Variant(Self.appName), Variant(replaces), Variant(""), Variant(summary), Variant(body),
            Variant(array: actions.map { Variant($0) }, elementType: "s"),
            Variant(dictionary: [("desktop-entry", Variant(Self.desktopEntry))] + hints),
            Variant(Int32(-1)),
        ])
        connection.callAsync(destination: Self.service, path: Self.path, interface: Self.interface, method: "Notify",
                             arguments: arguments, timeout: .seconds(10)) { result in
            switch result {
            case .success(let reply): if let id = reply[0].uint32 { shown(id) }
            case .failure(let error): Log.debug("notification not shown: \(error)")
            }
        }
    }

    /// Runs `body` with the server's capabilities, asking for them first if need be. Without a
    /// server the notification is dropped.
    private func withCapabilities(_ body: @escaping (Set<String>) -> Void) {
        if let capabilities { return body(capabilities) }
        if waitingForCapabilities != nil {
            waitingForCapabilities!.append(body)
            return
        }
        waitingForCapabilities = [body]
        connection.callAsync(destination: Self.service, path: Self.path, interface: Self.interface,
                             method: "GetCapabilities", timeout: .seconds(10)) { [weak self] result in
            guard let self else { return }
            let waiting = waitingForCapabilities ?? []
            waitingForCapabilities = nil
            switch result {
            case .success(let reply):
                let capabilities = Set(reply[0].strings ?? [])
                self.capabilities = capabilities
                waiting.forEach { $0(capabilities) }
            case .failure(let error):
                Log.debug("no desktop notification server (\(error)): \(waiting.count) notification(s) not shown")
            }
        }
    }

    private func serverChanged(to owner: String?) {
        defer { serverOwner = owner }
        guard let previous = serverOwner, previous != owner else { return }
        capabilities = nil
        pairingNotifications = [:]
        pairingNotificationsInFlight = []
        withdrawWhenShown = []
    }

    // MARK: Text

    private func displayName(of peer: PeerRef) -> String {
        let name = service.peerList().first { $0.ref == peer }?.name ?? ""
        return name.isEmpty ? peer.description : name
    }

    /// The body as the server expects it: servers with `body-markup` read it as markup, so `&`,
    /// `<` and `>` are escaped there and the text shows as written.
    static func body(_ text: String, capabilities: Set<String>) -> String {
        guard capabilities.contains("body-markup") else { return text }
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
