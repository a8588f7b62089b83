import CPipeWire
import Glibc
import Synchronization

/// Why PipeWire could not be used; `description` is meant for people.
public enum PipeWireError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No PipeWire daemon to talk to (no socket, or nothing listening on it).
    case notRunning(String)
    /// The daemon was there but the connection failed or it stopped answering.
    case connectionFailed(String)
    /// A stream could not be created or connected.
    case streamFailed(String)

    public var description: String {
        switch self {
        case .notRunning(let message), .connectionFailed(let message), .streamFailed(let message): message
        }
    }
}

/// Runs `pw_init` once per process.
private let pipeWireInitialized: Bool = {
    pw_init(nil, nil)
    return true
}()

/// One connection to a PipeWire daemon, served by its own `pw_thread_loop` thread.
///
/// `init` connects and waits for the daemon's first answer, so it throws at once when no daemon is
/// reachable. If the daemon goes away later, `connectionState` turns `.disconnected` and the
/// `onDisconnect` handler runs (on the PipeWire thread); the context is then dead: drop it and its
/// streams, and make a new one to retry.
///
/// `@unchecked Sendable`: its pointers are used under `pw_thread_loop_lock` or on PipeWire's
/// thread, and what both sides change is in the `Mutex`.
public final class PipeWireContext: @unchecked Sendable {
    public enum ConnectionState: Sendable, Equatable {
        case connected
        case disconnected(String)
    }

    /// Called once, on PipeWire's thread, when the daemon goes away.
    public typealias DisconnectHandler = @Sendable (String) -> Void

    let loop: OpaquePointer
    private let context: OpaquePointer
    let core: OpaquePointer
    private let coreHook: UnsafeMutablePointer<spa_hook>
    private let coreEvents: UnsafeMutablePointer<pw_core_events>
    /// The socket path this context connected to (for messages).
    public let socketPath: String

    private struct Shared {
        var connection: ConnectionState = .connected
        var onDisconnect: DisconnectHandler?
        var pendingSync: Int32 = -1
        var synced = false
        /// The seq of the core's latest `done` (a roundtrip ``roundtrip(timeout:)`` waits for).
        var lastDone: Int32 = -1
        var connectError: String?
    }
    private let shared: Mutex<Shared>

    /// Connects to the PipeWire daemon.
    ///
    /// - Parameters:
    ///   - remote: the daemon's socket: a name inside the runtime directory (like `PIPEWIRE_REMOTE`)
    ///     or an absolute path; nil means `$PIPEWIRE_REMOTE` or `pipewire-0`.
    ///   - applicationName: shown by `pw-cli`/`pw-dump` as the client's application name.
    ///   - timeout: how long to wait for the daemon's first answer, in seconds.
    ///   - realTime: load client-rt.conf (module-rt: real-time priority for the data thread that runs
    ///     the streams' callbacks, as pw-play has); false loads client.conf (no priority boost).
    ///   - onDisconnect: called once, on PipeWire's thread, when the daemon goes away later.
    public init(remote: String? = nil, applicationName: String = "PeerVoice", timeout: Double = 5,
                realTime: Bool = true, onDisconnect: DisconnectHandler? = nil) throws(PipeWireError) {
        _ = pipeWireInitialized
        let location = Self.socketLocation(remote: remote)
        socketPath = location.path ?? location.remoteName
        if location.path == nil {
            throw .notRunning("PipeWire is not running (no runtime directory: neither PIPEWIRE_RUNTIME_DIR nor XDG_RUNTIME_DIR is set)")
        }
        guard let loop = pw_thread_loop_new("peervoice-pw", nil) else {
            throw .connectionFailed("cannot create the PipeWire thread loop: \(Self.errnoText(errno))")
        }
        self.loop = loop
        shared = Mutex(Shared(onDisconnect: onDisconnect))
        coreHook = .allocate(capacity: 1)
        coreHook.initialize(to: spa_hook())
        coreEvents = .allocate(capacity: 1)
        coreEvents.initialize(to: Self.makeCoreEvents())

        pw_thread_loop_lock(loop)
        // pw_context_new and pw_context_connect take ownership of the properties.
        let contextProperties = ["application.name": applicationName,
                                 "config.name": realTime ? "client-rt.conf" : "client.conf"]
        // pw_context_new starts the data thread the streams' real-time callbacks run on, and it
        // takes the name of the thread that starts it: name it for itself (per-thread CPU in top
        // and the benches would count it as the caller's otherwise).
        let callerName = Self.threadName
        Self.threadName = Self.dataThreadName
        let created = pw_context_new(pw_thread_loop_get_loop(loop), Self.properties(contextProperties), 0)
        if let callerName { Self.threadName = callerName }
        guard let context = created else {
            let error = errno
            pw_thread_loop_unlock(loop)
            Self.release(loop: loop, hook: coreHook, events: coreEvents)
            throw .connectionFailed("cannot create a PipeWire context: \(Self.errnoText(error))")
        }
        self.context = context

        var connectProperties = [String: String]()
        if let remote { connectProperties["remote.name"] = remote }
        guard let core = pw_context_connect(context, Self.properties(connectProperties), 0) else {
            let error = errno
            pw_context_destroy(context)
            pw_thread_loop_unlock(loop)
            Self.release(loop: loop, hook: coreHook, events: coreEvents)
            throw Self.connectError(errno: error, location: location)
        }
        self.core = core
        peervoice_core_add_listener(core, coreHook, coreEvents, Unmanaged.passUnretained(self).toOpaque())
        let seq = peervoice_core_sync(core, UInt32(PW_ID_CORE), 0)
        shared.withLock { $0.pendingSync = seq }
        // Starting the thread only now means no callback can see a half-built `self`.
        let started = pw_thread_loop_start(loop)
        var failure: PipeWireError?
        if started < 0 {
            failure = .connectionFailed("cannot start the PipeWire thread: \(Self.errnoText(-started))")
        } else {
            var deadline = timespec()
            pw_thread_loop_get_time(loop, &deadline, Int64(max(0, timeout) * 1e9))
            while failure == nil {
                let (synced, error) = shared.withLock { ($0.synced, $0.connectError) }
                if synced { break }
                if let error {
                    failure = .connectionFailed("PipeWire refused the connection at \(socketPath): \(error)")
                } else if pw_thread_loop_timed_wait_full(loop, &deadline) != 0,  // -ETIMEDOUT
                          !shared.withLock({ $0.synced || $0.connectError != nil }) {
                    failure = .connectionFailed("PipeWire at \(socketPath) did not answer within \(timeout) s")
                }
            }
        }
        pw_thread_loop_unlock(loop)
        // `self` is fully initialized here, so throwing runs deinit, which cleans up.
        if let failure { throw failure }
    }

