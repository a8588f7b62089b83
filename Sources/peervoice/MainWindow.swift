import Foundation
import Gtk
import PeerVoiceAppModel

/// A string shown to people, through gettext (xgettext collects the `tr("…")` literals; see po/).
func tr(_ text: String) -> String { Gettext.translate(text) }

/// The app's one window: peers on the left; chat, voice and problems on the right. It renders
/// the model and hands what a person does to the service client. The accessible names set here
/// are the app's contract with screen readers and tests (README, "The desktop app").
final class MainWindow {
    let window: Window
    private let model: AppModel
    private let client: ServiceClient

    private let peerList = ListBox()
    private var rowIDs: [String] = []
    private var rowLabels: [(name: Label, detail: Label, speaking: Label)] = []
    private let searchButton = ToggleButton(tr("Search nearby"))
    private let connectButton = Button(tr("Connect"))
    private let disconnectButton = Button(tr("Disconnect"))
    private let addressEntry = Entry(placeholder: tr("ip:HOST:PORT or AA:BB:CC:DD:EE:FF"))
    private let addressButton = Button(tr("Connect to address"))

    private let peerTitle = Label()
    private let chatBox = Box(.vertical, spacing: 4)
    private let chatScroller: ScrolledWindow
    private let messageEntry = Entry(placeholder: tr("Message"))
    private let sendButton = Button(tr("Send"))
    private let voiceButton = Button(tr("Start voice"))
    private let muteButton = ToggleButton(tr("Mute"))
    private let holdButton = Button(tr("Hold to mute"))
    private let pushToTalk = Switch()
    private let microphoneIndicator = MainWindow.speakingDot()
    private let volumeScale = Scale(range: 0...200, step: 1)
    private let volumeLabel = Label()
    private let peerMuteButton = ToggleButton(tr("Mute this peer"))

    private let settingsButton = ToggleButton(tr("Settings"))
    private let settingsPanel = Box(.vertical, spacing: 8)
    private let nameEntry = Entry(placeholder: tr("The name other devices see"))
    private let renameButton = Button(tr("Rename"))
    private let bluetoothVisible = Switch()
    private let lanVisible = Switch()

    private let noticeBar = Box(.horizontal, spacing: 8)
    private let noticeLabel = Label()
    private let remedyButton = Button("")
    private let dismissButton = Button(tr("Dismiss"))

    private var pairingDialog: PairingDialog?
    /// While the list is rebuilt from the model, its selection signals are not a person's choice.
    private var renderingPeers = false

    init(application: Application, model: AppModel, client: ServiceClient) {
        self.model = model
        self.client = client
        window = Window(application: application)
        chatScroller = ScrolledWindow(chatBox)
        window.title = tr("PeerVoice")
        // One default size, so the screenshots in docs/ stay alike.
        window.setDefaultSize(width: 760, height: 560)
        window.setContent(layout())
        wire()
        model.onChange = { [unowned self] in render($0) }
        [.peers, .selection, .mute, .discovering, .service, .notice, .hold, .question, .settings, .speaking].forEach(render)
    }

    // MARK: Layout

