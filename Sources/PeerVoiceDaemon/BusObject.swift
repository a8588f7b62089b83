import GIO
import Glibc
import PeerVoiceBus
import PeerVoiceCore

/// `/org/example/PeerVoice` on the session bus: decodes method calls for `PeerVoiceService`,
/// encodes its answers, and turns its events into signals.
final class BusObject {
    static let busName = PeerVoiceBus.name
    static let path = PeerVoiceBus.path
    static let interface = PeerVoiceBus.interface
    static let errorPrefix = PeerVoiceBus.errorPrefix

    /// The interface as written in dbus/org.example.PeerVoice.xml, embedded at build time.
    static let introspectionXML = String(decoding: PackageResources.org_example_PeerVoice_xml, as: UTF8.self)

    private let connection: DBusConnection
    private let service: PeerVoiceService
    private var registration: ObjectRegistration?
    /// Callers of `RegisterPromptHandler`, whose prompts are not notified.
    let promptHandlers: PromptHandlers
    /// Callers of `StartMetering` and their `Levels`.
    private let metering: LevelsMetering
    /// `RegisterChannel`'s clients and their handlers.
    private let channels: BusChannels

    init(connection: DBusConnection, service: PeerVoiceService) throws(BusError) {
        self.connection = connection
        self.service = service
        promptHandlers = PromptHandlers(connection: connection)
        metering = LevelsMetering(connection: connection) { [unowned service] in service.voiceEngine }
        channels = BusChannels(connection: connection, channels: service.channels)
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
                service.startDiscovery { Self.reply(call, $0.map { nil }) }
            case "StopDiscovery":
                service.stopDiscovery { Self.reply(call, $0.map { nil }) }
            case "ListPeers":
                let peers = service.peerList().map { peer in
                    Variant(tuple: [Variant(peer.ref.description), Variant(peer.name),
                                    Variant(peer.transport.rawValue), Variant(peer.state.rawValue)])
                }
                call.reply(Variant(tuple: [Variant(array: peers, elementType: "(ssss)")]))
            case "Connect":
                service.connect(try PeerRef(parsing: arguments[0].string!)) { result in
                    Self.reply(call, result.map { id in Variant(tuple: [Variant(id.description)]) })
                }
            case "Disconnect":
                try service.disconnect(PeerRef(parsing: arguments[0].string!))
                call.reply()
            case "RemovePeer":
                try service.removePeer(PeerRef(parsing: arguments[0].string!))
                call.reply()
            case "Send":
                let target = arguments[0].string!
                let text = arguments[1].string!
                let peer = target.isEmpty ? nil : try PeerRef(parsing: target)
                // Answered once the message is on the disk: a reply is a promise it is kept.
                try service.send(text, to: peer) { messageID in call.reply(Variant(tuple: [Variant(messageID)])) }
            case "History":
                let (_, messages) = try service.history(of: PeerRef(parsing: arguments[0].string!),
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
                try service.confirmPairing(PeerRef(parsing: arguments[0].string!), accept: arguments[1].bool!)
                call.reply()
            case "RegisterPromptHandler":
                promptHandlers.register(call.sender)
                call.reply()
            case "StartVoice":
                try service.startVoice(PeerRef(parsing: arguments[0].string!))
                call.reply()
            case "StopVoice":
                try service.stopVoice(PeerRef(parsing: arguments[0].string!))
                call.reply()
            case "SetName":
                try service.setName(arguments[0].string!)
                call.reply()
            case "SetVisible":
                try service.setVisible(arguments[0].string!, arguments[1].bool!)
                call.reply()
            case "SetVolume":
                try service.setVolume(PeerRef(parsing: arguments[0].string!), volume: arguments[1].double!)
                call.reply()
            case "StartMetering":
                try metering.start(client: call.sender, intervalMs: arguments[0].uint32!)
                call.reply()
            case "StopMetering":
                metering.stop(client: call.sender)
                call.reply()
            case "SetPeerMuted":
                try service.setPeerMuted(PeerRef(parsing: arguments[0].string!), muted: arguments[1].bool!)
                call.reply()
            case "RegisterChannel":
                try channels.register(arguments[0].string!, handler: arguments[1].string!, options: arguments[2], client: call.sender)
                call.reply()
            case "UnregisterChannel":
                try channels.unregister(arguments[0].string!, client: call.sender)
                call.reply()
            case "OpenStream":
                let (channel, mode) = try BusChannels.streamRequest(channel: arguments[1].string!, options: arguments[2])
                let client = call.sender
                try service.openStream(to: PeerRef(parsing: arguments[0].string!), channel: channel, mode: mode,
                                       endedAbruptly: { [weak self] peer, reason in
                                           self?.channels.streamClosed(client: client, peer: peer, channel: channel, reason: reason)
                                       }) { result in
                    switch result {
                    case .success(let fd):
                        call.reply(Variant(tuple: [Variant(handle: 0)]), fds: [fd])
                        Glibc.close(fd)
                    case .failure(let error):
                        Self.fail(call, error)
                    }
                }
            case "JoinRoom":
                let options = arguments[1]
                try Self.refuseUnknownOptions(options, known: ["password", "accept-certificate", "force-tcp"])
                let forceTCP = options.lookup("force-tcp")
                if let forceTCP, forceTCP.bool == nil { throw .invalidArgument("force-tcp must be a boolean (b)") }
                service.rooms.join(url: arguments[0].string!, password: options.lookup("password")?.string,
                                   acceptCertificate: options.lookup("accept-certificate")?.string,
                                   forceTCP: forceTCP?.bool ?? false) { result in
                    Self.reply(call, result.map { Variant(tuple: [Variant(objectPath: RoomObjects.path(of: $0))]) })
                }
            case "SendFiles":
                let options = arguments[2].children.compactMap { $0[0].string }
                try service.sendFiles(arguments[1].strings ?? [], to: PeerRef(parsing: arguments[0].string!), options: options) { result in
                    Self.reply(call, result.map { Variant(tuple: [Variant(objectPath: $0)]) })
                }
            default:
                // GDBus only dispatches methods declared in the XML; this is a mismatch between the two.
                call.fail(name: Self.errorPrefix + "Failed", message: "\(call.method) is declared but not implemented")
            }
        } catch {
            Self.fail(call, error)
        }
    }

    /// Answers a call whose outcome came later (the reply was deferred until then).
    /// A deferred reply: the out-arguments (nil: none), or the error.
    private static func reply(_ call: MethodCall, _ result: Result<Variant?, ServiceError>) {
        switch result {
        case .success(let value): call.reply(value)
        case .failure(let error): fail(call, error)
        }
    }

    private static func refuseUnknownOptions(_ options: Variant, known: Set<String>) throws(ServiceError) {
        if let unknown = options.children.compactMap({ $0[0].string }).first(where: { !known.contains($0) }) {
            throw .invalidArgument("unknown option \"\(unknown)\" (known: \(known.sorted().joined(separator: ", ")))")
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
        case .id: Variant(service.ownID.description)
        case .fingerprint: Variant(service.ownKey.fingerprint)
        case .discoveryMethods: Variant(array: service.discoveryMethods.map { Variant($0) }, elementType: "s")
        case .audioProcessing:
            Variant(array: service.audioProcessing.map { Variant(tuple: [Variant($0.part.rawValue), Variant($0.running), Variant($0.reason)]) },
                    elementType: "(sbs)")
        case .name: Variant(service.settings.name)
        case .visible: Variant(array: DiscoveryMethod.allCases.filter(service.settings.visible.contains).map { Variant($0.rawValue) }, elementType: "s")
        case .speaking: Variant(service.isMicrophoneSpeaking)
        case .participants:
            Variant(array: service.relayedParticipants.map { Variant(tuple: [Variant($0.peer.description), Variant($0.name), Variant($0.speaking)]) },
                    elementType: "(ssb)")
        }
    }

    func emit(_ event: ServiceEvent) {
        if case .propertiesChanged(let properties) = event {
            emitPropertiesChanged(properties)
            return
        }
        for (name, arguments) in Self.signals(for: event) {
            do {
                try connection.emitSignal(path: Self.path, interface: Self.interface, name: name, arguments: Variant(tuple: arguments))
            } catch {
                Log.warning("could not emit \(name): \(error)")
            }
        }
    }

    /// The signals an event becomes, in order: a prompt is `PairingPrompt` first (which says what
    /// is asked), then `PairingRequested` for clients that know only that one.
    private static func signals(for event: ServiceEvent) -> [(String, [Variant])] {
        switch event {
        case .peerFound(let peer, let peerName): [("PeerFound", [Variant(peer.description), Variant(peerName)])]
        case .peerLost(let peer): [("PeerLost", [Variant(peer.description)])]
        case .peerIdentified(let address, let peer): [("PeerIdentified", [Variant(address.description), Variant(peer.description)])]
        case .peerStateChanged(let peer, let state): [("PeerStateChanged", [Variant(peer.description), Variant(state.rawValue)])]
        case .pairingRequested(let peer, let peerName, let passkey, let kind):
            [("PairingPrompt", [Variant(peer.description), Variant(peerName), Variant(passkey), Variant(kind.rawValue)]),
             ("PairingRequested", [Variant(peer.description), Variant(peerName), Variant(passkey)])]
        case .pairingSettled(let peer, let accepted): [("PairingSettled", [Variant(peer.description), Variant(accepted)])]
        case .messageReceived(let peer, let id, let text):
            [("MessageReceived", [Variant(peer.description), Variant(id), Variant(text)])]
        case .messageDelivered(let peer, let id): [("MessageDelivered", [Variant(peer.description), Variant(id)])]
        case .messageFailed(let peer, let id, let reason):
            [("MessageFailed", [Variant(peer.description), Variant(id), Variant(reason)])]
        case .muteChanged(let muted): [("MuteChanged", [Variant(muted)])]
        case .voiceStateChanged(let peer, let state): [("VoiceStateChanged", [Variant(peer.description), Variant(state.rawValue)])]
        case .propertiesChanged: preconditionFailure("handled above")
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
