import GIO
import MumbleProtobuf
import PeerVoiceCore

/// The Mumble rooms this service is in (`JoinRoom`), numbered from 1 in the order joined, and the
/// servers' pinned certificates. Held by `PeerVoiceService`; main loop only. Each room owns its
/// connection (`MumbleRoom`); `RoomObjects` shows them on the bus.
final class Rooms {
    private(set) var rooms: [Int: MumbleRoom] = [:]
    private var nextNumber = 1
    private let pins: RoomPins
    /// This installation's client certificate (Mumble's identity).
    private let identity: RoomIdentity
    /// The user name when a URL names none: the service's display name.
    private let displayName: () -> String
    private let voice: () -> VoiceEngine?
    private let codec = ProtobufCMumbleCodec()
    private var muted = false

    /// A room was added, changed or removed.
    var changed: () -> Void = {}
    /// A room's text message: the room, the sender's name, the text.
    var messageReceived: (MumbleRoom, String, String) -> Void = { _, _, _ in }

    /// `voice`: the voice thread's handle once it runs (rooms' voice goes through the call).
    init(stateDirectory: String, displayName: @escaping () -> String, voice: @escaping () -> VoiceEngine?) {
        pins = RoomPins(path: stateDirectory + "/room-servers.json")
        identity = RoomIdentity(stateDirectory: stateDirectory)
        self.displayName = displayName
        self.voice = voice
    }

    /// `JoinRoom(url, options)`: options `password` (s), `accept-certificate` (s, a fingerprint)
    /// and `force-tcp` (b: voice only through the TLS tunnel, never UDP).
    /// Completes once in the channel, or with why not; the room then stays until `leave`.
    func join(url text: String, password: String?, acceptCertificate: String?, forceTCP: Bool,
              completion: @escaping (Result<MumbleRoom, ServiceError>) -> Void) {
        let url: MumbleURL
        do throws(MumbleURL.ParseError) {
            url = try MumbleURL(parsing: text)
        } catch {
            return completion(.failure(.invalidArgument("\(text): \(error)")))
        }
        let room = MumbleRoom(number: nextNumber, url: url, username: url.user ?? MumbleURL.username(from: displayName()),
                              password: password, acceptedFingerprint: acceptCertificate, forceTCP: forceTCP, pins: pins,
                              identity: identity, codec: codec, muted: muted,
                              voice: voice)
        nextNumber += 1
        rooms[room.number] = room
        room.changed = { [unowned self] in changed() }
        room.messageReceived = { [unowned self, unowned room] sender, text in messageReceived(room, sender, text) }
        changed()
        room.join { [weak self] result in
            switch result {
            case .success:
                completion(.success(room))
            case .failure(let error):
                // A first attempt that failed leaves no room behind, but for a changed
                // certificate: its object stays, failed, with the fingerprint to compare.
                if !room.certificateChanged { self?.remove(room) }
                completion(.failure(error))
            }
        }
    }

    func leave(_ room: MumbleRoom) {
        Log.info("room \(room.number): leaving \(room.server)")
        remove(room)
    }

    /// Our microphone's mute, shown in every room as self-mute.
    func setMuted(_ muted: Bool) {
        self.muted = muted
        rooms.values.forEach { $0.setMuted(muted) }
    }

    /// Our voice packet for room `number`, from the voice thread.
    func sendVoice(_ packet: [UInt8], toRoom number: Int) {
        rooms[number]?.sendVoice(packet)
    }

    func shutdown() {
        rooms.values.forEach { $0.leave() }
        rooms = [:]
    }

    private func remove(_ room: MumbleRoom) {
        guard rooms.removeValue(forKey: room.number) != nil else { return }
        room.leave()
        changed()
    }
}
