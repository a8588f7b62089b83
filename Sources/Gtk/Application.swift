import CAdw
import CGtk

/// `AdwApplication`: GTK and libadwaita set up, the GLib main loop run by `run()`.
public final class Application {
    let raw: UnsafeMutableRawPointer

    /// `unique`: a second start hands over to the first instance (`G_APPLICATION_DEFAULT_FLAGS`);
    /// otherwise every start is its own instance (`G_APPLICATION_NON_UNIQUE`, for tests).
    public init(id: String, unique: Bool) {
        raw = UnsafeMutableRawPointer(adw_application_new(id, unique ? G_APPLICATION_DEFAULT_FLAGS : G_APPLICATION_NON_UNIQUE))
    }

    deinit { g_object_unref(raw) }

    /// The application was started (or started again, for a unique one): show its window.
    public func onActivate(_ action: @escaping () -> Void) {
        connectSignal(raw, "activate", action, trampoline: callback(voidTrampoline))
    }

    /// Runs the main loop until the last window closes; the exit status. Command-line arguments
    /// are not handed to GApplication.
    public func run() -> Int32 {
        g_application_run(raw.assumingMemoryBound(to: GApplication.self), 0, nil)
    }

    /// An action `app.NAME` (what a menu item or `accelerators` such as `<Control>comma` run).
    public func addAction(_ name: String, accelerators: [String] = [], _ action: @escaping () -> Void) {
        let simple = g_simple_action_new(name, nil)!
        connectSignal(UnsafeMutableRawPointer(simple), "activate", { (_: UnsafeMutableRawPointer?) in action() },
                      trampoline: callback(pointerTrampoline))
        g_action_map_add_action(OpaquePointer(raw), simple)
        g_object_unref(UnsafeMutableRawPointer(simple))
        guard !accelerators.isEmpty else { return }
        var strings = accelerators.map { strdup($0) } + [nil]
        defer { strings.forEach { free($0) } }
        strings.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) {
                gtk_application_set_accels_for_action(raw.assumingMemoryBound(to: GtkApplication.self), "app." + name, $0)
            }
        }
    }

    /// Line-buffered stdout, so a test reading it through a pipe sees each line at once.
    public static func lineBufferStandardOutput() { cgtk_stdout_line_buffered() }
}

/// The app's main window (`AdwApplicationWindow`).
public final class Window: Widget {
    private var content: Widget?
    /// The window's `GtkShortcutController` (owned by the window), made by the first shortcut.
    private var shortcuts: OpaquePointer?

    public init(application: Application) {
        super.init(adopting: UnsafeMutableRawPointer(adw_application_window_new(application.raw.assumingMemoryBound(to: GtkApplication.self))))
    }

    var window: UnsafeMutablePointer<GtkWindow> { ptr() }

    public var title: String {
        get { gtk_window_get_title(window).map { String(cString: $0) } ?? "" }
        set { gtk_window_set_title(window, newValue) }
    }

    public func setDefaultSize(width: Int32, height: Int32) { gtk_window_set_default_size(window, width, height) }

    /// Runs `action` for the key combination `trigger` (`<Control>f`, `Escape`) pressed anywhere
    /// in the window that the focused widget did not use itself; `action` returns false to let
    /// the key go on.
    public func addShortcut(_ trigger: String, _ action: @escaping () -> Bool) {
        if shortcuts == nil {
            let controller = gtk_shortcut_controller_new()!
            gtk_widget_add_controller(widget, controller)
            shortcuts = controller
        }
        let callbackAction = gtk_callback_action_new(shortcutTrampoline, HandlerBox(action).retainedPointer(), releaseBox)
        gtk_shortcut_controller_add_shortcut(shortcuts, gtk_shortcut_new(gtk_shortcut_trigger_parse_string(trigger), callbackAction))
    }

    public func setContent(_ child: Widget) {
        adw_application_window_set_content(ptr(), child.widget)
        content = child
    }

    public func present() { gtk_window_present(window) }

    /// Whether the widget with the keyboard focus has its own use for Space: a text field types
    /// it, a button, switch or check box is pressed by it. `except` is a widget to leave out.
    public func focusUsesSpace(except: Widget) -> Bool {
        guard let focus = gtk_window_get_focus(window), UnsafeMutableRawPointer(focus) != except.raw else { return false }
        let instance = UnsafeMutableRawPointer(focus).assumingMemoryBound(to: GTypeInstance.self)
        return [gtk_editable_get_type(), gtk_button_get_type(), gtk_switch_get_type(), gtk_check_button_get_type()]
            .contains { g_type_check_instance_is_a(instance, $0) != 0 }
    }

