/// How many encoders the microphone needs in a call, and which receivers each one serves, from
/// the loss each receiver reports (VOICE_REPORT): in-band FEC is a setting of the *encoder*, so
/// one packet cannot carry FEC for a lossy receiver and none for a clean one.
///
/// The rule (docs/GROUP.md):
/// - A receiver whose report gets a hint from ``FECPolicy`` (3 % and up) joins the **lossy**
///   group; it leaves it only when its report falls below ``leaveLossPercent``, so a receiver
///   hovering around the threshold does not switch encoders (a decoder fed by another encoder
///   glitches briefly) at every report.
/// - Everyone else is in the **clean** group: packet-loss hint 0, no FEC, full quality.
/// - The lossy group's encoder gets the hint of its worst receiver (3–5 %: the others in the group
///   get at most 2 points more FEC than they need, which costs little).
/// - One group only (or no receiver lossy): one encoder. Both: two, the clean one first. Never
///   more: the hints a lossy group can need span only 3–5 %.
public struct FECGroupPlan<Receiver: Hashable & Comparable & Sendable>: Sendable, Equatable {
    /// One encoder of the microphone: its packet-loss hint and the receivers its packets go to.
    public struct Encoder: Sendable, Equatable {
        /// For ``VoiceEncoder/setPacketLossPercent(_:)``.
        public var packetLossPercent: Int
        /// Sorted.
        public var receivers: [Receiver]

        public init(packetLossPercent: Int, receivers: [Receiver]) {
            self.packetLossPercent = packetLossPercent
            self.receivers = receivers
        }
    }

    /// A lossy receiver whose report falls below this rejoins the clean group (percent).
    public static var leaveLossPercent: Int { FECPolicy.minimumLossPercent - 1 }

    /// The encoders to run now: none without receivers, else one or two.
    public private(set) var encoders: [Encoder] = []

    private var lossy: Set<Receiver> = []

    public init() {}

    /// Replans from every receiver's latest report (percent; a receiver that has not reported
    /// counts as 0, like a session's start); receivers not listed have left the call. Returns
    /// whether ``encoders`` changed, so the engine reconfigures only then.
    @discardableResult
    public mutating func update(reportedLossPercent reports: [Receiver: Int]) -> Bool {
        lossy = Set(reports.compactMap { peer, percent in
            let staysLossy = lossy.contains(peer) && percent >= Self.leaveLossPercent
            return staysLossy || FECPolicy.encoderHint(reportedLossPercent: percent) > 0 ? peer : nil
        })
        let clean = reports.keys.filter { !lossy.contains($0) }.sorted()
        let lossyHint = lossy.map { max(FECPolicy.minimumLossPercent, FECPolicy.encoderHint(reportedLossPercent: reports[$0]!)) }.max()
        var planned: [Encoder] = []
        if !clean.isEmpty { planned.append(Encoder(packetLossPercent: 0, receivers: clean)) }
        if let lossyHint { planned.append(Encoder(packetLossPercent: lossyHint, receivers: lossy.sorted())) }
        defer { encoders = planned }
        return planned != encoders
    }
}
