/// What the desktop app shows for what the service said: peers, the pairing question, chats, mute,
/// and problems a person can act on. Pure Swift: the GTK layer renders it, the bus layer feeds it.
///
/// Peer ids are opaque strings (an address today, a `pv:` id once keys name peers); an address
/// becomes an id through `peerIdentified`.
public final class AppModel {
    /// Every peer row: the service's peer objects, and devices the LAN found (`PeerFound`) or a
    /// person dialled by address that have no object yet.
    public private(set) var peers: [PeerRow] = []
    /// The service's objects below its ObjectManager, by path, decoded by interface.
    public private(set) var objects: [String: ServiceObject] = [:]
    public private(set) var selectedPeer: String?
    /// The Mumble rooms joined (room objects), in the order joined.
    public private(set) var rooms: [RoomRow] = []
    /// The room whose page is on screen, by path (instead of a peer's conversation).
    public private(set) var selectedRoom: String?
    /// What each room's channel said since the app joined or started, oldest first.
    public private(set) var roomMessages: [String: [RoomMessage]] = [:]
    /// The pairing question on screen, if any (at most one at a time: the newest).
    public private(set) var question: PairingQuestion?
    public private(set) var chats: [String: [ChatMessage]] = [:]
    public private(set) var muted = false
    public private(set) var discovering = false
    public private(set) var service: ServiceStatus = .starting
    /// The problem on screen, if any.
    public private(set) var notice: Notice?
    public var holdMode: HoldMode = .holdToMute { didSet { changed(.hold) } }
    /// The display name other devices see (`Name`); nil while the service has not said (a service
    /// without the property has no settings to change).
    public private(set) var displayName: String?
    /// Where discovery makes this device visible (`Visible`): "bluetooth", "lan".
    public private(set) var visibility: Set<String> = []
    public private(set) var isHolding = false
    /// Our microphone holds speech now (the service's `Speaking`; muted speech is not speaking).
    public private(set) var microphoneSpeaking = false
    /// Volumes a person set with the slider that the service has not shown yet (by peer): the
    /// slider keeps them while older values arrive, so it does not jump back during a drag.
    private var requestedVolumes: [String: Double] = [:]
    /// Messages received from each peer while its conversation was not on screen.
    private var unread: [String: Int] = [:]
    /// The selected peer's conversation is on screen (not folded away behind the list).
    public private(set) var conversationVisible = true
    /// Failed messages a person sent again: the new one stands in for them (`History` still
    /// lists them, failed).
    private var resent: Set<String> = []
    /// Each transfer's bytes as reported, with when, over the last `rateWindowMs` (its rate).
    private var transferSamples: [String: [(ms: UInt64, bytes: UInt64)]] = [:]
    /// Addresses `PeerIdentified` named a peer for, while a listing still shows their found
    /// objects: the service replaces those in the same turn as the signal, but a listing read
    /// before that arrives lags behind it (seen under load: the selection was lost mid-pairing).
    private var identifiedAddresses: [String: String] = [:]
    /// What the peer list shows: rows whose name holds this text (any case); "" for all.
    public private(set) var peerFilter = ""
    /// The methods `StartDiscovery` can use now (`DiscoveryMethods`); nil until the service says.
    public private(set) var discoveryMethods: [String]?
    /// What cleans our microphone (`AudioProcessing`); nil until the service says.
    public private(set) var audioProcessing: [String]?
    /// Light, dark, or as the desktop prefers.
    public var style: AppStyle = .followSystem { didSet { if style != oldValue { changed(.style) } } }

    /// Called after every change, with what changed.
    public var onChange: (Change) -> Void = { _ in }
    private let localize: (String) -> String

    /// `localize` translates the English strings the model produces (gettext in the app).
    public init(localize: @escaping (String) -> String = { $0 }) {
        self.localize = localize
    }

    public enum Change: Equatable {
        case peers, selection, question, chat(peer: String), mute, discovering, service, notice, hold, settings
        /// The light or dark style a person chose.
        case style
        /// The microphone's `Speaking`.
        case speaking
        /// The selected peer's volume or mute here, as a person set it.
        case playback
        /// The rooms joined, or one's users or state.
        case rooms
        /// A room's conversation.
        case roomChat(room: String)
    }

    private func changed(_ change: Change) { onChange(change) }

    /// What the app keeps between starts, as it is now.
    public var preferences: AppPreferences {
        get { AppPreferences(holdMode: holdMode, style: style) }
        set {
            holdMode = newValue.holdMode
            style = newValue.style
        }
    }

