import CAdw
import CGtk

/// A `GtkWidget`. Holds one strong reference (a floating one is sunk), so the Swift object keeps
/// the widget alive while it is in or out of a container.
///
/// GTK runs on one thread: every wrapper is used only from the GLib main context's thread.
public class Widget {
    let raw: UnsafeMutableRawPointer

    init(adopting pointer: UnsafeMutableRawPointer) {
        raw = pointer
        g_object_ref_sink(raw)
    }

    deinit { g_object_unref(raw) }

    var widget: UnsafeMutablePointer<GtkWidget> { ptr() }
    var accessible: OpaquePointer { ptr() }

    /// The object as the C type a GTK function expects: GTK types whose struct is public import
    /// as typed pointers, opaque ones as `OpaquePointer` (this replaces the GTK_BOX()-style casts).
    func ptr<T>() -> UnsafeMutablePointer<T> { raw.assumingMemoryBound(to: T.self) }
    func ptr() -> OpaquePointer { OpaquePointer(raw) }

    /// The name screen readers (and the tests, through AT-SPI) know this control by.
    public func setAccessibleName(_ name: String) {
        cgtk_accessible_set_name(accessible, name)
    }

    public var isSensitive: Bool {
        get { gtk_widget_get_sensitive(widget) != 0 }
        set { gtk_widget_set_sensitive(widget, newValue ? 1 : 0) }
    }

    public var isVisible: Bool {
        get { gtk_widget_get_visible(widget) != 0 }
        set { gtk_widget_set_visible(widget, newValue ? 1 : 0) }
    }

    public var expandsHorizontally: Bool {
        get { gtk_widget_get_hexpand(widget) != 0 }
        set { gtk_widget_set_hexpand(widget, newValue ? 1 : 0) }
    }

    public var expandsVertically: Bool {
        get { gtk_widget_get_vexpand(widget) != 0 }
        set { gtk_widget_set_vexpand(widget, newValue ? 1 : 0) }
    }

    public func setMargins(_ margin: Int32) {
        gtk_widget_set_margin_start(widget, margin)
        gtk_widget_set_margin_end(widget, margin)
        gtk_widget_set_margin_top(widget, margin)
        gtk_widget_set_margin_bottom(widget, margin)
    }

    public func setSizeRequest(width: Int32, height: Int32) { gtk_widget_set_size_request(widget, width, height) }

    /// A style class of GTK or libadwaita (`suggested-action`, `destructive-action`, `title-1`, `dim-label`…).
    public func addStyleClass(_ name: String) { gtk_widget_add_css_class(widget, name) }
    public func removeStyleClass(_ name: String) { gtk_widget_remove_css_class(widget, name) }

    public func setTooltip(_ text: String) { gtk_widget_set_tooltip_text(widget, text) }

    /// What screen readers say after the name (a message's time and delivery state).
    public func setAccessibleDescription(_ text: String) {
        cgtk_accessible_set_string(accessible, GTK_ACCESSIBLE_PROPERTY_DESCRIPTION, text)
    }

    /// Left out of what screen readers (and AT-SPI) see, with everything inside: a pane that is
    /// off screen but still mapped (a folded leaflet's other side, a stack's other pages).
    public func setAccessibleHidden(_ hidden: Bool) {
        cgtk_accessible_set_state(accessible, GTK_ACCESSIBLE_STATE_HIDDEN, hidden ? 1 : 0)
    }

    /// Moves the keyboard focus here; false if the widget cannot take it.
    @discardableResult
    public func grabFocus() -> Bool { gtk_widget_grab_focus(widget) != 0 }

    public func setAlignment(horizontal: Alignment) { gtk_widget_set_halign(widget, horizontal.gtk) }
    public func setAlignment(vertical: Alignment) { gtk_widget_set_valign(widget, vertical.gtk) }
}

public enum Alignment {
    case fill, start, end, center
    var gtk: GtkAlign {
        switch self {
        case .fill: GTK_ALIGN_FILL
        case .start: GTK_ALIGN_START
        case .end: GTK_ALIGN_END
        case .center: GTK_ALIGN_CENTER
        }
    }
}

public enum Orientation {
    case horizontal, vertical
    var gtk: GtkOrientation { self == .horizontal ? GTK_ORIENTATION_HORIZONTAL : GTK_ORIENTATION_VERTICAL }
}