    /// The window gained (true) or lost (false) the keyboard focus of the desktop.
    public func onActiveChanged(_ action: @escaping (Bool) -> Void) {
        connectSignal(raw, "notify::is-active", { [unowned self] in
            action(gtk_window_is_active(window) != 0)
        }, trampoline: callback(notifyTrampoline))
    }

    /// Keys pressed and released anywhere in the window, seen before the focused widget (capture
    /// phase). `pressed` returns true when it handled the key (the widget then does not see it);
    /// held keys repeat `pressed`.
    public func onKey(pressed: @escaping (Key) -> Bool, released: @escaping (Key) -> Void) {
        let controller = gtk_event_controller_key_new()!
        gtk_event_controller_set_propagation_phase(controller, GTK_PHASE_CAPTURE)
        let controllerRaw = UnsafeMutableRawPointer(controller)
        connectSignal(controllerRaw, "key-pressed", { (keyval: UInt32) in pressed(Key(keyval: keyval)) },
                      trampoline: callback(keyPressedTrampoline))
        connectSignal(controllerRaw, "key-released", { (keyval: UInt32) -> Bool in released(Key(keyval: keyval)); return false },
                      trampoline: callback(keyReleasedTrampoline))
        gtk_widget_add_controller(widget, controller)
    }
}

/// A key, by its GDK key value.
public struct Key: Equatable, Sendable {
    public let keyval: UInt32
    public static let space = Key(keyval: UInt32(GDK_KEY_space))
}

/// `GtkMenuButton` showing a menu of actions (`app.NAME`), with an icon: the primary menu.
public final class MenuButton: Widget {
    /// `primary`: F10 opens it (the window's main menu; one per window).
    public init(icon: String, name: String, items: [(label: String, action: String)], primary: Bool = true) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_menu_button_new()))
        let menu = g_menu_new()!
        for item in items { g_menu_append(menu, item.label, item.action) }
        gtk_menu_button_set_menu_model(ptr(), UnsafeMutableRawPointer(menu).assumingMemoryBound(to: GMenuModel.self))
        g_object_unref(UnsafeMutableRawPointer(menu))
        gtk_menu_button_set_icon_name(ptr(), icon)
        // F10 opens it, as GNOME's primary menus do.
        gtk_menu_button_set_primary(ptr(), primary ? 1 : 0)
        setAccessibleName(name)
        setTooltip(name)
    }
}

/// `AdwHeaderBar`: the window's title bar.
public final class HeaderBar: Widget {
    private var items: [Widget] = []

    public init() {
        super.init(adopting: UnsafeMutableRawPointer(adw_header_bar_new()))
    }

    public func packStart(_ child: Widget) {
        adw_header_bar_pack_start(ptr(), child.widget)
        items.append(child)
    }

    public func packEnd(_ child: Widget) {
        adw_header_bar_pack_end(ptr(), child.widget)
        items.append(child)
    }

    public func setTitleWidget(_ title: Widget) {
        adw_header_bar_set_title_widget(ptr(), title.widget)
        items.append(title)
    }

    /// Whether the window's buttons show at this bar's start (close on the left) and end: a
    /// leaflet's panes share them while unfolded, each shows them folded.
    public func showWindowButtons(start: Bool, end: Bool) {
        adw_header_bar_set_show_start_title_buttons(ptr(), start ? 1 : 0)
        adw_header_bar_set_show_end_title_buttons(ptr(), end ? 1 : 0)
    }
}

/// Message catalogs (gettext), for the strings the app shows.
public enum Gettext {
    /// Selects the user's locale and binds `domain` to the catalogs under `directory`
    /// (`DIRECTORY/LANG/LC_MESSAGES/DOMAIN.mo`), in UTF-8.
    public static func setUp(domain: String, directory: String) {
        _ = setlocale(LC_ALL, "")
        _ = bindtextdomain(domain, directory)
        _ = bind_textdomain_codeset(domain, "UTF-8")
        _ = textdomain(domain)
    }

    /// `text` in the user's language, or `text` itself when there is no translation.
    public static func translate(_ text: String) -> String {
        // gettext returns its argument when there is no translation: read it while it lives.
        text.withCString { String(cString: gettext($0)) }
    }

    /// The form of `singular`/`plural` (English) for `count` in the user's language (`ngettext`).
    public static func translate(_ singular: String, _ plural: String, count: Int) -> String {
        singular.withCString { one in plural.withCString { many in String(cString: ngettext(one, many, UInt(max(count, 0)))) } }
    }
}
