import PeerVoiceBus

/// What a command accepts, and its help.
struct CommandSpec: Sendable {
    let name: String
    /// Arguments after the command name, e.g. `PEER [--max N]`.
    let synopsis: String
    /// One line for the command list.
    let summary: String
    /// The rest of `peervoicectl COMMAND --help`.
    let details: String
    /// Accepted options, and whether each takes a value.
    let options: [String: Bool]
    let minimumPositionals: Int
    let maximumPositionals: Int

    init(_ name: String, _ synopsis: String, _ summary: String, options: [String: Bool] = [:],
         positionals: ClosedRange<Int> = 0...0, details: String) {
        self.name = name
        self.synopsis = synopsis
        self.summary = summary
        self.details = details
        self.options = options
        minimumPositionals = positionals.lowerBound
        maximumPositionals = positionals.upperBound
    }

    var usageLine: String { "peervoicectl \(name)\(synopsis.isEmpty ? "" : " " + synopsis)" }

    var help: String {
        "Usage: \(usageLine)\n\(summary.prefix(1).uppercased() + summary.dropFirst()).\n\n\(details)"
    }
}

enum Usage {
    static let version = "0.1.0"

    static let commands: [CommandSpec] = [
        CommandSpec("status", "", "the service's version, mute and transport state, and its peers", details: """
            Prints the properties Name, Version, Muted, Discovering, ListenAddress, Adapter,
            DiscoveryMethods (as Discovery), Visible and AudioProcessing (as Processing: each part
            on or off, and why when not by default, e.g. "echo-cancel off (headphones: NODE
            (device.form-factor=headphones))"), then the known peers as `peervoicectl peers` does.
            """),
        CommandSpec("peers", "[--ids]", "list known peers: id, name, transport, state", options: ["--ids": false], details: """
              --ids   print only the peer ids, one per line (for scripts and completion)
            """),
        CommandSpec("peer", "PEER", "show one peer: its id, name, state, routes and key fingerprint", positionals: 1...1, details: """
            Reads the peer's object (org.example.PeerVoice.Peer, through the ObjectManager): PEER is
            its id or one of its addresses. The fingerprint is the key to compare, read aloud, with
            `peervoicectl status` on the other computer.
            """),
        CommandSpec("discover", "[--timeout S]", "search for nearby peers and print each one found or lost",
                    options: ["--timeout": true], details: """
            Starts discovery, prints a line for every PeerFound and PeerLost signal, and stops
            discovery after S seconds or at Ctrl-C.

              --timeout S   stop after S seconds (default: run until Ctrl-C)
            """),
        CommandSpec("connect", "PEER", "connect to PEER, pairing first if needed", positionals: 1...1, details: """
            Waits up to \(PeerVoiceBus.connectCallTimeout.components.seconds) seconds. While it waits it prints progress, and on first contact the
            code to compare and the command that answers, e.g.
              pairing with AA:BB:CC:DD:EE:FF: compare code 123456, then run: peervoicectl confirm AA:BB:CC:DD:EE:FF yes
            The person at the other computer is asked too (`peervoicectl monitor` shows it there as
            PairingRequested) and answers with `peervoicectl confirm YOUR-ID yes`.
            """),
        CommandSpec("disconnect", "PEER", "disconnect from PEER; it does not redial", positionals: 1...1, details: """
            Messages still queued for PEER wait for the next connection.
            """),
        CommandSpec("send", "PEER [TEXT...]", "send a text message to PEER and print its message id",
                    positionals: 1...Int.max, details: """
            TEXT is the remaining arguments joined by spaces. Without TEXT, or with TEXT `-`, the
            message is read from standard input (one trailing newline is dropped). PEER "" sends to
            every connected peer. Put `--` before text that starts with `-`.
            Examples:
              peervoicectl send ip:192.168.1.20:47800 hello there
              echo 'dinner is ready' | peervoicectl send AA:BB:CC:DD:EE:FF
            """),
        CommandSpec("history", "PEER [--max N]", "print the messages exchanged with PEER, oldest first",
                    options: ["--max": true], positionals: 1...1, details: """
            One line per message: local time (ISO 8601), status (received, queued, delivered or
            failed), message id, text.

              --max N   the newest N messages (default 20)
            """),
        CommandSpec("remove", "PEER", "forget PEER: its pinned key and its queued messages",
                    positionals: 1...1, details: """
            Queued messages for PEER fail. Connecting to it again pairs anew.
            """),
        CommandSpec("mute", "on|off|toggle", "silence or open the microphone and print the new state",
                    positionals: 1...1, details: """
            Prints `muted` or `unmuted`.
            """),
        CommandSpec("name", "NAME...", "change the display name other devices see", positionals: 1...Int.max, details: """
            NAME is the arguments joined by spaces: 1 to 128 bytes of text without control
            characters. The service keeps it across restarts; links opened from now on carry it.
            """),
        CommandSpec("visible", "bluetooth|lan on|off", "choose where discovery makes this device visible",
                    positionals: 2...2, details: """
            `peervoicectl discover` (StartDiscovery) makes this device visible, and searches, only
            on the methods that are on (both are, until turned off). Kept across restarts; while
            discovering it applies at once.
            """),
        CommandSpec("confirm", "PEER yes|no", "answer the pending pairing request of PEER",
                    positionals: 2...2, details: """
            `yes` accepts (the codes shown on both computers match), `no` refuses.
            """),
        CommandSpec("voice", "start|stop PEER", "start or stop a voice chat with a connected PEER",
                    positionals: 2...2, details: """
            The microphone follows `peervoicectl mute`.
            """),
        CommandSpec("volume", "PEER VOLUME", "play PEER's voice at VOLUME here, 0.0 (silent) to 2.0 (twice as loud)",
                    positionals: 2...2, details: """
            1.0 plays it as it comes. Kept across restarts for a paired peer; PEER hears no
            difference and is told nothing.
            """),
        CommandSpec("mute-peer", "PEER on|off", "stop or resume playing PEER's voice here",
                    positionals: 2...2, details: """
            PEER is told nothing and still hears you (your own microphone follows
            `peervoicectl mute`). Kept across restarts for a paired peer.
            """),
        CommandSpec("monitor", "[--json] [--levels]", "print every PeerVoice signal as it happens, one line each",
                    options: ["--json": false, "--levels": false], details: """
            Runs until Ctrl-C. Each line starts with the local time (ISO 8601, milliseconds) and
            the signal name, then the signal's arguments as NAME=VALUE; free text (names, message
            text, reasons) is quoted, with newlines written as \\n, so one event is one line.

              --json     one JSON object per line instead:
                         {"time": "...", "signal": "MessageReceived", "peer": "...", "message_id": "...", "text": "..."}
              --levels   also the voice levels (StartMetering, every 100 ms while one moves by more
                         than 1 dB), as bars from -60 to 0 dBFS: the microphone, then each voice peer
            """),
        CommandSpec("open", "PEER CHANNEL [--mode stream|messages]", "open a stream to an app's CHANNEL on PEER; bridge it to stdin and stdout",
                    options: ["--mode": true], positionals: 2...2, details: """
            What arrives on standard input goes to the app that registered CHANNEL on PEER (end of
            input ends this direction), and what it sends comes out on standard output, until both
            directions have ended. Exits 1 when the stream ends abruptly (the link dropped, the
            other side went away), saying why.

              --mode messages   each line of input is one message, each message one line of output
                                (default: stream, the bytes as they are)
            Examples:
              peervoicectl open pv:3k7qh2x4mzbv6tnwyc5rjd2lae org.example.Files < photo.jpg
              tar c Music | peervoicectl open ip:192.168.1.20:47800 org.example.Tar
            """),
        CommandSpec("listen", "CHANNEL [--once] [-- COMMAND [ARG...]]", "register CHANNEL and run COMMAND for each stream a peer opens to it",
                    options: ["--once": false], positionals: 1...Int.max, details: """
            Registers CHANNEL (3-255 characters of A-Z a-z 0-9 . _ - with a dot, e.g.
            org.example.Chess) until Ctrl-C. Each stream a connected peer opens to it runs COMMAND
            with the stream as its standard input and output (as socat's EXEC does), and
            PEERVOICE_PEER, PEERVOICE_PEER_NAME, PEERVOICE_CHANNEL and PEERVOICE_MODE in its
            environment; several streams run at once. Without COMMAND, the first stream is bridged
            to this command's standard input and output, like `open`.

              --once   take one stream; exit with COMMAND's status once it ends
            Examples:
              peervoicectl listen org.example.Files --once > photo.jpg
              peervoicectl listen org.example.Tar -- tar x -C Incoming
            """),
        CommandSpec("join", "URL [--password-stdin] [--accept-certificate FINGERPRINT]", "join a Mumble room: a channel on a Mumble server",
                    options: ["--password-stdin": false, "--accept-certificate": true], positionals: 1...1, details: """
            URL is mumble://[USER@]HOST[:PORT][/CHANNEL/SUB] (port 64738, your name, the server's
            default channel when left out). Waits until PeerVoice is in the channel, then prints the
            room's number and the server certificate's SHA-256 fingerprint: compare it with the one
            the server's administrator gives you (the first one is pinned; a different one later is
            refused, naming both, until you accept it).

              --password-stdin              read the server's (or your user's) password from the
                                            first line of standard input
              --accept-certificate FINGERPRINT
                                            accept this certificate in place of the pinned one
            Examples:
              peervoicectl join mumble://ana@mumble.example.org/Games
              secret-tool lookup mumble example | peervoicectl join mumble://example.org --password-stdin
            """),
        CommandSpec("rooms", "", "list the Mumble rooms: number, state, URL, channel, who is there", details: """
            One line per room (number, state, URL, channel, and why while reconnecting or
            failed), then the others in its channel, each marked when muted or speaking.
            """),
        CommandSpec("room-send", "ROOM TEXT...", "send text to everyone in a room's channel and print its id",
                    positionals: 2...Int.max, details: """
            ROOM is the room's number as `peervoicectl rooms` lists it. TEXT is the remaining
            arguments joined by spaces; Mumble clients show it as typed.
            """),
        CommandSpec("room-register", "ROOM", "register your name on a room's server for this installation", positionals: 1...1, details: """
            ROOM is the room's number as `peervoicectl rooms` lists it. The server then keeps the
            name for this installation's client certificate: nobody else can join under it, and
            you join with it again without a password. The server's access rules must allow
            self-registration (murmurd's do by default); if not, the server's refusal is printed.
            """),
        CommandSpec("leave", "ROOM", "leave a Mumble room", positionals: 1...1, details: """
            ROOM is the room's number as `peervoicectl rooms` lists it.
            """),
        CommandSpec("send-file", "PEER PATH... [--no-wait]", "send files and folders to PEER and show the transfer's progress",
                    options: ["--no-wait": false], positionals: 2...Int.max, details: """
            Each PATH is a file or a folder (sent whole, under its own name; symbolic links inside
            it are skipped). PEER must be paired; if it is away the transfer waits and starts when
            it connects. Its person accepts or declines; the files land in their download folder.
            On a terminal a progress bar shows bytes, rate and time left; otherwise a line per
            state and per tenth. Exits 0 once complete, 1 if it failed or was declined or
            cancelled (saying why); Ctrl-C cancels it.

              --no-wait   print the transfer's object path and exit (peervoicectl transfers
                          follows it)
            Examples:
              peervoicectl send-file pv:3k7qh2x4mzbv6tnwyc5rjd2lae holiday.jpg Notes
              peervoicectl send-file ip:192.168.1.20:47800 ~/Videos/talk.mkv --no-wait
            """),
        CommandSpec("transfers", "", "list this run's file transfers, both ways", details: """
            One row per transfer object: its number, direction, peer, state (with why it failed,
            was declined or cancelled), progress, files, and where an incoming one is saved.
            """),
        CommandSpec("transfer", "accept|decline|cancel N", "answer an incoming transfer, or cancel one",
                    positionals: 2...2, details: """
            N is the number `peervoicectl transfers` shows (or the object path). accept and
            decline answer an incoming transfer that waits; cancel stops one either way (the
            receiver removes what had arrived).
            """),
        CommandSpec("shortcut", "install KEYS | remove", "add or remove a GNOME keyboard shortcut that toggles mute",
                    positionals: 1...2, details: """
            For GNOME 43-47, whose desktop portal binds no global shortcuts: `install` adds a custom
            shortcut, KEYS (e.g. ctrl+alt+m), that runs `peervoicectl mute toggle`, next to the ones
            already there (GNOME Settings > Keyboard > Custom Shortcuts shows it); `remove` takes
            it away and leaves the others. On desktops with the GlobalShortcuts portal (KDE Plasma)
            peervoiced binds its keys itself.
            Examples:
              peervoicectl shortcut install ctrl+alt+m
              peervoicectl shortcut remove
            """),
        CommandSpec("help", "[COMMAND]", "show help for peervoicectl or one of its commands",
                    positionals: 0...1, details: ""),
    ]

    static func command(named name: String) -> CommandSpec? { commands.first { $0.name == name } }

    static var main: String {
        let width = commands.map { "\($0.name) \($0.synopsis)".count }.max() ?? 0
        let list = commands.map { command in
            let left = "\(command.name) \(command.synopsis)"
            return "  " + left + String(repeating: " ", count: width - left.count + 2) + command.summary
        }.joined(separator: "\n")
        return """
            Usage: peervoicectl [--help | --version] COMMAND [ARGUMENT...]
            Control PeerVoice (peervoiced, org.example.PeerVoice on the session bus): find nearby
            computers, connect, exchange text messages and talk.

            Commands:
            \(list)

            PEER is a peer id (pv:3k7qh2x4mzbv6tnwyc5rjd2lae) or an address: Bluetooth
            (AA:BB:CC:DD:EE:FF) or ip:HOST:PORT (ip:192.168.1.20:47800, ip:[::1]:47800);
            `peervoicectl peers` lists the known ones.
            `peervoicectl COMMAND --help` describes a command.

            Exit status: 0 done; 1 the service answered with an error (printed as NAME: message);
            2 usage error; 3 the service is not running or cannot be reached.
            """
    }
}