    private func layout() -> Widget {
        let header = HeaderBar()
        header.packStart(searchButton)
        header.packEnd(settingsButton)

        let peers = Box(.vertical, spacing: 6)
        let peersTitle = Label(tr("Peers"))
        peersTitle.addStyleClass("heading")
        peersTitle.setAlignment(0)
        peers.append(peersTitle)
        peerList.setAccessibleName(tr("Peers"))
        peerList.addStyleClass("boxed-list")
        let peerScroller = ScrolledWindow(peerList)
        peerScroller.expandsVertically = true
        peers.append(peerScroller)
        let peerButtons = Box(.horizontal, spacing: 6)
        connectButton.expandsHorizontally = true
        connectButton.addStyleClass("suggested-action")
        disconnectButton.expandsHorizontally = true
        peerButtons.append(connectButton)
        peerButtons.append(disconnectButton)
        peers.append(peerButtons)
        addressEntry.setAccessibleName(tr("Address"))
        addressEntry.setTooltip(tr("The address of a peer that cannot be found nearby"))
        peers.append(addressEntry)
        peers.append(addressButton)
        peers.setSizeRequest(width: 260, height: -1)

        let chat = Box(.vertical, spacing: 6)
        chat.expandsHorizontally = true
        peerTitle.addStyleClass("title-4")
        peerTitle.setAlignment(0)
        chat.append(peerTitle)
        chatBox.setAccessibleName(tr("Conversation"))
        chatScroller.expandsVertically = true
        chatScroller.addStyleClass("card")
        chat.append(chatScroller)
        let compose = Box(.horizontal, spacing: 6)
        messageEntry.setAccessibleName(tr("Message"))
        messageEntry.expandsHorizontally = true
        compose.append(messageEntry)
        sendButton.addStyleClass("suggested-action")
        compose.append(sendButton)
        chat.append(compose)

        let voice = Box(.horizontal, spacing: 8)
        voice.append(voiceButton)
        voice.append(microphoneIndicator)
        muteButton.addStyleClass("pill")
        muteButton.setSizeRequest(width: 140, height: 56)
        voice.append(muteButton)
        holdButton.addStyleClass("pill")
        holdButton.expandsHorizontally = true
        holdButton.setSizeRequest(width: -1, height: 56)
        voice.append(holdButton)
        chat.append(voice)

        // The selected peer's voice here: 0–200 % (SetVolume's 0.0–2.0), and muted here or not.
        let playback = Box(.horizontal, spacing: 8)
        playback.append(Label(tr("Volume")))
        volumeScale.setAccessibleName(tr("Volume"))
        volumeScale.addMark(at: 100)
        volumeScale.expandsHorizontally = true
        playback.append(volumeScale)
        volumeLabel.setSizeRequest(width: 48, height: -1)
        volumeLabel.setAlignment(1)
        playback.append(volumeLabel)
        playback.append(peerMuteButton)
        chat.append(playback)

        let columns = Box(.horizontal, spacing: 12)
        columns.setMargins(12)
        columns.expandsVertically = true
        columns.append(peers)
        columns.append(chat)

        noticeLabel.setWraps(true)
        noticeLabel.setAlignment(0)
        noticeLabel.expandsHorizontally = true
        noticeBar.append(noticeLabel)
        noticeBar.append(remedyButton)
        noticeBar.append(dismissButton)
        noticeBar.setMargins(8)
        noticeBar.addStyleClass("card")

        let page = Box(.vertical, spacing: 0)
        page.append(header)
        page.append(noticeBar)
        page.append(settingsLayout())
        page.append(columns)
        return page
    }

    /// Shown below the header while Settings is pressed: the display name, where discovery makes
    /// this device visible, and the hold button's mode.
    private func settingsLayout() -> Widget {
        let nameRow = Box(.horizontal, spacing: 8)
        let nameLabel = Label(tr("Display name"))
        nameLabel.setSizeRequest(width: 180, height: -1)
        nameLabel.setAlignment(0)
        nameEntry.setAccessibleName(tr("Display name"))
        nameEntry.expandsHorizontally = true
        nameRow.append(nameLabel)
        nameRow.append(nameEntry)
        nameRow.append(renameButton)
        let card = Box(.vertical, spacing: 8)
        card.addStyleClass("card")
        let rows = Box(.vertical, spacing: 8)
        rows.setMargins(10)
        card.append(rows)
        rows.append(nameRow)
        for (label, control) in [(tr("Visible over Bluetooth"), bluetoothVisible), (tr("Visible on the LAN"), lanVisible),
                                 (tr("Push to talk"), pushToTalk)] {
            let row = Box(.horizontal, spacing: 8)
            let text = Label(label)
            text.setAlignment(0)
            text.expandsHorizontally = true
            control.setAccessibleName(label)
            row.append(text)
            row.append(control)
            rows.append(row)
        }
        settingsPanel.append(card)
        settingsPanel.setMargins(12)
        settingsPanel.isVisible = false
        return settingsPanel
    }

    // MARK: What a person does

