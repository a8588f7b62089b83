import Foundation
import Gtk
import PeerVoiceAppModel

/// The left pane: the peers paired with and the devices found nearby, in two groups (as
/// GNOME Settings lists Bluetooth devices), or a status page saying why there are none and what
/// to do about it; Ctrl+F finds a peer by name; an address dials a peer that cannot be found.
final class PeerListPane {
    let root = Box(.vertical, spacing: 0)
    let header = HeaderBar()
    let muteButton = ToggleButton(icon: "audio-input-microphone-symbolic", name: tr("Mute"))
    let findButton = ToggleButton(icon: "system-search-symbolic", name: tr("Find a peer"))
    private let menuButton = MenuButton(icon: "open-menu-symbolic", name: tr("Main menu"),
                                        items: [(tr("Preferences"), "app.preferences"), (tr("About PeerVoice"), "app.about")])
    let searchEntry = SearchEntry(placeholder: tr("Find a peer"))
    let searchBar: SearchBar

    private let statusPage = StatusPage(icon: "network-workgroup-symbolic")
    private let statusSpinner = Spinner()
    private let statusSearchButton = Button(tr("Search nearby"))
    private let retryButton = Button(tr("Retry"))
    private let lists = Box(.vertical, spacing: 24)
    private let listsPage: ScrolledWindow
    private let pairedGroup = Box(.vertical, spacing: 8)
    private let pairedList = ListBox()
    private let nearbyList = ListBox()
    private let nearbyPlaceholder = Label()
    let searchToggle = ToggleButton(tr("Search nearby"))
    private let searchSpinner = Spinner()
    let addressEntry = Entry(placeholder: tr("ip:HOST:PORT or AA:BB:CC:DD:EE:FF"))
    let addressButton = Button(icon: "go-next-symbolic", name: tr("Connect to address"))
    /// The Mumble rooms joined, under the peers whatever the peers' lists show.
    let joinRoomButton = Button(tr("Join a room…"))
    private let roomsList = ListBox()
    private var roomPaths: [String] = []

    /// The rows on screen, per list, by peer id, in order.
    private var paired = RowViews()
    private var nearby = RowViews()
    /// While the lists are rebuilt or reselected from the model, their selection signals are not
    /// a person's choice.
    private var rendering = false
    /// Discovery runs (the status page's button stops it).
    private var discovering = false

    /// A person chose `peer` (`activated`: clicked or Enter, which opens its conversation even on
    /// a folded window; otherwise only selected, as the arrow keys do).
    var onOpen: (_ peer: String, _ activated: Bool) -> Void = { _, _ in }
    var onSearchNearby: (Bool) -> Void = { _ in }
    var onRetry: () -> Void = {}
    var onConnectAddress: (String) -> Void = { _ in }
    /// The search text changed ("" when the search closed).
    var onFilter: (String) -> Void = { _ in }
    /// A person chose a room (its object path; `activated` as for peers).
    var onOpenRoom: (_ room: String, _ activated: Bool) -> Void = { _, _ in }

