/// Turns what a ``JitterBuffer`` asks for into samples: decodes, recovers with FEC, conceals, and
/// merges a late packet into the concealment that was playing while it was waited for.
///
/// **Concealment in pieces.** While the buffer waits for a late packet it asks for concealment a
/// step (2.5 ms) at a time. Asking the decoder for 2.5 ms pieces would change what it conceals
/// (libopus conceals SILK in 10 ms and drops the rest of each call: steps in the waveform at the
/// pieces' edges), so this conceals a whole frame in one decoder call, keeps it, and hands it out
/// piece by piece; a later concealment continues from what is kept.
///
/// **Merge.** When a packet is decoded while part of such a frame of concealment is still kept,
/// the packet's first samples are cross-faded from that continuation (as WebRTC NetEQ's merge
/// does), so the decoded audio does not start with a step against what was just played.
///
/// Allocates only at init; not thread-safe (one voice thread).
public struct VoicePlayout: Sendable {
    /// Longest cross-fade from kept concealment into decoded audio (2.5 ms).
    public static let mergeFadeSamples = 120

    /// Samples of one frame of the stream (what one concealment call of the decoder gives).
    public let frameSamples: Int
    /// Decoded frames cross-faded from the concealment that played before them.
    public private(set) var crossFades = 0
    /// A frame of concealment, of which `kept[keptStart..<keptEnd]` was not handed out yet.
    private var kept: [Int16]
    private var keptStart = 0
    private var keptEnd = 0

    public init(frameSamples: Int) {
        precondition(frameSamples > 0, "frameSamples must be positive")
        self.frameSamples = frameSamples
        kept = [Int16](repeating: 0, count: frameSamples)
    }

    /// Produces `output`'s samples into `pcm` (which must hold ``voiceMaxPacketSamples``) and
    /// returns how many. On a decoder error nothing is kept; the caller plays silence instead.
    public mutating func render<Decoder: VoiceDecoder>(
        _ output: JitterBuffer.Output, decoder: inout Decoder, into pcm: UnsafeMutableBufferPointer<Int16>
    ) throws(VoiceCodecError) -> Int {
        switch output {
        case .frame(let payload), .recoverWithFEC(let payload):
            let fec: Bool
            if case .recoverWithFEC = output { fec = true } else { fec = false }
            defer { (keptStart, keptEnd) = (0, 0) }
            let count = try payload.withUnsafeBufferPointer { (p) throws(VoiceCodecError) -> Int in
                try decoder.decode(p, fec: fec, into: pcm)
            }
            crossFadeFromKept(into: pcm, count: count)
            return count
        case .conceal(let samples):
            return try conceal(min(samples, pcm.count), decoder: &decoder, into: pcm)
        case .silence(let samples):
            (keptStart, keptEnd) = (0, 0)
            let count = min(samples, pcm.count)
            UnsafeMutableBufferPointer(rebasing: pcm[0..<count]).update(repeating: 0)
            return count
        }
    }

    private mutating func conceal<Decoder: VoiceDecoder>(
        _ wanted: Int, decoder: inout Decoder, into pcm: UnsafeMutableBufferPointer<Int16>
    ) throws(VoiceCodecError) -> Int {
        var written = 0
        while written < wanted {
            if keptStart == keptEnd {
                (keptStart, keptEnd) = (0, 0)
                let count = try kept.withUnsafeMutableBufferPointer { (buffer) throws(VoiceCodecError) -> Int in
                    try decoder.decode(nil, fec: false, into: buffer)
                }
                guard count > 0 else { break }
                keptEnd = count
            }
            let n = min(wanted - written, keptEnd - keptStart)
            kept.withUnsafeBufferPointer { k in
                _ = UnsafeMutableBufferPointer(rebasing: pcm[written..<written + n])
                    .update(fromContentsOf: UnsafeBufferPointer(rebasing: k[keptStart..<keptStart + n]))
            }
            keptStart += n
            written += n
        }
        return written
    }

    /// Cross-fades the start of freshly decoded audio from the concealment still kept (its
    /// continuation).
    private mutating func crossFadeFromKept(into pcm: UnsafeMutableBufferPointer<Int16>, count: Int) {
        let fade = min(Self.mergeFadeSamples, keptEnd - keptStart, count)
        guard fade > 0 else { return }
        crossFades += 1
        for i in 0..<fade {
            let w = Double(i + 1) / Double(fade + 1)
            let mixed = (1 - w) * Double(kept[keptStart + i]) + w * Double(pcm[i])
            pcm[i] = Int16(mixed.rounded())
        }
    }
}
