import Foundation
import Glibc
import TestHarness

// The campaign's watch over the services a daemon leans on: the call two daemons hold through
// their PipeWires, and two daemons' LAN discovery through their avahi-daemons. Both are judged
// from the clients' signals as a user's app sees them, folded per node by `Node.observe()`.

extension Node {
    /// Folds the signals that arrived since the last look into the latest state per peer.
    func observe() {
        let signals = peer.client.signals
        guard cursor < signals.count else { return }
        for signal in signals[cursor...] {
            switch signal.member {
            case "PeerStateChanged": peerStates[signal.string(0)] = signal.string(1)
            case "VoiceStateChanged": voiceStates[signal.string(0)] = signal.string(1)
            case "PeerFound":
                foundAt[signal.string(1)] = Date()
                nearby[signal.string(0)] = signal.string(1)
            case "PeerLost": nearby[signal.string(0)] = nil
            default: break
            }
        }
        cursor = signals.count
    }

    /// A new life of the daemon knows no link and no call yet.
    func forgetLife() {
        observe()
        peerStates = [:]
        voiceStates = [:]
    }
}

/// A call held between two daemons, each with its own PipeWire. Whenever everything a call needs
/// has held for `bound` seconds (both daemons running and not stopped, both PipeWires up, each
/// side reporting the other connected), each side must report its voice with the other `active`;
/// how long it took after the last missing piece came back is kept per piece.
final class CallWatch {
    /// VoiceFaultTests.testPipeWireKilled… asks 3 s of an idle machine (0.79 s seen); the campaign
    /// shares two cores with its other faults, daemons and workload.
    static let bound = 5.0

    let a: Node, b: Node
    /// Since when everything the call needs has held (nil: something is missing).
    private var since: Date?
    /// What was missing just before `since`.
    private var cause = "start"
    private var missing: [String] = ["start"]
    private var wasUp = false
    private var reported = false
    /// Seconds from the last missing piece's return to voice active on both sides, by that piece.
    private(set) var recoveries: [String: [Double]] = [:]

    init(_ a: Node, _ b: Node) {
        self.a = a
        self.b = b
    }

    private var isUp: Bool {
        a.voiceStates[b.peer.id] == "active" && b.voiceStates[a.peer.id] == "active"
    }

    private func whatIsMissing() -> [String] {
        var missing: [String] = []
        for (node, other) in [(a, b), (b, a)] {
            if !node.usable { missing.append("\(node.name) down") }
            if node.pipewire == nil { missing.append("\(node.name)'s PipeWire") }
            if node.usable && node.peerStates[other.peer.id] != "connected" { missing.append("link") }
        }
        return missing
    }

    /// A violation when the call has been owed for longer than `bound`.
    func check() -> String? {
        let now = Date()
        let missingNow = whatIsMissing()
        if !missingNow.isEmpty {
            since = nil
            reported = false
            missing = missingNow
            wasUp = isUp
            return nil
        }
        if since == nil {
            since = now
            // The piece that came back last names the recovery (PipeWire before the link).
            cause = missing.contains { $0.hasSuffix("PipeWire") } ? "PipeWire"
                : missing.contains { $0.hasSuffix("down") } ? "daemon" : missing.first ?? "start"
        }
        let up = isUp
        defer { wasUp = up }
        if wasUp && !up {
            // The call ended with everything still there as far as the signals tell (a link's
            // VoiceStateChanged(stopped) comes just before its PeerStateChanged): owed anew from now.
            since = now
            cause = "drop"
        }
        if up && !wasUp, let since, cause != "start" {
            recoveries[cause, default: []].append(now.timeIntervalSince(since))
        }
        guard !up, let since, now.timeIntervalSince(since) > Self.bound, !reported else { return nil }
        reported = true
        return "the call \(a.name) ↔ \(b.name) was not active \(String(format: "%.1f", now.timeIntervalSince(since))) s after "
            + "everything it needs was back (last missing: \(cause)); voice states: \(a.name) \(a.voiceStates[b.peer.id] ?? "none"), "
            + "\(b.name) \(b.voiceStates[a.peer.id] ?? "none"): expected active within \(Self.bound) s"
    }

    /// Nothing is owed: the call is up, or cannot be.
    var settled: Bool { !whatIsMissing().isEmpty || isUp }
}

