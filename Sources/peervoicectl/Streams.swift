import GIO
import Glibc
import PeerVoiceBus
import Synchronization

/// `open` and `listen`: app channels from the shell. A stream is a socket descriptor the service
/// hands over (OpenStream's reply, NewStream's argument); these commands bridge it to standard
/// input and output, or to a command's.
extension Ctl {
    static let listenerPath = "/org/example/PeerVoice/peervoicectl/listener"
    static let handlerXML = String(decoding: PackageResources.org_example_PeerVoice_ChannelHandler_xml, as: UTF8.self)

    // MARK: open

    static func openStream(_ service: Service, peer: String, channel: String, lines: Bool) throws(Exit) {
        signal(SIGPIPE, SIG_IGN)
        let loop = EventLoop()
        var reason: String?
        let subscription = service.subscribe(member: "StreamClosed") { signal in
            if signal.text(1) == channel { reason = signal.text(2) }
        }
        var opened: Result<Int32, Exit>?
        let options = Variant(dictionary: [("mode", Variant(lines ? "messages" : "stream"))])
        service.connection.callAsyncReceivingFDs(destination: Service.name, path: Service.path, interface: Service.interface,
                                                 method: "OpenStream", arguments: Variant(tuple: [Variant(peer), Variant(channel), options]),
                                                 timeout: .seconds(30)) { result in
            switch result {
            case .success(let reply):
                opened = reply.fds.first.map { .success($0) } ?? .failure(Exit(status: Exit.serviceError, message: "peervoicectl: OpenStream returned no descriptor"))
            case .failure(let error):
                opened = .failure(Exit.from(error))
            }
            loop.finish(.success(()))
        }
        try loop.run(service) { .failure(Exit(status: 130, message: "")) }
        guard let fd = try opened?.get() else { return }
        try bridge(fd, to: service, lines: lines) { reason }
        withExtendedLifetime(subscription) {}
    }

    /// Copies standard input to `fd` and `fd` to standard output until both directions have
    /// ended; an abrupt end of the stream is an error (with `reason()` if the service said one).
    static func bridge(_ fd: Int32, to service: Service, lines: Bool, reason: @escaping () -> String?) throws(Exit) {
        let bridge = StreamBridge(fd: fd, lines: lines)
        let loop = EventLoop()
        let check = Timer.every(.milliseconds(10)) {
            guard let outcome = bridge.outcome else { return true }
            switch outcome {
            case .clean: loop.finish(.success(()))
            case .abrupt(let text):
                loop.finish(.failure(Exit(status: Exit.serviceError, message: "peervoicectl: the stream ended abruptly: \(reason() ?? text)")))
            }
            return false
        }
        bridge.start()
        defer { check.cancel() }
        try loop.run(service) { .failure(Exit(status: 130, message: "")) }
    }

    // MARK: listen

    static func listen(_ service: Service, channel: String, command: [String], once: Bool) throws(Exit) {
        signal(SIGPIPE, SIG_IGN)
        let loop = EventLoop()
        let listener = StreamListener(command: command, once: once || command.isEmpty) { loop.finish($0) }
        let registration: ObjectRegistration
        do {
            registration = try service.connection.registerObject(
                path: listenerPath, introspectionXML: handlerXML, interface: PeerVoiceBus.channelHandlerInterface,
                methods: { call in listener.newStream(call) }, properties: { _ in nil })
        } catch {
            throw Exit(status: Exit.serviceError, message: "peervoicectl: cannot export the channel handler: \(error.message)")
        }
        try service.call("RegisterChannel", [Variant(channel), Variant(objectPath: listenerPath), Variant(dictionary: [])])
        if isatty(2) != 0 { Output.error("peervoicectl: listening on \(channel); Ctrl-C to stop") }
        let reaper = Timer.every(.milliseconds(50)) { listener.reap(); return true }
        defer { reaper.cancel() }
        try loop.run(service) { .success(()) }
        withExtendedLifetime(registration) {}
        if let bridged = listener.bridged {
            // A messages stream is bridged as `open --mode messages` does: a message is a line.
            try bridge(bridged, to: service, lines: listener.bridgedMode == "messages") { nil }
        }
        if let status = listener.exitStatus, status != 0 {
            throw Exit(status: status, message: "")
        }
    }
}

/// Standard input to a stream's socket and the socket to standard output, each on its own
/// thread with blocking I/O (the simplest fast copy); `outcome` is set once both have ended, or
/// at once when the stream ends abruptly.
final class StreamBridge: Sendable {
    enum Outcome { case clean, abrupt(String) }

    private struct State {
        var finishedDirections = 0
        var abrupt: String?
    }

    private let fd: Int32
    private let lines: Bool
    private let state = Mutex(State())

    init(fd: Int32, lines: Bool) {
        self.fd = fd
        self.lines = lines
        // Blocking: the two threads wait in read and write.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
    }

    var outcome: Outcome? {
        state.withLock { state in
            if let abrupt = state.abrupt { return .abrupt(abrupt) }
            return state.finishedDirections == 2 ? .clean : nil
        }
    }

    func start() {
        _ = NamedThread(name: "stdin-to-stream") { [self] in finish(copyInput()) }
        _ = NamedThread(name: "stream-to-stdout") { [self] in finish(copyOutput()) }
    }

