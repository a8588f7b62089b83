import GIO
import Glibc

/// Suspend and resume through logind (`org.freedesktop.login1` on the system bus). While the
/// computer is awake it holds a delay inhibitor, so that on `PrepareForSleep(true)` there is time
/// to say goodbye to peers (they would otherwise wait for the 4 s silence limit) before the
/// inhibitor is released and the computer sleeps; on `PrepareForSleep(false)` it takes a new one.
/// Without a system bus or logind it does nothing. All calls are asynchronous.
final class SleepMonitor {
    private static let service = "org.freedesktop.login1"
    private static let path = "/org/freedesktop/login1"
    private static let interface = "org.freedesktop.login1.Manager"

    /// The computer is about to sleep: call `done` once peers were told (the inhibitor goes then).
    var willSleep: (_ done: @escaping () -> Void) -> Void = { $0() }
    var didWake: () -> Void = {}

    private var connection: DBusConnection?
    private var subscription: SignalSubscription?
    private var watch: NameWatch?
    /// The inhibitor's descriptor (-1: none): logind waits for it to be closed.
    private var inhibitor: Int32 = -1
    private var askingForInhibitor = false
    private var stopped = false

    func start() {
        DBusConnection.system { [weak self] result in
            guard let self, !stopped else { return }
            guard case .success(let connection) = result else { return }
            self.connection = connection
            subscription = connection.subscribe(sender: Self.service, interface: Self.interface, member: "PrepareForSleep",
                                                path: Self.path) { [weak self] signal in
                guard signal.arguments.typeString == "(b)", let sleeping = signal.arguments[0].bool else { return }
                self?.prepareForSleep(sleeping)
            }
            watch = connection.watchName(Self.service, appeared: { [weak self] _ in
                self?.takeInhibitor()
            }, vanished: { [weak self] in
                self?.releaseInhibitor()
            })
        }
    }

    func stop() {
        stopped = true
        subscription = nil
        watch = nil
        releaseInhibitor()
    }

    private func prepareForSleep(_ sleeping: Bool) {
        if sleeping {
            Log.info("the computer is going to sleep: saying goodbye to peers")
            willSleep { [weak self] in self?.releaseInhibitor() }
        } else {
            Log.info("the computer woke up: redialling peers with messages waiting")
            takeInhibitor()
            didWake()
        }
    }

    private func takeInhibitor() {
        guard inhibitor < 0, !askingForInhibitor, !stopped, let connection else { return }
        askingForInhibitor = true
        let arguments = Variant(tuple: [Variant("sleep"), Variant("PeerVoice"), Variant("telling peers it goes away"), Variant("delay")])
        connection.callAsyncReceivingFDs(destination: Self.service, path: Self.path, interface: Self.interface,
                                         method: "Inhibit", arguments: arguments, timeout: .seconds(5)) { [weak self] result in
            switch result {
            case .success(let (_, fds)):
                self?.askingForInhibitor = false
                guard let self, !stopped, inhibitor < 0, let fd = fds.first else { return fds.forEach { _ = close($0) } }
                inhibitor = fd
                fds.dropFirst().forEach { _ = close($0) }
            case .failure(let error):
                self?.askingForInhibitor = false
                Log.info("logind gave no sleep inhibitor (\(error.message)): peers learn of a suspend by the link's silence")
            }
        }
    }

    private func releaseInhibitor() {
        guard inhibitor >= 0 else { return }
        close(inhibitor)
        inhibitor = -1
    }
}
