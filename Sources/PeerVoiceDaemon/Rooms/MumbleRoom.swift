import GIO
import PeerVoiceCore

/// One room: a connection to a Mumble server, logged in and sitting in one channel, kept up
/// (reconnecting with backoff) until `leave()`. Main loop only. Owns the TLS connection, the
/// control stream's decoder, what the server told us (`MumbleRoomModel`) and the timers.
///
/// The password is held for reconnecting and sent only inside TLS to a server whose certificate
/// is the pinned one; it is never logged.
final class MumbleRoom {
    enum State: String {
        case connecting, connected, reconnecting, failed
    }

    let number: Int
    let url: MumbleURL
    let username: String
    private let password: String?
    private let pins: RoomPins
    private let identity: RoomIdentity
    /// Mumble's protobuf messages both ways (protobuf-c).
    private let codec: any MumbleControlCodec
    /// The voice thread, once it runs: our voice and the room's talkers go through the call's engine.
    private let voice: () -> VoiceEngine?
    /// The voice thread has this room in its call.
    private var inCall = false
    /// A fingerprint the person accepted in place of the pinned one (`accept-certificate`).
    private var acceptedFingerprint: String?

    private(set) var state = State.connecting
    /// Why the room is `failed` or `reconnecting`, in words; "" otherwise.
    private(set) var error = ""
    /// The server certificate's SHA-256, as `openssl x509 -fingerprint -sha256` prints it.
    private(set) var serverFingerprint = ""
    /// The server presented a certificate other than the pinned one (`serverFingerprint`).
    private(set) var certificateChanged = false
    private(set) var model = MumbleRoomModel()
    /// The sessions whose voice packets arrived in the last `speakingHold`.
    private(set) var speaking: Set<UInt32> = []

    /// Something a `Room` property shows changed.
    var changed: () -> Void = {}
    /// A text message to us or our channel: the sender's name and the text (as the server sent it, often HTML).
    var messageReceived: (String, String) -> Void = { _, _ in }

    private var connection: TLSClientConnection?
    /// Voice over UDP, from the server's `CryptSetup` until the connection ends (nil with `force-tcp`).
    private var udp: RoomUDP?
    /// `JoinRoom`'s `force-tcp`: voice only through the tunnel, as Mumble's "Force TCP mode".
    private let forceTCP: Bool
    private var decoder = MumbleFrameDecoder()
    private var channel: UInt32?
    private var pingTimer: EventSource?
    private var retryTimer: EventSource?
    private var speakingTimers: [UInt32: EventSource] = [:]
    /// Failed attempts since the last time we were in the channel.
    private var retries = 0
    private var muted: Bool
    /// `JoinRoom`'s reply, until the first attempt ends.
    private var joinCompletion: ((Result<Void, ServiceError>) -> Void)?
    /// `Register` calls waiting for the server's answer, and how long they wait.
    private var registerCompletions: [(Result<Void, ServiceError>) -> Void] = []
    private var registerTimer: EventSource?
    private var nextMessageID = 1
    /// Volume and mute here by user name (names stay across reconnects, sessions do not).
    private var playback: [String: VoiceMixer.Channel] = [:]
    /// The timestamp of our pings: a count (the server only echoes it).
    private var pings: UInt64 = 0
    /// Pings sent since the server last sent anything: a network gone quiet closes nothing.
    private var pingsUnanswered = 0
    /// After this many, the connection counts as lost (Mumble's servers drop a client after 30 s).
    static let maxPingsUnanswered = 6
    private var isLeft = false

    static let connectTimeout: Duration = .seconds(10)
    /// murmurd answers a registration at once (a database write); a server that says nothing in this long will not.
    static let registerTimeout: Duration = .seconds(10)
    /// Mumble drops a client silent for 30 s; its own clients ping every 5 s.
    static let pingInterval: Duration = .seconds(5)
    static let speakingHold: Duration = .milliseconds(300)
    static let maxBackoff: Duration = .seconds(30)

