import Foundation
import GIO
import PeerVoiceCore

/// Global hotkeys through the xdg-desktop-portal GlobalShortcuts portal
/// (`org.freedesktop.portal.GlobalShortcuts` version 1 on `org.freedesktop.portal.Desktop`): the
/// desktop lets the person pick the keys and tells us when they are pressed and released, whichever
/// window has the focus (on Wayland no application may grab keys itself).
///
/// CreateSession → Request::Response(session_handle) → BindShortcuts → Request::Response(shortcuts),
/// then `Activated`/`Deactivated` for our session:
///
/// | id | pressed | released |
/// | --- | --- | --- |
/// | `toggle-mute` | ToggleMute | – |
/// | `hold-to-mute` | Mute(true) | Mute(false) |
/// | `hold-to-talk` (`--push-to-talk`, which also starts muted) | Mute(false) | Mute(true) |
///
/// Without the portal it logs once where to read about binding keys by hand and carries on; when a
/// portal appears later (or comes back after a restart) it binds then. Nothing here blocks.
final class GlobalShortcuts {
    static let service = "org.freedesktop.portal.Desktop"
    static let path = "/org/freedesktop/portal/desktop"
    static let interface = "org.freedesktop.portal.GlobalShortcuts"
    static let requestInterface = "org.freedesktop.portal.Request"

    enum MuteAction: Sendable {
        case toggle, mute, unmute
    }

    struct Shortcut: Sendable {
        let id: String
        let description: String
        /// The keys we suggest, in the XDG shortcuts notation; the desktop (and the person) decide.
        let preferredTrigger: String
        let pressed: MuteAction
        let released: MuteAction?
    }

    static let toggleMute = Shortcut(id: "toggle-mute", description: "Mute or unmute the microphone",
                                     preferredTrigger: "CTRL+ALT+M", pressed: .toggle, released: nil)
    static let holdToMute = Shortcut(id: "hold-to-mute", description: "Mute the microphone while held",
                                     preferredTrigger: "CTRL+ALT+H", pressed: .mute, released: .unmute)
    static let holdToTalk = Shortcut(id: "hold-to-talk", description: "Push to talk: unmute the microphone while held",
                                     preferredTrigger: "CTRL+ALT+SPACE", pressed: .unmute, released: .mute)

    private enum Phase {
        /// Not started, or the portal went away after we had a session.
        case idle
        case probing, creatingSession, binding
        case bound(session: String)
        /// The portal (or its GlobalShortcuts interface) is not there.
        case missing
    }

    private let connection: DBusConnection
    private unowned let service: PeerVoiceService
    let shortcuts: [Shortcut]
    private var phase = Phase.idle
    /// Bumped whenever the portal goes away, so answers meant for its predecessor are ignored.
    private var generation = 0
    private var requestCount = 0
    private var announcedMissing = false
    /// The Response subscription of the request in flight.
    private var pendingResponse: SignalSubscription?
    private var activationSubscriptions: [SignalSubscription] = []
    private var portalWatch: NameWatch?
    private var portalOwner: String?

    init(connection: DBusConnection, service: PeerVoiceService, pushToTalk: Bool) {
        self.connection = connection
        self.service = service
        shortcuts = [Self.toggleMute, Self.holdToMute] + (pushToTalk ? [Self.holdToTalk] : [])
        if pushToTalk { service.setMuted(true) }
        activationSubscriptions = [
            connection.subscribe(sender: Self.service, interface: Self.interface, member: "Activated", path: Self.path) { [unowned self] signal in
                shortcutSignal(signal, pressed: true)
            },
            connection.subscribe(sender: Self.service, interface: Self.interface, member: "Deactivated", path: Self.path) { [unowned self] signal in
                shortcutSignal(signal, pressed: false)
            },
        ]
        portalWatch = connection.watchName(Self.service, appeared: { [unowned self] owner in portalAppeared(owner) },
                                           vanished: { [unowned self] in portalVanished() })
        // The portal is usually started on demand (D-Bus activation): asking is what starts it.
        probe()
    }

    // MARK: Portal life

    private func portalAppeared(_ owner: String) {
        if let previous = portalOwner, previous != owner { portalVanished() }
        portalOwner = owner
        switch phase {
        case .idle, .missing: probe()
        default: break
        }
    }

    /// The portal lost its owner: whatever it knew of us is gone.
    private func portalVanished() {
        // The watch's first report of a portal not running yet (it is started on demand) is no loss.
        guard portalOwner != nil else { return }
        portalOwner = nil
        generation += 1
        pendingResponse = nil
        switch phase {
        case .creatingSession, .binding, .bound:
            Log.info("the desktop portal went away: global hotkeys are off until it is back")
        default:
            break
        }
        phase = .idle
    }

    /// Reads the GlobalShortcuts `version` property: an answer means the portal is there.
    private func probe() {
        phase = .probing
        let generation = generation
        connection.callAsync(destination: Self.service, path: Self.path, interface: "org.freedesktop.DBus.Properties",
                             method: "Get", arguments: Variant(tuple: [Variant(Self.interface), Variant("version")]),
                             timeout: .seconds(25)) { [weak self] result in
            guard let self, generation == self.generation, case .probing = phase else { return }
            switch result {
            case .success(let reply):
                Log.debug("desktop portal GlobalShortcuts version \(reply[0].unboxed?.uint32 ?? 0)")
                createSession()
            case .failure(let error):
                phase = .missing
                if !announcedMissing {
                    announcedMissing = true
                    Log.info("global hotkeys need the xdg-desktop-portal GlobalShortcuts portal, which is not available (\(error.message)); bind keys to `peervoicectl mute toggle` in your desktop instead: see README.md, \"Global hotkey\"")
                } else {
                    Log.debug("desktop portal without GlobalShortcuts: \(error)")
                }
            }
        }
    }

