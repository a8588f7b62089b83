import Foundation
import GIO
import Glibc
import PeerVoiceCore
import PipeWire
import Synchronization

/// What the control plane hands the voice thread to start one peer's voice session.
struct VoiceSessionSetup: Sendable {
    let peer: String
    /// Which of the peer's sessions this is: events carry it back.
    let generation: Int
    /// How our voice travels.
    let route: VoiceRoute
    let sealer: RecordSealer
    let opener: RecordOpener
    /// Our Opus frame length, and the peer's (its decoder and jitter buffer follow it).
    let localFrameMs: Int
    let remoteFrameMs: Int
}

/// How one peer's voice travels (the peer accepts both ways, whichever we choose).
enum VoiceRoute: Sendable {
    /// Sealed with the voice keys, one VOICE record per UDP datagram to this address: loss never
    /// stalls voice behind retransmissions.
    case datagrams(IPEndpoint)
    /// VOICE frames on the peer's link (a Bluetooth channel, or TCP where UDP does not get
    /// through), sealed as link records; the link drops them rather than queue them behind a
    /// backlog (``PeerLink/sendVoice(_:)``).
    case link

    var host: String? {
        if case .datagrams(let endpoint) = self { endpoint.host } else { nil }
    }
}

/// What the voice thread reports back (delivered on the main context).
enum VoiceEvent: Sendable {
    /// Both streams run and the peer's frames arrive.
    case active(peer: String, generation: Int)
    /// The session failed or could not start; `reason` is for the log.
    case stopped(peer: String, generation: Int, reason: String)
    /// The share of the peer's voice we lose changed: tell the peer (VOICE_REPORT).
    case lossChanged(peer: String, generation: Int, percent: Int)
    /// The capture processing this session runs (known once its microphone was checked for an
    /// echo canceller of its own).
    case processingChanged(Set<VoiceProcessing>)
}

/// Settings of the audio side, from the command line.
struct VoiceAudioOptions: Sendable {
    var source: String?
    var sink: String?
    var frameMs = 20
    var cue = true
    /// Start voice as soon as a peer connects.
    var autoStart = true
    /// Send voice to IP peers on the link rather than over UDP (for networks that drop UDP).
    var overLink = false
    /// Capture processing (`--no-echo-cancel`, `--no-noise-suppression` take parts away).
    var processing = Set(VoiceProcessing.allCases)
}

/// The voice thread: it owns the UDP socket, the PipeWire connection, each session's streams,
/// Opus codec, jitter buffer and voice keys. The control plane talks to it only through
/// `start`/`stop` (a command queue and the wake-up) and the atomic mute flag; PipeWire's real-time
/// thread meets it only through each session's two lock-free rings, whose callbacks use the same
/// wake-up when there is work: a frame captured, the speaker's ring to refill.
///
/// `@unchecked Sendable`: the control plane touches only the command queue (in a `Mutex`), the
/// wake-up, the atomics and (at shutdown) the thread handle; the voice-thread state below only the
/// voice thread.
final class VoiceEngine: @unchecked Sendable {
    /// The longest the thread sleeps while sessions exist. The audio callbacks and datagrams wake
    /// it when there is work; this only makes sure a stream that stalled is still looked at.
    static let stateCheckMs: Int32 = 50

    let muted = Atomic<Bool>(false)
    let socket: Socket
    private let options: VoiceAudioOptions
    private let onEvent: @Sendable (VoiceEvent) -> Void
    private let sendOnLink: @Sendable (_ peer: String, _ frame: VoiceFrame, _ queuedAt: Int64) -> Void
    private let commands = Mutex<[Command]>([])
    private let wakeup = VoiceWakeup()
    private var thread: NamedThread?

    private enum Command {
        case start(VoiceSessionSetup)
        case stop(peer: String, reason: String)
        case receivedOnLink(peer: String, frame: VoiceFrame, arrival: Int64)
        case peerReportedLoss(peer: String, percent: Int)
        case shutdown
    }

    // Voice-thread state.
    private var context: PipeWireContext?
    private var sessions: [String: VoiceSession] = [:]
    private var receiveBuffer = [UInt8](repeating: 0, count: 2048)

    /// `socket`: the bound UDP socket voice arrives on. `onEvent` and `sendOnLink` (a VOICE
    /// frame for a peer whose route is ``VoiceRoute/link``, and when it was encoded) run on the
    /// voice thread; hop to the main context from them.
    init(socket: Socket, options: VoiceAudioOptions, onEvent: @escaping @Sendable (VoiceEvent) -> Void,
         sendOnLink: @escaping @Sendable (_ peer: String, _ frame: VoiceFrame, _ queuedAt: Int64) -> Void) {
        self.socket = socket
        self.options = options
        self.onEvent = onEvent
        self.sendOnLink = sendOnLink
        thread = NamedThread(name: "peervoice-voice") { [unowned self] in run() }
    }

