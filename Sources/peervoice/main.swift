import Foundation
import GIO
import Gtk
import PeerVoiceAppModel

/// The desktop app `peervoice`: one window over the PeerVoice service on the session bus.
Application.lineBufferStandardOutput()
Gettext.setUp(domain: "peervoice", directory: localeDirectory())

let connection: DBusConnection
do {
    connection = try DBusConnection.session()
} catch {
    FileHandle.standardError.write(Data("peervoice: cannot connect to the session bus: \(error.message)\n".utf8))
    exit(3)
}

let model = AppModel(localize: tr)
let preferencesFile = PreferencesFile()
model.preferences = preferencesFile.load()
let client = ServiceClient(connection: connection, model: model)
let application = Application(id: "org.example.PeerVoice.App", unique: true)
var mainWindow: MainWindow?
application.onActivate {
    if mainWindow == nil {
        StyleSheet.load(MainWindow.styleSheet)
        mainWindow = MainWindow(application: application, model: model, client: client,
                                receivedFiles: ReceivedFiles(connection: connection), preferencesFile: preferencesFile)
        client.start()
    }
    mainWindow?.present()
}
exit(application.run())

/// Where the translations are: $PEERVOICE_LOCALEDIR (the build tree's, for `make run-app` and the
/// tests), else share/locale next to the installed bin/.
func localeDirectory() -> String {
    if let directory = ProcessInfo.processInfo.environment["PEERVOICE_LOCALEDIR"] { return directory }
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return URL(fileURLWithPath: executable).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("share/locale").path
}
