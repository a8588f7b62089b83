import Foundation
import GIO
import PeerVoiceCore

/// Runs peervoiced: owns the bus name, serves the API on the GLib main loop until SIGTERM/SIGINT.
/// Returns the process exit status.
public func runDaemon(arguments: [String]) -> Int32 {
    let options: Options
    switch Options.parse(arguments) {
    case .exit(let message, let status):
        FileHandle(fileDescriptor: status == 0 ? 1 : 2).write(Data((message + "\n").utf8))
        return status
    case .run(let parsed):
        options = parsed
    }
    if options.verbose { Log.threshold = .debug }

    let loop = MainLoop()
    // Watched before the name is owned: a client may send SIGTERM as soon as it sees the name.
    let stop = { (signal: String) in
        Log.info("\(signal): shutting down")
        loop.quit()
    }
    let signalSources = [UnixSignal.watch(SIGTERM) { stop("SIGTERM") }, UnixSignal.watch(SIGINT) { stop("SIGINT") }]
    let service: PeerVoiceService
    do {
        service = try PeerVoiceService(options: options)
    } catch {
        Log.error(error.message)
        return 1
    }
    let connection: DBusConnection
    let bus: BusObject
    let peerObjects: PeerObjects
    do {
        connection = try DBusConnection.session()
        // The object is in place before the name is owned, so the first caller finds it.
        bus = try BusObject(connection: connection, service: service)
        // The ObjectManager of /org/example/PeerVoice; the service publishes its peers through it.
        peerObjects = try PeerObjects(connection: connection)
        guard try connection.requestName(BusObject.busName) == .owned else {
            Log.error("\(BusObject.busName) is already owned on the session bus: another peervoiced is running (stop it first, e.g. systemctl --user stop peervoiced)")
            return 1
        }
    } catch {
        Log.error("cannot serve on the session bus: \(error.message) (is DBUS_SESSION_BUS_ADDRESS set? `make run` starts a private bus when there is none)")
        return 1
    }
    // A session service without its session bus serves nobody (the desktop session ended, or a
    // bus started by dbus-run-session went away): it ends with it rather than hold the state
    // directory and the listen port.
    connection.onClosed {
        Log.info("the session bus went away: shutting down")
        loop.quit()
    }
    let notifications = options.notify
        ? DesktopNotifications(connection: connection, service: service, promptHandlers: bus.promptHandlers) : nil
    service.peerChanged = { [unowned service] ref in peerObjects.show(service.peerObjectSnapshot(of: ref), at: PeerObjects.path(of: ref)) }
    let roomObjects = RoomObjects(connection: connection, rooms: service.rooms)
    service.rooms.changed = { roomObjects.update() }
    service.rooms.messageReceived = { room, sender, text in roomObjects.messageReceived(in: room, from: sender, text: text) }
    // The paired peers from the state directory have objects from the start, not from their first change.
    peerObjects.show(service.peerObjectSnapshots())
    let transferObjects = TransferObjects(connection: connection) { [unowned service] method, number, completion in
        service.transfers.perform(method, on: number, completion: completion)
    }
    peerObjects.otherObjects = { roomObjects.managedObjects + transferObjects.managedObjects.map { ($0.path, $0.interfaces) } }
    service.transfers.show = { transferObjects.show($0) }
    if let notifications {
        service.transfers.offered = { notifications.notifyTransferOffer($0) }
        service.transfers.offerSettled = { notifications.withdrawTransferOffer($0) }
    }
    // Before publishAll: an end the last run did not get onto the bus is noted shown once written.
    service.eventsWritten = { connection.flush(completion: $0) }
    service.transfers.publishAll()
    service.emit = { [unowned bus, unowned service] event in
        bus.emit(event)
        // The objects the event is about follow right after it, and only those.
        event.changedPeerObjects.forEach(service.peerChanged)
        notifications?.handle(event)
    }
    Log.info("serving \(BusObject.busName) on the session bus as \(connection.uniqueName)")
    do {
        try service.start()
    } catch {
        Log.error(error.message)
        connection.releaseName(BusObject.busName)
        return 1
    }
    // After start(): the voice engine exists, so --push-to-talk's initial mute reaches it.
    let shortcuts = GlobalShortcuts(connection: connection, service: service, pushToTalk: options.pushToTalk)

    loop.run()

    withExtendedLifetime((signalSources, shortcuts)) {}
    service.shutdown()
    transferObjects.unregister()
    roomObjects.unregister()
    peerObjects.unregister()
    bus.unregister()
    connection.releaseName(BusObject.busName)
    connection.flush()
    return 0
}
