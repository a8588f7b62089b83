import Foundation

/// The Mumble servers' certificates as first met (trust on first use), by `host:port`: the
/// fingerprints in `room-servers.json` in the state directory (`{"host:port": "AB:CD:…"}`).
/// A different certificate is refused until the person accepts it (`accept-certificate`), which
/// pins the new one. Main loop only.
final class RoomPins {
    enum Verdict: Equatable {
        case trusted
        /// The certificate is not the pinned one, which is given.
        case changed(pinned: String)
    }

    private let path: String
    private var pins: [String: String]

    init(path: String) {
        self.path = path
        let data = FileManager.default.contents(atPath: path) ?? Data()
        pins = (try? JSONSerialization.jsonObject(with: data) as? [String: String]) ?? [:]
    }

    /// Pins on first use and when `accepted` is the presented certificate.
    func check(server: String, fingerprint: String, accepted: String?) -> Verdict {
        if let pinned = pins[server], pinned != fingerprint, accepted?.uppercased() != fingerprint {
            return .changed(pinned: pinned)
        }
        if pins[server] != fingerprint {
            pins[server] = fingerprint
            save()
        }
        return .trusted
    }

    private func save() {
        do {
            let data = try JSONSerialization.data(withJSONObject: pins, options: [.prettyPrinted, .sortedKeys])
            try data.write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            Log.warning("cannot save the Mumble servers' certificates in \(path): \(error.localizedDescription)")
        }
    }
}
