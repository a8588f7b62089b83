import Foundation
import Gtk
import PeerVoiceAppModel

/// A string shown to people, through gettext (xgettext collects the `tr("…")` literals; see po/).
func tr(_ text: String) -> String { Gettext.translate(text) }

/// The form of a string with a count (`trn("%d unread message", "%d unread messages", n)`).
func trn(_ singular: String, _ plural: String, _ count: Int) -> String { Gettext.translate(singular, plural, count: count) }

/// The app's one window (`AdwApplicationWindow`): peers on the left, the selected peer's
/// conversation on the right, in an `AdwLeaflet` that folds to one pane with back navigation on a
/// narrow window; brief problems as toasts. It renders the model and hands what a person does to
/// the service client. The accessible names set here are the app's contract with screen readers
/// and the tests (README, "The desktop app").
final class MainWindow {
    let window: Window
    private let model: AppModel
    private let client: ServiceClient
    private let receivedFiles: ReceivedFiles
    private let preferencesFile: PreferencesFile
    private let peerList = PeerListPane()
    private let conversation = ConversationPane()
    private let roomPane = RoomPane()
    /// The right pane: the selected peer's conversation or the selected room's page.
    private let rightPane = Box(.vertical, spacing: 0)
    private var joinRoomDialog: JoinRoomDialog?
    private let leaflet = Leaflet()
    private let toasts: ToastOverlay
    private var pairingDialog: PairingDialog?
    private var preferences: PreferencesDialog?
    /// Where the notice on screen is shown (the window's toasts or the preferences').
    private var shownToasts: ToastOverlay?

    init(application: Application, model: AppModel, client: ServiceClient, receivedFiles: ReceivedFiles,
         preferencesFile: PreferencesFile) {
        self.model = model
        self.client = client
        self.receivedFiles = receivedFiles
        self.preferencesFile = preferencesFile
        window = Window(application: application)
        window.title = tr("PeerVoice")
        // One default size, so the screenshots in docs/ stay alike.
        window.setDefaultSize(width: 760, height: 560)
        peerList.root.addStyleClass("sidebar-pane")
        leaflet.append(peerList.root)
        leaflet.append(Separator(.vertical), navigatable: false)
        rightPane.append(conversation.root)
        rightPane.append(roomPane.root)
        rightPane.expandsHorizontally = true
        leaflet.append(rightPane)
        toasts = ToastOverlay(leaflet)
        window.setContent(toasts)
        wire(application)
        model.onChange = { [unowned self] in render($0) }
        [.peers, .selection, .rooms, .mute, .discovering, .service, .notice, .hold, .question, .settings, .speaking, .style].forEach(render)
        layOutPanes()
    }

    func present() { window.present() }

    // MARK: What a person does

