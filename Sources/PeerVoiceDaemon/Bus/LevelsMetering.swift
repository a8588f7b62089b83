import GIO
import PeerVoiceCore

/// `StartMetering` / `StopMetering` and the unicast `Levels` signal, on the main loop: who asked
/// (``MeteringSubscriptions``, each client watched for leaving the bus), a 50 ms timer that runs
/// only while someone meters, and the voice engine's `metering` flag, so that nothing is
/// measured or sent while nobody asked.
final class LevelsMetering {
    /// How often due clients are looked at: the shortest interval a client may ask for.
    static let tick: Duration = .milliseconds(MeteringSubscriptions.minimumIntervalMs)

    private let connection: DBusConnection
    private let engine: () -> VoiceEngine?
    private var subscriptions = MeteringSubscriptions()
    private var watches: [String: NameWatch] = [:]
    private var timer: EventSource?

    /// `engine`: the voice engine, when there is one (its levels, and its flag to measure them).
    init(connection: DBusConnection, engine: @escaping () -> VoiceEngine?) {
        self.connection = connection
        self.engine = engine
    }

    /// `StartMetering` from `client` (the caller's unique name).
    func start(client: String, intervalMs: UInt32) throws(ServiceError) {
        try subscriptions.start(client: client, intervalMs: intervalMs, now: VoiceEngine.monotonicNs())
        if watches[client] == nil {
            Log.info("\(client) meters levels every \(intervalMs) ms")
            watches[client] = connection.watchName(client, appeared: { _ in }, vanished: { [unowned self] in
                guard watches[client] != nil else { return }
                Log.info("\(client) left the bus: it meters no more")
                end(client)
            })
        }
        engine()?.metering.store(true, ordering: .relaxed)
        if timer == nil {
            timer = Timer.every(Self.tick) { [unowned self] in tick() }
        }
    }

    /// `StopMetering` from `client`.
    func stop(client: String) {
        guard watches[client] != nil else { return }
        Log.info("\(client) stopped metering levels")
        end(client)
    }

    private func end(_ client: String) {
        subscriptions.stop(client: client)
        watches[client] = nil
        guard subscriptions.isEmpty else { return }
        engine()?.metering.store(false, ordering: .relaxed)
        timer = nil
    }

    private func tick() -> Bool {
        let levels = engine()?.levels ?? VoiceLevels(inputDBFS: LevelMeter.silenceDBFS, peersDBFS: [:])
        // A voice engine made after metering started (PipeWire came later) learns of it here.
        engine()?.metering.store(true, ordering: .relaxed)
        let peers = levels.peersDBFS.sorted { $0.key < $1.key }.map { Variant(dictionaryEntry: Variant($0.key.description), Variant($0.value)) }
        let arguments = Variant(tuple: [Variant(levels.inputDBFS), Variant(array: peers, elementType: "{sd}")])
        for client in subscriptions.tick(now: VoiceEngine.monotonicNs(), levels: levels) {
            do {
                try connection.emitSignal(path: BusObject.path, interface: BusObject.interface, name: "Levels",
                                          arguments: arguments, destination: client)
            } catch {
                Log.debug("could not send Levels to \(client): \(error)")
            }
        }
        return true
    }
}
