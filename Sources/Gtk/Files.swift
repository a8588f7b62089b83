import CGtk

/// `GtkProgressBar`: how much of something is done, with its text on it.
public final class ProgressBar: Widget {
    public init() {
        super.init(adopting: UnsafeMutableRawPointer(gtk_progress_bar_new()))
        gtk_progress_bar_set_show_text(ptr(), 1)
    }

    /// 0…1.
    public var fraction: Double {
        get { gtk_progress_bar_get_fraction(ptr()) }
        set { gtk_progress_bar_set_fraction(ptr(), newValue) }
    }

    public var text: String {
        get { gtk_progress_bar_get_text(ptr()).map { String(cString: $0) } ?? "" }
        set { gtk_progress_bar_set_text(ptr(), newValue) }
    }
}

/// A size in bytes as GNOME writes it ("4.2 MB", decimal units), in the user's locale.
public func formattedSize(_ bytes: UInt64) -> String {
    guard let text = g_format_size(guint64(bytes)) else { return "\(bytes)" }
    defer { g_free(text) }
    return String(cString: text)
}

/// `GtkFileChooserNative`: the desktop's own file chooser (the file-chooser portal inside a
/// sandbox, GTK's dialog outside one), for files to open or a folder.
public enum FileChooser {
    public enum Kind {
        /// One or more files.
        case files
        /// One folder.
        case folder
    }

    /// Shows the chooser over `parent`; `chosen` gets the local paths picked (never called when
    /// the person cancels).
    public static func choose(_ kind: Kind, title: String, acceptLabel: String, parent: Window,
                              chosen: @escaping ([String]) -> Void) {
        let action = kind == .files ? GTK_FILE_CHOOSER_ACTION_OPEN : GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER
        guard let created = gtk_file_chooser_native_new(title, parent.window, action, acceptLabel, nil) else { return }
        let native = UnsafeMutableRawPointer(created)
        let dialog = native.assumingMemoryBound(to: GtkNativeDialog.self)
        let chooser = OpaquePointer(native)
        gtk_file_chooser_set_select_multiple(chooser, kind == .files ? 1 : 0)
        gtk_native_dialog_set_modal(dialog, 1)
        // The dialog holds itself until it answers: the handler releases it.
        let response: (Int32) -> Void = { answer in
            defer { g_object_unref(native) }
            guard answer == GTK_RESPONSE_ACCEPT.rawValue, let files = gtk_file_chooser_get_files(chooser) else { return }
            defer { g_object_unref(UnsafeMutableRawPointer(files)) }
            chosen(paths(in: files))
        }
        connectSignal(native, "response", response, trampoline: callback(intTrampoline))
        gtk_native_dialog_show(dialog)
    }

    private static func paths(in files: OpaquePointer) -> [String] {
        (0..<g_list_model_get_n_items(files)).compactMap { index in
            guard let file = g_list_model_get_item(files, index) else { return nil }
            defer { g_object_unref(file) }
            return path(of: OpaquePointer(file))
        }
    }

    static func path(of file: OpaquePointer) -> String? {
        guard let path = g_file_get_path(file) else { return nil }
        defer { g_free(path) }
        return String(cString: path)
    }
}

extension Widget {
    /// Files dropped on this widget (from a file manager): their local paths.
    public func onFilesDropped(_ action: @escaping ([String]) -> Void) {
        guard let target = gtk_drop_target_new(gdk_file_list_get_type(), GDK_ACTION_COPY) else { return }
        let drop: (UnsafeRawPointer?) -> Bool = { value in
            guard let value, let boxed = g_value_get_boxed(value.assumingMemoryBound(to: GValue.self)) else { return false }
            var paths: [String] = []
            var node = gdk_file_list_get_files(OpaquePointer(boxed))
            let list = node
            while let current = node {
                if let file = current.pointee.data, let path = FileChooser.path(of: OpaquePointer(file)) { paths.append(path) }
                node = current.pointee.next
            }
            g_slist_free(list)
            guard !paths.isEmpty else { return false }
            action(paths)
            return true
        }
        connectSignal(UnsafeMutableRawPointer(target), "drop", drop, trampoline: callback(dropTrampoline))
        gtk_widget_add_controller(widget, target)
    }
}

/// Opening what the person received, with the desktop's default application for it (GIO's
/// `g_app_info_launch_default_for_uri`: the handler `mimeapps.list` names for its content type,
/// or the OpenURI portal inside a sandbox). GTK 4.8 has no `GtkFileLauncher` yet.
public enum DefaultApplication {
    /// The `file://` URI of a local path, escaped as URIs are.
    public static func uri(ofPath path: String) -> String {
        let file = g_file_new_for_path(path)
        defer { g_object_unref(UnsafeMutableRawPointer(file)) }
        guard let uri = g_file_get_uri(file) else { return "file://" + path }
        defer { g_free(uri) }
        return String(cString: uri)
    }

    /// Opens `path` (a file or a folder) with its default application, without waiting for it;
    /// `failed` gets why not, in GLib's words.
    public static func open(path: String, failed: @escaping (String) -> Void) {
        let context = gdk_display_get_app_launch_context(gdk_display_get_default())
        defer { if let context { g_object_unref(UnsafeMutableRawPointer(context)) } }
        let finished: (OpaquePointer?) -> Void = { result in
            var error: UnsafeMutablePointer<GError>?
            guard g_app_info_launch_default_for_uri_finish(result, &error) == 0 else { return }
            defer { if let error { g_error_free(error) } }
            failed(error.map { String(cString: $0.pointee.message) } ?? "cannot open \(path)")
        }
        g_app_info_launch_default_for_uri_async(uri(ofPath: path), context.map { UnsafeMutableRawPointer($0).assumingMemoryBound(to: GAppLaunchContext.self) }, nil,
                                                launchFinished, HandlerBox(finished).retainedPointer())
    }
}

/// `(GObject*, GAsyncResult*, user_data)`: a GAsyncReadyCallback, called once: the box goes with it.
private let launchFinished: GAsyncReadyCallback = { _, result, data in
    Unmanaged<HandlerBox<(OpaquePointer?) -> Void>>.fromOpaque(data!).takeRetainedValue().function(result)
}
