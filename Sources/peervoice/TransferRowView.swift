import Gtk
import PeerVoiceAppModel

/// A file transfer as a row of the conversation, among the bubbles: what travels (the file or
/// folder, or how many items) and its size, a progress bar with the bytes, rate and time left,
/// the state in words (the reason when it failed), and what a person can do now: Accept or
/// Decline an offer, Cancel one under way, Retry one of ours that failed, Open or Show in folder
/// what was received. While only its bytes
/// move it is updated in place (a button keeps the keyboard focus).
final class TransferRowView {
    struct Actions {
        var accept: (TransferRow) -> Void
        var decline: (TransferRow) -> Void
        var cancel: (TransferRow) -> Void
        var retry: (TransferRow) -> Void
        /// The app knows what the transfer sent (it began here), so Retry can send it again.
        var canRetry: (TransferRow) -> Bool
        /// What was received (its `Destination`), with its default application, or in the file manager.
        var open: (TransferRow) -> Void
        var showInFolder: (TransferRow) -> Void
    }

    let row: ListRow
    private let bar = ProgressBar()
    private var shown: TransferRow

    init(_ transfer: TransferRow, rate: TransferRate?, from peerName: String, actions: Actions) {
        shown = transfer
        let title = Self.title(of: transfer)
        let icon = Image(icon: transfer.files.contains { $0.name.contains("/") } ? "folder-symbolic" : "text-x-generic-symbolic")
        icon.setAccessibleHidden(true)
        let name = Label(title)
        name.setWraps(true)
        name.setAlignment(0)
        name.expandsHorizontally = true
        name.addStyleClass("heading")
        let size = Label(formattedSize(transfer.size))
        size.addStyleClass("dim-label")
        let top = Box(.horizontal, spacing: 8)
        top.append(icon)
        top.append(name)
        top.append(size)

        let card = Box(.vertical, spacing: 6)
        card.addStyleClass("card")
        card.addStyleClass("transfer")
        card.setSizeRequest(width: 300, height: -1)
        card.setAlignment(horizontal: transfer.incoming ? .start : .end)
        card.append(top)
        if !transfer.state.isFinal || transfer.state == .complete {
            bar.fraction = transfer.fraction
            bar.text = Self.progress(of: transfer, rate: rate)
            bar.setAccessibleName(tr("Progress of %s").replacingPlaceholder(with: title))
            card.append(bar)
        }
        let status = Label(Self.status(of: transfer))
        status.setWraps(true)
        status.setAlignment(0)
        status.addStyleClass("caption")
        status.addStyleClass(transfer.state == .failed ? "error" : "dim-label")
        card.append(status)

        let buttons = Box(.horizontal, spacing: 6)
        buttons.setAlignment(horizontal: .end)
        func add(_ label: String, _ accessibleName: String, style: String?, _ action: @escaping (TransferRow) -> Void) {
            let button = Button(label)
            button.setAccessibleName(accessibleName.replacingPlaceholder(with: title))
            if let style { button.addStyleClass(style) }
            button.onClicked { action(transfer) }
            buttons.append(button)
        }
        switch transfer.state {
        case .waiting where transfer.incoming:
            add(tr("Decline"), tr("Decline %s"), style: nil, actions.decline)
            add(tr("Accept"), tr("Accept %s"), style: "suggested-action", actions.accept)
        case .waiting, .active, .paused:
            add(tr("Cancel"), tr("Cancel %s"), style: nil, actions.cancel)
        case .failed where !transfer.incoming:
            if actions.canRetry(transfer) { add(tr("Retry"), tr("Send %s again"), style: nil, actions.retry) }
        case .complete where transfer.incoming && !transfer.destination.isEmpty:
            add(tr("Show in folder"), tr("Show %s in its folder"), style: nil, actions.showInFolder)
            add(tr("Open"), tr("Open %s"), style: nil, actions.open)
        default:
            break
        }
        card.append(buttons)

        row = ListRow(card, activatable: false)
        // Who sends what: what a screen reader reads per row, then where it stands.
        row.setAccessibleName((transfer.incoming ? peerName : tr("You")) + ": " + title)
        row.setAccessibleDescription(formattedSize(transfer.size) + ", " + Self.status(of: transfer))
    }

    /// Shows `transfer`'s bytes and rate, when that is all that changed; false when the row must
    /// be made anew (its state, and with it its words and buttons, changed).
    func update(_ transfer: TransferRow, rate: TransferRate?) -> Bool {
        var moved = shown
        moved.transferred = transfer.transferred
        guard moved == transfer else { return false }
        shown = transfer
        bar.fraction = transfer.fraction
        bar.text = Self.progress(of: transfer, rate: rate)
        return true
    }

    /// The item's name (a file, or a folder sent whole), or how many items.
    static func title(of transfer: TransferRow) -> String {
        let items = transfer.items
        if items.count == 1 { return items[0] }
        return trn("%d item", "%d items", items.count).replacingPlaceholder(with: "\(items.count)", "%d")
    }

    /// "1.2 MB of 4.2 MB — 800.0 kB/s, 4 s left" while it moves.
    static func progress(of transfer: TransferRow, rate: TransferRate?) -> String {
        var text = tr("%s of %s").replacingPlaceholder(with: formattedSize(transfer.transferred))
            .replacingPlaceholder(with: formattedSize(transfer.size))
        if let rate {
            text += " — " + tr("%s/s").replacingPlaceholder(with: formattedSize(UInt64(rate.bytesPerSecond)))
            if let seconds = rate.secondsLeft {
                let left = seconds < 60 ? trn("%d second left", "%d seconds left", Int(seconds.rounded(.up)))
                    .replacingPlaceholder(with: "\(Int(seconds.rounded(.up)))", "%d")
                    : trn("%d minute left", "%d minutes left", Int((seconds / 60).rounded(.up)))
                    .replacingPlaceholder(with: "\(Int((seconds / 60).rounded(.up)))", "%d")
                text += ", " + left
            }
        }
        return text
    }

    /// Where it stands, in words.
    static func status(of transfer: TransferRow) -> String {
        let reason = transfer.error.isEmpty ? "" : ": " + transfer.error
        switch transfer.state {
        case .waiting: return transfer.incoming ? tr("Offered to you") : tr("Waiting for the peer to accept")
        case .active: return transfer.incoming ? tr("Receiving") : tr("Sending")
        case .paused: return tr("Paused until the peer is back")
        case .complete: return transfer.incoming ? tr("Received") : tr("Sent")
        case .failed: return tr("Failed") + reason
        case .cancelled: return tr("Cancelled") + reason
        case .declined: return tr("Declined") + reason
        }
    }
}