    init(number: Int, url: MumbleURL, username: String, password: String?, acceptedFingerprint: String?, forceTCP: Bool,
         pins: RoomPins, identity: RoomIdentity, codec: any MumbleControlCodec, muted: Bool,
         voice: @escaping () -> VoiceEngine?) {
        self.forceTCP = forceTCP
        self.identity = identity
        self.codec = codec
        self.voice = voice
        self.number = number
        self.url = url
        self.username = username
        self.password = password
        self.acceptedFingerprint = acceptedFingerprint
        self.pins = pins
        self.muted = muted
    }

    /// Which way our voice goes now (PROTOCOL.md §14.7).
    var voicePath: MumbleVoiceRoute.Path { udp?.route.path ?? .tcp }

    var server: String { url.host.contains(":") ? "[\(url.host)]:\(url.port)" : "\(url.host):\(url.port)" }

    /// The channel we are in, as a path from the root ("/" for the root); "" before we are in one.
    var channelPath: String { model.ownChannel.map(model.path(of:)) ?? "" }

    /// Connects; `completion` gets the first attempt's outcome (in the channel, or why not).
    func join(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        joinCompletion = completion
        connect()
    }

    /// Leaves the server (no reconnecting); the room is done.
    func leave() {
        isLeft = true
        stop()
        finishJoin(.failure(.failed("the room was left before it was joined")))
    }

    func setMuted(_ muted: Bool) {
        guard muted != self.muted else { return }
        self.muted = muted
        if state == .connected, let own = model.ownSession { send(.selfMute(session: own, muted: muted)) }
    }

    /// Sends text to our channel; returns its id.
    func sendToChannel(_ text: String) throws(ServiceError) -> String {
        guard state == .connected, let channel = model.ownChannel else { throw .notConnected("the room is \(state.rawValue), not connected") }
        return sendText(text, sessions: [], channels: [channel])
    }

    /// Sends text to one user of the server, named by session number or name.
    func send(_ text: String, toUser user: String) throws(ServiceError) -> String {
        guard state == .connected else { throw .notConnected("the room is \(state.rawValue), not connected") }
        let target = UInt32(user).flatMap { model.users[$0] } ?? model.users.values.first { $0.name == user }
        guard let target else { throw .invalidArgument("no user \"\(user)\" on \(server)") }
        return sendText(text, sessions: [target.session], channels: [])
    }

    private func sendText(_ text: String, sessions: [UInt32], channels: [UInt32]) -> String {
        // Mumble shows text as HTML: escape it, so what is typed is what is read.
        var escaped = ""
        for character in text {
            switch character {
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "&": escaped += "&amp;"
            case "\n": escaped += "<br>"
            default: escaped.append(character)
            }
        }
        send(.textMessage(sessions: sessions, channels: channels, text: escaped))
        defer { nextMessageID += 1 }
        return "room\(number)-\(nextMessageID)"
    }

    /// Our voice packet for the room (from the voice thread) while connected: over UDP when that
    /// path works, else through the TCP tunnel, dropped there rather than queued behind a backlog
    /// (late voice is useless).
    func sendVoice(_ packet: [UInt8]) {
        guard state == .connected else { return }
        if udp?.send(voice: packet) == true { return }
        guard let connection, connection.queuedWrites < Self.maxQueuedVoice else { return }
        connection.send(codec.frame(.voice(packet)))
    }

    /// `SetUserVolume`, `SetUserMuted`: a user's voice here, by session or name (until it leaves;
    /// kept while we reconnect, under the name).
    func setPlayback(ofUser user: String, volume: Double? = nil, muted: Bool? = nil) throws(ServiceError) {
        let target = UInt32(user).flatMap { model.users[$0] } ?? model.users.values.first { $0.name == user }
        guard let target else { throw .invalidArgument("no user \"\(user)\" on \(server)") }
        var channel = playback[target.name] ?? .unity
        if let volume { try channel.setVolume(volume) }
        if let muted { channel.muted = muted }
        playback[target.name] = channel
        if inCall { voice()?.setRoomPlayback(number, session: target.session, channel) }
    }

