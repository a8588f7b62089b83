import GIO
import PeerVoiceBus
import PeerVoiceCore

/// Desktop notifications (`org.freedesktop.Notifications` on the session bus, Desktop
/// Notifications Specification 1.2) for what a person should see without watching the bus: an
/// incoming message, a pairing request with Accept/Reject buttons that answer it like
/// `ConfirmPairing`, and files offered with Accept/Decline buttons that answer like the
/// transfer object's `Accept` and `Decline`.
///
/// Everything is asynchronous: without a notification server (nothing owns the name and nothing
/// can be activated) a notification is dropped with a debug line and the service carries on.
/// Closing a pairing notification without choosing leaves the request open (`peervoicectl
/// confirm` still answers it, and it times out as usual); one still showing when the peer stops
/// pairing (answered elsewhere, timed out, connected: `PairingSettled`) is withdrawn, and so is an
/// offer of files that stops waiting. While a client shows prompts itself (`RegisterPromptHandler`),
/// prompts (pairings and offers) are not notified.
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
    /// A question on screen: a pairing (by peer) or an offer of files (by transfer number).
    private enum Prompt: Hashable {
        case pairing(PeerRef)
        case transfer(Int)
    }

    /// Prompts on screen: notification id → prompt.
    private var prompts: [UInt32: Prompt] = [:]
    /// Prompts whose notification is on its way to the server, and those of them whose question
    /// was settled meanwhile (withdrawn as soon as the server names it).
    private var promptsInFlight: Set<Prompt> = []
    private var withdrawWhenShown: Set<Prompt> = []

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
                prompts[id] = nil
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
            withdraw(.pairing(peer))
        case .pairingSettled(let peer, _):
            withdraw(.pairing(peer))
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
        let body = passkey.isEmpty ? "\(name) (\(peer)) asks to pair" : "Compare the code \(passkey) with the other screen"
        ask(.pairing(peer), summary: "Pair with \(name)?", body: body, answer: "peervoicectl confirm \(peer) yes|no",
            actions: ["accept", "Accept", "reject", "Reject"])
    }

    /// Files offered, waiting for this person: who offers how many files of what size.
    func notifyTransferOffer(_ offer: TransferOffer) {
        guard promptHandlers.isEmpty else { return }
        let name = offer.peerName.isEmpty ? offer.peer.description : offer.peerName
        let what = offer.fileCount == 1 && !offer.firstName.isEmpty
            ? "\(offer.firstName) (\(ByteCount.text(offer.bytes)))"
            : "\(offer.fileCount) \(offer.fileCount == 1 ? "file" : "files"), \(ByteCount.text(offer.bytes))"
        ask(.transfer(offer.number), summary: "Receive files from \(name)?", body: what,
            answer: "peervoicectl transfer accept|decline \(offer.number)", actions: ["accept", "Accept", "decline", "Decline"])
    }

    /// The offer is no longer waiting: its notification goes.
    func withdrawTransferOffer(_ number: Int) { withdraw(.transfer(number)) }

    /// Shows a question with buttons (one per prompt on screen: a second replaces the first); a
    /// server without buttons gets the command that answers instead.
    private func ask(_ prompt: Prompt, summary: String, body: String, answer: String, actions: [String]) {
        let previous = prompts.first { $0.value == prompt }?.key
        promptsInFlight.insert(prompt)
        withdrawWhenShown.remove(prompt)
        withCapabilities { [unowned self] capabilities in
            var text = body
            if !capabilities.contains("actions") { text += "\nAnswer with: \(answer)" }
            notify(summary: summary, body: Self.body(text, capabilities: capabilities), actions: actions,
                   hints: [("urgency", Variant(parsing: "byte 2")!)], replaces: previous ?? 0) { [weak self] id in
                guard let self else { return }
                if let previous { prompts[previous] = nil }
                prompts[id] = prompt
                promptsInFlight.remove(prompt)
                if withdrawWhenShown.remove(prompt) != nil { withdraw(prompt) }
            }
        }
    }

    private func withdraw(_ prompt: Prompt) {
        if promptsInFlight.contains(prompt) { withdrawWhenShown.insert(prompt) }
        for (id, shown) in prompts where shown == prompt {
            prompts[id] = nil
            connection.callAsync(destination: Self.service, path: Self.path, interface: Self.interface,
                                 method: "CloseNotification", arguments: Variant(tuple: [Variant(id)]), timeout: .seconds(5)) { result in
                if case .failure(let error) = result { Log.debug("could not withdraw a notification: \(error)") }
            }
        }
    }

    private func actionInvoked(id: UInt32, action: String) {
        guard let prompt = prompts[id] else { return }
        switch (prompt, action) {
        case (.pairing(let peer), "accept"), (.pairing(let peer), "reject"):
            prompts[id] = nil
            let accept = action == "accept"
            Log.info("pairing with \(peer) \(accept ? "accepted" : "refused") in its notification")
            do {
                try service.confirmPairing(peer, accept: accept)
            } catch {
                Log.info("could not answer the pairing with \(peer) from its notification: \(error.message)")
            }
        case (.transfer(let number), "accept"), (.transfer(let number), "decline"):
            prompts[id] = nil
            service.transfers.perform(action == "accept" ? "Accept" : "Decline", on: number) { result in
                if case .failure(let error) = result { Log.info("could not answer transfer \(number) from its notification: \(error.message)") }
            }
        default:
            break
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
        prompts = [:]
        promptsInFlight = []
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