    // MARK: Service

    public func serviceAppeared() {
        service = .running
        changed(.service)
    }

    /// The service left the bus (it ended or crashed): what it told us is no longer true, and a
    /// person is told so (with Retry) unless it was never there (activation is under way).
    public func serviceVanished() {
        let wasRunning = service == .running
        service = wasRunning ? .unavailable(localize("The PeerVoice service is not running.")) : .starting
        question = nil
        changed(.question)
        changed(.service)
    }

    /// Bus activation (`StartServiceByName`) failed with the D-Bus error `errorName`.
    /// A failure that crossed the service's start (it appeared meanwhile) is no longer true.
    public func activationFailed(errorName: String, message: String) {
        guard service != .running else { return }
        let reason: String
        switch errorName {
        case "org.freedesktop.DBus.Error.ServiceUnknown":
            reason = localize("PeerVoice is not installed for this session: the bus does not know how to start org.example.PeerVoice.")
        case let name where name.hasPrefix("org.freedesktop.DBus.Error.Spawn."):
            reason = localize("The PeerVoice service could not be started:") + " " + message
        default:
            reason = localize("The PeerVoice service could not be reached:") + " " + message
        }
        service = .unavailable(reason)
        changed(.service)
    }

    /// A person asked to start the service again (Retry): it is starting until it appears or
    /// activation fails again.
    public func activationRetried() {
        guard service != .running else { return }
        service = .starting
        changed(.service)
    }

    /// What the peer list shows instead of rows, or `.peers` when it has some to show.
    public var peerListState: PeerListState {
        switch service {
        case .starting: return .starting
        case .unavailable(let reason): return .serviceNotRunning(reason)
        case .running:
            guard peers.isEmpty else { return .peers }
            // A service that has not said (or is older) is taken to search over Bluetooth.
            let methods = discoveryMethods ?? ["bluetooth"]
            if methods.contains("bluetooth") { return .noOneNearby(searching: discovering) }
            return .bluetoothOff(canSearchNetwork: methods.contains("lan"), searching: discovering)
        }
    }

    // MARK: Peers

    /// The service's objects (`GetManagedObjects`, kept current by `InterfacesAdded`,
    /// `InterfacesRemoved` and `PropertiesChanged`), decoded by interface. Peer rows follow the
    /// peer objects; rows only found on the LAN (`PeerFound`) stay until an object stands for
    /// them or `PeerLost`.
    public func objectsListed(_ listed: [String: ServiceObject], nowMs: UInt64 = 0) {
        let before = transfers
        objects = listed.mapValues { object in
            guard case .transfer(var row) = object else { return object }
            row.timeMs = before[row.path]?.timeMs ?? nowMs
            return .transfer(row)
        }
        // `transfers` is derived from `objects` afresh on each read: read it once here.
        let after = transfers
        for (path, row) in after where row.transferred != before[path]?.transferred || row.state != before[path]?.state {
            transferSamples[path, default: []].append((nowMs, row.transferred))
            transferSamples[path]?.removeAll { $0.ms + Self.rateWindowMs < nowMs }
        }
        transferSamples = transferSamples.filter { after[$0.key] != nil }
        let roomsBefore = rooms
        rooms = objects.values.compactMap { object -> RoomRow? in
            guard case .room(let room) = object else { return nil }
            return room
        }.sorted { ($0.path.count, $0.path) < ($1.path.count, $1.path) }
        if rooms != roomsBefore { changed(.rooms) }
        if let room = selectedRoom, !rooms.contains(where: { $0.path == room }) {
            selectedRoom = nil
            changed(.selection)
        }
        roomMessages = roomMessages.filter { path, _ in rooms.contains { $0.path == path } }
        for peer in Set(after.values.map(\.peer) + before.values.map(\.peer))
        where after.values.filter({ $0.peer == peer }) != before.values.filter({ $0.peer == peer }) {
            changed(.chat(peer: peer))
        }
        let listedRows = listed.keys.sorted().compactMap { path -> PeerRow? in
            guard case .peer(let row) = listed[path] else { return nil }
            return row
        }
        // A found object already identified stands for its peer until the peer's own object
        // comes; once the found object is gone, so is the need.
        identifiedAddresses = identifiedAddresses.filter { address, _ in listedRows.contains { $0.id == address } }
        let objectRows = listedRows.compactMap { row -> PeerRow? in
            guard let peer = identifiedAddresses[row.id] else { return row }
            if listedRows.contains(where: { $0.id == peer }) { return nil }
            var renamed = row
            renamed.id = peer
            return renamed
        }
        var rows = objectRows
        for row in peers where row.state == .nearby && !objectRows.contains(where: { $0.id == row.id }) {
            rows.append(row)
        }
        let removed = peers.filter { old in !rows.contains { $0.id == old.id } }.map(\.id)
        peers = rows
        for row in objectRows where requestedVolumes[row.id] == row.volume { requestedVolumes[row.id] = nil }
        for id in removed { unread[id] = nil }
        changed(.peers)
        if let selected = selectedPeer, !rows.contains(where: { $0.id == selected }) {
            selectedPeer = nil
            changed(.selection)
        }
        closeQuestionIfPairingEnded()
    }