    /// `Register()`: asks the server to register this installation's certificate under our name
    /// (Mumble's self-registration: a UserState with user_id 0 for our own session), so nobody
    /// else can take the name there; completes once the server gives our session a user id, or
    /// with its refusal in words. Already registered: done at once.
    func register(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard state == .connected, let own = model.ownSession else {
            return completion(.failure(.notConnected("the room is \(state.rawValue), not connected")))
        }
        if model.users[own]?.userID != nil { return completion(.success(())) }
        registerCompletions.append(completion)
        guard registerCompletions.count == 1 else { return }
        Log.info("room \(number): registering \(username) on \(server)")
        send(.register(session: own))
        registerTimer = Timer.after(Self.registerTimeout) { [weak self] in
            guard let self else { return }
            finishRegister(.failure(.notAvailable("\(server) did not answer the registration in \(Self.registerTimeout)")))
        }
    }

    private func finishRegister(_ result: Result<Void, ServiceError>) {
        registerTimer = nil
        let completions = registerCompletions
        registerCompletions = []
        if case .failure(let error) = result, !completions.isEmpty { Log.info("room \(number): not registered: \(error.message)") }
        completions.forEach { $0(result) }
    }

    /// Writes waiting in the TLS connection beyond which a voice packet is dropped (100 ms of 20 ms packets).
    static let maxQueuedVoice = 5

    // MARK: The connection

    private func connect() {
        retryTimer = nil
        pingsUnanswered = 0
        decoder = MumbleFrameDecoder()
        model = MumbleRoomModel()
        channel = nil
        Log.info("room \(number): connecting to \(server) as \(username)")
        identity.withCertificate { [weak self] certificate in
            guard let self, !isLeft else { return }
            TLSClientConnection.connect(host: url.host, port: url.port, timeout: Self.connectTimeout,
                                        clientCertificate: certificate) { [weak self] result in
                guard let self, !isLeft else {
                    if case .success(let connection) = result { connection.close() }
                    return
                }
                switch result {
                case .success(let connection):
                    secured(connection)
                case .failure(let failure) where failure.inHandshake:
                    lost("\(server) ended the connection in the TLS handshake (murmurd does so when it is full, or to a banned address): \(failure.message)")
                case .failure(let failure):
                    lost("cannot reach \(server): \(failure.message)")
                }
            }
        }
    }

    private func secured(_ connection: TLSClientConnection) {
        let fingerprint = connection.peerCertificateFingerprint
        serverFingerprint = fingerprint
        switch pins.check(server: server, fingerprint: fingerprint, accepted: acceptedFingerprint) {
        case .trusted:
            break
        case .changed(let pinned):
            connection.close()
            certificateChanged = true
            Log.warning("room \(number): \(server)'s certificate changed (pinned \(pinned), now \(fingerprint)); refused")
            return fail(.rejected("the certificate of \(server) changed: it was \(pinned), it is now \(fingerprint). If you trust the new one, join again with accept-certificate set to it"))
        }
        Log.info("room \(number): TLS to \(server), certificate \(fingerprint)")
        self.connection = connection
        connection.onReceive = { [unowned self] bytes in received(bytes) }
        connection.onClosed = { [unowned self] failure in
            self.connection = nil
            lost(failure.map { "\(server) closed the connection: \($0.message)" } ?? "\(server) closed the connection")
        }
        // 1.3.4: the legacy UDP voice format (PROTOCOL.md "Rooms").
        send(.version(0x01_03_04, release: "PeerVoice \(Options.version)", os: "Linux", osVersion: ""))
        send(.authenticate(username: username, password: password))
        pingTimer = Timer.every(Self.pingInterval) { [weak self] in
            guard let self else { return false }
            guard pingsUnanswered < Self.maxPingsUnanswered else {
                drop("\(server) sent nothing for \(Self.pingInterval * Self.maxPingsUnanswered)")
                return false
            }
            pings += 1
            pingsUnanswered += 1
            send(.ping(timestamp: pings))
            return true
        }
    }