    /// What PipeWire's data thread is called (the kernel keeps 15 bytes).
    static let dataThreadName = "peervoice-rt"

    /// The calling thread's name (/proc/thread-self/comm; nil if it cannot be read); setting it
    /// renames the thread.
    private static var threadName: String? {
        get {
            let fd = open("/proc/thread-self/comm", O_RDONLY)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var bytes = [UInt8](repeating: 0, count: 32)
            let count = read(fd, &bytes, bytes.count)
            guard count > 0 else { return nil }
            return String(decoding: bytes[0..<count].filter { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        }
        set {
            guard let newValue else { return }
            let fd = open("/proc/thread-self/comm", O_WRONLY)
            guard fd >= 0 else { return }
            defer { close(fd) }
            _ = Array(newValue.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        }
    }

    deinit {
        pw_thread_loop_lock(loop)
        spa_hook_remove(coreHook)
        pw_core_disconnect(core)
        pw_thread_loop_unlock(loop)
        pw_thread_loop_stop(loop)
        pw_context_destroy(context)
        Self.release(loop: loop, hook: coreHook, events: coreEvents)
    }

    public var connectionState: ConnectionState { shared.withLock { $0.connection } }

    public var isConnected: Bool { connectionState == .connected }

    /// Gives the calling thread real-time priority `priority` (SCHED_FIFO, 1–99) as this
    /// context's data thread got its own: through module-rt (client-rt.conf), which sets it
    /// directly where the process may and asks RealtimeKit otherwise. Returns nil when done, else
    /// why not (no module-rt, no privilege and no RealtimeKit).
    public func makeCurrentThreadRealtime(priority: Int32) -> String? {
        let result = peervoice_context_acquire_rt(context, priority)
        return result >= 0 ? nil : Self.errnoText(-result)
    }

    /// Replaces the handler called when the daemon goes away (called at once if it already has).
    public func setDisconnectHandler(_ handler: DisconnectHandler?) {
        let already: String? = shared.withLock {
            $0.onDisconnect = handler
            if case .disconnected(let message) = $0.connection { return message }
            return nil
        }
        if let already, let handler { handler(already) }
    }

    /// Runs `body` holding the thread loop's lock: every pw_* call from outside PipeWire's thread
    /// must. The lock is recursive, so PipeWire callbacks may call this too.
    func locked<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        pw_thread_loop_lock(loop)
        defer { pw_thread_loop_unlock(loop) }
        return try body()
    }

    /// Asks the daemon for a `done` and waits for it, lock held (the wait releases it): every
    /// event the daemon sent before has been handled then.
    func roundtrip(timeout: Double) throws(PipeWireError) {
        let seq = peervoice_core_sync(core, UInt32(PW_ID_CORE), 0)
        var deadline = timespec()
        pw_thread_loop_get_time(loop, &deadline, Int64(max(0, timeout) * 1e9))
        while shared.withLock({ $0.lastDone != seq }) {
            if case .disconnected(let reason) = connectionState { throw .connectionFailed(reason) }
            if pw_thread_loop_timed_wait_full(loop, &deadline) != 0, shared.withLock({ $0.lastDone != seq }) {
                throw .connectionFailed("PipeWire at \(socketPath) did not answer within \(timeout) s")
            }
        }
    }

    // MARK: Core events (PipeWire's thread, lock held)

    fileprivate func coreDone(id: UInt32, seq: Int32) {
        guard id == UInt32(PW_ID_CORE) else { return }
        shared.withLock { state in
            state.lastDone = seq
            if state.pendingSync == seq { state.synced = true }
        }
        pw_thread_loop_signal(loop, false)
    }

    fileprivate func coreError(id: UInt32, seq: Int32, result: Int32, message: String) {
        // Errors about other objects (a stream's node, say) reach their own listeners.
        guard id == UInt32(PW_ID_CORE) else { return }
        let text = "\(message) (\(Self.errnoText(-result)))"
        let (handler, wasSynced): (DisconnectHandler?, Bool) = shared.withLock { state in
            guard state.synced else {
                state.connectError = text
                return (nil, false)
            }
            guard result == -EPIPE, state.connection == .connected else { return (nil, true) }
            state.connection = .disconnected("PipeWire went away: \(text)")
            return (state.onDisconnect, true)
        }
        if !wasSynced { pw_thread_loop_signal(loop, false) }
        if let handler, case .disconnected(let reason) = connectionState { handler(reason) }
    }

    // MARK: Helpers

    private static func makeCoreEvents() -> pw_core_events {
        var events = pw_core_events()
        events.version = UInt32(PW_VERSION_CORE_EVENTS)
        events.done = { data, id, seq in
            guard let data else { return }
            Unmanaged<PipeWireContext>.fromOpaque(data).takeUnretainedValue().coreDone(id: id, seq: seq)
        }
        events.error = { data, id, seq, res, message in
            guard let data else { return }
            Unmanaged<PipeWireContext>.fromOpaque(data).takeUnretainedValue()
                .coreError(id: id, seq: seq, result: res, message: message.map { String(cString: $0) } ?? "error")
        }
        return events
    }

    private static func release(loop: OpaquePointer, hook: UnsafeMutablePointer<spa_hook>,
                                events: UnsafeMutablePointer<pw_core_events>) {
        pw_thread_loop_destroy(loop)
        hook.deinitialize(count: 1)
        hook.deallocate()
        events.deinitialize(count: 1)
        events.deallocate()
    }

    /// A `pw_properties` holding `values` (the caller, or the pw_* function it is passed to, owns it).
    static func properties(_ values: [String: String]) -> UnsafeMutablePointer<pw_properties>? {
        let properties = pw_properties_new_string("")
        for (key, value) in values { pw_properties_set(properties, key, value) }
        return properties
    }

    /// Where libpipewire looks for the daemon's socket, resolved the way it does.
    static func socketLocation(remote: String?) -> (remoteName: String, path: String?) {
        func env(_ name: String) -> String? {
            guard let value = getenv(name), value.pointee != 0 else { return nil }
            return String(cString: value)
        }
        let name = remote ?? env("PIPEWIRE_REMOTE") ?? "pipewire-0"
        if name.hasPrefix("/") { return (name, name) }
        guard let directory = env("PIPEWIRE_RUNTIME_DIR") ?? env("XDG_RUNTIME_DIR") ?? env("USERPROFILE") else {
            return (name, nil)
        }
        return (name, directory + "/" + name)
    }

    private static func connectError(errno error: Int32, location: (remoteName: String, path: String?)) -> PipeWireError {
        let path = location.path ?? location.remoteName
        var info = stat()
        if stat(path, &info) != 0 {
            if !location.remoteName.hasPrefix("/"), let variable = runtimeDirectoryVariable {
                return .notRunning("PipeWire is not running (no socket \(location.remoteName) in $\(variable.name) = \(variable.path))")
            }
            return .notRunning("PipeWire is not running (no socket at \(path))")
        }
        if error == ECONNREFUSED || error == EHOSTDOWN || error == ENOENT {
            return .notRunning("PipeWire is not running (nothing listens on \(path))")
        }
        return .connectionFailed("cannot connect to PipeWire at \(path): \(errnoText(error))")
    }

    /// Which environment variable names the runtime directory (as libpipewire picks it), and its value.
    private static var runtimeDirectoryVariable: (name: String, path: String)? {
        for name in ["PIPEWIRE_RUNTIME_DIR", "XDG_RUNTIME_DIR", "USERPROFILE"] {
            if let value = getenv(name), value.pointee != 0 { return (name, String(cString: value)) }
        }
        return nil
    }

    static func errnoText(_ code: Int32) -> String { String(cString: strerror(code)) }
}