    private func wire(_ application: Application) {
        peerList.onOpen = { [unowned self] peer, activated in
            model.select(peer)
            client.loadHistory(of: peer)
            // Folded, the conversation takes the list's place and the focus goes to its message
            // field; side by side, the focus stays in the list (as in GNOME Settings' sidebar).
            guard activated, leaflet.isFolded else { return }
            leaflet.visibleChild = rightPane
            conversation.compose.entry.grabFocus()
        }
        peerList.onSearchNearby = { [unowned self] on in client.setDiscovery(on) }
        peerList.onRetry = { [unowned self] in client.retryActivation() }
        peerList.onConnectAddress = { [unowned self] address in
            model.peerStateChanged(address, state: .connecting, transport: "")
            model.select(address)
            client.connect(address)
        }
        peerList.onFilter = { [unowned self] text in model.filterPeers(text) }
        for mute in [peerList.muteButton, conversation.muteButton] {
            mute.onToggled { [unowned self] muted in client.setMuted(muted) }
        }

        conversation.header.backButton.onClicked { [unowned self] in goBack() }
        conversation.connectButton.onClicked { [unowned self] in
            if let peer = model.selectedPeer { client.connect(peer) }
        }
        conversation.disconnectButton.onClicked { [unowned self] in
            if let peer = model.selectedPeer { client.disconnect(peer) }
        }
        conversation.compose.onSend { [unowned self] text in
            guard let peer = model.selectedPeer else { return false }
            client.send(text, to: peer)
            return true
        }
        conversation.onRetry = { [unowned self] message in
            if let peer = model.selectedPeer { client.resend(message, to: peer) }
        }
        conversation.voiceButton.onClicked { [unowned self] in
            guard let row = model.selectedRow else { return }
            client.setVoice(!row.voiceActive, with: row.id)
        }
        conversation.volumeScale.onValueChanged { [unowned self] percent in
            guard let peer = model.selectedPeer else { return }
            client.setVolume(model.volumeRequested(percent: percent, for: peer), for: peer)
        }
        conversation.peerMuteButton.onToggled { [unowned self] muted in
            if let peer = model.selectedPeer { client.setPeerMuted(muted, peer: peer) }
        }
        conversation.holdButton.onHold(pressed: { [unowned self] in holdDown() }, released: { [unowned self] in holdUp() })

        window.onKey(pressed: { [unowned self] key in
            guard key == .space, !window.focusUsesSpace(except: conversation.holdButton) else { return false }
            holdDown()
            return true
        }, released: { [unowned self] key in
            if key == .space { holdUp() }
        })
        // A window that loses the focus while the button or Space is held never sees the release.
        window.onActiveChanged { [unowned self] active in if !active { holdUp() } }

        window.addShortcut("<Control>f") { [unowned self] in
            if leaflet.isFolded { leaflet.visibleChild = peerList.root }
            peerList.searchBar.isShown = true
            peerList.searchEntry.grabFocus()
            return true
        }
        window.addShortcut("<Control>m") { [unowned self] in
            guard model.service == .running else { return false }
            client.setMuted(!model.muted)
            return true
        }
        // Escape goes back from a conversation on a folded window (a search field, a dialog use
        // it first).
        window.addShortcut("Escape") { [unowned self] in
            guard leaflet.isFolded, leaflet.visibleChild === rightPane else { return false }
            goBack()
            return true
        }
        leaflet.onFoldedChanged { [unowned self] _ in layOutPanes() }
        leaflet.onVisibleChildChanged { [unowned self] in layOutPanes() }

        wireTransfers(application)
        wireRooms()
        application.addAction("preferences", accelerators: ["<Control>comma"]) { [unowned self] in showPreferences() }
        application.addAction("about") { [unowned self] in
            AboutWindow.present(parent: window, name: tr("PeerVoice"), icon: "org.example.PeerVoice.App",
                                developer: tr("The PeerVoice developers"),
                                comments: tr("Talk and chat with computers nearby, over Bluetooth or the local network."))
        }
    }

    /// Files to the selected peer (the header's Send files…, or dropped on the conversation),
    /// and what its transfers' rows offer.
    private func wireTransfers(_ application: Application) {
        let send = { [unowned self] (paths: [String]) in
            if let peer = model.selectedPeer, !paths.isEmpty { client.sendFiles(paths, to: peer) }
        }
        application.addAction("send-files") { [unowned self] in
            FileChooser.choose(.files, title: tr("Send files"), acceptLabel: tr("Send"), parent: window, chosen: send)
        }
        application.addAction("send-folder") { [unowned self] in
            FileChooser.choose(.folder, title: tr("Send a folder"), acceptLabel: tr("Send"), parent: window, chosen: send)
        }
        conversation.onFilesDropped = send
        conversation.transferActions = TransferRowView.Actions(
            accept: { [unowned self] in client.transfer($0, "Accept") },
            decline: { [unowned self] in client.transfer($0, "Decline") },
            cancel: { [unowned self] in client.transfer($0, "Cancel") },
            retry: { [unowned self] in client.retry($0) },
            canRetry: { [unowned self] in client.canRetry($0) },
            open: { [unowned self] in receivedFiles.open($0.destination) },
            showInFolder: { [unowned self] in receivedFiles.showInFolder($0.destination) })
        receivedFiles.failed = { [unowned self] reason in model.callFailed("Open", peer: nil, errorName: "", message: reason) }
    }