    /// Peers paired with (their keys pinned), by name.
    public var pairedPeers: [PeerRow] { shown(peers.filter(\.isPaired)) }

    /// Devices found nearby, being dialled or paired with, whose pairing is not (yet) confirmed, by name.
    public var nearbyPeers: [PeerRow] { shown(peers.filter { !$0.isPaired }) }

    private func shown(_ rows: [PeerRow]) -> [PeerRow] {
        let filter = peerFilter.lowercased()
        return rows.filter { filter.isEmpty || $0.displayName.lowercased().contains(filter) }
            .sorted { ($0.displayName.lowercased(), $0.id) < ($1.displayName.lowercased(), $1.id) }
    }

    /// A person typed `text` into the peer search (Ctrl+F); "" shows every row.
    public func filterPeers(_ text: String) {
        guard peerFilter != text else { return }
        peerFilter = text
        changed(.peers)
    }

    /// How many messages `peer` sent that were not on screen when they came.
    public func unreadCount(of peer: String) -> Int { unread[peer] ?? 0 }

    public func peerFound(_ id: String, name: String, transport: String) {
        if let index = index(of: id) {
            if !name.isEmpty && peers[index].name != name { peers[index].name = name; changed(.peers) }
            return
        }
        peers.append(PeerRow(id: id, name: name, transport: transport, state: .nearby))
        changed(.peers)
    }

    /// Out of range: a found-only peer leaves the list; a known one stays (it can be dialled).
    public func peerLost(_ id: String) {
        guard let index = index(of: id), peers[index].state == .nearby else { return }
        peers.remove(at: index)
        if selectedPeer == id { selectedPeer = nil; changed(.selection) }
        changed(.peers)
    }

    public func peerStateChanged(_ id: String, state: PeerState, transport: String) {
        if let index = index(of: id) {
            peers[index].state = state
        } else {
            peers.append(PeerRow(id: id, name: "", transport: transport, state: state))
        }
        if state != .connected, let index = index(of: id) { peers[index].voiceActive = false }
        changed(.peers)
        closeQuestionIfPairingEnded()
    }

    /// Connected or not: the pairing is over, however it ended (a service without
    /// PairingSettled says so only this way; a code that was only shown has no other end).
    private func closeQuestionIfPairingEnded() {
        guard let peer = question?.peer, let row = peers.first(where: { $0.id == peer }),
              row.state == .connected || row.state == .disconnected else { return }
        question = nil
        changed(.question)
    }

    /// `PeerIdentified(address, peer)`: the row (chat, selection, question) known by `address` is
    /// now known by `peer`; if `peer` already has a row, the two become one.
    public func peerIdentified(address: String, as peer: String) {
        guard address != peer else { return }
        identifiedAddresses[address] = peer
        guard let from = index(of: address) else { return }
        let row = peers.remove(at: from)
        if let existing = index(of: peer) {
            if peers[existing].name.isEmpty { peers[existing].name = row.name }
            if row.state != .nearby { peers[existing].state = row.state }
        } else {
            var renamed = row
            renamed.id = peer
            peers.insert(renamed, at: from)
        }
        if let messages = chats.removeValue(forKey: address) {
            chats[peer] = merge(chats[peer] ?? [], messages)
            changed(.chat(peer: peer))
        }
        if let count = unread.removeValue(forKey: address) { unread[peer, default: 0] += count }
        if selectedPeer == address { selectedPeer = peer; changed(.selection) }
        if question?.peer == address { question?.peer = peer; changed(.question) }
        changed(.peers)
    }

    public func voiceStateChanged(_ id: String, active: Bool) {
        guard let index = index(of: id) else { return }
        peers[index].voiceActive = active
        changed(.peers)
    }

