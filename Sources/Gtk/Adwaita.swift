import CAdw
import CGtk

/// `AdwLeaflet`: panes side by side that fold into one at a time on a narrow window, with back
/// navigation (a peer list and its chat, as on a phone).
public final class Leaflet: Widget {
    private var children: [Widget] = []

    public init() {
        super.init(adopting: UnsafeMutableRawPointer(adw_leaflet_new()))
        // Swipe back as on a phone; the back button and Escape do the same.
        adw_leaflet_set_can_navigate_back(ptr(), 1)
    }

    /// Adds a pane; `navigatable` false for what only separates panes.
    public func append(_ child: Widget, navigatable: Bool = true) {
        let page = adw_leaflet_append(ptr(), child.widget)
        adw_leaflet_page_set_navigatable(page, navigatable ? 1 : 0)
        children.append(child)
    }

    /// One pane at a time is shown.
    public var isFolded: Bool { adw_leaflet_get_folded(ptr()) != 0 }

    /// The pane shown while folded (and the one navigation starts from).
    public var visibleChild: Widget? {
        get {
            let visible = adw_leaflet_get_visible_child(ptr()).map(UnsafeMutableRawPointer.init)
            return children.first { $0.raw == visible }
        }
        set {
            if let newValue { adw_leaflet_set_visible_child(ptr(), newValue.widget) }
        }
    }

    public func onFoldedChanged(_ action: @escaping (Bool) -> Void) {
        connectSignal(raw, "notify::folded", { [unowned self] in action(isFolded) }, trampoline: callback(notifyTrampoline))
    }

    /// The shown pane changed (navigation, a swipe, code).
    public func onVisibleChildChanged(_ action: @escaping () -> Void) {
        connectSignal(raw, "notify::visible-child", action, trampoline: callback(notifyTrampoline))
    }
}

/// `AdwClamp`: its child no wider than `maximumWidth`, centred (chat bubbles on a wide window).
public final class Clamp: Widget {
    private let child: Widget

    public init(_ child: Widget, maximumWidth: Int32) {
        self.child = child
        super.init(adopting: UnsafeMutableRawPointer(adw_clamp_new()))
        adw_clamp_set_child(ptr(), child.widget)
        adw_clamp_set_maximum_size(ptr(), maximumWidth)
        adw_clamp_set_tightening_threshold(ptr(), maximumWidth * 3 / 4)
    }
}

/// `AdwWindowTitle`: a header bar's title and subtitle.
public final class WindowTitle: Widget {
    public init() {
        super.init(adopting: UnsafeMutableRawPointer(adw_window_title_new("", "")))
    }

    public func set(title: String, subtitle: String) {
        adw_window_title_set_title(ptr(), title)
        adw_window_title_set_subtitle(ptr(), subtitle)
    }
}

/// `AdwStatusPage`: an empty state (icon, title, description, and what to do about it).
public final class StatusPage: Widget {
    private var child: Widget?

    public init(icon: String, title: String = "", description: String = "") {
        super.init(adopting: UnsafeMutableRawPointer(adw_status_page_new()))
        adw_status_page_set_icon_name(ptr(), icon)
        set(title: title, description: description)
    }

    public func set(title: String, description: String) {
        adw_status_page_set_title(ptr(), title)
        adw_status_page_set_description(ptr(), description)
    }

    public func setIcon(_ icon: String) { adw_status_page_set_icon_name(ptr(), icon) }

    public func setChild(_ child: Widget) {
        adw_status_page_set_child(ptr(), child.widget)
        self.child = child
    }
}

/// `AdwAvatar`: a person's initials on a colour picked from their name.
public final class Avatar: Widget {
    public init(size: Int32) {
        super.init(adopting: UnsafeMutableRawPointer(adw_avatar_new(size, nil, 1)))
    }

    public var text: String {
        get { adw_avatar_get_text(ptr()).map { String(cString: $0) } ?? "" }
        set { adw_avatar_set_text(ptr(), newValue) }
    }
}

/// `AdwActionRow`: a list row with a title, a subtitle, widgets before (`addPrefix`) and after
/// (`addSuffix`).
public final class ActionRow: Widget {
    private var parts: [Widget] = []

    public init(title: String = "", subtitle: String = "") {
        super.init(adopting: UnsafeMutableRawPointer(adw_action_row_new()))
        set(title: title, subtitle: subtitle)
    }

