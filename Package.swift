// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "PeerVoice",
    products: [
        .executable(name: "peervoiced", targets: ["peervoiced"]),
        .executable(name: "peervoicectl", targets: ["peervoicectl"]),
    ],
    targets: [
        // C libraries, each reached through one system-library target and wrapped by one Swift module.
        .systemLibrary(name: "CGio", pkgConfig: "gio-unix-2.0", providers: [.apt(["libglib2.0-dev"])]),

        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "COpus", pkgConfig: "opus", providers: [.apt(["libopus-dev"])]),
        .systemLibrary(name: "CPipeWire", pkgConfig: "libpipewire-0.3", providers: [.apt(["libpipewire-0.3-dev"])]),

        // GLib main loop, timers, fd watches and GDBus, in Swift. The only importer of CGio.
        .target(name: "GIO", dependencies: ["CGio"]),
        // libsodium behind PeerVoiceCore's crypto protocol. The only importer of CSodium.
        .target(name: "Sodium", dependencies: ["CSodium", "PeerVoiceCore"]),
        // libopus behind PeerVoiceCore's codec protocol. The only importer of COpus.
        .target(name: "Opus", dependencies: ["COpus", "PeerVoiceCore"]),
        // PipeWire capture and playback streams. The only importer of CPipeWire.
        .target(name: "PipeWire", dependencies: ["CPipeWire", "PeerVoiceCore"]),

        // Wire protocol, message store, state machines: pure Swift, no C module.
        .target(name: "PeerVoiceCore"),

        // PeerVoice's bus name, object path, interface and error prefix, shared by the service,
        // peervoicectl and the tests. Pure Swift.
        .target(name: "PeerVoiceBus"),

        // The service: bus API, peer links, transports.
        .target(
            name: "PeerVoiceDaemon",
            dependencies: ["PeerVoiceCore", "PeerVoiceBus", "GIO", "Sodium", "Opus", "PipeWire"],
            resources: [.embedInCode("org.example.PeerVoice.xml"), .embedInCode("org.example.PeerVoice.Peer.xml")]
        ),
        .executableTarget(name: "peervoiced", dependencies: ["PeerVoiceDaemon"]),
        // A thin client of the public bus API, nothing more.
        .executableTarget(name: "peervoicectl", dependencies: ["GIO", "PeerVoiceBus"]),

        .target(name: "TestHarness", dependencies: ["GIO", "PeerVoiceBus", "PeerVoiceCore", "Sodium"], path: "Tests/TestHarness"),
        .testTarget(name: "PeerVoiceCoreTests", dependencies: ["PeerVoiceCore"]),
        .testTarget(name: "SodiumTests", dependencies: ["Sodium", "PeerVoiceCore"]),
        .testTarget(name: "OpusTests", dependencies: ["Opus", "PeerVoiceCore"]),
        .testTarget(name: "PipeWireTests", dependencies: ["PipeWire", "PeerVoiceCore", "TestHarness"]),
        .testTarget(name: "ServiceTests", dependencies: ["TestHarness", "GIO"]),
        // PeerObjects in-process (the daemon module's component) against a real private dbus-daemon.
        .testTarget(name: "PeerObjectsTests", dependencies: ["PeerVoiceDaemon", "PeerVoiceCore", "TestHarness", "GIO"]),
        .testTarget(name: "GIOTests", dependencies: ["GIO", "TestHarness"]),
    ],
    swiftLanguageModes: [.v6]
)