/// `GtkBox`: children in a row or a column.
public final class Box: Widget {
    private var children: [Widget] = []

    public init(_ orientation: Orientation, spacing: Int32 = 6) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_box_new(orientation.gtk, spacing)))
    }

    public func append(_ child: Widget) {
        gtk_box_append(ptr(), child.widget)
        children.append(child)
    }

    public func remove(_ child: Widget) {
        gtk_box_remove(ptr(), child.widget)
        children.removeAll { $0 === child }
    }

    public func removeAll() { children.forEach(remove) }
}

/// `GtkLabel`.
public final class Label: Widget {
    public init(_ text: String = "") {
        super.init(adopting: UnsafeMutableRawPointer(gtk_label_new(text)))
    }

    public var text: String {
        get { String(cString: gtk_label_get_text(ptr())) }
        set { gtk_label_set_text(ptr(), newValue) }
    }

    /// `text` as Pango markup that shows it as it is (libadwaita's titles are markup).
    public static func escape(_ text: String) -> String {
        let escaped = g_markup_escape_text(text, -1)!
        defer { g_free(escaped) }
        return String(cString: escaped)
    }

    public func setWraps(_ wraps: Bool) {
        gtk_label_set_wrap(ptr(), wraps ? 1 : 0)
        gtk_label_set_wrap_mode(ptr(), PANGO_WRAP_WORD_CHAR)
    }
    /// Wraps (or ellipsizes) beyond about `characters` characters.
    public func setMaximumWidth(characters: Int32) { gtk_label_set_max_width_chars(ptr(), characters) }
    public func setSelectable(_ selectable: Bool) { gtk_label_set_selectable(ptr(), selectable ? 1 : 0) }
    /// 0 = start, 1 = end.
    public func setAlignment(_ xalign: Float) { gtk_label_set_xalign(ptr(), xalign) }
}

/// `GtkButton`.
public class Button: Widget {
    public convenience init(_ label: String) {
        self.init(adopting: UnsafeMutableRawPointer(gtk_button_new_with_label(label)))
    }

    /// A button showing only the icon `icon`: `name` is its accessible name and its tooltip.
    public convenience init(icon: String, name: String) {
        self.init(adopting: UnsafeMutableRawPointer(gtk_button_new_from_icon_name(icon)))
        setIcon(icon, name: name)
    }

    override init(adopting pointer: UnsafeMutableRawPointer) { super.init(adopting: pointer) }

    public var label: String {
        get { gtk_button_get_label(ptr()).map { String(cString: $0) } ?? "" }
        set { gtk_button_set_label(ptr(), newValue) }
    }

    /// Shows the icon `icon`, named `name` for screen readers and in the tooltip.
    public func setIcon(_ icon: String, name: String) {
        gtk_button_set_icon_name(ptr(), icon)
        setAccessibleName(name)
        setTooltip(name)
    }

    public func onClicked(_ action: @escaping () -> Void) {
        connectSignal(raw, "clicked", action, trampoline: callback(voidTrampoline))
    }

    /// Calls `pressed` when a pointer goes down on the button and `released` when it comes up (or
    /// the press is cancelled): a `GtkGestureClick` in the capture phase, which sees the press
    /// before the button's own gesture and claims it.
    public func onHold(pressed: @escaping () -> Void, released: @escaping () -> Void) {
        let gesture = gtk_gesture_click_new()!
        gtk_event_controller_set_propagation_phase(gesture, GTK_PHASE_CAPTURE)
        let gestureRaw = UnsafeMutableRawPointer(gesture)
        connectSignal(gestureRaw, "pressed", {
            gtk_gesture_set_state(gesture, GTK_EVENT_SEQUENCE_CLAIMED)
            pressed()
        }, trampoline: callback(pressTrampoline))
        connectSignal(gestureRaw, "released", released, trampoline: callback(pressTrampoline))
        connectSignal(gestureRaw, "cancel", released, trampoline: callback(sequenceTrampoline))
        gtk_widget_add_controller(widget, gesture)
    }
}

/// `GtkToggleButton`: a button that stays pressed.
public final class ToggleButton: Button {
    private var settingActive = false