    private func finish(_ failure: String?) {
        state.withLock { state in
            if let failure { state.abrupt = state.abrupt ?? failure } else { state.finishedDirections += 1 }
        }
    }

    /// nil when standard input ended (and the stream's direction with it).
    private func copyInput() -> String? {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pending: [UInt8] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            if lines {
                pending += buffer[0..<count]
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    if let failure = sendAll(Array(pending[..<newline]), asMessage: true) { return failure }
                    pending.removeSubrange(...newline)
                }
            } else if let failure = sendAll(Array(buffer[0..<count]), asMessage: false) {
                return failure
            }
        }
        if lines && !pending.isEmpty, let failure = sendAll(pending, asMessage: true) { return failure }
        shutdown(fd, Int32(SHUT_WR))
        return nil
    }

    private func sendAll(_ bytes: [UInt8], asMessage: Bool) -> String? {
        // An empty line is no message (a message has 1 to 65536 bytes).
        guard !bytes.isEmpty else { return nil }
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 {
                if errno == EINTR { continue }
                return String(cString: strerror(errno))
            }
            offset += asMessage ? bytes.count : sent
        }
        return nil
    }

    private func copyOutput() -> String? {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 {
                if errno == EINTR { continue }
                return String(cString: strerror(errno))
            }
            if count == 0 { return nil }
            var out = Array(buffer[0..<count])
            if lines { out.append(UInt8(ascii: "\n")) }
            var offset = 0
            while offset < out.count {
                let written = out[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
                if written < 0 {
                    if errno == EINTR { continue }
                    // Nobody reads our output any more: this direction is over.
                    return nil
                }
                offset += written
            }
        }
    }
}

/// `listen`'s handler object: runs the command for each NewStream, or keeps the first stream to
/// bridge when there is no command.
final class StreamListener {
    private let command: [String]
    private let once: Bool
    private let finish: (Result<Void, Exit>) -> Void
    private var children: Set<pid_t> = []
    private var taken = false
    /// Without a command: the stream to bridge once the loop has ended, and its mode.
    private(set) var bridged: Int32?
    private(set) var bridgedMode = ""
    /// With `--once`: the command's exit status.
    private(set) var exitStatus: Int32?

    init(command: [String], once: Bool, finish: @escaping (Result<Void, Exit>) -> Void) {
        self.command = command
        self.once = once
        self.finish = finish
    }

    func newStream(_ call: MethodCall) {
        let arguments = call.arguments
        guard call.method == "NewStream", let handle = arguments[2].handle, let fd = call.fileDescriptor(handle: handle) else {
            return call.fail(name: PeerVoiceBus.errorPrefix + "InvalidArgument", message: "no socket descriptor came with the call")
        }
        guard !(once && taken) else {
            close(fd)
            return call.fail(name: PeerVoiceBus.errorPrefix + "Rejected", message: "this listener takes one stream only")
        }
        taken = true
        let properties = arguments[3]
        if command.isEmpty {
            bridged = fd
            bridgedMode = properties.lookup("mode")?.string ?? ""
            call.reply()
            return finish(.success(()))
        }
        let environment = [
            "PEERVOICE_PEER=\(arguments[0].string ?? "")",
            "PEERVOICE_PEER_NAME=\(properties.lookup("name")?.string ?? "")",
            "PEERVOICE_CHANNEL=\(arguments[1].string ?? "")",
            "PEERVOICE_MODE=\(properties.lookup("mode")?.string ?? "")",
        ]
        defer { close(fd) }
        guard let pid = Self.spawn(command, stdio: fd, environment: environment) else {
            Output.error("peervoicectl: cannot run \(command[0]): \(String(cString: strerror(errno)))")
            call.fail(name: PeerVoiceBus.errorPrefix + "Failed", message: "the listener could not run its command")
            if once { finish(.failure(Exit(status: Exit.serviceError, message: ""))) }
            return
        }
        children.insert(pid)
        call.reply()
    }

    /// Collects ended commands; with `--once`, ends the loop when the one command has ended.
    func reap() {
        for pid in children {
            var status: Int32 = 0
            guard waitpid(pid, &status, WNOHANG) == pid else { continue }
            children.remove(pid)
            let signal = status & 0x7f
            if once {
                exitStatus = signal == 0 ? (status >> 8) & 0xff : 128 + signal
                finish(.success(()))
            }
        }
    }

    /// Runs `command` with `stdio` as standard input and output, signals unblocked and at their
    /// defaults, and the extra `environment`.
    private static func spawn(_ command: [String], stdio: Int32, environment: [String]) -> pid_t? {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdio, 0)
        posix_spawn_file_actions_adddup2(&actions, stdio, 1)
        // Blocking, as programs expect of their standard input and output.
        _ = fcntl(stdio, F_SETFL, fcntl(stdio, F_GETFL) & ~O_NONBLOCK)
        var inherited: [String] = []
        var index = 0
        while let entry = environ[index] {
            inherited.append(String(cString: entry))
            index += 1
        }
        let argv = command.map { strdup($0) } + [nil]
        let envp = (inherited + environment).map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let result = withDefaultSignalSpawnAttributes { posix_spawnp(&pid, command[0], &actions, &$0, argv, envp) }
        guard result == 0 else {
            errno = result
            return nil
        }
        return pid
    }
}