    /// Join a room…, a room's page, and Leave.
    private func wireRooms() {
        peerList.onOpenRoom = { [unowned self] room, activated in
            model.select(room: room)
            guard activated, leaflet.isFolded else { return }
            leaflet.visibleChild = rightPane
            _ = roomPane.compose.entry.grabFocus()
        }
        peerList.joinRoomButton.onClicked { [unowned self] in
            let dialog = JoinRoomDialog(parent: window) { [unowned self] url, password in join(url, password: password) }
            joinRoomDialog = dialog
            dialog.present()
        }
        roomPane.header.backButton.onClicked { [unowned self] in goBack() }
        roomPane.leaveButton.onClicked { [unowned self] in
            if let room = model.selectedRoom { client.leaveRoom(room) }
        }
        roomPane.compose.onSend { [unowned self] text in
            guard let room = model.selectedRoom else { return false }
            client.send(text, toRoom: room)
            return true
        }
    }

    private func join(_ url: String, password: String, acceptCertificate: String? = nil) {
        client.joinRoom(url, password: password, acceptCertificate: acceptCertificate) { [unowned self] fingerprint in
            JoinRoomDialog.askToTrust(parent: window, url: url, fingerprint: fingerprint) { [unowned self] in
                join(url, password: password, acceptCertificate: fingerprint)
            }
        }
    }

    private func goBack() {
        leaflet.visibleChild = peerList.root
        _ = peerList.focusFirstRow()
    }

    private func holdDown() {
        if let muted = model.holdPressed() { client.setMuted(muted) }
    }

    private func holdUp() {
        if let muted = model.holdReleased() { client.setMuted(muted) }
    }

    private func showPreferences() {
        if preferences == nil {
            let dialog = PreferencesDialog(parent: window, model: model)
            dialog.onRename = { [unowned self] name in client.setName(name) }
            dialog.onVisible = { [unowned self] visible, method in client.setVisible(visible, on: method) }
            dialog.onPreferencesChanged = { [unowned self] in preferencesFile.save(model.preferences) }
            preferences = dialog
        }
        preferences?.present()
    }

    /// Folded, each pane has the window's buttons and only the one on screen is there for screen
    /// readers; unfolded, they share the buttons, side by side.
    private func layOutPanes() {
        let folded = leaflet.isFolded
        let showsConversation = leaflet.visibleChild === rightPane
        peerList.header.showWindowButtons(start: true, end: folded)
        conversation.header.fold(folded)
        // One Mute on screen: the list's header has it, unless only the conversation shows.
        conversation.muteButton.isVisible = folded
        peerList.root.setAccessibleHidden(folded && showsConversation)
        rightPane.setAccessibleHidden(folded && !showsConversation)
        roomPane.header.fold(folded)
        model.conversationShown(!folded || showsConversation)
    }

    // MARK: Rendering

    private func render(_ change: AppModel.Change) {
        switch change {
        case .peers:
            peerList.renderState(model)
            peerList.renderRows(model)
            conversation.renderSelection(model)
            conversation.renderActions(model)
            conversation.renderPlayback(model)
            SpeakingDot.show(model.microphoneIndicator, on: conversation.microphoneIndicator)
            if let question = model.question, let row = model.peers.first(where: { $0.id == question.peer }) {
                pairingDialog?.update(name: row.displayName)
            }
        case .selection:
            renderRightPane()
            peerList.renderSelection(model)
            peerList.renderRooms(model)
            conversation.renderSelection(model)
            conversation.renderActions(model)
            conversation.renderPlayback(model)
        case .chat(let peer):
            if peer == model.selectedPeer { conversation.renderConversation(model) }
        case .question:
            renderQuestion()
        case .mute:
            renderMute()
        case .discovering, .service:
            peerList.renderState(model)
            peerList.renderRooms(model)
            conversation.renderActions(model)
            conversation.renderPlayback(model)
            preferences?.render()
        case .settings:
            preferences?.render()
        case .notice:
            renderNotice()
            // A toggle whose call failed shows the service's state again.
            renderMute()
            peerList.renderState(model)
            conversation.renderPlayback(model)
            preferences?.render()
        case .hold:
            conversation.renderHold(model)
        case .speaking:
            SpeakingDot.show(model.microphoneIndicator, on: conversation.microphoneIndicator)
        case .playback:
            conversation.renderPlayback(model)
        case .style:
            StyleManager.set(model.style.scheme)
        case .rooms:
            peerList.renderRooms(model)
            roomPane.render(model)
        case .roomChat(let room):
            if room == model.selectedRoom { roomPane.renderConversation(model) }
        }
    }

