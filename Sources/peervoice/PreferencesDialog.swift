import Gtk
import PeerVoiceAppModel

/// Preferences (`AdwPreferencesWindow`, Ctrl+comma): what the service keeps — the name other
/// devices see and where discovery makes this device visible —, what cleans the microphone (as
/// the service reports it), and the app's own: the hold button's mode and light or dark.
final class PreferencesDialog {
    private let window: PreferencesWindow
    private let model: AppModel
    private let nameRow = EntryRow(title: tr("Display name"), applyName: tr("Rename"))
    private let bluetoothVisible = Switch()
    private let lanVisible = Switch()
    private let pushToTalk = Switch()
    private let audioRows: [(stage: AudioProcessingStage, row: ActionRow)]
    private let styleButtons: [(style: AppStyle, button: ToggleButton)]

    var onRename: (String) -> Void = { _ in }
    var onVisible: (_ visible: Bool, _ method: String) -> Void = { _, _ in }
    var onPreferencesChanged: () -> Void = {}

    init(parent: Window, model: AppModel) {
        self.model = model
        window = PreferencesWindow(parent: parent, pageTitle: tr("General"))
        audioRows = AudioProcessingStage.allCases.map { ($0, ActionRow(title: Self.title(of: $0))) }
        styleButtons = AppStyle.allCases.map { ($0, ToggleButton(Self.title(of: $0))) }

        let device = PreferencesGroup(title: tr("This device"), description: tr("How other computers see this one."))
        device.add(nameRow)
        for (label, control) in [(tr("Visible over Bluetooth"), bluetoothVisible), (tr("Visible on the LAN"), lanVisible)] {
            device.add(switchRow(label, control))
        }
        window.add(device)

        let voice = PreferencesGroup(title: tr("Voice"))
        voice.add(switchRow(tr("Push to talk"), pushToTalk, subtitle: tr("The hold button opens the microphone while held, instead of muting it.")))
        window.add(voice)

        let processing = PreferencesGroup(title: tr("Audio processing"),
                                          description: tr("What cleans your microphone before it is sent, as the service reports it."))
        audioRows.forEach { processing.add($0.row) }
        window.add(processing)

        let appearance = PreferencesGroup(title: tr("Appearance"))
        let styleRow = ActionRow(title: tr("Style"))
        let choices = Box(.horizontal, spacing: 0)
        choices.addStyleClass("linked")
        choices.setAlignment(vertical: .center)
        for (_, button) in styleButtons {
            if button !== styleButtons[0].button { button.join(styleButtons[0].button) }
            choices.append(button)
        }
        styleRow.addSuffix(choices)
        appearance.add(styleRow)
        window.add(appearance)
        wire()
        render()
    }

    private func switchRow(_ title: String, _ control: Switch, subtitle: String = "") -> ActionRow {
        let row = ActionRow(title: title, subtitle: subtitle)
        control.setAlignment(vertical: .center)
        row.addSuffix(control)
        row.setActivatableWidget(control)
        control.setAccessibleName(title)
        return row
    }

    private func wire() {
        nameRow.onApply { [unowned self] in
            // Unchanged: nothing to ask; anything else the service checks (and says why it refuses).
            if nameRow.text != model.displayName { onRename(nameRow.text) }
        }
        bluetoothVisible.onToggled { [unowned self] on in onVisible(on, "bluetooth") }
        lanVisible.onToggled { [unowned self] on in onVisible(on, "lan") }
        pushToTalk.onToggled { [unowned self] on in
            model.holdMode = on ? .holdToTalk : .holdToMute
            onPreferencesChanged()
        }
        for (style, button) in styleButtons {
            button.onToggled { [unowned self] on in
                guard on else { return }
                model.style = style
                onPreferencesChanged()
            }
        }
    }

    /// The service's settings as it last said them (a refused change springs back), and the app's.
    func render() {
        let available = model.settingsAvailable
        [nameRow, bluetoothVisible, lanVisible].forEach { $0.isSensitive = available }
        if let name = model.displayName, nameRow.text != name { nameRow.text = name }
        bluetoothVisible.isActive = model.isVisible(on: "bluetooth")
        lanVisible.isActive = model.isVisible(on: "lan")
        pushToTalk.isActive = model.holdMode == .holdToTalk
        for (stage, on) in model.audioProcessingStages {
            audioRows.first { $0.stage == stage }?.row.set(title: Self.title(of: stage), subtitle: on ? tr("On") : tr("Off"))
        }
        for (style, button) in styleButtons { button.isActive = model.style == style }
    }

    func present() { window.present() }

    /// Open now: problems go to its toasts, over it.
    var isShown: Bool { window.isVisible }
    var toasts: ToastOverlay { window.toasts }

    private static func title(of stage: AudioProcessingStage) -> String {
        switch stage {
        case .echoCancel: tr("Echo cancellation")
        case .noiseSuppression: tr("Noise suppression")
        case .highPass: tr("High-pass filter")
        case .gainControl: tr("Automatic gain")
        }
    }

    private static func title(of style: AppStyle) -> String {
        switch style {
        case .followSystem: tr("Follow the system")
        case .light: tr("Light")
        case .dark: tr("Dark")
        }
    }
}
