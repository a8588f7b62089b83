import PeerVoiceCore
import XCTest

/// Which outputs can echo into the microphone, from the properties PipeWire gives real devices
/// (ALSA cards, Bluetooth) and virtual sinks, and what the echo canceller does about it.
final class EchoPathTests: XCTestCase {
    func testWhatSaysASinkIsAtTheEar() {
        let table: [(String, PlaybackSink, Earpiece?)] = [
            ("a virtual sink that says nothing", PlaybackSink(node: ["node.name": "null"]), nil),
            ("USB headphones", PlaybackSink(node: ["node.name": "usb"], device: ["device.form-factor": "headphones"]),
             Earpiece(kind: .headphones, evidence: "device.form-factor=headphones")),
            ("PipeWire's own spelling", PlaybackSink(node: ["device.form-factor": "headphone"]),
             Earpiece(kind: .headphones, evidence: "device.form-factor=headphone")),
            ("a USB headset", PlaybackSink(node: [:], device: ["device.form-factor": "headset", "device.bus": "usb"]),
             Earpiece(kind: .headset, evidence: "device.form-factor=headset")),
            ("a Bluetooth headset", PlaybackSink(node: [:], device: ["device.form-factor": "headset", "device.bus": "bluetooth"]),
             Earpiece(kind: .bluetoothHeadset, evidence: "device.form-factor=headset")),
            ("a Bluetooth car kit", PlaybackSink(node: [:], device: ["device.form-factor": "hands-free", "device.api": "bluez5"]),
             Earpiece(kind: .bluetoothHeadset, evidence: "device.form-factor=hands-free")),
            ("a wired speakerphone", PlaybackSink(node: [:], device: ["device.form-factor": "hands-free", "device.bus": "usb"]), nil),
            ("a Bluetooth speaker", PlaybackSink(node: [:], device: ["device.form-factor": "speaker", "device.bus": "bluetooth"]), nil),
            ("an icon only", PlaybackSink(node: [:], device: ["device.icon-name": "audio-headphones-bluetooth"]),
             Earpiece(kind: .headphones, evidence: "device.icon-name=audio-headphones-bluetooth")),
            ("a Bluetooth headset's icon", PlaybackSink(node: [:], device: ["device.icon-name": "audio-headset-bluetooth", "device.api": "bluez5"]),
             Earpiece(kind: .bluetoothHeadset, evidence: "device.icon-name=audio-headset-bluetooth")),
            ("a Bluetooth device in its headset profile", PlaybackSink(node: ["api.bluez5.profile": "headset-head-unit"],
                                                                       device: ["device.bus": "bluetooth"]),
             Earpiece(kind: .bluetoothHeadset, evidence: "api.bluez5.profile=headset-head-unit")),
            ("the same in its music profile", PlaybackSink(node: ["api.bluez5.profile": "a2dp-sink"], device: ["device.bus": "bluetooth"]), nil),
            ("a laptop's jack with headphones in", PlaybackSink(node: [:], device: ["device.form-factor": "internal"],
                                                                routes: [["port.type": "headphones", "port.availability-group": "Legacy 1"]]),
             Earpiece(kind: .headphones, evidence: "port.type=headphones")),
            ("a laptop's speakers", PlaybackSink(node: [:], device: ["device.form-factor": "internal", "device.icon-name": "audio-card-analog-pci"],
                                                 routes: [["port.type": "speaker"]]), nil),
            ("the node's word before its device's", PlaybackSink(node: ["device.form-factor": "speaker"], device: ["device.form-factor": "headphones"]), nil),
        ]
        for (what, sink, expected) in table {
            XCTAssertEqual(sink.earpiece, expected, what)
        }
    }

    func testTheCancellerRunsUnlessNothingCanEcho() {
        let speaker = PlaybackSink(node: ["node.name": "laptop-speaker"])
        let headphones = PlaybackSink(node: ["node.name": "phones", "device.form-factor": "headphones"])
        let headset = PlaybackSink(node: ["node.name": "bt", "device.bus": "bluetooth", "device.form-factor": "headset"])
        let table: [(String, EchoCancellerDecision, Bool, String)] = [
            ("turned off", .decide(wanted: false, microphoneCanceller: nil, sinks: [headphones]), false, "option"),
            ("PipeWire's canceller records", .decide(wanted: true, microphoneCanceller: "echo-cancel-source", sinks: [speaker]),
             false, "pipewire-echo-cancel: echo-cancel-source"),
            ("nothing known yet", .decide(wanted: true, microphoneCanceller: nil, sinks: []), true, "default"),
            ("speakers", .decide(wanted: true, microphoneCanceller: nil, sinks: [speaker]), true, "speaker: laptop-speaker"),
            ("headphones", .decide(wanted: true, microphoneCanceller: nil, sinks: [headphones]),
             false, "headphones: phones (device.form-factor=headphones)"),
            ("a Bluetooth headset", .decide(wanted: true, microphoneCanceller: nil, sinks: [headset]),
             false, "bluetooth-headset: bt (device.form-factor=headset)"),
            ("headphones and speakers at once", .decide(wanted: true, microphoneCanceller: nil, sinks: [headphones, speaker]),
             true, "speaker: laptop-speaker"),
        ]
        for (what, decision, running, reason) in table {
            XCTAssertEqual(decision.running, running, what)
            XCTAssertEqual(decision.reason, reason, what)
        }
    }

    func testEveryPartIsListedWithWhy() {
        let off = EchoCancellerDecision.decide(wanted: true, microphoneCanceller: nil,
                                               sinks: [PlaybackSink(node: ["node.name": "phones", "device.form-factor": "headphones"])])
        let defaults = VoiceProcessingState.all(options: VoiceProcessing.defaults, echoCanceller: off)
        XCTAssertEqual(defaults.map(\.part), [.echoCancel, .noiseSuppression, .highPass, .gainControl])
        XCTAssertEqual(defaults.map(\.running), [false, true, true, false])
        XCTAssertEqual(defaults.map(\.reason), ["headphones: phones (device.form-factor=headphones)", "default", "default", "default"])

        let options: Set<VoiceProcessing> = [.highPass, .gainControl]
        let chosen = VoiceProcessingState.all(options: options, echoCanceller: .decide(wanted: false, microphoneCanceller: nil, sinks: []))
        XCTAssertEqual(chosen.map(\.running), [false, false, true, true])
        XCTAssertEqual(chosen.map(\.reason), ["option", "option", "default", "option"])
    }
}
