import Foundation
import Gtk
import PeerVoiceAppModel

/// The right pane for a Mumble room: its channel's conversation (bubbles with each user's
/// name), the users in the channel beside it (name, speaking, muted), a message field, and
/// Leave in the header.
final class RoomPane {
    let root = Box(.vertical, spacing: 0)
    let header = PaneHeader()
    let leaveButton = Button(tr("Leave"))
    let compose = ComposeBar(placeholder: tr("Message to the room"), accessibleName: tr("Message to the room"),
                             sendName: tr("Send to the room"))
    private let conversation = ListBox(selectable: false)
    private let scroller: ScrolledWindow
    private let users = ListBox(selectable: false)
    private let noUsers = Label(tr("Nobody else is here"))
    private var shownRoom: String?

    init() {
        scroller = ScrolledWindow(Clamp(conversation, maximumWidth: 720))
        leaveButton.addStyleClass("destructive-action")
        header.bar.packEnd(leaveButton)
        root.append(header.bar)

        conversation.setAccessibleName(tr("Room conversation"))
        conversation.addStyleClass("conversation")
        conversation.setMargins(12)
        scroller.setAccessibleName(tr("Room conversation"))
        scroller.followEnd()
        scroller.expandsVertically = true
        scroller.expandsHorizontally = true

        users.setAccessibleName(tr("Users in the room"))
        users.addStyleClass("boxed-list")
        noUsers.addStyleClass("dim-label")
        noUsers.setWraps(true)
        noUsers.setMargins(12)
        users.setPlaceholder(noUsers)
        let side = Box(.vertical, spacing: 8)
        side.setMargins(12)
        let heading = Label(tr("Users"))
        heading.addStyleClass("heading")
        heading.setAlignment(0)
        side.append(heading)
        side.append(users)
        side.setSizeRequest(width: 150, height: -1)

        let body = Box(.horizontal, spacing: 0)
        body.append(scroller)
        body.append(Separator(.vertical))
        body.append(side)
        body.expandsVertically = true
        root.append(body)
        root.append(Separator(.horizontal))

        root.append(compose.root)
        root.expandsHorizontally = true
        root.setSizeRequest(width: 360, height: -1)
    }

    /// The selected room's title, state, users and conversation.
    func render(_ model: AppModel) {
        guard let room = model.selectedRoomRow else { return }
        header.set(title: room.title, subtitle: Self.state(of: room))
        let connected = room.state == "connected"
        compose.sendButton.isSensitive = connected
        compose.entry.isSensitive = connected
        users.removeAll()
        for user in room.users {
            let line = Box(.horizontal, spacing: 6)
            line.setMargins(6)
            let name = Label(user.name)
            name.expandsHorizontally = true
            name.setAlignment(0)
            line.append(name)
            let dot = SpeakingDot.make()
            SpeakingDot.show(SpeakingIndicator(speaking: user.speaking, name: user.speaking ? tr("Speaking") : tr("Silent")), on: dot)
            line.append(dot)
            if user.muted {
                let muted = Image(icon: "microphone-sensitivity-muted-symbolic")
                muted.set(icon: "microphone-sensitivity-muted-symbolic", name: tr("Muted"))
                line.append(muted)
            }
            let row = ListRow(line, activatable: false)
            row.setAccessibleName(user.name)
            row.setAccessibleDescription(([user.speaking ? tr("Speaking") : tr("Silent")] + (user.muted ? [tr("Muted")] : [])).joined(separator: ", "))
            users.append(row)
        }
        if shownRoom != room.path {
            shownRoom = room.path
            renderConversation(model)
            scroller.scrollToEnd()
        }
    }

