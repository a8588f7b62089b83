import GIO

/// Clients that show pairing prompts themselves (`RegisterPromptHandler`, e.g. the desktop app):
/// while one is on the bus the service raises no notification for a prompt, so a person is asked
/// once. A registration lasts until its client leaves the bus.
final class PromptHandlers {
    private let connection: DBusConnection
    /// Registered unique bus names, each watched for leaving the bus.
    private var handlers: [String: NameWatch] = [:]

    init(connection: DBusConnection) {
        self.connection = connection
    }

    /// Whether some client shows prompts now.
    var isEmpty: Bool { handlers.isEmpty }

    /// Registers `busName` (the caller's unique name); registering again changes nothing.
    func register(_ busName: String) {
        guard handlers[busName] == nil else { return }
        Log.info("\(busName) handles pairing prompts: no notifications for them while it is on the bus")
        handlers[busName] = connection.watchName(busName, appeared: { _ in }, vanished: { [unowned self] in
            guard handlers.removeValue(forKey: busName) != nil else { return }
            Log.info("\(busName) left the bus: pairing prompts are notified again")
        })
    }
}