    /// Why voice cannot start now (no PipeWire), or nil. Cheap: looks for the daemon's socket.
    static var unavailableReason: String? {
        let environment = ProcessInfo.processInfo.environment
        guard let directory = environment["PIPEWIRE_RUNTIME_DIR"] ?? environment["XDG_RUNTIME_DIR"] else {
            return "voice needs PipeWire, and there is no runtime directory (XDG_RUNTIME_DIR is not set)"
        }
        let name = environment["PIPEWIRE_REMOTE"] ?? "pipewire-0"
        let path = name.hasPrefix("/") ? name : directory + "/" + name
        return FileManager.default.fileExists(atPath: path)
            ? nil : "voice needs PipeWire, which is not running (no \(path)); voice starts by itself when it is"
    }

    func start(_ setup: VoiceSessionSetup) { post(.start(setup)) }

    func stop(peer: String, reason: String) { post(.stop(peer: peer, reason: reason)) }

    /// A VOICE frame that came on `peer`'s link (already opened by it), stamped on arrival.
    func receivedOnLink(peer: String, frame: VoiceFrame) {
        post(.receivedOnLink(peer: peer, frame: frame, arrival: Self.monotonicNs()))
    }

    /// The peer's VOICE_REPORT: how much of our voice it loses.
    func peerReportedLoss(peer: String, percent: Int) {
        post(.peerReportedLoss(peer: peer, percent: percent))
    }

    /// Stops every session and the thread; returns once it has ended.
    func shutdown() {
        post(.shutdown)
        thread?.join()
    }

    private func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        wakeup.signal()
    }

    // MARK: The voice thread

    private func run() {
        var fds = [pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: wakeup.fd, events: Int16(POLLIN), revents: 0)]
        while true {
            _ = poll(&fds, nfds_t(fds.count), sessions.isEmpty ? -1 : Self.stateCheckMs)
            if fds[1].revents != 0 { wakeup.consume() }
            for command in commands.withLock({ queue in defer { queue.removeAll() }; return queue }) {
                switch command {
                case .start(let setup): startSession(setup)
                case .stop(let peer, let reason): endSession(peer, reason: reason, report: false)
                case .receivedOnLink(let peer, let frame, let arrival): sessions[peer]?.receive(frame, arrival: arrival)
                case .peerReportedLoss(let peer, let percent): sessions[peer]?.peerReportedLoss(percent)
                case .shutdown:
                    for peer in Array(sessions.keys) { endSession(peer, reason: "shutting down", report: false) }
                    context = nil
                    return
                }
            }
            receiveDatagrams()
            let now = Self.monotonicNs()
            let isMuted = muted.load(ordering: .relaxed)
            for (peer, session) in sessions {
                if let failure = session.pump(now: now, muted: isMuted, socket: socket) {
                    endSession(peer, reason: failure, report: true)
                } else {
                    if session.becameActive() { onEvent(.active(peer: peer, generation: session.generation)) }
                    if let loss = session.lossToReport() {
                        onEvent(.lossChanged(peer: peer, generation: session.generation, percent: loss))
                    }
                    if let processing = session.processingChanged() {
                        onEvent(.processingChanged(processing))
                    }
                }
            }
        }
    }

    private func startSession(_ setup: VoiceSessionSetup) {
        endSession(setup.peer, reason: "replaced by a new session", report: false)
        do {
            if context == nil || context?.isConnected == false {
                context = try PipeWireContext(applicationName: "PeerVoice")
            }
            guard let context else { return }
            let peer = setup.peer, sendOnLink = sendOnLink
            sessions[peer] = try VoiceSession(setup: setup, context: context, options: options, wakeup: wakeup) { frame in
                sendOnLink(peer, frame, Self.monotonicNs())
            }
            Log.info("voice with \(setup.peer): session started (\(setup.localFrameMs) ms frames out, \(setup.remoteFrameMs) ms in)")
        } catch {
            context = nil
            onEvent(.stopped(peer: setup.peer, generation: setup.generation, reason: "\(error)"))
        }
    }

    /// Ends `peer`'s session; `report` tells the control plane, which did not ask for it.
    private func endSession(_ peer: String, reason: String, report: Bool) {
        guard let session = sessions.removeValue(forKey: peer) else { return }
        session.close(cue: options.cue)
        Log.info("voice with \(peer) stopped (\(reason)): \(session.statisticsSummary)")
        if report { onEvent(.stopped(peer: peer, generation: session.generation, reason: reason)) }
    }

    /// Hands each datagram to the session whose keys open it (sealed records authenticate their
    /// sender, whatever address a relay or NAT shows).
    private func receiveDatagrams() {
        let arrival = Self.monotonicNs()
        while let (count, from) = receiveBuffer.withUnsafeMutableBytes({ socket.receive(datagramInto: $0) }) {
            let datagram = Array(receiveBuffer[0..<count])
            // The sessions whose peer the datagram comes from first, then any other (a relay).
            func opened(fromPeerHost: Bool) -> Bool {
                sessions.values.contains {
                    ($0.route.host == from.host) == fromPeerHost && $0.receive(datagram: datagram, arrival: arrival)
                }
            }
            if !opened(fromPeerHost: true) && !opened(fromPeerHost: false) {
                Log.debug("voice: dropped a datagram from \(from) that no session opens")
            }
        }
    }

    static func monotonicNs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}
