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

    /// Line-buffered stdout, so a test reading it through a pipe sees each line at once.
    public static func lineBufferStandardOutput() { cgtk_stdout_line_buffered() }
}

/// A `GtkWindow`: `AdwApplicationWindow` for the main window, a plain one for dialogs.
public final class Window: Widget {
    private var content: Widget?

    /// The application's main window.
    public init(application: Application) {
        super.init(adopting: UnsafeMutableRawPointer(adw_application_window_new(application.raw.assumingMemoryBound(to: GtkApplication.self))))
    }

    /// A modal dialog window over `parent`.
    public init(dialogFor parent: Window) {
        super.init(adopting: UnsafeMutableRawPointer(gtk_window_new()))
        gtk_window_set_transient_for(window, parent.window)
        gtk_window_set_modal(window, 1)
        gtk_window_set_destroy_with_parent(window, 1)
    }

    private var window: UnsafeMutablePointer<GtkWindow> { ptr() }
    private var isApplicationWindow: Bool {
        g_type_check_instance_is_a(raw.assumingMemoryBound(to: GTypeInstance.self), adw_application_window_get_type()) != 0
    }

    public var title: String {
        get { gtk_window_get_title(window).map { String(cString: $0) } ?? "" }
        set { gtk_window_set_title(window, newValue) }
    }

    public func setDefaultSize(width: Int32, height: Int32) { gtk_window_set_default_size(window, width, height) }
    public func setResizable(_ resizable: Bool) { gtk_window_set_resizable(window, resizable ? 1 : 0) }

    public func setContent(_ child: Widget) {
        if isApplicationWindow {
            adw_application_window_set_content(ptr(), child.widget)
        } else {
            gtk_window_set_child(window, child.widget)
        }
        content = child
    }

    public func present() { gtk_window_present(window) }

    /// Hides and drops the window (a dialog that has been answered).
    public func destroy() { gtk_window_destroy(window) }

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

    /// A person asked to close the window; return true to keep it open.
    public func onCloseRequest(_ action: @escaping () -> Bool) {
        connectSignal(raw, "close-request", action, trampoline: callback(closeRequestTrampoline))
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
}
