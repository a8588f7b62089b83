import Foundation
import GIO
import Gtk

/// What the desktop does with a file or folder received: opened with its default application,
/// or shown selected in the file manager (`org.freedesktop.FileManager1.ShowItems`, which GNOME
/// Files, Dolphin, Nemo and Caja implement); with no file manager on the bus, its folder opens.
final class ReceivedFiles {
    private let connection: DBusConnection
    /// Why something could not be opened, in GLib's words.
    var failed: (String) -> Void = { _ in }

    init(connection: DBusConnection) {
        self.connection = connection
    }

    func open(_ path: String) {
        DefaultApplication.open(path: path) { [unowned self] reason in failed(reason) }
    }

    func showInFolder(_ path: String) {
        let uris = Variant(array: [Variant(DefaultApplication.uri(ofPath: path))], elementType: "s")
        connection.callAsync(destination: "org.freedesktop.FileManager1", path: "/org/freedesktop/FileManager1",
                             interface: "org.freedesktop.FileManager1", method: "ShowItems",
                             arguments: Variant(tuple: [uris, Variant("")]), timeout: .seconds(10)) { [unowned self] result in
            guard case .failure(let error) = result else { return }
            print("peervoice: no file manager to show \(path) in (\(error.message)): opening its folder")
            open((path as NSString).deletingLastPathComponent)
        }
    }
}
