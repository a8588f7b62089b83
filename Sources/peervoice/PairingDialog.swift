import Foundation
import Gtk
import PeerVoiceAppModel

/// The pairing question as an `AdwMessageDialog`: the peer's name and the code, large and in
/// two groups for reading aloud; Accept and Reject when the code is to be confirmed, Close when
/// it is only shown.
final class PairingDialog {
    let peer: String
    let kind: PairingQuestion.Kind
    private let dialog: MessageDialog
    private let code = Label()
    private var answered = false

    /// `answer(peer, accept)` runs once, when a person answers: Escape or closing rejects a code
    /// to confirm, and dismisses (nil) a code that was only shown.
    init(parent: Window, question: PairingQuestion, answer: @escaping (String, Bool?) -> Void) {
        peer = question.peer
        kind = question.kind
        dialog = MessageDialog(parent: parent, heading: "", body: "")
        code.addStyleClass("pairing-code")
        code.setSelectable(false)
        dialog.setExtraChild(code)
        if question.asks {
            dialog.addResponse("reject", label: tr("Reject"), appearance: .destructive)
            dialog.addResponse("accept", label: tr("Accept"), appearance: .suggested)
            // Enter accepts nothing by accident: comparing the codes is the point.
            dialog.set(defaultResponse: nil, closeResponse: "reject")
        } else {
            dialog.addResponse("close", label: tr("Close"))
            dialog.set(defaultResponse: "close", closeResponse: "close")
        }
        let peer = peer
        dialog.onResponse { [unowned self] response in
            guard !answered else { return }
            answered = true
            switch response {
            case "accept": answer(peer, true)
            case "reject": answer(peer, false)
            default: answer(peer, nil)
            }
        }
        update(question)
    }

    func update(_ question: PairingQuestion) {
        update(name: question.name)
        code.text = question.groupedPasskey
        // A label names itself after its text whenever the text is set: name it afterwards.
        code.setAccessibleName(tr("Pairing code"))
    }

    func update(name: String) {
        if kind == .confirm {
            dialog.set(heading: tr("Pair with %s?").replacingPlaceholder(with: name),
                       body: tr("%s wants to pair. Accept if the other screen shows the same code:").replacingPlaceholder(with: name))
        } else {
            dialog.set(heading: tr("Pairing with %s").replacingPlaceholder(with: name),
                       body: tr("Type or confirm this code on %s:").replacingPlaceholder(with: name))
        }
    }

    func present() { dialog.present() }

    /// Withdraws the question (answered here or anywhere else).
    func close() {
        answered = true
        dialog.destroy()
    }
}

extension String {
    /// The first `placeholder` (`%s`, or `%d` in a plural) replaced by `value` (gettext strings
    /// keep C's placeholders, so translators can move them).
    func replacingPlaceholder(with value: String, _ placeholder: String = "%s") -> String {
        guard let range = range(of: placeholder) else { return self }
        return replacingCharacters(in: range, with: value)
    }
}