    init() {
        searchBar = SearchBar(searchEntry)
        listsPage = ScrolledWindow(Clamp(lists, maximumWidth: 560))
        header.packStart(muteButton)
        header.packEnd(menuButton)
        header.packEnd(findButton)
        root.append(header)
        searchEntry.setAccessibleName(tr("Find a peer"))
        root.append(searchBar)

        statusPage.expandsVertically = true
        let statusActions = Box(.vertical, spacing: 12)
        statusActions.setAlignment(horizontal: .center)
        for button in [statusSearchButton, retryButton] {
            button.addStyleClass("pill")
            button.addStyleClass("suggested-action")
            statusActions.append(button)
        }
        statusActions.append(statusSpinner)
        statusPage.setChild(statusActions)
        root.append(statusPage)

        lists.setMargins(12)
        pairedList.setAccessibleName(tr("Peers"))
        pairedList.addStyleClass("boxed-list")
        pairedGroup.append(Self.heading(tr("Peers")))
        pairedGroup.append(pairedList)
        lists.append(pairedGroup)

        let nearbyGroup = Box(.vertical, spacing: 8)
        let nearbyHeading = Box(.horizontal, spacing: 6)
        let nearbyTitle = Self.heading(tr("Nearby devices"))
        nearbyTitle.expandsHorizontally = true
        nearbyHeading.append(nearbyTitle)
        nearbyHeading.append(searchSpinner)
        searchToggle.addStyleClass("flat")
        nearbyHeading.append(searchToggle)
        nearbyGroup.append(nearbyHeading)
        nearbyList.setAccessibleName(tr("Nearby devices"))
        nearbyList.addStyleClass("boxed-list")
        nearbyPlaceholder.addStyleClass("dim-label")
        nearbyPlaceholder.setWraps(true)
        nearbyPlaceholder.setMargins(12)
        nearbyList.setPlaceholder(nearbyPlaceholder)
        nearbyGroup.append(nearbyList)
        lists.append(nearbyGroup)
        listsPage.expandsVertically = true
        root.append(listsPage)

        // An address dials a peer that cannot be found nearby (another network, no discovery).
        let addressBar = Box(.horizontal, spacing: 0)
        addressBar.addStyleClass("linked")
        addressBar.setMargins(12)
        addressEntry.setAccessibleName(tr("Address"))
        addressEntry.setTooltip(tr("The address of a peer that cannot be found nearby"))
        addressEntry.expandsHorizontally = true
        addressBar.append(addressEntry)
        addressBar.append(addressButton)
        root.append(Separator(.horizontal))
        root.append(roomsGroup())
        root.append(Separator(.horizontal))
        root.append(addressBar)
        // Wide enough for a name and its state; the leaflet folds before it gets narrower.
        root.setSizeRequest(width: 300, height: -1)
        wire()
    }

    private func roomsGroup() -> Widget {
        let group = Box(.vertical, spacing: 8)
        group.setMargins(12)
        let heading = Box(.horizontal, spacing: 6)
        let title = Self.heading(tr("Rooms"))
        title.expandsHorizontally = true
        heading.append(title)
        joinRoomButton.addStyleClass("flat")
        heading.append(joinRoomButton)
        group.append(heading)
        roomsList.setAccessibleName(tr("Rooms"))
        roomsList.addStyleClass("boxed-list")
        roomsList.isVisible = false
        group.append(roomsList)
        roomsList.onSelectionChanged { [unowned self] index in
            guard !rendering, let index else { return }
            onOpenRoom(roomPaths[index], false)
        }
        roomsList.onRowActivated { [unowned self] index in onOpenRoom(roomPaths[index], true) }
        return group
    }

    /// The rooms joined: the server and channel, and how many others are there or why not.
    func renderRooms(_ model: AppModel) {
        rendering = true
        defer { rendering = false }
        roomsList.removeAll()
        roomPaths = model.rooms.map(\.path)
        for room in model.rooms {
            let row = ActionRow(title: room.title, subtitle: RoomPane.state(of: room))
            row.setActivatable(true)
            roomsList.append(row)
        }
        roomsList.isVisible = !model.rooms.isEmpty
        joinRoomButton.isSensitive = model.service == .running
        roomsList.selectedIndex = model.selectedRoom.flatMap { roomPaths.firstIndex(of: $0) }
    }

    private static func heading(_ text: String) -> Label {
        let label = Label(text)
        label.addStyleClass("heading")
        label.setAlignment(0)
        return label
    }

