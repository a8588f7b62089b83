public enum PeerVoiceDaemonPlaceholder {}