    /// Titles are plain text, not markup (peer names come from the network). The subtitle is
    /// also the row's accessible description (GTK 4.8 passes libadwaita's described-by on to
    /// no screen reader).
    public func set(title: String, subtitle: String) {
        adw_preferences_row_set_use_markup(ptr(), 0)
        adw_preferences_row_set_title(ptr(), title)
        adw_action_row_set_subtitle(ptr(), subtitle)
        setAccessibleDescription(subtitle)
    }

    public func addPrefix(_ widget: Widget) {
        adw_action_row_add_prefix(ptr(), widget.widget)
        parts.append(widget)
    }

    public func addSuffix(_ widget: Widget) {
        adw_action_row_add_suffix(ptr(), widget.widget)
        parts.append(widget)
    }

    /// Activating the row (click, Enter) activates `widget` (a switch it holds).
    public func setActivatableWidget(_ widget: Widget) {
        adw_action_row_set_activatable_widget(ptr(), widget.widget)
    }

    /// The row can be activated (opens a peer's chat).
    public func setActivatable(_ activatable: Bool) {
        gtk_list_box_row_set_activatable(ptr(), activatable ? 1 : 0)
    }
}

/// `AdwEntryRow`: a text field as a list row, its title inside, an apply button while edited.
public final class EntryRow: Widget {
    /// `applyName`: what the apply button does, for screen readers (libadwaita 1.2 names it only
    /// by its "Apply" tooltip).
    public init(title: String, applyName: String) {
        super.init(adopting: UnsafeMutableRawPointer(adw_entry_row_new()))
        adw_preferences_row_set_title(ptr(), title)
        adw_entry_row_set_show_apply_button(ptr(), 1)
        if let apply = descendants(of: widget).first(where: isButton) {
            cgtk_accessible_set_name(OpaquePointer(apply), applyName)
            gtk_widget_set_tooltip_text(apply, applyName)
        }
    }

    public var text: String {
        get { String(cString: gtk_editable_get_text(ptr())) }
        set { gtk_editable_set_text(ptr(), newValue) }
    }

    /// The apply button, or Enter: the person is done editing.
    public func onApply(_ action: @escaping () -> Void) {
        connectSignal(raw, "apply", action, trampoline: callback(voidTrampoline))
    }
}

/// `AdwPreferencesGroup`: a titled box of rows.
public final class PreferencesGroup: Widget {
    private var rows: [Widget] = []

    public init(title: String, description: String = "") {
        super.init(adopting: UnsafeMutableRawPointer(adw_preferences_group_new()))
        adw_preferences_group_set_title(ptr(), Label.escape(title))
        if !description.isEmpty { adw_preferences_group_set_description(ptr(), Label.escape(description)) }
    }

    public func add(_ row: Widget) {
        adw_preferences_group_add(ptr(), row.widget)
        rows.append(row)
    }
}

/// `AdwPreferencesWindow` with one page of groups; closing hides it for the next time.
public final class PreferencesWindow: Widget {
    private let page: UnsafeMutablePointer<GtkWidget>
    private var groups: [PreferencesGroup] = []

    /// `pageTitle` names the one page (for screen readers: its tab is not shown).
    public init(parent: Window, pageTitle: String) {
        page = adw_preferences_page_new()
        super.init(adopting: UnsafeMutableRawPointer(adw_preferences_window_new()))
        adw_preferences_page_set_title(preferencesPage, pageTitle)
        // Few settings: nothing to search; its hidden search field is none for screen readers either.
        adw_preferences_window_set_search_enabled(ptr(), 0)
        for search in descendants(of: widget) where String(cString: cgtk_type_name_of(search)) == "GtkSearchEntry" {
            cgtk_accessible_set_state(OpaquePointer(search), GTK_ACCESSIBLE_STATE_HIDDEN, 1)
        }
        adw_preferences_window_add(ptr(), preferencesPage)
        gtk_window_set_transient_for(ptr(), parent.ptr())
        gtk_window_set_modal(ptr(), 1)
        gtk_window_set_hide_on_close(ptr(), 1)
    }

    private var preferencesPage: UnsafeMutablePointer<AdwPreferencesPage> {
        UnsafeMutableRawPointer(page).assumingMemoryBound(to: AdwPreferencesPage.self)
    }

    /// Toasts over this window, where a person looks while it is open.
    public private(set) lazy var toasts = ToastOverlay(inside: widget)

    public func add(_ group: PreferencesGroup) {
        adw_preferences_page_add(preferencesPage, group.ptr())
        groups.append(group)
    }

    public func present() { gtk_window_present(ptr()) }
}

