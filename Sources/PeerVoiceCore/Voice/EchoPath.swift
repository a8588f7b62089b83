// Whether the call's echo canceller runs, decided from what can echo (docs/VOICE.md, "No
// canceller where nothing can echo"): the option, a microphone that is PipeWire's canceller
// already, and the sinks the speaker stream plays into.

/// A sink the speaker stream plays into, as PipeWire describes it: the node's own properties, its
/// device's, and the `info` of the device's active output routes for it (`port.type`).
public struct PlaybackSink: Equatable, Sendable {
    public var node: [String: String]
    public var device: [String: String]
    public var routes: [[String: String]]

    public init(node: [String: String], device: [String: String] = [:], routes: [[String: String]] = []) {
        (self.node, self.device, self.routes) = (node, device, routes)
    }

    /// `node.name`, or what else names it.
    public var name: String { node["node.name"] ?? node["node.description"] ?? "a sink" }

    /// What keeps what this sink plays away from the microphone, or nil when it may echo (speakers,
    /// a laptop's internal ones, anything that does not say). The node's properties are asked
    /// before its device's; the active route (a laptop jack's headphones) last.
    public var earpiece: Earpiece? {
        let bluetooth = value("device.bus") == "bluetooth" || value("device.api") == "bluez5"
        if let formFactor = value("device.form-factor") {
            switch formFactor {
            case "headphone", "headphones":
                return Earpiece(kind: .headphones, evidence: "device.form-factor=\(formFactor)")
            case "headset":
                return Earpiece(kind: bluetooth ? .bluetoothHeadset : .headset, evidence: "device.form-factor=\(formFactor)")
            case "hands-free" where bluetooth, "handsfree" where bluetooth:
                // A Bluetooth hands-free unit (HFP) cancels its own echo, as a headset does.
                return Earpiece(kind: .bluetoothHeadset, evidence: "device.form-factor=\(formFactor)")
            default:
                break
            }
        }
        if let icon = value("device.icon-name") {
            if icon.hasPrefix("audio-headphones") { return Earpiece(kind: .headphones, evidence: "device.icon-name=\(icon)") }
            if icon.hasPrefix("audio-headset") {
                return Earpiece(kind: bluetooth ? .bluetoothHeadset : .headset, evidence: "device.icon-name=\(icon)")
            }
        }
        if bluetooth, let profile = node["api.bluez5.profile"], profile.hasPrefix("headset") {
            return Earpiece(kind: .bluetoothHeadset, evidence: "api.bluez5.profile=\(profile)")
        }
        for route in routes {
            switch route["port.type"] {
            case "headphones": return Earpiece(kind: .headphones, evidence: "port.type=headphones")
            case "headset": return Earpiece(kind: bluetooth ? .bluetoothHeadset : .headset, evidence: "port.type=headset")
            default: continue
            }
        }
        return nil
    }

    private func value(_ key: String) -> String? { node[key] ?? device[key] }
}

/// Why what a sink plays cannot reach the microphone.
public struct Earpiece: Equatable, Sendable {
    public enum Kind: String, Sendable {
        case headphones
        case headset
        /// A Bluetooth headset or hands-free unit: its microphone is at the mouth, and it cancels
        /// its own echo (HFP).
        case bluetoothHeadset = "bluetooth-headset"
    }

    public let kind: Kind
    /// The property that says so, as `key=value`.
    public let evidence: String

    public init(kind: Kind, evidence: String) {
        (self.kind, self.evidence) = (kind, evidence)
    }
}

/// Whether the echo canceller runs, and why: the first part of `AudioProcessing`.
public struct EchoCancellerDecision: Equatable, Sendable {
    public let running: Bool
    /// As `AudioProcessing` gives it: `default`, `option`, `speaker: NODE`,
    /// `pipewire-echo-cancel: NODE`, or the earpiece's kind with the sink and the property that
    /// said so (`headphones: NODE (device.form-factor=headphones)`).
    public let reason: String

    /// - Parameters:
    ///   - wanted: the options leave the canceller on.
    ///   - microphoneCanceller: the node the microphone records from when that is PipeWire's own
    ///     echo canceller (never two in series).
    ///   - sinks: what the speaker stream plays into; nil or empty while that is not known
    ///     (the canceller runs until something says nothing can echo).
    public static func decide(wanted: Bool, microphoneCanceller: String?, sinks: [PlaybackSink]) -> Self {
        guard wanted else { return Self(running: false, reason: "option") }
        if let microphoneCanceller { return Self(running: false, reason: "pipewire-echo-cancel: \(microphoneCanceller)") }
        guard let first = sinks.first else { return Self(running: true, reason: "default") }
        // One sink that may echo is enough to need the canceller.
        if let loud = sinks.first(where: { $0.earpiece == nil }) { return Self(running: true, reason: "speaker: \(loud.name)") }
        let earpiece = first.earpiece!
        return Self(running: false, reason: "\(earpiece.kind.rawValue): \(first.name) (\(earpiece.evidence))")
    }
}

/// One part of the capture processing as `AudioProcessing` lists it: whether it runs, and why.
public struct VoiceProcessingState: Equatable, Sendable {
    public let part: VoiceProcessing
    public let running: Bool
    /// `default`, `option`, or for `echo-cancel` what ``EchoCancellerDecision`` says.
    public let reason: String

    /// Every part, in processing order: those the options chose, with the echo canceller as decided.
    public static func all(options: Set<VoiceProcessing>, echoCanceller: EchoCancellerDecision) -> [Self] {
        VoiceProcessing.allCases.map { part in
            if part == .echoCancel { return Self(part: part, running: echoCanceller.running, reason: echoCanceller.reason) }
            let running = options.contains(part)
            // An option changes a part from what it is by default.
            return Self(part: part, running: running, reason: running == VoiceProcessing.defaults.contains(part) ? "default" : "option")
        }
    }
}