    public func select(_ id: String?) {
        let leavesRoom = id != nil && selectedRoom != nil
        if id != nil { selectedRoom = nil }
        guard selectedPeer != id || leavesRoom else { return }
        selectedPeer = id
        markRead()
        changed(.selection)
    }

    /// Whether the selected peer's conversation is on screen: a folded window shows either the
    /// list or the conversation.
    public func conversationShown(_ visible: Bool) {
        guard conversationVisible != visible else { return }
        conversationVisible = visible
        markRead()
    }

    private func markRead() {
        guard conversationVisible, let peer = selectedPeer, unread[peer] != nil else { return }
        unread[peer] = nil
        changed(.peers)
    }

    public var selectedRow: PeerRow? { selectedPeer.flatMap { id in peers.first { $0.id == id } } }

    /// What Connect, Disconnect, the voice button and the chat may do for the selected peer.
    public var actions: PeerActions {
        guard service == .running, let row = selectedRow else { return PeerActions() }
        return PeerActions(connect: row.state != .connected && row.state != .connecting && row.state != .pairing,
                           disconnect: row.state == .connected || row.state == .connecting,
                           voice: row.state == .connected, send: true,
                           voiceLabel: row.voiceActive ? localize("Stop voice") : localize("Start voice"))
    }

    private func index(of id: String) -> Int? { peers.firstIndex { $0.id == id } }

    // MARK: Pairing

    /// `PairingPrompt(peer, name, passkey, kind)`, or the older `PairingRequested` (always a code to
    /// confirm). A newer prompt replaces the one on screen.
    public func pairingRequested(peer: String, name: String, passkey: String, kind: PairingQuestion.Kind) {
        if !name.isEmpty, let index = index(of: peer), peers[index].name.isEmpty {
            peers[index].name = name
            changed(.peers)
        }
        let displayName = name.isEmpty ? (peers.first { $0.id == peer }?.displayName ?? peer) : name
        let asked = PairingQuestion(peer: peer, name: displayName, passkey: passkey, kind: kind)
        guard question != asked else { return }
        question = asked
        changed(.question)
    }

    /// `PairingSettled(peer, accepted)`: the question was answered (here, elsewhere, by the other
    /// side or the timeout): withdraw it.
    public func pairingSettled(peer: String, accepted: Bool) {
        guard question?.peer == peer else { return }
        question = nil
        changed(.question)
    }

    /// This app answered; the service's `PairingSettled` will confirm it.
    public func answeredPairing() {
        guard question != nil else { return }
        question = nil
        changed(.question)
    }

    // MARK: Chat

    public func history(of peer: String, _ messages: [ChatMessage]) {
        chats[peer] = merge(messages, chats[peer] ?? [])
        changed(.chat(peer: peer))
    }

    public func messageReceived(from peer: String, id: String, text: String, timeMs: UInt64) {
        let isNew = !(chats[peer] ?? []).contains { $0.id == id }
        append(ChatMessage(id: id, incoming: true, text: text, state: .received, timeMs: timeMs), to: peer)
        if isNew && !(conversationVisible && selectedPeer == peer) {
            unread[peer, default: 0] += 1
            changed(.peers)
        }
    }

    /// A failed message was sent again as `newID` (Retry): the new one takes its place.
    public func messageResent(to peer: String, failedID: String, as newID: String, timeMs: UInt64) {
        guard let failed = chats[peer]?.first(where: { $0.id == failedID }) else { return }
        resent.insert(failedID)
        chats[peer]?.removeAll { $0.id == failedID }
        append(ChatMessage(id: newID, incoming: false, text: failed.text, state: .queued, timeMs: timeMs), to: peer)
    }

    /// `Send` returned the message's id: it is queued until delivered or failed.
    public func messageQueued(to peer: String, id: String, text: String, timeMs: UInt64) {
        append(ChatMessage(id: id, incoming: false, text: text, state: .queued, timeMs: timeMs), to: peer)
    }

    public func messageDelivered(to peer: String, id: String) { update(id, of: peer, to: .delivered) }

    public func messageFailed(to peer: String, id: String, reason: String) { update(id, of: peer, to: .failed(reason)) }