    public init(_ label: String) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_toggle_button_new_with_label(label)))
    }

    /// A toggle showing only the icon `icon`: `name` is its accessible name and its tooltip.
    public init(icon: String, name: String) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_toggle_button_new()))
        setIcon(icon, name: name)
    }

    public var isActive: Bool {
        get { gtk_toggle_button_get_active(ptr()) != 0 }
        set {
            guard newValue != isActive else { return }
            settingActive = true
            defer { settingActive = false }
            gtk_toggle_button_set_active(ptr(), newValue ? 1 : 0)
        }
    }

    /// Called when a person toggles the button, not when `isActive` is set from code.
    public func onToggled(_ action: @escaping (Bool) -> Void) {
        connectSignal(raw, "toggled", { [unowned self] in
            if !settingActive { action(isActive) }
        }, trampoline: callback(voidTrampoline))
    }

    /// Joins `other`'s group: at most one button of the group is pressed (a choice of one).
    public func join(_ other: ToggleButton) { gtk_toggle_button_set_group(ptr(), other.ptr()) }
}

/// `GtkEntry`: one line of text.
public final class Entry: Widget {
    public init(placeholder: String = "") {
        super.init(adopting: UnsafeMutableRawPointer(gtk_entry_new()))
        gtk_entry_set_placeholder_text(ptr(), placeholder)
    }

    public var text: String {
        get { String(cString: gtk_editable_get_text(ptr())) }
        set { gtk_editable_set_text(ptr(), newValue) }
    }

    /// Enter pressed in the entry.
    public func onActivate(_ action: @escaping () -> Void) {
        connectSignal(raw, "activate", action, trampoline: callback(voidTrampoline))
    }

}

/// `GtkPasswordEntry`: a secret, shown as dots unless its eye is pressed.
public final class PasswordEntry: Widget {
    public init() {
        super.init(adopting: UnsafeMutableRawPointer(gtk_password_entry_new()))
        gtk_password_entry_set_show_peek_icon(ptr(), 1)
    }

    public var text: String {
        get { String(cString: gtk_editable_get_text(ptr())) }
        set { gtk_editable_set_text(ptr(), newValue) }
    }
}

/// `GtkScrolledWindow` around one child.
public final class ScrolledWindow: Widget {
    private var child: Widget?
    /// The view shows the end of its content (within a pixel), as far as a person is concerned.
    private var isAtEnd = true

    public init(_ child: Widget) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_scrolled_window_new()))
        gtk_scrolled_window_set_child(ptr(), child.widget)
        gtk_scrolled_window_set_policy(ptr(), GTK_POLICY_NEVER, GTK_POLICY_AUTOMATIC)
        self.child = child
    }

    private var adjustment: UnsafeMutablePointer<GtkAdjustment> { gtk_scrolled_window_get_vadjustment(ptr()) }

    /// Keeps the end in view as the content grows or the view shrinks, unless a person scrolled
    /// away from it (a chat: new messages show, older ones stay put while being read).
    public func followEnd() {
        let adjustmentRaw = UnsafeMutableRawPointer(adjustment)
        connectSignal(adjustmentRaw, "value-changed", { [unowned self] in
            isAtEnd = gtk_adjustment_get_value(adjustment) + gtk_adjustment_get_page_size(adjustment)
                >= gtk_adjustment_get_upper(adjustment) - 1
        }, trampoline: callback(voidTrampoline))
        // "changed": the content's or the view's height changed (after both are set).
        connectSignal(adjustmentRaw, "changed", { [unowned self] in
            if isAtEnd { scrollToEnd() }
        }, trampoline: callback(voidTrampoline))
    }

    /// Shows the end of the content (the newest chat message), and follows it from now on.
    public func scrollToEnd() {
        isAtEnd = true
        gtk_adjustment_set_value(adjustment, gtk_adjustment_get_upper(adjustment) - gtk_adjustment_get_page_size(adjustment))
    }
}

/// `GtkListBox`: rows (`ListRow`, `ActionRow`), at most one selected.
public final class ListBox: Widget {
    private var rows: [Widget] = []
    private var placeholder: Widget?

