import Glibc

// peervoicectl: a thin command-line client of org.example.PeerVoice. Everything it does goes
// through the public bus API (dbus/org.example.PeerVoice.xml), as any other application would.
exit(Ctl.run(Array(CommandLine.arguments.dropFirst())))
