import Foundation
import Gtk
import PeerVoiceAppModel

/// The right pane: the selected peer's conversation as bubbles (ours on the right, theirs on the
/// left, each with its time and, for ours, whether it arrived), the voice controls, and the
/// message field. Its header has the peer's name and state, Connect or Disconnect, and Back
/// while the window is folded.
final class ConversationPane {
    let root = Box(.vertical, spacing: 0)
    let header = PaneHeader()
    let connectButton = Button(tr("Connect"))
    let disconnectButton = Button(tr("Disconnect"))
    /// Files or a folder to the selected peer, through the desktop's file chooser.
    let sendFilesButton = MenuButton(icon: "mail-attachment-symbolic", name: tr("Send files…"),
                                     items: [(tr("Files…"), "app.send-files"), (tr("A folder…"), "app.send-folder")], primary: false)

    private let emptyPage = StatusPage(icon: "user-available-symbolic", title: tr("No conversation selected"),
                                       description: tr("Choose a peer to chat with."))
    private let chatPage = Box(.vertical, spacing: 0)
    private let conversation = ListBox(selectable: false)
    private let scroller: ScrolledWindow
    /// The peer whose conversation is on screen.
    private var shownPeer: String?
    /// What the conversation shows now, and its transfers' rows by path.
    private var shownItems: [ConversationItem] = []
    private var transferViews: [String: TransferRowView] = [:]

    /// The microphone's mute, here while the window is folded (the list's header has it otherwise).
    let muteButton = ToggleButton(icon: "audio-input-microphone-symbolic", name: tr("Mute"))
    let voiceButton = Button(tr("Start voice"))
    let microphoneIndicator = SpeakingDot.make()
    let holdButton = Button(tr("Hold to mute"))
    let volumeScale = Scale(range: 0...200, step: 1)
    private let volumeLabel = Label()
    let peerMuteButton = ToggleButton(icon: "audio-volume-muted-symbolic", name: tr("Mute this peer"))
    let compose = ComposeBar(placeholder: tr("Message"), accessibleName: tr("Message"), sendName: tr("Send"))

    /// A person asked to send a failed message again.
    var onRetry: (ChatMessage) -> Void = { _ in }
    /// What a person does with a transfer's row.
    var transferActions = TransferRowView.Actions(accept: { _ in }, decline: { _ in }, cancel: { _ in },
                                                  retry: { _ in }, canRetry: { _ in false }, open: { _ in },
                                                  showInFolder: { _ in })
    /// Files dropped on the conversation, to send to the selected peer.
    var onFilesDropped: ([String]) -> Void = { _ in }

    init() {
        scroller = ScrolledWindow(Clamp(conversation, maximumWidth: 720))
        connectButton.addStyleClass("suggested-action")
        header.bar.packEnd(connectButton)
        header.bar.packEnd(disconnectButton)
        header.bar.packEnd(sendFilesButton)
        root.append(header.bar)

        emptyPage.expandsVertically = true
        root.append(emptyPage)

        conversation.setAccessibleName(tr("Conversation"))
        conversation.addStyleClass("conversation")
        conversation.setMargins(12)
        scroller.expandsVertically = true
        scroller.followEnd()
        // With no button among the bubbles the view itself takes the focus (the arrow keys and
        // Page Up scroll it): named, so a screen reader does not say only "scroll pane".
        scroller.setAccessibleName(tr("Conversation"))
        chatPage.append(scroller)
        chatPage.append(Separator(.horizontal))
        chatPage.append(voiceBar())
        chatPage.append(compose.root)
        chatPage.expandsVertically = true
        chatPage.onFilesDropped { [unowned self] paths in onFilesDropped(paths) }
        root.append(chatPage)
        root.expandsHorizontally = true
        // A phone's width: the leaflet folds to this pane alone below it plus the list's.
        root.setSizeRequest(width: 360, height: -1)
    }

    /// Voice with the selected peer, our microphone (mute by holding), and how its voice plays here.
    private func voiceBar() -> Widget {
        let bar = Box(.vertical, spacing: 6)
        bar.setMargins(8)
        let call = Box(.horizontal, spacing: 8)
        call.append(voiceButton)
        muteButton.isVisible = false
        call.append(muteButton)
        call.append(microphoneIndicator)
        holdButton.addStyleClass("pill")
        holdButton.expandsHorizontally = true
        holdButton.setAccessibleName(tr("Hold to mute"))
        call.append(holdButton)
        bar.append(call)

        // The selected peer's voice here: 0–200 % (SetVolume's 0.0–2.0), and muted here or not.
        let playback = Box(.horizontal, spacing: 6)
        let speaker = Image(icon: "audio-volume-high-symbolic")
        speaker.setAccessibleHidden(true)
        playback.append(speaker)
        volumeScale.setAccessibleName(tr("Volume"))
        volumeScale.addMark(at: 100)
        volumeScale.expandsHorizontally = true
        playback.append(volumeScale)
        volumeLabel.setSizeRequest(width: 48, height: -1)
        volumeLabel.setAlignment(1)
        playback.append(volumeLabel)
        peerMuteButton.addStyleClass("flat")
        playback.append(peerMuteButton)
        bar.append(playback)
        return bar
    }

    // MARK: Rendering

    /// The selected peer's name and state in the header, and its conversation or the empty page.
    func renderSelection(_ model: AppModel) {
        let row = model.selectedRow
        header.set(title: row?.displayName ?? "", subtitle: row.map(PeerDetail.text(of:)) ?? "")
        emptyPage.isVisible = row == nil
        emptyPage.setAccessibleHidden(row != nil)
        chatPage.isVisible = row != nil
        chatPage.setAccessibleHidden(row == nil)
        if model.selectedPeer != shownPeer {
            shownPeer = model.selectedPeer
            renderConversation(model)
            scroller.scrollToEnd()
        }
    }

