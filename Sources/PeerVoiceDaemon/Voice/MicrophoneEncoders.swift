import Opus
import PeerVoiceCore

/// The microphone's Opus encoders for the whole call, grouped by ``FECGroupPlan``: one encoder
/// while every receiver is clean (or every one lossy), a clean and a lossy one when both kinds
/// are in the call. Each captured frame is encoded once per encoder, and each packet goes to
/// every receiver of its group (sealed per link by the caller). Voice thread only.
final class MicrophoneEncoders {
    private let frameDuration: OpusFrameDuration
    private var plan = FECGroupPlan<PeerID>()
    /// Every receiver's latest VOICE_REPORT (0 until it reports, like a new session).
    private var reports: [PeerID: Int] = [:]
    private var encoders: [(encoder: OpusVoiceEncoder, group: FECGroupPlan<PeerID>.Encoder)] = []
    private var packet = [UInt8](repeating: 0, count: 1500)

    init(frameDuration: OpusFrameDuration) {
        self.frameDuration = frameDuration
    }

    /// How many encoders run (for the log and the tests: 1, or 2 with clean and lossy receivers).
    var count: Int { encoders.count }

    func add(receiver: PeerID) throws(VoiceCodecError) {
        reports[receiver] = 0
        try replan()
    }

    func remove(receiver: PeerID) {
        reports[receiver] = nil
        try? replan()  // dropping a receiver creates no encoder, so it cannot fail
    }

    /// The receiver's VOICE_REPORT: how much of our voice it loses.
    func report(receiver: PeerID, lossPercent: Int) throws(VoiceCodecError) {
        guard reports[receiver] != nil else { return }
        reports[receiver] = lossPercent
        try replan()
    }

    /// The packet-loss hint of the encoder whose packets `receiver` gets (0: no FEC).
    func packetLossPercent(for receiver: PeerID) -> Int {
        encoders.first { $0.group.receivers.contains(receiver) }?.encoder.packetLossPercent ?? 0
    }

    /// Starts every encoder afresh (after the microphone rested on digital silence).
    func reset() {
        for entry in encoders { entry.encoder.reset() }
    }

    /// Encodes `frame` once per encoder and hands each packet (DTX packets of at most
    /// `dtxPacketBytes` are not worth sending, and are not handed on) to `deliver` with the
    /// receivers of its group.
    func encode(_ frame: UnsafeBufferPointer<Int16>, dtxPacketBytes: Int,
                deliver: (_ payload: [UInt8], _ receivers: [PeerID]) -> Void) {
        for (encoder, group) in encoders {
            let bytes: Int
            do {
                bytes = try packet.withUnsafeMutableBufferPointer { try encoder.encode(frame, into: $0) }
            } catch {
                Log.warning("voice: Opus could not encode a frame: \(error)")
                continue
            }
            if bytes > dtxPacketBytes { deliver(Array(packet[0..<bytes]), group.receivers) }
        }
    }

    /// Follows the plan: an encoder of the same kind (clean or lossy) is kept, and with one group
    /// only, whichever encoder ran (its receivers' decoders go on without a glitch); a second
    /// group gets a new encoder.
    private func replan() throws(VoiceCodecError) {
        guard plan.update(reportedLossPercent: reports) else { return }
        var old = encoders
        var next: [(encoder: OpusVoiceEncoder, group: FECGroupPlan<PeerID>.Encoder)] = []
        for group in plan.encoders {
            let lossy = group.packetLossPercent > 0
            let kept = old.firstIndex { ($0.group.packetLossPercent > 0) == lossy }
                ?? (plan.encoders.count == 1 && !old.isEmpty ? 0 : nil)
            let encoder: OpusVoiceEncoder
            if let kept {
                encoder = old.remove(at: kept).encoder
            } else {
                // No FEC until a receiver reports loss (FECPolicy): on a clean path it only costs quality.
                encoder = try OpusVoiceEncoder(configuration: .init(frameDuration: frameDuration, packetLossPercent: 0))
            }
            encoder.setPacketLossPercent(group.packetLossPercent)
            next.append((encoder, group))
        }
        encoders = next
        if next.count > 1 {
            Log.info("voice: two microphone encoders: clean for \(next[0].group.receivers), FEC for \(next[1].group.packetLossPercent) % for \(next[1].group.receivers)")
        }
    }
}
