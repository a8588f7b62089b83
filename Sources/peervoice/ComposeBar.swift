import Gtk

/// A message field and its send button in a row, as a peer's conversation and a room's page
/// both end. Enter or the button hands the text to `onSend`, and the field is cleared when the
/// text was taken.
final class ComposeBar {
    let root = Box(.horizontal, spacing: 6)
    let entry: Entry
    let sendButton: Button

    init(placeholder: String, accessibleName: String, sendName: String) {
        entry = Entry(placeholder: placeholder)
        sendButton = Button(icon: "mail-send-symbolic", name: sendName)
        root.setMargins(8)
        entry.setAccessibleName(accessibleName)
        entry.expandsHorizontally = true
        root.append(entry)
        sendButton.addStyleClass("suggested-action")
        sendButton.addStyleClass("circular")
        root.append(sendButton)
    }

    /// `take` gets the text (never empty) and says whether it was sent.
    func onSend(_ take: @escaping (String) -> Bool) {
        let send = { [unowned self] in
            let text = entry.text
            if !text.isEmpty, take(text) { entry.text = "" }
        }
        sendButton.onClicked(send)
        entry.onActivate(send)
    }
}
