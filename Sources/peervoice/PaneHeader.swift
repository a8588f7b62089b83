import Gtk

/// The header a right-hand pane (a peer's conversation, a room) starts with: Back at the start
/// while the window is folded, then the title and its subtitle.
final class PaneHeader {
    let bar = HeaderBar()
    let backButton = Button(icon: "go-previous-symbolic", name: tr("Back"))
    private let title = WindowTitle()

    init() {
        backButton.isVisible = false
        bar.packStart(backButton)
        bar.setTitleWidget(title)
    }

    func set(title: String, subtitle: String) {
        self.title.set(title: title, subtitle: subtitle)
    }

    /// Folded, the pane is alone on screen and has the window's buttons at both ends and Back;
    /// unfolded, the list beside it has the start's.
    func fold(_ folded: Bool) {
        bar.showWindowButtons(start: folded, end: true)
        backButton.isVisible = folded
    }
}

/// A message's bubble, as a peer's conversation and a room's both show it: ours at the end,
/// theirs at the start, the text wrapped to a readable width, the time small and dim.
enum ChatBubble {
    static func box(incoming: Bool) -> Box {
        let bubble = Box(.vertical, spacing: 2)
        bubble.addStyleClass("bubble")
        bubble.addStyleClass(incoming ? "incoming" : "outgoing")
        bubble.setAlignment(horizontal: incoming ? .start : .end)
        return bubble
    }

    static func text(_ text: String) -> Label {
        let label = Label(text)
        label.setWraps(true)
        label.setMaximumWidth(characters: 48)
        label.setAlignment(0)
        return label
    }

    static func time(_ timeMs: UInt64) -> Label {
        let label = Label(MessageTime.text(of: timeMs))
        label.addStyleClass("caption")
        label.addStyleClass("dim-label")
        return label
    }
}