    /// The shortcuts as the portal takes them: `a(sa{sv})`, each with its description and the keys we suggest.
    private var shortcutList: Variant {
        Variant(array: shortcuts.map { shortcut in
            Variant(tuple: [Variant(shortcut.id), Variant(dictionary: [("description", Variant(shortcut.description)),
                                                                        ("preferred_trigger", Variant(shortcut.preferredTrigger))])])
        }, elementType: "(sa{sv})")
    }

    private func createSession() {
        phase = .creatingSession
        let sessionToken = "peervoice_\(UInt32.random(in: 0...UInt32.max))"
        // The list goes in CreateSession's options too: xdg-desktop-portal-kde 5.27 registers
        // shortcuts only from there, and answers a BindShortcuts alone with none bound.
        request("CreateSession", [], options: [("session_handle_token", Variant(sessionToken)), ("shortcuts", shortcutList)],
                what: "create a hotkey session") { [unowned self] results in
            guard let session = results.lookup("session_handle")?.string else {
                Log.warning("the desktop portal created a hotkey session without naming it: global hotkeys are off")
                phase = .missing
                return
            }
            bind(session: session)
        }
    }

    private func bind(session: String) {
        phase = .binding
        request("BindShortcuts", [Variant(objectPath: session), shortcutList, Variant("")],
                what: "bind the hotkeys") { [unowned self] results in
            phase = .bound(session: session)
            let bound = (results.lookup("shortcuts")?.children ?? []).map { entry in
                let trigger = entry[1].lookup("trigger_description")?.string ?? ""
                return entry[0].string.map { trigger.isEmpty ? $0 : "\($0) (\(trigger))" } ?? "?"
            }
            Log.info("global hotkeys bound through the desktop portal: \(bound.isEmpty ? "none yet (assign keys in the desktop's settings)" : bound.joined(separator: ", "))")
        }
    }

    /// Calls a portal method that answers through a Request object: subscribes to the Response
    /// on the path the portal will use (…/request/SENDER/TOKEN) before calling, so an answer that
    /// comes at once is not missed; `success` gets the results of response 0.
    private func request(_ method: String, _ arguments: [Variant], options extraOptions: [(String, Variant)] = [],
                         what: String, success: @escaping (Variant) -> Void) {
        requestCount += 1
        let token = "peervoice\(requestCount)_\(UInt32.random(in: 0...UInt32.max))"
        let sender = connection.uniqueName.dropFirst().replacingOccurrences(of: ".", with: "_")
        let generation = generation
        let answered = { [unowned self] (signal: BusSignal) in
            guard generation == self.generation else { return }
            pendingResponse = nil
            let response = signal.arguments[0].uint32 ?? 2
            guard response == 0 else {
                Log.info("could not \(what) through the desktop portal (\(response == 1 ? "cancelled" : "refused")): global hotkeys are off")
                phase = .missing
                return
            }
            success(signal.arguments[1])
        }
        let expected = "\(Self.path)/request/\(sender)/\(token)"
        pendingResponse = subscribeResponse(path: expected, answered)
        let options = Variant(dictionary: [("handle_token", Variant(token))] + extraOptions)
        connection.callAsync(destination: Self.service, path: Self.path, interface: Self.interface, method: method,
                             arguments: Variant(tuple: arguments + [options])) { [weak self] result in
            guard let self, generation == self.generation else { return }
            switch result {
            case .success(let reply):
                // Portals older than handle_token answer on a path of their own choosing.
                if let handle = reply[0].string, handle != expected, pendingResponse != nil {
                    pendingResponse = subscribeResponse(path: handle, answered)
                }
            case .failure(let error):
                pendingResponse = nil
                Log.warning("could not \(what) through the desktop portal: \(error): global hotkeys are off")
                phase = .missing
            }
        }
    }

    private func subscribeResponse(path: String, _ answered: @escaping (BusSignal) -> Void) -> SignalSubscription {
        connection.subscribe(sender: Self.service, interface: Self.requestInterface, member: "Response", path: path, answered)
    }

    // MARK: Activation

    /// `Activated`/`Deactivated(o session_handle, s shortcut_id, t timestamp, a{sv} options)`.
    private func shortcutSignal(_ signal: BusSignal, pressed: Bool) {
        guard case .bound(let session) = phase, signal.arguments.count >= 2,
              signal.arguments[0].string == session, let id = signal.arguments[1].string,
              let shortcut = shortcuts.first(where: { $0.id == id }) else { return }
        Log.debug("hotkey \(id) \(pressed ? "pressed" : "released")")
        switch pressed ? shortcut.pressed : shortcut.released {
        case .toggle: _ = service.toggleMute()
        case .mute: service.setMuted(true)
        case .unmute: service.setMuted(false)
        case nil: break
        }
    }
}