    private func wire() {
        peerList.onSelectionChanged { [unowned self] index in
            guard !renderingPeers else { return }
            let peer = index.map { rowIDs[$0] }
            model.select(peer)
            if let peer { client.loadHistory(of: peer) }
        }
        searchButton.onToggled { [unowned self] on in client.setDiscovery(on) }
        connectButton.onClicked { [unowned self] in
            if let peer = model.selectedPeer { client.connect(peer) }
        }
        disconnectButton.onClicked { [unowned self] in
            if let peer = model.selectedPeer { client.disconnect(peer) }
        }
        let connectToAddress = { [unowned self] in
            let address = addressEntry.text.trimmingCharacters(in: .whitespaces)
            guard !address.isEmpty else { return }
            addressEntry.text = ""
            model.peerStateChanged(address, state: .connecting, transport: "")
            model.select(address)
            client.connect(address)
        }
        addressButton.onClicked(connectToAddress)
        addressEntry.onActivate(connectToAddress)

        let send = { [unowned self] in
            let text = messageEntry.text
            guard !text.isEmpty, let peer = model.selectedPeer else { return }
            messageEntry.text = ""
            client.send(text, to: peer)
        }
        sendButton.onClicked(send)
        messageEntry.onActivate(send)

        voiceButton.onClicked { [unowned self] in
            guard let row = model.selectedRow else { return }
            client.setVoice(!row.voiceActive, with: row.id)
        }
        muteButton.onToggled { [unowned self] muted in client.setMuted(muted) }
        volumeScale.onValueChanged { [unowned self] percent in
            guard let peer = model.selectedPeer else { return }
            client.setVolume(model.volumeRequested(percent: percent, for: peer), for: peer)
        }
        peerMuteButton.onToggled { [unowned self] muted in
            if let peer = model.selectedPeer { client.setPeerMuted(muted, peer: peer) }
        }
        holdButton.onHold(pressed: { [unowned self] in holdDown() }, released: { [unowned self] in holdUp() })
        window.onKey(pressed: { [unowned self] key in
            guard key == .space, !window.focusUsesSpace(except: holdButton) else { return false }
            holdDown()
            return true
        }, released: { [unowned self] key in
            if key == .space { holdUp() }
        })
        // A window that loses the focus while the button or Space is held never sees the release.
        window.onActiveChanged { [unowned self] active in if !active { holdUp() } }
        pushToTalk.onToggled { [unowned self] on in model.holdMode = on ? .holdToTalk : .holdToMute }
        settingsButton.onToggled { [unowned self] on in settingsPanel.isVisible = on }
        let rename = { [unowned self] in
            let name = nameEntry.text
            // Unchanged: nothing to ask; anything else the service checks (and says why it refuses).
            if name != model.displayName { client.setName(name) }
        }
        renameButton.onClicked(rename)
        nameEntry.onActivate(rename)
        bluetoothVisible.onToggled { [unowned self] on in client.setVisible(on, on: "bluetooth") }
        lanVisible.onToggled { [unowned self] on in client.setVisible(on, on: "lan") }

        remedyButton.onClicked { [unowned self] in
            switch model.notice?.remedy {
            case .retryActivation: client.activate()
            case .forgetAndPairAgain(let peer): client.forgetAndPairAgain(peer)
            case .none?, nil: break
            }
            model.dismissNotice()
        }
        dismissButton.onClicked { [unowned self] in model.dismissNotice() }
    }

    private func holdDown() {
        if let muted = model.holdPressed() { client.setMuted(muted) }
    }

    private func holdUp() {
        if let muted = model.holdReleased() { client.setMuted(muted) }
    }

    // MARK: Rendering

    private func render(_ change: AppModel.Change) {
        switch change {
        case .peers:
            renderPeers()
            renderActions()
            renderPlayback()
            show(model.microphoneIndicator, on: microphoneIndicator)
        case .selection:
            renderSelection()
            renderActions()
            renderPlayback()
            renderChat()
        case .chat(let peer):
            if peer == model.selectedPeer { renderChat() }
        case .question:
            renderQuestion()
        case .mute:
            muteButton.isActive = model.muted
        case .discovering:
            searchButton.isActive = model.discovering
        case .service:
            renderActions()
            renderPlayback()
            renderSettings()
        case .settings:
            renderSettings()
        case .notice:
            renderNotice()
            // A toggle whose call failed shows the service's state again.
            muteButton.isActive = model.muted
            searchButton.isActive = model.discovering
            renderPlayback()
            renderSettings()
        case .hold:
            holdButton.label = model.holdLabel
            holdButton.setAccessibleName(model.holdLabel)
            if model.isHolding { holdButton.addStyleClass("destructive-action") } else { holdButton.removeStyleClass("destructive-action") }
        case .speaking:
            show(model.microphoneIndicator, on: microphoneIndicator)
        case .playback:
            renderPlayback()
        }
    }

    private func renderPeers() {
        renderingPeers = true
        defer { renderingPeers = false }
        let ids = model.peers.map(\.id)
        if ids != rowIDs {
            while peerList.count > 0 { peerList.remove(at: 0) }
            rowLabels = []
            for row in model.peers {
                let name = Label(), detail = Label(), speaking = Self.speakingDot()
                name.setAlignment(0)
                detail.setAlignment(0)
                detail.addStyleClass("dim-label")
                let texts = Box(.vertical, spacing: 2)
                texts.expandsHorizontally = true
                texts.append(name)
                texts.append(detail)
                let cell = Box(.horizontal, spacing: 6)
                cell.setMargins(8)
                cell.append(texts)
                cell.append(speaking)
                peerList.append(cell, name: row.displayName)
                rowLabels.append((name, detail, speaking))
            }
            rowIDs = ids
        }
        for (index, row) in model.peers.enumerated() {
            rowLabels[index].name.text = row.displayName
            rowLabels[index].detail.text = Self.detail(of: row)
            show(model.speakingIndicator(of: row), on: rowLabels[index].speaking)
            peerList.setName(row.displayName, at: index)
        }
        renderSelection()
        if let question = model.question, let row = model.peers.first(where: { $0.id == question.peer }) {
            pairingDialog?.update(name: row.displayName)
        }
    }

