/// One reading of every level `Levels(d input_dbfs, a{sd} peers_dbfs)` carries: the microphone
/// and each remote voice as decoded, before the local volume (by peer id), in dBFS (``LevelMeter``).
public struct VoiceLevels: Sendable, Equatable {
    public var inputDBFS: Double
    public var peersDBFS: [PeerID: Double]

    public init(inputDBFS: Double, peersDBFS: [PeerID: Double]) {
        self.inputDBFS = inputDBFS
        self.peersDBFS = peersDBFS
    }

    /// Whether any level differs from `other`'s by more than `thresholdDB`, or a peer came or went.
    public func differs(from other: VoiceLevels, byMoreThan thresholdDB: Double) -> Bool {
        if abs(inputDBFS - other.inputDBFS) > thresholdDB || peersDBFS.count != other.peersDBFS.count { return true }
        for (peer, level) in peersDBFS {
            guard let previous = other.peersDBFS[peer], abs(level - previous) <= thresholdDB else { return true }
        }
        return false
    }
}

/// Who asked for `Levels`, how often, and what each was last told: the policy behind
/// `StartMetering(u interval_ms)` / `StopMetering()`.
///
/// Clients are bus names (the caller's unique name); their subscription ends with
/// ``stop(client:)`` or when they leave the bus (``clientLeft(_:)``, from `NameOwnerChanged`).
/// On each ``tick(now:levels:)`` it says which clients get a `Levels` signal (unicast): those
/// whose interval has come, and only if some level moved by more than ``changeThresholdDB``
/// since what that client was last sent. With no client, nothing needs measuring at all
/// (``isEmpty``). Times are one monotonic clock in nanoseconds, passed in: no timer here.
public struct MeteringSubscriptions: Sendable {
    /// The shortest interval a client may ask for (ms).
    public static let minimumIntervalMs: UInt32 = 50
    /// The most clients metering at once.
    public static let maximumClients = 8
    /// A level must move by more than this since a client's last `Levels` to send it another (dB).
    public static let changeThresholdDB = 1.0

    private struct Subscription: Sendable {
        var intervalNs: Int64
        var nextDue: Int64
        var lastSent: VoiceLevels?
    }

    private var subscriptions: [String: Subscription] = [:]

    public init() {}

    /// No client is metering: the voice engine need not measure levels.
    public var isEmpty: Bool { subscriptions.isEmpty }

    /// The clients metering, sorted.
    public var clients: [String] { subscriptions.keys.sorted() }

    /// Starts (or, for a client already metering, changes the interval of) `client`'s
    /// subscription; its first `Levels` is due at once. Refuses a too-short interval
    /// (`InvalidArgument`) and a ninth client (`NotAvailable`).
    public mutating func start(client: String, intervalMs: UInt32, now: Int64) throws(ServiceError) {
        guard intervalMs >= Self.minimumIntervalMs else {
            throw .invalidArgument(
                "interval_ms \(intervalMs) is too short: levels come at most every \(Self.minimumIntervalMs) ms; ask for \(Self.minimumIntervalMs) or more")
        }
        guard subscriptions[client] != nil || subscriptions.count < Self.maximumClients else {
            throw .notAvailable(
                "\(Self.maximumClients) clients are already metering levels, the most at once; try again after one of them calls StopMetering or quits")
        }
        subscriptions[client] = Subscription(intervalNs: Int64(intervalMs) * 1_000_000, nextDue: now, lastSent: nil)
    }

    /// Ends `client`'s subscription; returns whether it had one (stopping twice is harmless).
    @discardableResult
    public mutating func stop(client: String) -> Bool {
        subscriptions.removeValue(forKey: client) != nil
    }

    /// `client` left the bus: its subscription, if any, ends.
    public mutating func clientLeft(_ client: String) {
        subscriptions.removeValue(forKey: client)
    }

    /// When the next client is due (arm the timer for it), nil when no one is metering.
    public var nextDue: Int64? { subscriptions.values.map(\.nextDue).min() }

    /// The clients to send `levels` to now, sorted: those due whose last `Levels` differs from
    /// `levels` by more than ``changeThresholdDB`` (or who got none yet). Every due client's next
    /// time moves on by its interval, sent or skipped; a client whose timer fell behind by more
    /// than an interval (a busy main loop) is due again an interval from now, not in a burst.
    public mutating func tick(now: Int64, levels: VoiceLevels) -> [String] {
        var recipients: [String] = []
        for (client, var subscription) in subscriptions where subscription.nextDue <= now {
            subscription.nextDue += subscription.intervalNs
            if subscription.nextDue <= now { subscription.nextDue = now + subscription.intervalNs }
            if subscription.lastSent.map({ levels.differs(from: $0, byMoreThan: Self.changeThresholdDB) }) ?? true {
                subscription.lastSent = levels
                recipients.append(client)
            }
            subscriptions[client] = subscription
        }
        return recipients.sorted()
    }
}