/// avahi-daemon restarts on the LAN hosts: once a host's avahi-daemon is back, within `bound`
/// seconds its daemon must browse again (it reports the other's PeerFound anew), publish again
/// (its avahi-daemon lists its service), and be shown by the other daemon among the peers found
/// (after PeerLost, a PeerFound again). Whether the other's daemon lost it at all depends on the
/// other's mDNS cache: a kill sends no goodbye, and a goodbye followed soon by the same record
/// again may never surface; so that part is judged on a new PeerFound, or else no sooner than
/// `settling` seconds after the return, when a goodbye's PeerLost (a second after it) has come.
final class AvahiWatch {
    /// LANTests waits 10 s for each of these steps.
    static let bound = 10.0
    static let settling = 3.0

    private struct Restart {
        let node: Node, other: Node
        let at: Date
        let graceful: Bool
        var browsing: Double?, published: Double?, shownByOther: Double?
        var lastLook = Date.distantPast
        /// What avahi-browse said last (the instance names, or its error).
        var listed = "nothing yet"

        var done: Bool { browsing != nil && published != nil && shownByOther != nil }
    }

    private var pending: [Restart] = []
    /// Seconds from avahi-daemon's return to the last of the checks above.
    private(set) var recoveries: [Double] = []
    private(set) var interrupted = 0
    /// Restarts after which the other daemon reported the host lost and then found again.
    private(set) var foundAgain = 0

    /// `node`'s avahi-daemon is back; `graceful` when it had been stopped with SIGTERM.
    func restarted(_ node: Node, other: Node, graceful: Bool) {
        pending.append(Restart(node: node, other: other, at: Date(), graceful: graceful))
    }

    /// A host's avahi-daemon goes down: a check that needs it cannot be judged.
    func goingDown(_ node: Node) {
        let before = pending.count
        pending.removeAll { $0.node === node || $0.other === node }
        interrupted += before - pending.count
    }

    func check() -> [String] {
        var violations: [String] = []
        let now = Date()
        pending = pending.compactMap { restart in
            var restart = restart
            let elapsed = now.timeIntervalSince(restart.at)
            if restart.browsing == nil, let found = restart.node.foundAt[restart.other.name], found > restart.at {
                restart.browsing = found.timeIntervalSince(restart.at)
            }
            if restart.shownByOther == nil, restart.other.nearby.values.contains(restart.node.name) {
                if let found = restart.other.foundAt[restart.node.name], found > restart.at {
                    restart.shownByOther = found.timeIntervalSince(restart.at)
                    foundAgain += 1
                } else if elapsed >= Self.settling {
                    restart.shownByOther = 0  // never lost
                }
            }
            // avahi-browse once a second at most: a process each time.
            if restart.published == nil, now.timeIntervalSince(restart.lastLook) >= 1, let host = restart.node.lanHost {
                restart.lastLook = now
                do {
                    let names = try host.instanceNames("_peervoice._tcp", resolve: false)
                    restart.listed = "\(names)"
                    if names.contains(restart.node.name) { restart.published = Date().timeIntervalSince(restart.at) }
                } catch {
                    restart.listed = "avahi-browse failed: \(error)"
                }
            }
            if restart.done {
                recoveries.append(max(restart.browsing ?? 0, restart.published ?? 0, restart.shownByOther ?? 0))
                return nil
            }
            guard elapsed > Self.bound else { return restart }
            var missing: [String] = []
            if restart.browsing == nil { missing.append("\(restart.node.name) reported no PeerFound for \(restart.other.name)") }
            if restart.published == nil {
                missing.append("its avahi-daemon did not list \(restart.node.name)'s service (avahi-browse last: \(restart.listed))")
            }
            if restart.shownByOther == nil { missing.append("\(restart.other.name) does not show it among the peers found (PeerLost, no PeerFound since)") }
            violations.append("\(restart.node.name)'s avahi-daemon back (after a \(restart.graceful ? "SIGTERM" : "SIGKILL")) "
                + "\(String(format: "%.1f", elapsed)) s ago: \(missing.joined(separator: "; ")); expected within \(Self.bound) s")
            return nil
        }
        return violations
    }

    var settled: Bool { pending.isEmpty }
}