    private func send(_ message: MumbleClientMessage) {
        connection?.send(codec.frame(message))
    }

    private func received(_ bytes: [UInt8]) {
        pingsUnanswered = 0
        decoder.append(bytes)
        do throws(MumbleProtocolError) {
            while let (type, body) = try decoder.next() {
                handle(try codec.decode(type: type, body: body))
                if connection == nil { return }
            }
        } catch {
            Log.warning("room \(number): \(server) sent a bad message: \(error)")
            drop("\(server) broke the protocol (\(error))")
        }
    }

    private func handle(_ message: MumbleServerMessage) {
        let change = model.apply(message)
        switch message {
        case .reject(let kind, let reason):
            let words = reason.flatMap { $0.isEmpty ? nil : $0 } ?? "refused (\(kind.map { "\($0)" } ?? "no reason given"))"
            Log.info("room \(number): \(server) refused us: \(words)")
            return fail(kind == .wrongServerPassword || kind == .wrongUserPassword ? .rejected(words) : .failed(words))
        case .serverSync:
            guard let wanted = model.channel(atPath: url.channelPath) else {
                return fail(.invalidArgument("\(server) has no channel /\(url.channelPath.joined(separator: "/"))"))
            }
            channel = wanted
            if muted, let own = model.ownSession { send(.selfMute(session: own, muted: true)) }
            if model.ownChannel != wanted, let own = model.ownSession { send(.joinChannel(session: own, channel: wanted)) }
        case .permissionDenied(let denied):
            if state != .connected {
                return fail(.rejected("\(server) did not let us in: \(denied.words)"))
            }
            if !registerCompletions.isEmpty { finishRegister(.failure(.rejected("\(server) did not register \(username): \(denied.words)"))) }
        case .userState(let user) where user.session == model.ownSession && user.userID != nil:
            if !registerCompletions.isEmpty {
                Log.info("room \(number): registered as user \(user.userID ?? 0) on \(server)")
                finishRegister(.success(()))
            }
        case .userRemove(let session, let reason, let ban) where session == model.ownSession:
            // Applied already: we are no longer in the model.
            return fail(.rejected("\(ban ? "banned" : "kicked") from \(server)\(reason.map { ": \($0)" } ?? "")"))
        case .userRemove(let session, _, _):
            if inCall { voice()?.roomTalkerLeft(number, session: session) }
        case .textMessage(let text):
            let sender = text.actor.flatMap { model.users[$0]?.name } ?? "server"
            messageReceived(sender, text.text)
        case .voice(let bytes):
            if let packet = try? MumbleVoicePacket.fromServer(bytes[...]) { voiceArrived(packet) }
        case .cryptSetup(let key, let clientNonce, let serverNonce):
            cryptSetup(key: key, clientNonce: clientNonce, serverNonce: serverNonce)
        default:
            break
        }
        if let channel, state != .connected, model.ownChannel == channel {
            state = .connected
            error = ""
            retries = 0
            if let engine = voice() {
                engine.roomStarted(number)
                inCall = true
                for user in model.users.values { if let channel = playback[user.name] { engine.setRoomPlayback(number, session: user.session, channel) } }
            }
            Log.info("room \(number): in \(model.path(of: channel)) on \(server) with \(model.usersInOwnChannel.count) others")
            finishJoin(.success(()))
            changed()
        } else if change != .none && state == .connected {
            changed()
        }
    }

    /// A talker's packet, through the tunnel or over UDP.
    private func voiceArrived(_ packet: MumbleVoicePacket) {
        guard let session = packet.session else { return }
        talking(session, stopped: packet.isLast)
        if inCall { voice()?.roomVoice(number, packet) }
    }

