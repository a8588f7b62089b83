import GIO
import PeerVoiceCore

/// One transfer as the main loop holds it: its record (what is kept on disk), the stream that
/// carries it now, and what its object on the bus shows. Owned by `Transfers`.
final class Transfer {
    /// The `<n>` of its object path, given in order this run; nil for an ended transfer of an
    /// earlier run, kept only to answer a peer that offers it again.
    let number: Int?
    let id: TransferID
    let peer: PeerID
    let manifest: TransferManifest
    var record: TransferRecord
    /// The stream's thread, while one runs.
    var stream: TransferStreamHandle?
    /// Incoming: a new stream whose OFFER named this transfer while the old stream's thread was
    /// still ending; it takes over once that one has (never two threads on one part file).
    var nextStream: TransferStreamHandle?
    /// Outgoing: a stream is being opened.
    var opening = false
    /// Outgoing: the next attempt, after one that could not open or ended while the link stayed.
    var retry: EventSource?
    /// Incoming: top-level name → the name it was saved under.
    var placed: [String: String] = [:]
    /// Incoming: its partial data goes once no stream writes it any more.
    var discardPending = false
    /// `Transferred` when no stream runs (what the last one reached, or the durable position).
    var transferredAtRest: UInt64 = 0
    /// `Transferred` as last shown (it is shown at most 4 times a second, and at state changes).
    var shownTransferred: UInt64 = 0
    /// A notification or the app was asked about it this run (incoming, waiting).
    var asked = false
    /// Its record on disk says how it ended (or, outgoing, is gone): only then is the end shown,
    /// since a `kill -9` before the write would bring back the old record and perhaps another
    /// end (simulation seed 272). True for what the record of an earlier run said.
    var endRecorded: Bool
    /// Incoming, ended: what goes to the sender (COMPLETE or ABORT, then the stream's close) once
    /// the record says how it ended; the sender forgets a transfer its receiver ended, so a
    /// `kill -9` before the write would leave the receiver waiting for it (simulation seeds 2461, 2993).
    var heldForTheRecord: (tell: TransferMessage?, close: Bool)?

    init(number: Int?, id: TransferID, peer: PeerID, manifest: TransferManifest, record: TransferRecord) {
        self.number = number
        self.id = id
        self.peer = peer
        self.manifest = manifest
        self.record = record
        endRecorded = record.lifecycle.state.isFinished
    }

    var direction: TransferDirection { record.lifecycle.direction }
    var state: TransferState { record.lifecycle.state }
    var lifecycle: TransferLifecycle {
        get { record.lifecycle }
        set { record.lifecycle = newValue }
    }

    /// Bytes sent (outgoing) or written here (incoming) so far.
    var transferred: UInt64 {
        if state == .complete { return manifest.totalBytes }
        return stream?.transferred.load(ordering: .relaxed) ?? transferredAtRest
    }

    /// Incoming: the file or folder it is saved as (one top-level item), or the folder the
    /// items are saved in (several): the name it lands under once in place.
    var destination: String {
        guard direction == .incoming else { return "" }
        guard manifest.topLevelNames.count == 1, let name = manifest.topLevelNames.first else { return record.folder }
        return record.folder + "/" + (placed[name] ?? name)
    }

    /// How a log line names it: the first 8 hex digits of its id.
    var logName: String { "transfer \(id.hex.prefix(8))" }

    /// What its object shows, with `Transferred` as last shown.
    var snapshot: TransferObjectSnapshot {
        TransferObjectSnapshot(
            path: TransferObjects.path(number ?? 0), id: id.hex, peer: peer.description, direction: direction.rawValue,
            state: state.rawValue, files: manifest.files.map { ($0.path.description, $0.size) }, size: manifest.totalBytes,
            transferred: shownTransferred, error: record.lifecycle.error, destination: destination, skipped: record.skipped)
    }
}

/// What one transfer object shows: the values of `org.example.PeerVoice.Transfer`'s properties
/// (dbus/org.example.PeerVoice.Transfer.xml).
struct TransferObjectSnapshot {
    var path: String
    var id: String
    var peer: String
    var direction: String
    var state: String
    var files: [(String, UInt64)]
    var size: UInt64
    var transferred: UInt64
    var error: String
    var destination: String
    var skipped: [String]
}

/// The properties of `org.example.PeerVoice.Transfer`, by their bus names.
enum TransferProperty: String, CaseIterable {
    case id = "Id"
    case peer = "Peer"
    case direction = "Direction"
    case state = "State"
    case files = "Files"
    case size = "Size"
    case transferred = "Transferred"
    case error = "Error"
    case destination = "Destination"
    case skipped = "Skipped"
}

extension TransferObjectSnapshot {
    func value(of property: TransferProperty) -> Variant {
        switch property {
        case .id: Variant(id)
        case .peer: Variant(peer)
        case .direction: Variant(direction)
        case .state: Variant(state)
        case .files: Variant(array: files.map { Variant(tuple: [Variant($0.0), Variant($0.1)]) }, elementType: "(st)")
        case .size: Variant(size)
        case .transferred: Variant(transferred)
        case .error: Variant(error)
        case .destination: Variant(destination)
        case .skipped: Variant(array: skipped.map { Variant($0) }, elementType: "s")
        }
    }

    /// The properties whose values differ from `old`'s, in declaration order (`Files` and
    /// `Skipped` never change, so they are not compared).
    func properties(changedFrom old: TransferObjectSnapshot) -> [TransferProperty] {
        TransferProperty.allCases.filter { $0 != .files && $0 != .skipped && value(of: $0) != old.value(of: $0) }
    }
}