    /// `selectable`: one row can be selected (a peer list); otherwise rows are only shown or
    /// activated (a conversation).
    public init(selectable: Bool = true) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_list_box_new()))
        gtk_list_box_set_selection_mode(ptr(), selectable ? GTK_SELECTION_SINGLE : GTK_SELECTION_NONE)
    }

    public var count: Int { rows.count }

    /// Adds `row` (a `ListRow` or an `ActionRow`) as the new last row.
    public func append(_ row: Widget) {
        gtk_list_box_append(ptr(), row.widget)
        rows.append(row)
    }

    public func remove(at index: Int) {
        gtk_list_box_remove(ptr(), rows[index].widget)
        rows.remove(at: index)
    }

    public func removeAll() {
        while !rows.isEmpty { remove(at: rows.count - 1) }
    }

    /// Shown while the list has no rows.
    public func setPlaceholder(_ widget: Widget) {
        gtk_list_box_set_placeholder(ptr(), widget.widget)
        placeholder = widget
    }

    public var selectedIndex: Int? {
        get {
            guard let selected = gtk_list_box_get_selected_row(ptr()) else { return nil }
            return rows.firstIndex { $0.raw == UnsafeMutableRawPointer(selected) }
        }
        set {
            if let newValue {
                gtk_list_box_select_row(ptr(), rows[newValue].ptr())
            } else {
                gtk_list_box_unselect_all(ptr())
            }
        }
    }

    /// The selection changed (by a person or by code); nil: nothing selected.
    public func onSelectionChanged(_ action: @escaping (Int?) -> Void) {
        connectSignal(raw, "row-selected", { [unowned self] (_: UnsafeMutableRawPointer?) in action(selectedIndex) },
                      trampoline: callback(pointerTrampoline))
    }

    /// A row was activated: clicked, or Enter or Space on it.
    public func onRowActivated(_ action: @escaping (Int) -> Void) {
        connectSignal(raw, "row-activated", { [unowned self] (row: UnsafeMutableRawPointer?) in
            if let index = rows.firstIndex(where: { $0.raw == row }) { action(index) }
        }, trampoline: callback(pointerTrampoline))
    }
}

/// `GtkListBoxRow` holding one child.
public final class ListRow: Widget {
    private let child: Widget

    /// `activatable`: the row takes the focus and can be activated (a peer); otherwise it only
    /// shows its child (a chat bubble, whose own buttons take the focus).
    public init(_ child: Widget, activatable: Bool = true) {
        self.child = child
        super.init(adopting: UnsafeMutableRawPointer(gtk_list_box_row_new()))
        gtk_list_box_row_set_child(ptr(), child.widget)
        gtk_list_box_row_set_activatable(ptr(), activatable ? 1 : 0)
        gtk_widget_set_focusable(widget, activatable ? 1 : 0)
    }
}

/// `GtkSwitch`.
public final class Switch: Widget {
    private var settingActive = false

    public init() {
        super.init(adopting: UnsafeMutableRawPointer(gtk_switch_new()))
    }

    public var isActive: Bool {
        get { gtk_switch_get_active(ptr()) != 0 }
        set {
            guard newValue != isActive else { return }
            settingActive = true
            defer { settingActive = false }
            gtk_switch_set_active(ptr(), newValue ? 1 : 0)
        }
    }

    /// Called when a person flips the switch, not when `isActive` is set from code.
    public func onToggled(_ action: @escaping (Bool) -> Void) {
        connectSignal(raw, "notify::active", { [unowned self] in
            if !settingActive { action(isActive) }
        }, trampoline: callback(notifyTrampoline))
    }
}

/// `GtkScale`: a horizontal slider over `range`, moved in whole `step`s.
public final class Scale: Widget {
    private var settingValue = false

    public init(range: ClosedRange<Double>, step: Double) {
        super.init(adopting: UnsafeMutableRawPointer(
            gtk_scale_new_with_range(GTK_ORIENTATION_HORIZONTAL, range.lowerBound, range.upperBound, step)))
        // Whole steps also for values from a drag or from AT-SPI, not only the arrow keys.
        gtk_scale_set_digits(ptr(), 0)
    }

    public var value: Double {
        get { gtk_range_get_value(ptr()) }
        set {
            guard newValue != value else { return }
            settingValue = true
            defer { settingValue = false }
            gtk_range_set_value(ptr(), newValue)
        }
    }

    /// A tick at `value` (e.g. where a voice plays as it comes).
    public func addMark(at value: Double) {
        gtk_scale_add_mark(ptr(), value, GTK_POS_BOTTOM, nil)
    }