    /// The server's `CryptSetup`, as Mumble's clients take it: a key and both nonces start voice
    /// over UDP (afresh); its nonce alone resyncs our decryption; nothing asks for our nonce.
    private func cryptSetup(key: [UInt8]?, clientNonce: [UInt8]?, serverNonce: [UInt8]?) {
        if let key, let clientNonce, let serverNonce {
            // A new key: voice is in the tunnel again until the new socket's first echo.
            let wasUDP = voicePath == .udp
            udp?.stop()
            udp = nil
            if wasUDP { changed() }
            guard !forceTCP, let address = connection?.peerAddress else { return }
            let endpoint = IPEndpoint(host: address.host, port: address.port)
            do throws(SystemError) {
                udp = try RoomUDP(server: endpoint, key: key, clientNonce: clientNonce, serverNonce: serverNonce)
            } catch {
                return Log.warning("room \(number): no UDP socket for voice (\(error)); voice stays in the TCP tunnel")
            }
            guard let udp else { return Log.warning("room \(number): \(server) sent a CryptSetup of the wrong sizes; voice stays in the TCP tunnel") }
            udp.voiceReceived = { [unowned self] packet in voiceArrived(packet) }
            udp.sendControl = { [unowned self] message in send(message) }
            udp.pathChanged = { [unowned self, unowned udp] in
                if udp.route.path == .udp {
                    Log.info("room \(number): voice over UDP to \(udp.server) (round trip \((udp.route.roundTripNs ?? 0) / 1_000) µs)")
                } else {
                    Log.info("room \(number): no UDP echo from \(udp.server) for \(MumbleVoiceRoute.fallbackAfterNs / 1_000_000) ms; voice through the TCP tunnel")
                }
                changed()
            }
        } else if let serverNonce {
            udp?.resync(serverNonce: serverNonce)
        } else if let udp {
            Log.info("room \(number): \(server) asked for our UDP nonce (its decryption lost step); sent")
            send(.cryptSetup(clientNonce: udp.encryptNonce))
        }
    }

    private func talking(_ session: UInt32, stopped: Bool) {
        let was = speaking.contains(session)
        speakingTimers[session] = nil
        if stopped {
            speaking.remove(session)
        } else {
            speaking.insert(session)
            speakingTimers[session] = Timer.after(Self.speakingHold) { [weak self] in self?.talking(session, stopped: true) }
        }
        if was != speaking.contains(session) { changed() }
    }

    /// The connection is gone: before the first join it is the join's failure, afterwards we come back.
    private func lost(_ reason: String) {
        stop()
        if joinCompletion != nil {
            return fail(.notAvailable(reason))
        }
        retries += 1
        let delay = min(Self.maxBackoff, .seconds(1) * (1 << min(retries - 1, 5)))
        Log.info("room \(number): \(reason); reconnecting in \(delay)")
        state = .reconnecting
        error = reason
        changed()
        retryTimer = Timer.after(delay) { [weak self] in self?.connect() }
    }

    /// The server said no: no reconnecting until the person joins again.
    private func fail(_ reason: ServiceError) {
        stop()
        state = .failed
        error = reason.message
        // The object says so before JoinRoom's reply does.
        changed()
        finishJoin(.failure(reason))
    }

    private func drop(_ reason: String) {
        connection?.close()
        connection = nil
        lost(reason)
    }

    private func stop() {
        if inCall {
            voice()?.roomEnded(number)
            inCall = false
        }
        finishRegister(.failure(.notConnected("the connection to \(server) ended before it answered")))
        pingTimer = nil
        retryTimer = nil
        udp?.stop()
        udp = nil
        speakingTimers = [:]
        speaking = []
        connection?.close()
        connection = nil
    }

    private func finishJoin(_ result: Result<Void, ServiceError>) {
        guard let completion = joinCompletion else { return }
        joinCompletion = nil
        completion(result)
    }
}