    func renderConversation(_ model: AppModel) {
        conversation.removeAll()
        guard let room = model.selectedRoom else { return }
        for message in model.roomMessages[room] ?? [] {
            let who = message.user ?? tr("You")
            let bubble = ChatBubble.box(incoming: message.user != nil)
            if let user = message.user {
                let name = Label(user)
                name.addStyleClass("caption-heading")
                name.setAlignment(0)
                bubble.append(name)
            }
            bubble.append(ChatBubble.text(message.text))
            let time = ChatBubble.time(message.timeMs)
            time.setAlignment(1)
            bubble.append(time)
            let row = ListRow(bubble, activatable: false)
            row.setAccessibleName(who + ": " + message.text)
            row.setAccessibleDescription(time.text)
            conversation.append(row)
        }
    }

    /// "connected · /Games · 2 users", or why it is not.
    static func state(of room: RoomRow) -> String {
        switch room.state {
        case "connected":
            return [tr("connected"), room.channel,
                    trn("%d other user", "%d other users", room.users.count).replacingPlaceholder(with: "\(room.users.count)", "%d")]
                .filter { !$0.isEmpty }.joined(separator: " · ")
        case "connecting": return tr("connecting")
        case "reconnecting": return tr("reconnecting") + (room.error.isEmpty ? "" : ": " + room.error)
        default: return tr("failed") + (room.error.isEmpty ? "" : ": " + room.error)
        }
    }
}

/// "Join a room…": a mumble:// address and, when the server wants one, a password. When the
/// server's certificate is not the one seen before, a second question shows the new
/// fingerprint to compare before joining with it.
final class JoinRoomDialog {
    private let dialog: MessageDialog
    private let address = Entry(placeholder: "mumble://name@host/Channel")
    private let password = PasswordEntry()

    /// `join(url, password)` runs when a person chooses Join.
    init(parent: Window, join: @escaping (String, String) -> Void) {
        dialog = MessageDialog(parent: parent, heading: tr("Join a room"),
                               body: tr("A Mumble server's address, with the channel to join and the name to use there."))
        let fields = Box(.vertical, spacing: 8)
        address.setAccessibleName(tr("Room address"))
        password.setAccessibleName(tr("Password"))
        fields.append(Self.labelled(tr("Address"), address))
        fields.append(Self.labelled(tr("Password (if the server has one)"), password))
        dialog.setExtraChild(fields)
        dialog.addResponse("cancel", label: tr("Cancel"))
        dialog.addResponse("join", label: tr("Join"), appearance: .suggested)
        dialog.set(defaultResponse: "join", closeResponse: "cancel")
        dialog.onResponse { [unowned self] response in
            let url = address.text.trimmingCharacters(in: .whitespaces)
            if response == "join", !url.isEmpty { join(url, password.text) }
        }
        address.onActivate { [unowned self] in
            let url = address.text.trimmingCharacters(in: .whitespaces)
            guard !url.isEmpty else { return }
            join(url, password.text)
            dialog.destroy()
        }
    }

    private static func labelled(_ text: String, _ field: Widget) -> Widget {
        let box = Box(.vertical, spacing: 4)
        let label = Label(text)
        label.setAlignment(0)
        label.addStyleClass("caption-heading")
        label.setAccessibleHidden(true)
        box.append(label)
        box.append(field)
        return box
    }

    func present() { dialog.present() }

    /// Asks whether to trust a server whose certificate changed; `accept` joins with it.
    static func askToTrust(parent: Window, url: String, fingerprint: String, accept: @escaping () -> Void) {
        let question = MessageDialog(parent: parent, heading: tr("The server's certificate changed"),
                                     body: tr("It is not the one this server showed before. Join only if its administrator confirms this fingerprint:"))
        let shown = Label(fingerprint)
        shown.setWraps(true)
        shown.setSelectable(true)
        shown.addStyleClass("monospace")
        question.setExtraChild(shown)
        shown.setAccessibleName(tr("Server fingerprint"))
        question.addResponse("cancel", label: tr("Cancel"))
        question.addResponse("trust", label: tr("Trust and join"), appearance: .destructive)
        question.set(defaultResponse: nil, closeResponse: "cancel")
        question.onResponse { response in if response == "trust" { accept() } }
        question.present()
    }
}