    /// `peer`'s conversation, oldest first: its messages and its transfers, by time (a transfer
    /// by when the app first saw it; one seen at the same time as a message comes after it).
    public func conversation(with peer: String) -> [ConversationItem] {
        let messages = messages(with: peer).filter { !$0.text.isEmpty }
        let files = transfers.values.filter { $0.peer == peer }.sorted { ($0.timeMs, $0.path.count, $0.path) < ($1.timeMs, $1.path.count, $1.path) }
        var items: [ConversationItem] = []
        var next = files.startIndex
        for message in messages {
            while next < files.endIndex, files[next].timeMs < message.timeMs {
                items.append(.transfer(files[next]))
                next += 1
            }
            items.append(.message(message))
        }
        return items + files[next...].map(ConversationItem.transfer)
    }

    // MARK: Rooms

    /// A person opened `room` (its path) from the sidebar: it takes the place of a peer's conversation.
    public func select(room: String?) {
        guard selectedRoom != room || (room != nil && selectedPeer != nil) else { return }
        selectedRoom = room
        if room != nil { selectedPeer = nil }
        changed(.selection)
    }

    public var selectedRoomRow: RoomRow? { selectedRoom.flatMap { path in rooms.first { $0.path == path } } }

    /// A room's `MessageReceived` (user nil: what we sent, once `Send` took it).
    public func roomMessage(in room: String, from user: String?, text: String, timeMs: UInt64) {
        roomMessages[room, default: []].append(RoomMessage(user: user, text: text, timeMs: timeMs))
        changed(.roomChat(room: room))
    }

    // MARK: Transfers

    /// The transfer objects, by path.
    public var transfers: [String: TransferRow] {
        objects.compactMapValues { object in
            guard case .transfer(let row) = object else { return nil }
            return row
        }
    }

    /// How fast the transfer at `path` moved over the last seconds, and the time left at that
    /// rate; nil until two reports of its bytes are apart in time, and once it is not active.
    public func rate(of path: String) -> TransferRate? {
        guard let row = transfers[path], row.state == .active, let samples = transferSamples[path],
              let first = samples.first, let last = samples.last, last.ms > first.ms, last.bytes >= first.bytes else { return nil }
        let bytesPerSecond = Double(last.bytes - first.bytes) * 1000 / Double(last.ms - first.ms)
        let left = row.size > row.transferred ? Double(row.size - row.transferred) : 0
        return TransferRate(bytesPerSecond: bytesPerSecond, secondsLeft: bytesPerSecond > 0 ? left / bytesPerSecond : nil)
    }

    /// Over how long the rate is measured: long enough to smooth the service's four reports a
    /// second, short enough to follow a link that slows.
    static let rateWindowMs: UInt64 = 5_000

    public func messages(with peer: String) -> [ChatMessage] { chats[peer] ?? [] }

    private func append(_ message: ChatMessage, to peer: String) {
        var messages = chats[peer] ?? []
        if let index = messages.firstIndex(where: { $0.id == message.id }) {
            // A Delivered that overtook the Send reply left a row without text: its state stays.
            if messages[index].text.isEmpty { messages[index].text = message.text }
        } else {
            messages.append(message)
        }
        chats[peer] = messages
        changed(.chat(peer: peer))
    }

    private func update(_ id: String, of peer: String, to state: MessageState) {
        var messages = chats[peer] ?? []
        if let index = messages.firstIndex(where: { $0.id == id }) {
            messages[index].state = state
        } else {
            // Delivered before Send's reply arrived: remember the state; the text comes with the reply.
            messages.append(ChatMessage(id: id, incoming: false, text: "", state: state, timeMs: 0))
        }
        chats[peer] = messages
        changed(.chat(peer: peer))
    }

    /// `first` and then those of `second` it lacks, by id; a known text or state wins over a blank one.
    private func merge(_ first: [ChatMessage], _ second: [ChatMessage]) -> [ChatMessage] {
        var result = first.filter { !resent.contains($0.id) }
        for message in second where !resent.contains(message.id) {
            if let index = result.firstIndex(where: { $0.id == message.id }) {
                if result[index].text.isEmpty { result[index].text = message.text }
                if result[index].state == .queued { result[index].state = message.state }
            } else {
                result.append(message)
            }
        }
        return result.sorted { $0.timeMs < $1.timeMs }
    }

    // MARK: Voice

    public func muteChanged(_ muted: Bool) {
        guard self.muted != muted else { return }
        self.muted = muted
        changed(.mute)
    }

    public func discoveringChanged(_ discovering: Bool) {
        guard self.discovering != discovering else { return }
        self.discovering = discovering
        changed(.discovering)
    }

    /// The hold button (or Space) went down: the `Mute` value to ask for, nil if already held.
    public func holdPressed() -> Bool? {
        guard !isHolding else { return nil }
        isHolding = true
        changed(.hold)
        return holdMode == .holdToMute
    }