/// `AdwMessageDialog`: a question over the window, with the answers as buttons.
public final class MessageDialog: Widget {
    public enum Appearance {
        case normal, suggested, destructive
        var adw: AdwResponseAppearance {
            switch self {
            case .normal: ADW_RESPONSE_DEFAULT
            case .suggested: ADW_RESPONSE_SUGGESTED
            case .destructive: ADW_RESPONSE_DESTRUCTIVE
            }
        }
    }

    private var extra: Widget?

    public init(parent: Window, heading: String, body: String) {
        super.init(adopting: UnsafeMutableRawPointer(adw_message_dialog_new(parent.ptr(), heading, body)))
    }

    public func set(heading: String, body: String) {
        adw_message_dialog_set_heading(ptr(), heading)
        adw_message_dialog_set_body(ptr(), body)
    }

    public func addResponse(_ id: String, label: String, appearance: Appearance = .normal) {
        adw_message_dialog_add_response(ptr(), id, label)
        adw_message_dialog_set_response_appearance(ptr(), id, appearance.adw)
    }

    /// `defaultResponse`: Enter; `closeResponse`: Escape or closing the dialog.
    public func set(defaultResponse: String?, closeResponse: String) {
        adw_message_dialog_set_default_response(ptr(), defaultResponse)
        adw_message_dialog_set_close_response(ptr(), closeResponse)
    }

    /// Shown between the body and the buttons (a large code).
    public func setExtraChild(_ child: Widget) {
        adw_message_dialog_set_extra_child(ptr(), child.widget)
        extra = child
    }

    /// A person chose the response `id` (the dialog closes itself after).
    public func onResponse(_ action: @escaping (String) -> Void) {
        connectSignal(raw, "response", { (id: UnsafeMutableRawPointer?) in
            action(id.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) } ?? "")
        }, trampoline: callback(pointerTrampoline))
    }

    public func present() {
        // Its response buttons have mnemonic labels, which GTK 4.8 reads twice: name them once.
        for button in descendants(of: widget) where isButton(button) {
            if let label = gtk_button_get_label(button.withMemoryRebound(to: GtkButton.self, capacity: 1) { $0 }) {
                cgtk_accessible_set_name(OpaquePointer(button), String(String(cString: label).filter { $0 != "_" }))
            }
        }
        gtk_window_present(ptr())
    }

    /// Closes it without a response (the question was answered elsewhere).
    public func destroy() { gtk_window_destroy(ptr()) }
}

/// `AdwToastOverlay`: brief messages over its child, one at a time.
public final class ToastOverlay: Widget {
    private let child: Widget?
    /// The toast on screen, and its widget (libadwaita's, held to hide it from screen readers once
    /// dismissed, while it fades out).
    private var current: (toast: OpaquePointer, widget: UnsafeMutableRawPointer?)?

    public init(_ child: Widget) {
        self.child = child
        super.init(adopting: UnsafeMutableRawPointer(adw_toast_overlay_new()))
        adw_toast_overlay_set_child(ptr(), child.widget)
    }

    /// The overlay a window of libadwaita's has inside (an `AdwPreferencesWindow`'s).
    init(inside window: UnsafeMutablePointer<GtkWidget>) {
        child = nil
        let overlay = descendants(of: window).first { String(cString: cgtk_type_name_of($0)) == "AdwToastOverlay" }!
        super.init(adopting: UnsafeMutableRawPointer(overlay))
    }

    deinit { if let widget = current?.widget { g_object_unref(widget) } }

    /// Shows `title` (plain text, wrapped) until `timeoutSeconds` pass (0: until dismissed), with a button
    /// `button` that calls `onButton`, replacing the toast on screen. libadwaita 1.2 leaves its
    /// close button unnamed: it gets `dismissName`.
    public func show(_ title: String, timeoutSeconds: UInt32, dismissName: String, button: String? = nil,
                     onButton: @escaping () -> Void = {}, onDismissed: @escaping () -> Void = {}) {
        dismiss()
        let toast = adw_toast_new("")!
        // A label of its own: the service's messages are long, and a toast's title is one line.
        let label = Label(title)
        label.setWraps(true)
        label.setAlignment(0)
        adw_toast_set_custom_title(toast, label.widget)
        adw_toast_set_timeout(toast, timeoutSeconds)
        adw_toast_set_priority(toast, ADW_TOAST_PRIORITY_HIGH)
        if let button {
            adw_toast_set_button_label(toast, button)
            connectSignal(UnsafeMutableRawPointer(toast), "button-clicked", onButton, trampoline: callback(voidTrampoline))
        }
        // A toast this overlay replaced or took away itself is no person's dismissal.
        connectSignal(UnsafeMutableRawPointer(toast), "dismissed", { [unowned self] in
            guard current?.toast == toast else { return }
            forget()
            onDismissed()
        }, trampoline: callback(voidTrampoline))
        let before = Set(toastWidgets())
        adw_toast_overlay_add_toast(ptr(), toast)
        let widget = toastWidgets().first { !before.contains($0) }
        if let widget { g_object_ref(widget) }
        current = (toast, widget)
        nameButtons(of: widget, dismissName: dismissName, button: button)
    }

