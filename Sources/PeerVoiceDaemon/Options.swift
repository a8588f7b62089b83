import Foundation

/// peervoiced's command line.
public struct Options: Sendable {
    public static let version = "0.1.0"

    /// `HOST:PORT` for the IP transport's listener; nil = the default LAN listener (PeerVoiceService+LAN.swift).
    public var listen: String?
    public var adapter: String?
    /// Discovery on the LAN through Avahi, and without `--listen` a default listener (`--no-lan`
    /// turns both off).
    public var lan = true
    /// Interfaces LAN discovery neither advertises on nor browses (`--lan-exclude`).
    public var lanExcludedInterfaces: Set<String> = []
    /// Also ask BlueZ to make our pairing agent the default one, so pairings other computers
    /// start reach PeerVoice too (`AgentManager1.RequestDefaultAgent`).
    public var defaultAgent = false
    public var name: String = ProcessInfo.processInfo.hostName
    public var stateDirectory: String = Options.defaultStateDirectory
    public var verbose = false
    /// Desktop notifications for messages and pairing requests (`--no-notify` turns them off).
    public var notify = true
    /// Start muted and bind the portal's hold-to-talk hotkey (`--push-to-talk`).
    public var pushToTalk = false
    /// Where incoming files are saved (`--download-dir`); nil: the desktop's download folder.
    public var downloadDirectory: String?
    /// Audio devices, frame length, auto start and cue tones.
    var voice = VoiceAudioOptions()

    public static let usage = """
        Usage: peervoiced [OPTION]...
        PeerVoice: find nearby computers, exchange text and talk, over Bluetooth or IP.
        Serves org.example.PeerVoice on the session bus.

          --listen HOST:PORT  accept IP peers on this address (e.g. 0.0.0.0:47800) at any time
                              (without it: on the LAN, port 47800 or any free one, while
                              discoverable or while known peers exist; first contacts only
                              while discoverable)
          --no-lan            no LAN discovery (Avahi) and no default listener
          --lan-exclude IFACE do not advertise or browse on interface IFACE (repeatable,
                              or IFACE,IFACE)
          --adapter hciN      Bluetooth adapter to use (default: the first powered one)
          --default-agent     answer Bluetooth pairing requests from other computers too
                              (PeerVoice's agent becomes BlueZ's default agent)
          --name NAME         display name other peers see (default: the host name)
          --state-dir DIR     keys, peers and messages (default: $XDG_STATE_HOME/peervoice)
          --download-dir DIR  save received files here (default: XDG_DOWNLOAD_DIR from
                              user-dirs.dirs, else ~/Downloads)
          --source NODE       microphone: a PipeWire node name (default: the default source)
          --sink NODE         speaker: a PipeWire node name (default: the default sink)
          --frame-ms 10|20    Opus frame length; 10 lowers latency, 20 (default) saves bandwidth
          --no-auto-voice     do not start voice when a peer connects (StartVoice does)
          --no-cue            no chime when voice with a peer starts and stops
          --no-echo-cancel    do not cancel the speaker's echo in the microphone (turns itself
                              off anyway when the microphone is PipeWire's echo canceller)
          --no-noise-suppression  do not suppress steady noise in the microphone
          --gain-control      even out the microphone's level (automatic gain control)
          --voice-over-link   send voice to IP peers inside the encrypted TCP link rather than
                              over UDP, for networks that drop UDP (Bluetooth peers always do)
          --no-notify         no desktop notifications for messages and pairing requests
          --push-to-talk      start muted; the hold-to-talk hotkey unmutes while held
          --verbose           debug logging
          --help              show this help and exit
          --version           show the version and exit
        """

    public enum ParseResult {
        case run(Options)
        case exit(message: String, status: Int32)
    }

    public static func parse(_ arguments: [String]) -> ParseResult {
        var options = Options()
        var rest = arguments[...]
        func value(for flag: String) -> String? {
            guard let next = rest.popFirst(), !next.hasPrefix("--") else { return nil }
            return next
        }
        while let argument = rest.popFirst() {
            // Accept --flag=value as well as --flag value.
            var flag = argument
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                flag = String(argument[..<equals])
                rest.insert(String(argument[argument.index(after: equals)...]), at: rest.startIndex)
            }
            switch flag {
            case "--help", "-h": return .exit(message: usage, status: 0)
            case "--version": return .exit(message: "peervoiced \(version)", status: 0)
            case "--verbose", "-v": options.verbose = true
            case "--default-agent": options.defaultAgent = true
            case "--no-auto-voice": options.voice.autoStart = false
            case "--no-cue": options.voice.cue = false
            case "--no-echo-cancel": options.voice.processing.remove(.echoCancel)
            case "--no-noise-suppression": options.voice.processing.remove(.noiseSuppression)
            case "--gain-control": options.voice.processing.insert(.gainControl)
            case "--voice-over-link": options.voice.overLink = true
            case "--no-notify": options.notify = false
            case "--no-lan": options.lan = false
            case "--push-to-talk": options.pushToTalk = true
            case "--listen", "--lan-exclude", "--adapter", "--name", "--state-dir", "--source", "--sink", "--frame-ms", "--download-dir":
                guard let value = value(for: flag), !value.isEmpty else {
                    return .exit(message: "peervoiced: \(flag) needs a value\n\(usage)", status: 2)
                }
                switch flag {
                case "--listen": options.listen = value
                case "--lan-exclude":
                    options.lanExcludedInterfaces.formUnion(value.split(separator: ",").map(String.init))
                case "--adapter": options.adapter = value
                case "--name": options.name = value
                case "--download-dir":
                    options.downloadDirectory = value.hasPrefix("/") ? value : FileManager.default.currentDirectoryPath + "/" + value
                case "--source": options.voice.source = value
                case "--sink": options.voice.sink = value
                case "--frame-ms":
                    guard value == "10" || value == "20" else {
                        return .exit(message: "peervoiced: --frame-ms takes 10 or 20, not '\(value)'", status: 2)
                    }
                    options.voice.frameMs = Int(value)!
                default: options.stateDirectory = value
                }
            default:
                return .exit(message: "peervoiced: unknown option '\(argument)'\n\(usage)", status: 2)
            }
        }
        return .run(options)
    }

    static var defaultStateDirectory: String {
        let environment = ProcessInfo.processInfo.environment
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/peervoice" }
        return NSHomeDirectory() + "/.local/state/peervoice"
    }
}