    private func wire() {
        for (list, views) in [(pairedList, \PeerListPane.paired), (nearbyList, \PeerListPane.nearby)] {
            list.onSelectionChanged { [unowned self] index in
                guard !rendering, let index else { return }
                onOpen(self[keyPath: views].ids[index], false)
            }
            list.onRowActivated { [unowned self] index in onOpen(self[keyPath: views].ids[index], true) }
        }
        statusSearchButton.onClicked { [unowned self] in onSearchNearby(!discovering) }
        searchToggle.onToggled { [unowned self] on in onSearchNearby(on) }
        retryButton.onClicked { [unowned self] in onRetry() }
        let connect = { [unowned self] in
            let address = addressEntry.text.trimmingCharacters(in: .whitespaces)
            guard !address.isEmpty else { return }
            addressEntry.text = ""
            onConnectAddress(address)
        }
        addressButton.onClicked(connect)
        addressEntry.onActivate(connect)
        findButton.onToggled { [unowned self] on in searchBar.isShown = on }
        searchBar.onShownChanged { [unowned self] shown in
            findButton.isActive = shown
            if !shown { searchEntry.text = "" }
        }
        searchEntry.onSearchChanged { [unowned self] in onFilter(searchEntry.text) }
        // Enter in the search opens the first peer it shows.
        searchEntry.onActivate { [unowned self] in
            if let first = paired.ids.first ?? nearby.ids.first { onOpen(first, true) }
        }
    }

    // MARK: Rendering

    /// The status page or the lists, as the model says.
    func renderState(_ model: AppModel) {
        let state = model.peerListState
        discovering = model.discovering
        statusSearchButton.isVisible = false
        retryButton.isVisible = false
        statusSpinner.isVisible = false
        switch state {
        case .peers:
            break
        case .starting:
            statusPage.setIcon("system-run-symbolic")
            statusPage.set(title: tr("Starting PeerVoice…"), description: "")
            statusSpinner.isVisible = true
        case .serviceNotRunning(let reason):
            statusPage.setIcon("dialog-error-symbolic")
            statusPage.set(title: tr("PeerVoice is not running"), description: reason)
            retryButton.isVisible = true
        case .noOneNearby(let searching):
            statusPage.setIcon("network-workgroup-symbolic")
            statusPage.set(title: tr("No one nearby yet"),
                           description: searching ? tr("Searching for computers nearby, over Bluetooth and this network…")
                                                  : tr("Search for computers nearby, or connect to one by its address below."))
            showSearchButton(searching: searching)
        case .bluetoothOff(let canSearchNetwork, let searching):
            statusPage.setIcon("bluetooth-disabled-symbolic")
            statusPage.set(title: tr("Bluetooth is off"),
                           description: canSearchNetwork
                               ? tr("Turn Bluetooth on to find computers nearby. Meanwhile Search nearby looks on this network, or connect to a computer by its address below.")
                               : tr("Turn Bluetooth on to find computers nearby, or connect to one by its address below."))
            if canSearchNetwork { showSearchButton(searching: searching) }
        }
        show(statusPage, state != .peers)
        show(listsPage, state == .peers)
        // The header's search toggle is the status page's button while that shows.
        searchToggle.isSensitive = model.service == .running
        searchToggle.isActive = model.discovering
        searchSpinner.isSpinning = model.discovering
        searchSpinner.isVisible = model.discovering
        nearbyPlaceholder.text = model.discovering ? tr("Searching…") : tr("Nobody found yet: Search nearby looks for computers around.")
        let running = model.service == .running
        muteButton.isSensitive = running
        addressEntry.isSensitive = running
        addressButton.isSensitive = running
    }

    private func showSearchButton(searching: Bool) {
        statusSearchButton.label = searching ? tr("Stop searching") : tr("Search nearby")
        statusSearchButton.isVisible = true
        statusSpinner.isVisible = searching
        statusSpinner.isSpinning = searching
    }

    /// Shown, or hidden from the screen and from screen readers alike.
    private func show(_ page: Widget, _ shown: Bool) {
        page.isVisible = shown
        page.setAccessibleHidden(!shown)
    }

    /// Both groups' rows: rebuilt when who is in them changed, else updated in place.
    func renderRows(_ model: AppModel) {
        rendering = true
        defer { rendering = false }
        paired.render(model.pairedPeers, in: pairedList, model: model)
        nearby.render(model.nearbyPeers, in: nearbyList, model: model)
        pairedGroup.isVisible = !model.pairedPeers.isEmpty || !model.peerFilter.isEmpty
        renderSelection(model)
    }

