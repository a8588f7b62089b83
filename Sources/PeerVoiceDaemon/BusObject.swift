import GIO
import PeerVoiceCore

/// `/org/example/PeerVoice` on the session bus: decodes method calls for `PeerVoiceService`,
/// encodes its answers, and turns its events into signals.
final class BusObject {
    static let busName = "org.example.PeerVoice"
    static let path = "/org/example/PeerVoice"
    static let interface = "org.example.PeerVoice"
    static let errorPrefix = "org.example.PeerVoice.Error."

    /// The interface as written in dbus/org.example.PeerVoice.xml, embedded at build time.
    static let introspectionXML = String(decoding: PackageResources.org_example_PeerVoice_xml, as: UTF8.self)

    private let connection: DBusConnection
    private let service: PeerVoiceService
    private var registration: ObjectRegistration?

    init(connection: DBusConnection, service: PeerVoiceService) throws(BusError) {
        self.connection = connection
        self.service = service
        registration = try connection.registerObject(
            path: Self.path, introspectionXML: Self.introspectionXML, interface: Self.interface,
            methods: { [unowned self] call in dispatch(call) },
            properties: { [unowned self] name in ServiceProperty(rawValue: name).map(value(of:)) })
    }

    func unregister() { registration = nil }

    // MARK: Methods

    private func dispatch(_ call: MethodCall) {
        let arguments = call.arguments
        do throws(ServiceError) {
            switch call.method {
            case "StartDiscovery":
                try service.startDiscovery()
                call.reply()
            case "StopDiscovery":
                try service.stopDiscovery()
                call.reply()
            case "ListPeers":
                let peers = service.peerList().map { peer in
                    Variant(tuple: [Variant(peer.id.description), Variant(peer.name),
                                    Variant(peer.id.transport.rawValue), Variant(peer.state.rawValue)])
                }
                call.reply(Variant(tuple: [Variant(array: peers, elementType: "(ssss)")]))
            case "Connect":
                let peer = try PeerID(parsing: arguments[0].string!)
                service.connect(peer) { result in
                    switch result {
                    case .success: call.reply()
                    case .failure(let error): Self.fail(call, error)
                    }
                }
            case "Disconnect":
                try service.disconnect(PeerID(parsing: arguments[0].string!))
                call.reply()
            case "RemovePeer":
                try service.removePeer(PeerID(parsing: arguments[0].string!))
                call.reply()
            case "Send":
                let target = arguments[0].string!
                let text = arguments[1].string!
                let peer = target.isEmpty ? nil : try PeerID(parsing: target)
                let messageID = try service.send(text, to: peer)
                call.reply(Variant(tuple: [Variant(messageID)]))
            case "History":
                let messages = try service.history(of: PeerID(parsing: arguments[0].string!),
                                                   max: Int(arguments[1].uint32!))
                let rows = messages.map { message in
                    Variant(tuple: [Variant(message.id), Variant(message.status.rawValue),
                                    Variant(message.timeMs), Variant(message.text)])
                }
                call.reply(Variant(tuple: [Variant(array: rows, elementType: "(ssts)")]))
            case "Mute":
                service.setMuted(arguments[0].bool!)
                call.reply()
            case "ToggleMute":
                call.reply(Variant(tuple: [Variant(service.toggleMute())]))
            case "ConfirmPairing":
                try service.confirmPairing(PeerID(parsing: arguments[0].string!), accept: arguments[1].bool!)
                call.reply()
            case "StartVoice":
                try service.startVoice(PeerID(parsing: arguments[0].string!))
                call.reply()
            case "StopVoice":
                try service.stopVoice(PeerID(parsing: arguments[0].string!))
                call.reply()
            default:
                // GDBus only dispatches methods declared in the XML; this is a mismatch between the two.
                call.fail(name: Self.errorPrefix + "Failed", message: "\(call.method) is declared but not implemented")
            }
        } catch {
            Self.fail(call, error)
        }
    }

    private static func fail(_ call: MethodCall, _ error: ServiceError) {
        Log.debug("\(call.method) from \(call.sender): \(error.name): \(error.message)")
        call.fail(name: errorPrefix + error.name, message: error.message)
    }

    // MARK: Properties and signals

    private func value(of property: ServiceProperty) -> Variant {
        switch property {
        case .muted: Variant(service.isMuted)
        case .discovering: Variant(service.isDiscovering)
        case .version: Variant(Options.version)
        case .listenAddress: Variant(service.listenAddress)
        case .adapter: Variant(service.adapterName)
        case .audioProcessing: Variant(array: service.audioProcessing.map { Variant($0) }, elementType: "s")
        }
    }

    func emit(_ event: ServiceEvent) {
        if case .propertiesChanged(let properties) = event {
            emitPropertiesChanged(properties)
            return
        }
        let (name, arguments): (String, [Variant]) = switch event {
        case .peerFound(let peer, let peerName): ("PeerFound", [Variant(peer.description), Variant(peerName)])
        case .peerLost(let peer): ("PeerLost", [Variant(peer.description)])
        case .peerStateChanged(let peer, let state): ("PeerStateChanged", [Variant(peer.description), Variant(state.rawValue)])
        case .pairingRequested(let peer, let peerName, let passkey):
            ("PairingRequested", [Variant(peer.description), Variant(peerName), Variant(passkey)])
        case .messageReceived(let peer, let id, let text):
            ("MessageReceived", [Variant(peer.description), Variant(id), Variant(text)])
        case .messageDelivered(let peer, let id): ("MessageDelivered", [Variant(peer.description), Variant(id)])
        case .messageFailed(let peer, let id, let reason):
            ("MessageFailed", [Variant(peer.description), Variant(id), Variant(reason)])
        case .muteChanged(let muted): ("MuteChanged", [Variant(muted)])
        case .voiceStateChanged(let peer, let state): ("VoiceStateChanged", [Variant(peer.description), Variant(state.rawValue)])
        case .propertiesChanged: preconditionFailure("handled above")
        }
        do {
            try connection.emitSignal(path: Self.path, interface: Self.interface, name: name, arguments: Variant(tuple: arguments))
        } catch {
            Log.warning("could not emit \(name): \(error)")
        }
    }

    private func emitPropertiesChanged(_ properties: [ServiceProperty]) {
        do {
            try connection.emitPropertiesChanged(path: Self.path, interface: Self.interface,
                                                 changed: properties.map { ($0.rawValue, value(of: $0)) })
        } catch {
            Log.warning("could not emit PropertiesChanged: \(error)")
        }
    }
}
