// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "PeerVoice",
    products: [
        .executable(name: "peervoiced", targets: ["peervoiced"]),
        .executable(name: "peervoicectl", targets: ["peervoicectl"]),
        .executable(name: "peervoice", targets: ["peervoice"]),
    ],
    targets: [
        // C libraries, each reached through one system-library target and wrapped by one Swift module.
        .systemLibrary(name: "CGio", pkgConfig: "gio-unix-2.0", providers: [.apt(["libglib2.0-dev"])]),

        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "COpus", pkgConfig: "opus", providers: [.apt(["libopus-dev"])]),
        .systemLibrary(name: "CGtk", pkgConfig: "gtk4", providers: [.apt(["libgtk-4-dev"])]),
        .systemLibrary(name: "CAdw", pkgConfig: "libadwaita-1", providers: [.apt(["libadwaita-1-dev"])]),
        .systemLibrary(name: "CPipeWire", pkgConfig: "libpipewire-0.3", providers: [.apt(["libpipewire-0.3-dev"])]),
        // webrtc-audio-processing 0.3 is C++: a tiny shim gives it a C API (Debian
        // libwebrtc-audio-processing-dev; the flags are its pkg-config --cflags).
        .target(
            name: "CWebRTCAudio",
            cxxSettings: [.define("WEBRTC_POSIX"), .define("WEBRTC_AUDIO_PROCESSING_ONLY_BUILD"),
                          .unsafeFlags(["-I/usr/include/webrtc_audio_processing"])],
            linkerSettings: [.linkedLibrary("webrtc_audio_processing")]
        ),

        // GLib main loop, timers, fd watches and GDBus, in Swift. The only importer of CGio.
        .target(name: "GIO", dependencies: ["CGio"]),
        // GTK 4 and libadwaita widgets for the desktop app. The only importer of CGtk and CAdw.
        .target(name: "Gtk", dependencies: ["CGtk", "CAdw"]),
        // libsodium behind PeerVoiceCore's crypto protocol. The only importer of CSodium.
        .target(name: "Sodium", dependencies: ["CSodium", "PeerVoiceCore"]),
        // libopus behind PeerVoiceCore's codec protocol. The only importer of COpus.
        .target(name: "Opus", dependencies: ["COpus", "PeerVoiceCore"]),
        // PipeWire capture and playback streams. The only importer of CPipeWire.
        .target(name: "PipeWire", dependencies: ["CPipeWire", "PeerVoiceCore"]),
        // Echo cancellation, noise suppression, voice activity behind PeerVoiceCore's
        // VoiceProcessor. The only importer of CWebRTCAudio.
        .target(name: "AudioProcessing", dependencies: ["CWebRTCAudio", "PeerVoiceCore"]),

        // Wire protocol, message store, state machines: pure Swift, no C module.
        .target(name: "PeerVoiceCore"),

        // PeerVoice's bus name, object path, interface and error prefix, shared by the service,
        // peervoicectl and the tests. Pure Swift.
        .target(name: "PeerVoiceBus"),

        // The service: bus API, peer links, transports.
        .target(
            name: "PeerVoiceDaemon",
            dependencies: ["PeerVoiceCore", "PeerVoiceBus", "GIO", "Sodium", "Opus", "PipeWire", "AudioProcessing"],
            resources: [.embedInCode("org.example.PeerVoice.xml"), .embedInCode("org.example.PeerVoice.Peer.xml"),
                        .embedInCode("org.example.PeerVoice.Room.xml"), .embedInCode("org.example.PeerVoice.Transfer.xml")]
        ),
        .executableTarget(name: "peervoiced", dependencies: ["PeerVoiceDaemon"]),
        // A thin client of the public bus API, nothing more.
        .executableTarget(name: "peervoicectl", dependencies: ["GIO", "PeerVoiceBus"],
                          resources: [.embedInCode("org.example.PeerVoice.ChannelHandler.xml")]),
        // The desktop app: what to show for which bus state (pure Swift), and its GTK window.
        .target(name: "PeerVoiceAppModel"),
        .executableTarget(name: "peervoice", dependencies: ["PeerVoiceAppModel", "PeerVoiceBus", "Gtk", "GIO"]),
        // bench/playout's offline playout simulation (make bench-playout): not shipped.
        .executableTarget(name: "playout-bench", dependencies: ["PeerVoiceCore", "Opus", "SeededRandom"], path: "bench/playout/driver"),

        // The deterministic simulation of the core (make simulate, docs/RELIABILITY.md): not shipped.
        .target(name: "PeerVoiceSimulation", dependencies: ["PeerVoiceCore", "SeededRandom"], path: "Tests/Simulation"),
        .executableTarget(name: "simulate", dependencies: ["PeerVoiceSimulation"], path: "Tests/SimulationDriver"),
        // The seeded fault campaign against real daemons (make chaos, docs/RELIABILITY.md): not shipped.
        .executableTarget(name: "chaos", dependencies: ["TestHarness", "GIO", "SeededRandom"], path: "Tests/ChaosDriver"),

        // Seeded randomness for tests and benchmarks; assertions and handshake runs for the core's tests.
        .target(name: "SeededRandom", path: "Tests/SeededRandom"),
        .target(name: "CoreTestSupport", dependencies: ["PeerVoiceCore"], path: "Tests/CoreTestSupport"),
        .target(name: "TestHarness", dependencies: ["GIO", "PeerVoiceBus", "PeerVoiceCore", "Sodium", "SeededRandom"],
                path: "Tests/TestHarness"),
        .testTarget(name: "PeerVoiceCoreTests", dependencies: ["PeerVoiceCore", "SeededRandom", "CoreTestSupport"]),
        .testTarget(name: "SimulationTests", dependencies: ["PeerVoiceSimulation", "PeerVoiceCore", "SeededRandom"]),
        .testTarget(name: "SodiumTests", dependencies: ["Sodium", "PeerVoiceCore", "CoreTestSupport"]),
        .testTarget(name: "OpusTests", dependencies: ["Opus", "PeerVoiceCore"]),
        // The processor offline, and the daemon's capture path around it (no PipeWire).
        .testTarget(name: "AudioProcessingTests", dependencies: ["AudioProcessing", "PeerVoiceCore", "PeerVoiceDaemon"]),
        .testTarget(name: "PipeWireTests", dependencies: ["PipeWire", "PeerVoiceCore", "TestHarness"]),
        .testTarget(name: "ServiceTests", dependencies: ["TestHarness", "GIO"]),
        // PeerObjects in-process (the daemon module's component) against a real private dbus-daemon.
        .testTarget(name: "DaemonInProcessTests", dependencies: ["PeerVoiceDaemon", "PeerVoiceCore", "TestHarness", "GIO"]),
        .testTarget(name: "GIOTests", dependencies: ["GIO", "TestHarness"]),
        .testTarget(name: "PeerVoiceAppModelTests", dependencies: ["PeerVoiceAppModel"]),
        // The app in Xvfb, driven through AT-SPI against real daemons; needs the peervoice product.
        .testTarget(name: "AppTests", dependencies: ["TestHarness", "GIO"]),
    ],
    swiftLanguageModes: [.v6]
)
