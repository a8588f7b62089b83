/// The responder's decision on handshake message 1 (docs/SECURITY.md §11.2): answer with message
/// 2, or refuse exactly as it refuses any stranger (no word, the same close after
/// ``refusalDelay``). A responder open to strangers (discoverable, or an explicit listen address,
/// or Bluetooth, where BlueZ admits only bonded devices) answers everyone. One that is not
/// answers only a dial whose ``DialProof`` holds under one of its presence secrets for the epoch
/// before, of or after its own (clocks differ), and only once: an accepted commitment is
/// remembered while its proof could still be accepted, so a captured message 1 replayed gets
/// the stranger's answer, and tells the replayer nothing (not even "the same installation").
///
/// The work does not depend on the secrets or on what was sent: three secret slots (the current
/// secret and, while a rotation is under way, up to two older ones: ``PresenceSecrets``) times
/// three epochs, nine keyed hashes every time, compared in constant time; the link closes a refused dial on a timer
/// from message 1's arrival, so no difference in work shows in when it closes.
public struct DialGate: Sendable {
    /// What to do with the dial.
    public enum Decision: Equatable, Sendable {
        /// Send message 2 and go on.
        case answer
        /// Send nothing more; close ``DialGate/refusalDelay`` after message 1 arrived.
        case refuse(Refusal)
    }

    /// Why a dial was refused: for the log and the tests only, never told to the peer.
    public enum Refusal: String, Equatable, Sendable, CustomStringConvertible {
        case noProofField = "the agreed protocol version has no dial proof (an older peer, or a stranger)"
        case notProven = "the dial proof does not hold (a stranger, or a peer with an old secret)"
        case replayed = "the dial proof was accepted before (a replayed message 1)"
        public var description: String { rawValue }
    }

    /// How long after the bytes that decided it a refused dial (or any incoming dial that fails
    /// before message 2) is closed: the same for every refusal, long enough that no difference
    /// in work shows.
    public static let refusalDelay: Duration = .seconds(1)
    /// Secret slots checked on every dial: the current secret and up to two older ones.
    public static let secretSlots = 3
    /// Accepted commitments remembered at most; past it the oldest go first.
    public static let defaultReplayCapacity = 4096

    /// Accepted commitments, with the epoch their proof was made for.
    private var accepted: [[UInt8]: UInt64] = [:]
    private let replayCapacity: Int

    public init(replayCapacity: Int = defaultReplayCapacity) {
        precondition(replayCapacity > 0)
        self.replayCapacity = replayCapacity
    }

    /// Commitments remembered now (for tests).
    public var rememberedCount: Int { accepted.count }

    /// Decides on message 1.
    ///
    /// - Parameters:
    ///   - claim: message 1's commitment and proof; nil when the agreed version has no proof field.
    ///   - openToStrangers: this listener answers first contacts now.
    ///   - secrets: the presence secrets a paired peer may hold, current first (at most ``secretSlots``).
    ///   - unixSeconds: the responder's clock.
    public mutating func decide(_ claim: DialProofClaim?, openToStrangers: Bool, secrets: [PresenceSecret],
                                unixSeconds: UInt64, crypto: any CryptoPrimitives) -> Decision {
        precondition(!secrets.isEmpty && secrets.count <= Self.secretSlots)
        if openToStrangers { return .answer }
        guard let claim else { return .refuse(.noProofField) }
        let now = PresenceTag.epoch(unixSeconds: unixSeconds)
        forgetExpired(now: now)
        guard let epoch = Self.provenEpoch(claim, secrets: secrets, around: now, crypto: crypto) else {
            return .refuse(.notProven)
        }
        guard accepted[claim.commitment] == nil else { return .refuse(.replayed) }
        remember(claim.commitment, epoch: epoch)
        return .answer
    }

    /// The epoch (now - 1, now or now + 1) whose proof `claim` carries under one of `secrets`, or
    /// nil. Always nine hashes and nine constant-time comparisons, whatever matches.
    static func provenEpoch(_ claim: DialProofClaim, secrets: [PresenceSecret], around now: UInt64,
                            crypto: any CryptoPrimitives) -> UInt64? {
        // An unused slot is checked too, under a key nobody is given, and its result ignored.
        let unused = PresenceSecret(bytes: [UInt8](repeating: 0, count: PresenceSecret.byteCount))!
        var proven: UInt64 = 0
        var found = false
        for slot in 0..<secretSlots {
            let inUse = slot < secrets.count
            let secret = inUse ? secrets[slot] : unused
            for epoch in [now &- 1, now, now &+ 1] {
                let expected = DialProof.make(secret: secret, epoch: epoch, commitment: claim.commitment, crypto: crypto)
                let matches = constantTimeEqual(expected, claim.proof) && inUse
                if matches {
                    proven = epoch
                    found = true
                }
            }
        }
        return found ? proven : nil
    }

    /// A proof for epoch e is accepted while the responder's epoch is e - 1 to e + 1: after that
    /// a replay fails the proof anyway.
    private mutating func forgetExpired(now: UInt64) {
        guard accepted.values.contains(where: { $0 &+ 1 < now }) else { return }
        accepted = accepted.filter { $0.value &+ 1 >= now }
    }

    private mutating func remember(_ commitment: [UInt8], epoch: UInt64) {
        if accepted.count >= replayCapacity, let oldest = accepted.min(by: { $0.value < $1.value }) {
            accepted[oldest.key] = nil
        }
        accepted[commitment] = epoch
    }
}