    /// Called when a person moves the slider (pointer, keys, AT-SPI), not when `value` is set from code.
    public func onValueChanged(_ action: @escaping (Double) -> Void) {
        connectSignal(raw, "value-changed", { [unowned self] in
            if !settingValue { action(value) }
        }, trampoline: callback(voidTrampoline))
    }
}

/// `GtkSpinner`: something is under way.
public final class Spinner: Widget {
    public init() {
        super.init(adopting: UnsafeMutableRawPointer(gtk_spinner_new()))
    }

    public var isSpinning: Bool {
        get { gtk_spinner_get_spinning(ptr()) != 0 }
        set { gtk_spinner_set_spinning(ptr(), newValue ? 1 : 0) }
    }
}

/// `GtkSeparator`.
public final class Separator: Widget {
    public init(_ orientation: Orientation) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_separator_new(orientation.gtk)))
    }
}

/// `GtkSearchEntry`: a text field for a search, with its clear button; Escape stops the search.
public final class SearchEntry: Widget {
    public init(placeholder: String) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_search_entry_new()))
        setStringProperty(raw, "placeholder-text", placeholder)
    }

    public var text: String {
        get { String(cString: gtk_editable_get_text(ptr())) }
        set { gtk_editable_set_text(ptr(), newValue) }
    }

    /// The text changed (after GtkSearchEntry's short delay).
    public func onSearchChanged(_ action: @escaping () -> Void) {
        connectSignal(raw, "search-changed", action, trampoline: callback(voidTrampoline))
    }

    /// Enter pressed.
    public func onActivate(_ action: @escaping () -> Void) {
        connectSignal(raw, "activate", action, trampoline: callback(voidTrampoline))
    }

    /// Escape pressed: the search is over.
    public func onStopSearch(_ action: @escaping () -> Void) {
        connectSignal(raw, "stop-search", action, trampoline: callback(voidTrampoline))
    }
}

/// `GtkSearchBar`: a search entry revealed below a header bar.
public final class SearchBar: Widget {
    private let entry: SearchEntry

    public init(_ entry: SearchEntry) {
        self.entry = entry
        super.init(adopting: UnsafeMutableRawPointer(gtk_search_bar_new()))
        gtk_search_bar_set_child(ptr(), entry.widget)
        gtk_search_bar_connect_entry(ptr(), entry.ptr())
    }

    public var isShown: Bool {
        get { gtk_search_bar_get_search_mode(ptr()) != 0 }
        set { gtk_search_bar_set_search_mode(ptr(), newValue ? 1 : 0) }
    }

    /// The bar was shown or hidden (by code, by Escape in its entry).
    public func onShownChanged(_ action: @escaping (Bool) -> Void) {
        connectSignal(raw, "notify::search-mode-enabled", { [unowned self] in action(isShown) },
                      trampoline: callback(notifyTrampoline))
    }
}

/// The app's own style sheet (chat bubbles, badges), on top of libadwaita's, for the display.
public enum StyleSheet {
    public static func load(_ css: String) {
        let provider = gtk_css_provider_new()!
        gtk_css_provider_load_from_data(provider, css, -1)
        gtk_style_context_add_provider_for_display(gdk_display_get_default(), OpaquePointer(provider),
                                                   UInt32(GTK_STYLE_PROVIDER_PRIORITY_APPLICATION))
    }
}

/// Sets a string property of a GObject by name (`g_object_set` is variadic).
func setStringProperty(_ object: UnsafeMutableRawPointer, _ name: String, _ value: String) {
    var gvalue = GValue()
    g_value_init(&gvalue, cgtk_type_string())
    g_value_set_string(&gvalue, value)
    g_object_set_property(object.assumingMemoryBound(to: GObject.self), name, &gvalue)
    g_value_unset(&gvalue)
}

/// `GtkImage` showing a themed icon; `name` says what it shows (for screen readers, and the
/// tooltip).
public final class Image: Widget {
    public init(icon: String) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_image_new_from_icon_name(icon)))
    }

    public func set(icon: String, name: String) {
        gtk_image_set_from_icon_name(ptr(), icon)
        setAccessibleName(name)
        setTooltip(name)
    }
}