    func renderSelection(_ model: AppModel) {
        rendering = true
        defer { rendering = false }
        for (list, views) in [(pairedList, paired), (nearbyList, nearby)] {
            let index = model.selectedPeer.flatMap { views.ids.firstIndex(of: $0) }
            if list.selectedIndex != index { list.selectedIndex = index }
        }
    }

    /// Focus on the first row (Ctrl+F's Down arrow lands there too); false when there is none.
    func focusFirstRow() -> Bool {
        (paired.rows.first ?? nearby.rows.first)?.row.grabFocus() ?? false
    }
}

/// The rows of one list: an avatar with the peer's initials, its name and state, its unread
/// count and, while voice runs, whether it speaks.
private struct RowViews {
    struct Views {
        let row: ActionRow
        let avatar: Avatar
        let unread: Label
        let speaking: Label
    }

    private(set) var ids: [String] = []
    private(set) var rows: [Views] = []

    mutating func render(_ peers: [PeerRow], in list: ListBox, model: AppModel) {
        if peers.map(\.id) != ids {
            list.removeAll()
            rows = peers.map { _ in
                let views = Views(row: ActionRow(), avatar: Avatar(size: 36), unread: Label(), speaking: SpeakingDot.make())
                views.row.setActivatable(true)
                views.row.addPrefix(views.avatar)
                views.unread.addStyleClass("unread-badge")
                views.unread.setAlignment(vertical: .center)
                views.row.addSuffix(views.unread)
                views.row.addSuffix(views.speaking)
                list.append(views.row)
                return views
            }
            ids = peers.map(\.id)
        }
        for (views, peer) in zip(rows, peers) {
            views.row.set(title: peer.displayName, subtitle: PeerDetail.text(of: peer))
            views.avatar.text = peer.displayName
            let unread = model.unreadCount(of: peer.id)
            views.unread.isVisible = unread > 0
            views.unread.text = "\(unread)"
            let unreadName = trn("%d unread message", "%d unread messages", unread).replacingPlaceholder(with: "\(unread)", "%d")
            // A label names itself after its text: name it afterwards.
            views.unread.setAccessibleName(unreadName)
            views.row.setAccessibleDescription(unread > 0 ? PeerDetail.text(of: peer) + ", " + unreadName : PeerDetail.text(of: peer))
            SpeakingDot.show(model.speakingIndicator(of: peer), on: views.speaking)
        }
    }
}

/// A peer's transport and state as its row says them: "network · connected · voice on".
enum PeerDetail {
    static func text(of row: PeerRow) -> String {
        let state: String
        switch row.state {
        case .nearby: state = tr("nearby")
        case .connecting: state = tr("connecting")
        case .pairing: state = tr("pairing")
        case .connected: state = tr("connected")
        case .disconnected: state = tr("not connected")
        }
        let transport = row.transport == "bluetooth" ? tr("Bluetooth") : row.transport == "ip" ? tr("network") : ""
        return ([transport, state] + (row.voiceActive ? [tr("voice on")] : [])).filter { !$0.isEmpty }.joined(separator: " · ")
    }
}

/// A dot that lights up while a voice holds speech. Its accessible name says which ("Speaking",
/// "Silent"; set after the text, which would otherwise name it).
enum SpeakingDot {
    static func make() -> Label {
        let dot = Label("●")
        dot.addStyleClass("title-3")
        dot.isVisible = false
        return dot
    }

    static func show(_ indicator: SpeakingIndicator?, on dot: Label) {
        dot.isVisible = indicator != nil
        guard let indicator else { return }
        dot.setAccessibleName(indicator.name)
        dot.setTooltip(indicator.name)
        if indicator.speaking {
            dot.addStyleClass("success")
            dot.removeStyleClass("dim-label")
        } else {
            dot.addStyleClass("dim-label")
            dot.removeStyleClass("success")
        }
    }
}
