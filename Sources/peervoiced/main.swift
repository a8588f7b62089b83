import Foundation
import PeerVoiceDaemon

exit(runDaemon(arguments: Array(CommandLine.arguments.dropFirst())))