    func renderActions(_ model: AppModel) {
        let actions = model.actions
        connectButton.isVisible = model.selectedRow != nil && !actions.disconnect
        connectButton.isSensitive = actions.connect
        disconnectButton.isVisible = actions.disconnect
        voiceButton.isSensitive = actions.voice
        voiceButton.label = actions.voiceLabel.isEmpty ? tr("Start voice") : actions.voiceLabel
        if model.selectedRow?.voiceActive == true {
            voiceButton.addStyleClass("destructive-action")
        } else {
            voiceButton.removeStyleClass("destructive-action")
        }
        compose.sendButton.isSensitive = actions.send
        // Files wait for a peer that is away, as messages do: any known peer can be sent them.
        sendFilesButton.isSensitive = model.selectedRow?.isPaired == true && model.service == .running
        compose.entry.isSensitive = actions.send
        holdButton.isSensitive = model.service == .running
        muteButton.isSensitive = model.service == .running
    }

    /// The selected peer's volume and mute here, as the service last said them (a refused change
    /// springs back) or as the slider was just moved.
    func renderPlayback(_ model: AppModel) {
        let playback = model.selectedPlayback
        volumeScale.isSensitive = playback != nil
        peerMuteButton.isSensitive = playback != nil
        let percent = playback?.percent ?? 100
        volumeScale.value = percent
        volumeLabel.text = "\(Int(percent)) %"
        peerMuteButton.isActive = playback?.mutedHere ?? false
    }

    func renderHold(_ model: AppModel) {
        holdButton.label = model.holdLabel
        holdButton.setAccessibleName(model.holdLabel)
        if model.isHolding { holdButton.addStyleClass("destructive-action") } else { holdButton.removeStyleClass("destructive-action") }
    }

    /// The conversation's bubbles, oldest first; the view stays at the newest unless a person
    /// scrolled up to read older ones.
    func renderConversation(_ model: AppModel) {
        let items = model.selectedPeer.map(model.conversation(with:)) ?? []
        // Only bytes moved (a transfer reports them four times a second): its rows follow in place.
        if items.count == shownItems.count, zip(items, shownItems).allSatisfy({ item, shown in
            switch (item, shown) {
            case (.message(let message), .message(let old)): return message == old
            case (.transfer(let transfer), .transfer(let old)):
                return transfer.path == old.path && transferViews[transfer.path]?.update(transfer, rate: model.rate(of: transfer.path)) == true
            default: return false
            }
        }) {
            shownItems = items
            return
        }
        conversation.removeAll()
        transferViews = [:]
        shownItems = items
        guard let peer = model.selectedPeer else { return }
        let name = model.selectedRow?.displayName ?? peer
        for item in items {
            switch item {
            case .message(let message): conversation.append(bubble(message, from: name))
            case .transfer(let transfer):
                let view = TransferRowView(transfer, rate: model.rate(of: transfer.path), from: name, actions: transferActions)
                transferViews[transfer.path] = view
                conversation.append(view.row)
            }
        }
    }

    private func bubble(_ message: ChatMessage, from peerName: String) -> Widget {
        let time = ChatBubble.time(message.timeMs)
        let meta = Box(.horizontal, spacing: 4)
        meta.setAlignment(horizontal: .end)
        meta.append(time)
        let state = Self.describe(message.state)
        if let state, !message.incoming {
            let mark = Image(icon: state.icon)
            mark.set(icon: state.icon, name: state.text)
            mark.addStyleClass("caption")
            mark.addStyleClass(state.failed ? "error" : "dim-label")
            meta.append(mark)
        }
        let bubble = ChatBubble.box(incoming: message.incoming)
        bubble.append(ChatBubble.text(message.text))
        bubble.append(meta)
        if state?.failed == true {
            let retry = Button(tr("Retry"))
            retry.setAccessibleName(tr("Retry sending"))
            retry.setAlignment(horizontal: .end)
            retry.onClicked { [unowned self] in onRetry(message) }
            bubble.append(retry)
        }
        let row = ListRow(bubble, activatable: false)
        // Who said what, then when and whether it arrived: what a screen reader reads per row.
        row.setAccessibleName((message.incoming ? peerName : tr("You")) + ": " + message.text)
        row.setAccessibleDescription(([time.text] + (message.incoming ? [] : [state?.text ?? ""])).joined(separator: ", "))
        return row
    }

    private static func describe(_ state: MessageState) -> (text: String, icon: String, failed: Bool)? {
        switch state {
        case .received: nil
        case .queued: (tr("Queued"), "document-open-recent-symbolic", false)
        case .delivered: (tr("Delivered"), "object-select-symbolic", false)
        case .failed(let reason): (reason.isEmpty ? tr("Not delivered") : tr("Not delivered:") + " " + reason, "dialog-warning-symbolic", true)
        }
    }
}

/// When a message was sent or received, as its bubble says it: the time today, the day and time
/// before, in the user's locale.
enum MessageTime {
    static func text(of timeMs: UInt64, now: Date = Date()) -> String {
        guard timeMs > 0 else { return "" }
        let date = Date(timeIntervalSince1970: Double(timeMs) / 1000)
        let formatter = DateFormatter()
        formatter.timeStyle = .short
        formatter.dateStyle = Calendar.current.isDate(date, inSameDayAs: now) ? .none : .medium
        return formatter.string(from: date)
    }
}