    private static func detail(of row: PeerRow) -> String {
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

    private func renderSelection() {
        let index = model.selectedPeer.flatMap { rowIDs.firstIndex(of: $0) }
        if peerList.selectedIndex != index {
            renderingPeers = true
            peerList.selectedIndex = index
            renderingPeers = false
        }
        if let row = model.selectedRow {
            peerTitle.text = row.displayName
        } else {
            peerTitle.text = model.peers.isEmpty ? tr("No peers yet: search nearby or type an address.") : tr("Choose a peer to chat with.")
        }
    }

    /// A dot that lights up while a voice holds speech. Its accessible name says which
    /// ("Speaking", "Silent"; set after the text, which would otherwise name it).
    private static func speakingDot() -> Label {
        let dot = Label("●")
        dot.addStyleClass("title-3")
        return dot
    }

    private func show(_ indicator: SpeakingIndicator?, on dot: Label) {
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

    /// The selected peer's volume and mute here, as the service last said them (a refused change
    /// springs back) or as the slider was just moved.
    private func renderPlayback() {
        let playback = model.selectedPlayback
        volumeScale.isSensitive = playback != nil
        peerMuteButton.isSensitive = playback != nil
        let percent = playback?.percent ?? 100
        volumeScale.value = percent
        volumeLabel.text = "\(Int(percent)) %"
        peerMuteButton.isActive = playback?.mutedHere ?? false
    }

    private func renderActions() {
        let actions = model.actions
        connectButton.isSensitive = actions.connect
        disconnectButton.isSensitive = actions.disconnect
        voiceButton.isSensitive = actions.voice
        voiceButton.label = actions.voiceLabel.isEmpty ? tr("Start voice") : actions.voiceLabel
        sendButton.isSensitive = actions.send
        messageEntry.isSensitive = actions.send
        let running = model.service == .running
        [searchButton, muteButton, holdButton, addressButton].forEach { $0.isSensitive = running }
    }

    /// The service's settings as it last said them (a refused change springs back).
    private func renderSettings() {
        let available = model.settingsAvailable
        [nameEntry, renameButton, bluetoothVisible, lanVisible].forEach { $0.isSensitive = available }
        if let name = model.displayName { nameEntry.text = name }
        bluetoothVisible.isActive = model.isVisible(on: "bluetooth")
        lanVisible.isActive = model.isVisible(on: "lan")
    }

    private func renderChat() {
        chatBox.removeAll()
        guard let peer = model.selectedPeer else { return }
        for message in model.messages(with: peer) where !message.text.isEmpty {
            let bubble = Box(.vertical, spacing: 0)
            bubble.setMargins(6)
            let text = Label(message.text)
            text.setWraps(true)
            text.setSelectable(false)
            text.setAlignment(message.incoming ? 0 : 1)
            bubble.append(text)
            if let state = Self.describe(message.state) {
                let stateLabel = Label(state)
                stateLabel.addStyleClass("dim-label")
                stateLabel.addStyleClass("caption")
                stateLabel.setAlignment(1)
                bubble.append(stateLabel)
            }
            chatBox.append(bubble)
        }
        chatScroller.scrollToEnd()
    }

    private static func describe(_ state: MessageState) -> String? {
        switch state {
        case .received: return nil
        case .queued: return tr("Queued")
        case .delivered: return tr("Delivered")
        case .failed(let reason): return reason.isEmpty ? tr("Not delivered") : tr("Not delivered:") + " " + reason
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

    private func renderNotice() {
        guard let notice = model.notice else {
            // Emptied as well as hidden: AT-SPI still lists a hidden bar's children as visible.
            noticeLabel.text = ""
            remedyButton.isVisible = false
            noticeBar.isVisible = false
            return
        }
        noticeLabel.text = notice.text
        switch notice.remedy {
        case .none:
            remedyButton.isVisible = false
        case .retryActivation:
            remedyButton.label = tr("Retry")
            remedyButton.isVisible = true
        case .forgetAndPairAgain:
            remedyButton.label = tr("Forget and pair again")
            remedyButton.isVisible = true
        }
        noticeBar.isVisible = true
    }

    func present() { window.present() }
}
