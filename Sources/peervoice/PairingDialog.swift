import Foundation
import Gtk
import PeerVoiceAppModel

/// The pairing question: the peer's name and the code, large and in two groups for reading
/// aloud; Accept and Reject when the code is to be confirmed, no buttons when it is only shown.
final class PairingDialog {
    let peer: String
    let kind: PairingQuestion.Kind
    private let window: Window
    private let intro = Label()
    private let code = Label()
    private var answered = false
    private var respond: (Bool?) -> Void = { _ in }

    /// `answer(peer, accept)` runs once, when a person answers: closing the dialog rejects a code
    /// to confirm, and dismisses (nil) a code that was only shown.
    init(parent: Window, question: PairingQuestion, answer: @escaping (String, Bool?) -> Void) {
        peer = question.peer
        kind = question.kind
        window = Window(dialogFor: parent)
        window.title = tr("Pairing")
        window.setResizable(false)

        let content = Box(.vertical, spacing: 12)
        content.setMargins(24)
        intro.setWraps(true)
        content.append(intro)
        code.setSelectable(false)
        content.append(code)

        if question.asks {
            let buttons = Box(.horizontal, spacing: 12)
            let reject = Button(tr("Reject"))
            let accept = Button(tr("Accept"))
            reject.expandsHorizontally = true
            accept.expandsHorizontally = true
            reject.addStyleClass("destructive-action")
            accept.addStyleClass("suggested-action")
            buttons.append(reject)
            buttons.append(accept)
            content.append(buttons)
            accept.onClicked { [unowned self] in respond(true) }
            reject.onClicked { [unowned self] in respond(false) }
        }
        let peer = peer, asks = question.asks
        respond = { [unowned self] accepted in
            guard !answered else { return }
            answered = true
            answer(peer, accepted)
        }
        // The answer withdraws the question, and that closes the window (`close()`).
        window.onCloseRequest { [unowned self] in respond(asks ? false : nil); return true }
        window.setContent(content)
        update(question)
    }

    func update(_ question: PairingQuestion) {
        update(name: question.name)
        code.setMarkup("<span font_desc=\"Bold 32\" font_features=\"tnum\">"
                       + Label.escape(question.groupedPasskey) + "</span>")
        // A label names itself after its text whenever the text is set: name it afterwards.
        code.setAccessibleName(tr("Pairing code"))
    }

    func update(name: String) {
        intro.text = (kind == .confirm ? tr("%s wants to pair. Accept if the other screen shows the same code:")
                                       : tr("Type or confirm this code on %s:"))
            .replacingPlaceholder(with: name)
    }

    func present() { window.present() }

    /// Withdraws the question (answered here or anywhere else).
    func close() {
        answered = true
        window.destroy()
    }
}

extension String {
    /// The first `%s` replaced by `value` (gettext strings keep C's placeholder, so translators
    /// can move it).
    func replacingPlaceholder(with value: String) -> String {
        guard let range = range(of: "%s") else { return self }
        return replacingCharacters(in: range, with: value)
    }
}
