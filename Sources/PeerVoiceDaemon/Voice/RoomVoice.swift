import Opus
import PeerVoiceCore

/// One Mumble room on the voice thread: a ``RemoteVoice`` per talker (one jitter buffer and
/// decoder each, mixed with the peers' voices), and our own voice's sequence numbers.
/// Voice thread only.
final class RoomVoice {
    /// One talker of the room, mixed like a peer's voice.
    final class Talker: MixedVoice {
        let remote: RemoteVoice
        var channel = VoiceMixer.Channel.unity

        init(channel: VoiceMixer.Channel) throws(VoiceCodecError) {
            remote = try RemoteVoice(frameMs: RoomVoice.frameMs)
            self.channel = channel
        }
    }

    /// What the decoders are made for, and what we send: Mumble's default 20 ms per packet.
    static let frameMs = 20
    /// Mumble's sequence numbers count 10 ms frames.
    static let sequencePerPacket: UInt64 = 2

    let room: Int
    private(set) var talkers: [UInt32: Talker] = [:]
    /// Volume and mute here by session (`SetUserVolume`, `SetUserMuted`), also for talkers not heard yet.
    private var playback: [UInt32: VoiceMixer.Channel] = [:]
    /// Our packets' sequence number: 10 ms frames since our first packet, counted on the call's
    /// 48 kHz clock, so that it moves on while the microphone rests (as Mumble's own clients
    /// count frames whether they send them or not): receivers place packets by it.
    private var sequence: UInt64 = 0
    private var lastTimestamp: UInt32?
    /// Talkers whose packets we dropped for their length (logged once each).
    private var refused: Set<UInt32> = []

    init(room: Int) { self.room = room }

    /// A talker's packet from the room (through the server), stamped on arrival. Returns whether
    /// the set of talkers changed (the mix must be rebuilt).
    func receive(_ packet: MumbleVoicePacket, arrival: Int64) -> Bool {
        guard let session = packet.session else { return false }
        guard packet.opusDurationMicroseconds == Self.frameMs * 1000 else {
            if refused.insert(session).inserted {
                Log.info("voice: room \(room): session \(session) sends \(packet.opusDurationMicroseconds.map { "\($0 / 1000) ms" } ?? "unreadable") Opus packets; only \(Self.frameMs) ms ones are played")
            }
            return false
        }
        var added = false
        if talkers[session] == nil {
            do {
                talkers[session] = try Talker(channel: playback[session] ?? .unity)
                added = true
            } catch {
                Log.warning("voice: room \(room): no decoder for session \(session): \(error)")
                return false
            }
        }
        // The jitter buffer counts packets and places them on a 48 kHz clock.
        guard let frame = try? VoiceFrame(seq: packet.sequence / Self.sequencePerPacket,
                                          timestamp: UInt32(truncatingIfNeeded: packet.sequence &* 480), payload: Array(packet.opus)) else {
            return added
        }
        talkers[session]?.remote.insert(frame, arrival: arrival)
        return added
    }

    /// A talker left the room (or the room reconnected: sessions change).
    func removeTalker(_ session: UInt32) -> Bool {
        playback[session] = nil
        return talkers.removeValue(forKey: session) != nil
    }

    /// A talker's volume and mute here (it ramps to them over one mixer frame).
    func setPlayback(_ session: UInt32, _ channel: VoiceMixer.Channel) {
        playback[session] = channel
        guard let talker = talkers[session] else { return }
        try? talker.channel.setVolume(channel.volume)  // in range: it is a channel's
        talker.channel.muted = channel.muted
    }

    /// Our encoded frame, captured at `timestamp` on the call's 48 kHz clock, as the room's voice
    /// packet (the TCP tunnel's body).
    func packet(for opus: [UInt8], timestamp: UInt32) -> [UInt8] {
        if let lastTimestamp { sequence &+= UInt64(timestamp &- lastTimestamp) / 480 }
        lastTimestamp = timestamp
        return MumbleVoicePacket(sequence: sequence, opus: opus[...], isLast: false).fromClient
    }
}