    /// The selected room's page in place of a conversation, or the conversation (or its empty page).
    private func renderRightPane() {
        let inRoom = model.selectedRoom != nil
        conversation.root.isVisible = !inRoom
        conversation.root.setAccessibleHidden(inRoom)
        roomPane.root.isVisible = inRoom
        roomPane.root.setAccessibleHidden(!inRoom)
        roomPane.render(model)
    }

    private func renderMute() {
        for mute in [peerList.muteButton, conversation.muteButton] {
            mute.isActive = model.muted
            mute.setIcon(model.muted ? "microphone-sensitivity-muted-symbolic" : "audio-input-microphone-symbolic", name: tr("Mute"))
        }
    }

    private func renderQuestion() {
        guard let question = model.question else {
            pairingDialog?.close()
            pairingDialog = nil
            return
        }
        if let dialog = pairingDialog, dialog.peer == question.peer, dialog.kind == question.kind {
            dialog.update(question)
            return
        }
        pairingDialog?.close()
        let dialog = PairingDialog(parent: window, question: question) { [unowned self] peer, accept in
            model.answeredPairing()
            if let accept { client.confirmPairing(peer, accept: accept) }
        }
        pairingDialog = dialog
        dialog.present()
    }

    /// A problem as a toast in the service's words: brief unless it offers a remedy, which stays
    /// until a person acts on it or dismisses it.
    private func renderNotice() {
        shownToasts?.dismiss()
        guard let notice = model.notice else { return }
        // Over the preferences while they are open (they are modal: the window is behind them).
        let toasts = preferences?.isShown == true ? preferences!.toasts : self.toasts
        shownToasts = toasts
        switch notice.remedy {
        case .none, .retryActivation:
            toasts.show(notice.text, timeoutSeconds: 8, dismissName: tr("Dismiss"),
                        onDismissed: { [unowned self] in model.dismissNotice() })
        case .forgetAndPairAgain(let peer):
            toasts.show(notice.text, timeoutSeconds: 0, dismissName: tr("Dismiss"), button: tr("Forget and pair again"),
                        onButton: { [unowned self] in
                            model.dismissNotice()
                            client.forgetAndPairAgain(peer)
                        }, onDismissed: { [unowned self] in model.dismissNotice() })
        }
    }

    /// The app's own styles on top of libadwaita's: chat bubbles, transfer cards, the unread badge, the code.
    static let styleSheet = [
        ".conversation { background: none; }",
        ".conversation > row { padding: 2px 0; background: none; }",
        ".bubble { border-radius: 14px; padding: 6px 12px; }",
        ".bubble.outgoing { background: @accent_bg_color; color: @accent_fg_color; }",
        ".bubble.outgoing .dim-label { color: @accent_fg_color; opacity: 0.8; }",
        ".bubble.incoming { background: alpha(@view_fg_color, 0.08); }",
        ".card.transfer { padding: 10px 12px; }",
        ".unread-badge { background: @accent_bg_color; color: @accent_fg_color; border-radius: 10px;"
            + " padding: 0 7px; min-width: 8px; font-weight: bold; font-size: smaller; }",
        ".pairing-code { font-size: 32pt; font-weight: bold; font-feature-settings: 'tnum'; }",
    ].joined(separator: "\n")
}

extension AppStyle {
    var scheme: StyleManager.Scheme {
        switch self {
        case .followSystem: .followSystem
        case .light: .light
        case .dark: .dark
        }
    }
}
