import PeerVoiceCore

/// A voice the call mixes: a peer's own (``VoiceParticipant``) or one its host relays to us
/// (``RelayedVoice``). Voice thread only.
protocol MixedVoice: AnyObject {
    var remote: RemoteVoice { get }
    /// Its volume and mute here.
    var channel: VoiceMixer.Channel { get set }
}

/// One participant of a call hosted by one of our voice peers, as that host relays it to us
/// (RELAYED_VOICE with this source): its own jitter buffer and decoder (``RemoteVoice``), mixed
/// like a direct voice. Display only beyond that: we hold no keys of its, and it is no peer of ours.
/// Used only by the voice thread.
final class RelayedVoice: MixedVoice {
    /// The participant's peer id, as the host's list names it.
    let peer: PeerID
    let frameMs: Int
    let remote: RemoteVoice
    /// Unity, or muted while we hear the same peer in a voice session of our own (docs/GROUP.md,
    /// duplicates: the direct one wins).
    var channel = VoiceMixer.Channel.unity
    /// The loss we last told the host about (RELAY_REPORT).
    private var reportedLossPercent = 0

    init(peer: PeerID, frameMs: Int) throws(VoiceCodecError) {
        self.peer = peer
        self.frameMs = frameMs
        remote = try RemoteVoice(frameMs: frameMs)
    }

    /// The loss we measure on this source when it changed since we last reported it, or nil.
    func lossToReport() -> Int? {
        let loss = remote.lossPercent
        guard loss != reportedLossPercent else { return nil }
        reportedLossPercent = loss
        return loss
    }
}
