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
        cgtk_accessible_set_string(accessible, GTK_ACCESSIBLE_PROPERTY_LABEL, name)
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

    /// Pango markup; the caller escapes text with `Label.escape`.
    public func setMarkup(_ markup: String) { gtk_label_set_markup(ptr(), markup) }

    public static func escape(_ text: String) -> String {
        let escaped = g_markup_escape_text(text, -1)!
        defer { g_free(escaped) }
        return String(cString: escaped)
    }

    public func setWraps(_ wraps: Bool) { gtk_label_set_wrap(ptr(), wraps ? 1 : 0) }
    public func setSelectable(_ selectable: Bool) { gtk_label_set_selectable(ptr(), selectable ? 1 : 0) }
    /// 0 = start, 1 = end.
    public func setAlignment(_ xalign: Float) { gtk_label_set_xalign(ptr(), xalign) }
}

/// `GtkButton`.
public class Button: Widget {
    public convenience init(_ label: String) {
        self.init(adopting: UnsafeMutableRawPointer(gtk_button_new_with_label(label)))
    }

    override init(adopting pointer: UnsafeMutableRawPointer) { super.init(adopting: pointer) }

    public var label: String {
        get { gtk_button_get_label(ptr()).map { String(cString: $0) } ?? "" }
        set { gtk_button_set_label(ptr(), newValue) }
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

/// `GtkScrolledWindow` around one child.
public final class ScrolledWindow: Widget {
    private var child: Widget?

    public init(_ child: Widget) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_scrolled_window_new()))
        gtk_scrolled_window_set_child(ptr(), child.widget)
        gtk_scrolled_window_set_policy(ptr(), GTK_POLICY_NEVER, GTK_POLICY_AUTOMATIC)
        self.child = child
    }

    /// Scrolls to the end (the newest chat message) once the layout has settled.
    public func scrollToEnd() {
        let adjustment = gtk_scrolled_window_get_vadjustment(ptr())
        gtk_adjustment_set_value(adjustment, gtk_adjustment_get_upper(adjustment))
    }
}

/// `GtkListBox` of rows, each row one child widget; single selection.
public final class ListBox: Widget {
    private var rows: [(row: Widget, child: Widget)] = []

    public init() {
        super.init(adopting: UnsafeMutableRawPointer(gtk_list_box_new()))
        gtk_list_box_set_selection_mode(ptr(), GTK_SELECTION_SINGLE)
    }

    public var count: Int { rows.count }

    /// Adds `child` as a new last row whose accessible name is `name`.
    public func append(_ child: Widget, name: String) {
        let row = Widget(adopting: UnsafeMutableRawPointer(gtk_list_box_row_new()))
        gtk_list_box_row_set_child(row.ptr(), child.widget)
        row.setAccessibleName(name)
        gtk_list_box_append(ptr(), row.widget)
        rows.append((row, child))
    }

    public func setName(_ name: String, at index: Int) { rows[index].row.setAccessibleName(name) }

    public func remove(at index: Int) {
        gtk_list_box_remove(ptr(), rows[index].row.widget)
        rows.remove(at: index)
    }

    public var selectedIndex: Int? {
        get {
            guard let selected = gtk_list_box_get_selected_row(ptr()) else { return nil }
            return rows.firstIndex { $0.row.raw == UnsafeMutableRawPointer(selected) }
        }
        set {
            if let newValue {
                gtk_list_box_select_row(ptr(), rows[newValue].row.ptr())
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
