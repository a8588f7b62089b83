import GIO
import PeerVoiceBus
import PeerVoiceCore

/// The first-contact prompts waiting for a person's `ConfirmPairing` (at most one per peer, each
/// with its 60 s window), and the limit on key exchanges per host: every exchange that reaches
/// the commitment is one guess at a code (SECURITY.md §7).
final class PairingPrompts {
    private struct Prompt {
        let link: PeerLink
        let timeout: EventSource
    }

    private var prompts: [PeerID: Prompt] = [:]
    private var limiter = PairingRateLimiter()
    private let clock: WallClock
    private let emit: (ServiceEvent) -> Void
    /// A prompt was refused here or not answered in time: the peer stays disconnected and its
    /// waiting `Connect`s fail with this error.
    var onRefused: (PeerID, ServiceError) -> Void = { _, _ in }

    init(clock: WallClock, emit: @escaping (ServiceEvent) -> Void) {
        self.clock = clock
        self.emit = emit
    }

    func isPending(for peer: PeerID) -> Bool { prompts[peer] != nil }

    /// Shows the 6-digit code of `link` for `peer` and waits for the person's answer.
    func ask(about peer: Peer, over link: PeerLink) {
        guard let result = link.result else { return }
        let id = peer.id
        let window = PeerVoiceBus.pairingConfirmationWindow
        let timeout = Timer.after(window) { [unowned self] in
            guard let prompt = prompts.removeValue(forKey: id) else { return }
            settle(prompt, for: id, accept: false, reason: "not confirmed within \(window.components.seconds) s")
        }
        prompts[id] = Prompt(link: link, timeout: timeout)
        Log.info("\(peer.paired ? "\(id) asks its person to compare codes" : "first contact with \(id)"): waiting for ConfirmPairing")
        emit(.pairingRequested(.id(id), name: peer.name, passkey: result.verificationCode))
    }

    /// `ConfirmPairing` for `peer`: the link opens once the peer's person accepts too.
    func answer(_ peer: PeerID, accept: Bool) throws(ServiceError) {
        guard let prompt = prompts.removeValue(forKey: peer) else {
            throw .invalidArgument("no pairing request is pending for \(peer)")
        }
        settle(prompt, for: peer, accept: accept, reason: "refused here with ConfirmPairing")
    }

    /// Withdraws the prompt for `peer` (only if it asks about `link`, when given): nobody needs
    /// to answer it any more.
    func withdraw(_ peer: PeerID, askingAbout link: PeerLink? = nil) {
        guard let prompt = prompts[peer], link.map({ $0 === prompt.link }) ?? true else { return }
        prompts[peer] = nil
        prompt.timeout.cancel()
        emit(.pairingSettled(.id(peer), accepted: false))
    }

    private func settle(_ prompt: Prompt, for peer: PeerID, accept: Bool, reason: String) {
        prompt.timeout.cancel()
        emit(.pairingSettled(.id(peer), accepted: accept))
        if accept {
            Log.info("pairing with \(peer) accepted here")
            prompt.link.accept()
        } else {
            Log.info("pairing with \(peer) \(reason)")
            onRefused(peer, .rejected("pairing with \(peer) was \(reason)"))
            prompt.link.refuse(logReason: "pairing \(reason)")
        }
    }

    // MARK: Key exchanges per host

    /// Whether `host` used up its key exchanges: its new connections are closed before any work.
    func turnsAway(host: String) -> Bool {
        limiter.isExhausted(host: host, nowMs: clock.nowMs())
    }

    /// Counts a key exchange by `host` that reached the commitment; false if it must stop there.
    func allowsKeyExchange(by host: String) -> Bool {
        limiter.allow(host: host, nowMs: clock.nowMs())
    }

    /// An exchange by `host` ended on a pinned key: it guessed nothing.
    func giveBack(host: String) {
        limiter.giveBack(host: host)
    }
}
