import Glibc

/// `posix_spawn` attributes for a child that starts with no signal blocked and SIGTERM, SIGINT,
/// SIGHUP, SIGPIPE and SIGCHLD at their defaults, whatever the spawning thread had: a child of a
/// Swift-concurrency or dispatch thread would otherwise inherit a blocked SIGTERM and ignore it
/// (docs/ARCHITECTURE.md's thread rules; the tests' and peervoicectl's children use this).
public func withDefaultSignalSpawnAttributes<Result>(_ body: (inout posix_spawnattr_t) -> Result) -> Result {
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var noSignals = sigset_t()
    sigemptyset(&noSignals)
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    return body(&attributes)
}