    /// Takes the toast on screen away, if any.
    public func dismiss() {
        guard let toast = current?.toast else { return }
        forget()
        adw_toast_dismiss(toast)
    }

    private func forget() {
        guard let (_, widget) = current else { return }
        current = nil
        if let widget {
            cgtk_accessible_set_state(OpaquePointer(widget), GTK_ACCESSIBLE_STATE_HIDDEN, 1)
            g_object_unref(widget)
        }
    }

    private func toastWidgets() -> [UnsafeMutableRawPointer] {
        descendants(of: widget).filter { String(cString: cgtk_type_name_of($0)) == "AdwToastWidget" }.map(UnsafeMutableRawPointer.init)
    }

    private func nameButtons(of toastWidget: UnsafeMutableRawPointer?, dismissName: String, button: String?) {
        guard let toastWidget else { return }
        for child in descendants(of: toastWidget.assumingMemoryBound(to: GtkWidget.self)) where isButton(child) {
            let icon = gtk_button_get_icon_name(child.withMemoryRebound(to: GtkButton.self, capacity: 1) { $0 })
            let name = icon.map { String(cString: $0) } == "window-close-symbolic" ? dismissName : button ?? ""
            cgtk_accessible_set_name(OpaquePointer(child), name)
        }
    }
}

/// `AdwStyleManager`: light or dark for the whole app.
public enum StyleManager {
    public enum Scheme {
        /// The desktop's preference (light when it has none).
        case followSystem
        case light, dark
    }

    public static func set(_ scheme: Scheme) {
        let adw: AdwColorScheme = switch scheme {
        case .followSystem: ADW_COLOR_SCHEME_DEFAULT
        case .light: ADW_COLOR_SCHEME_FORCE_LIGHT
        case .dark: ADW_COLOR_SCHEME_FORCE_DARK
        }
        adw_style_manager_set_color_scheme(adw_style_manager_get_default(), adw)
    }

}

/// `AdwAboutWindow`: the app's name, version and credits.
public enum AboutWindow {
    public static func present(parent: Window, name: String, icon: String, developer: String, comments: String) {
        let about = adw_about_window_new()!
        adw_about_window_set_application_name(OpaquePointer(about), name)
        adw_about_window_set_application_icon(OpaquePointer(about), icon)
        adw_about_window_set_developer_name(OpaquePointer(about), developer)
        adw_about_window_set_comments(OpaquePointer(about), comments)
        gtk_window_set_transient_for(about.withMemoryRebound(to: GtkWindow.self, capacity: 1) { $0 }, parent.ptr())
        // libadwaita 1.2 names its icon buttons (Back) only by their tooltips, and keeps text views
        // for release notes and debugging information this app does not give: name the ones,
        // leave the others out for screen readers.
        for child in descendants(of: about) {
            let type = String(cString: cgtk_type_name_of(child))
            if isButton(child), gtk_button_get_label(child.withMemoryRebound(to: GtkButton.self, capacity: 1) { $0 }) == nil,
               let tooltip = gtk_widget_get_tooltip_text(child) {
                cgtk_accessible_set_name(OpaquePointer(child), String(cString: tooltip))
            } else if type == "GtkTextView" {
                cgtk_accessible_set_state(OpaquePointer(child), GTK_ACCESSIBLE_STATE_HIDDEN, 1)
            }
        }
        gtk_window_present(about.withMemoryRebound(to: GtkWindow.self, capacity: 1) { $0 })
    }
}

/// Every widget below `root`, depth first (libadwaita's own children, to name what it leaves
/// unnamed).
func descendants(of root: UnsafeMutablePointer<GtkWidget>) -> [UnsafeMutablePointer<GtkWidget>] {
    var result: [UnsafeMutablePointer<GtkWidget>] = []
    var child = gtk_widget_get_first_child(root)
    while let current = child {
        result.append(current)
        result += descendants(of: current)
        child = gtk_widget_get_next_sibling(current)
    }
    return result
}

func isButton(_ widget: UnsafeMutablePointer<GtkWidget>) -> Bool {
    g_type_check_instance_is_a(UnsafeMutableRawPointer(widget).assumingMemoryBound(to: GTypeInstance.self), gtk_button_get_type()) != 0
}