    /// The hold button (or Space) came up, or the window lost focus while held: the `Mute` value
    /// to ask for, nil if nothing was held. The microphone never stays open by accident.
    public func holdReleased() -> Bool? {
        guard isHolding else { return nil }
        isHolding = false
        changed(.hold)
        return holdMode == .holdToTalk
    }

    public var holdLabel: String { holdMode == .holdToMute ? localize("Hold to mute") : localize("Hold to talk") }

    // MARK: Who is speaking

    public func microphoneSpeakingChanged(_ speaking: Bool) {
        guard microphoneSpeaking != speaking else { return }
        microphoneSpeaking = speaking
        changed(.speaking)
    }

    /// What `row`'s speaking indicator shows; nil while voice with it is off (nothing to hear).
    public func speakingIndicator(of row: PeerRow) -> SpeakingIndicator? {
        guard row.voiceActive else { return nil }
        return SpeakingIndicator(speaking: row.speaking, name: row.speaking ? localize("Speaking") : localize("Silent"))
    }

    /// What the indicator of our own microphone shows; nil while voice runs with nobody.
    public var microphoneIndicator: SpeakingIndicator? {
        guard peers.contains(where: \.voiceActive) else { return nil }
        return SpeakingIndicator(speaking: microphoneSpeaking,
                                 name: microphoneSpeaking ? localize("You are speaking") : localize("You are silent"))
    }

    // MARK: Volume and mute per peer

    /// The selected peer's volume and mute here; nil when there is nothing to set (no service,
    /// no peer selected, or one only found nearby, which the service does not know).
    public var selectedPlayback: PeerPlayback? {
        guard service == .running, let row = selectedRow, row.state != .nearby else { return nil }
        return PeerPlayback(volume: requestedVolumes[row.id] ?? row.volume, mutedHere: row.mutedHere)
    }

    /// A person moved `peer`'s slider to `percent` (0–200): the volume to ask for (`SetVolume`).
    public func volumeRequested(percent: Double, for peer: String) -> Double {
        let volume = min(max(percent.rounded(), 0), 200) / 100
        requestedVolumes[peer] = volume
        changed(.playback)
        return volume
    }

    /// `SetVolume` for `peer` failed: the slider shows the service's volume again.
    public func volumeNotSet(for peer: String) {
        guard requestedVolumes.removeValue(forKey: peer) != nil else { return }
        changed(.playback)
    }

    // MARK: Settings

    /// `Name` and `Visible` from `GetAll` or `PropertiesChanged` (nil: not among them).
    public func settingsChanged(name: String?, visible: [String]?) {
        var changedAny = false
        if let name, name != displayName { displayName = name; changedAny = true }
        if let visible, Set(visible) != visibility { visibility = Set(visible); changedAny = true }
        if changedAny { changed(.settings) }
    }

    /// `DiscoveryMethods` and `AudioProcessing` from `GetAll` or `PropertiesChanged` (nil: not
    /// among them).
    public func capabilitiesChanged(discoveryMethods: [String]?, audioProcessing: [String]?) {
        if let discoveryMethods, discoveryMethods != self.discoveryMethods {
            self.discoveryMethods = discoveryMethods
            changed(.service)
        }
        if let audioProcessing, audioProcessing != self.audioProcessing {
            self.audioProcessing = audioProcessing
            changed(.settings)
        }
    }

    /// Each stage that may clean our microphone, in the service's order, and whether it runs.
    public var audioProcessingStages: [(stage: AudioProcessingStage, on: Bool)] {
        AudioProcessingStage.allCases.map { stage in (stage, audioProcessing?.contains(stage.rawValue) ?? false) }
    }

    /// Whether the settings can be changed now: the service runs and has them.
    public var settingsAvailable: Bool { service == .running && displayName != nil }

    public func isVisible(on method: String) -> Bool { visibility.contains(method) }

    // MARK: Problems

    /// A call failed with the D-Bus error `errorName`: show it as something a person can act on.
    public func callFailed(_ action: String, peer: String?, errorName: String, message: String) {
        let failure = Notice.from(action: action, peer: peer, errorName: errorName, message: message, localize: localize)
        if failure.remedy == .retryActivation {
            // The service is gone: the peer list says so, with Retry.
            service = .unavailable(failure.text)
            changed(.service)
            return
        }
        notice = failure
        changed(.notice)
    }

    public func dismissNotice() {
        guard notice != nil else { return }
        notice = nil
        changed(.notice)
    }
}
