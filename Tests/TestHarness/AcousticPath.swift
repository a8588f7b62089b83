import Foundation

/// A laptop's room in one PipeWire graph: what the speaker plays comes back into the microphone,
/// late and quieter (`pw-loopback` from the speaker's monitor into the mic's input, its playback
/// volume set to the attenuation). Measured here at 50 ms asked for: 66.7 ms from speaker monitor
/// to mic capture (the loopback's buffering adds a quantum or so), -18.0 dB.
public final class AcousticPath {
    public let process: ChildProcess

    /// Loops `session`'s speaker into its mic with `delaySeconds` of delay and `gainDB` of gain.
    public init(_ session: PipeWireSession, delaySeconds: Double = 0.05, gainDB: Double = -18) throws {
        let name = "peervoice-room-\(getpid())"
        process = try session.spawn("pw-loopback", ["-n", name, "-c", "1", "-m", "[ MONO ]", "-d", String(delaySeconds),
                                                    "--capture-props", "{ node.name = \(name)-in node.autoconnect = false }",
                                                    "--playback-props", "{ node.name = \(name)-out node.autoconnect = false }"],
                                    logName: name)
        do {
            try session.waitForPorts(["\(name)-in:input_MONO", "\(name)-out:output_MONO"])
            try session.link("\(PipeWireSession.speakerName):monitor_MONO", "\(name)-in:input_MONO")
            try session.link("\(name)-out:output_MONO", "\(PipeWireSession.micName):input_MONO")
            guard let id = try session.nodeProperties(named: "\(name)-out")?["object.id"] else {
                throw HarnessError("no node \(name)-out")
            }
            let volume = pow(10, gainDB / 20)
            try session.run("pw-cli", ["set-param", id, "Props", "{ channelVolumes: [ \(volume) ] }"])
        } catch {
            process.kill()
            throw HarnessError("cannot build the acoustic path: \(error); pw-loopback said: \(process.log)")
        }
    }

    deinit { stop() }

    public func stop() {
        process.signal(SIGINT)
        if process.wait(timeout: 5) == nil { process.kill() }
    }
}

extension AudioAnalysis {
    /// Pink noise (Paul Kellet's refinement of the Voss filter on seeded white noise) at
    /// `dBFS` RMS: the spectrum of a fan or a room's hum, -3 dB per octave.
    public static func pinkNoise(seconds: Double, dBFS: Double, seed: UInt64 = 7, sampleRate: Int = 48_000) -> [Int16] {
        var random = seed
        var b = [Double](repeating: 0, count: 7)
        let raw: [Double] = (0..<Int(seconds * Double(sampleRate))).map { _ in
            random = random &* 6364136223846793005 &+ 1442695040888963407
            let white = Double(random >> 11) / Double(1 << 53) * 2 - 1
            b[0] = 0.99886 * b[0] + white * 0.0555179
            b[1] = 0.99332 * b[1] + white * 0.0750759
            b[2] = 0.96900 * b[2] + white * 0.1538520
            b[3] = 0.86650 * b[3] + white * 0.3104856
            b[4] = 0.55000 * b[4] + white * 0.5329522
            b[5] = -0.7616 * b[5] - white * 0.0168980
            let value = b[0] + b[1] + b[2] + b[3] + b[4] + b[5] + b[6] + white * 0.5362
            b[6] = white * 0.115926
            return value
        }
        let rms = (raw.reduce(0) { $0 + $1 * $1 } / Double(max(raw.count, 1))).squareRoot()
        let scale = pow(10, dBFS / 20) * 32768 / max(rms, 1e-12)
        return raw.map { Int16(max(-32768, min(32767, ($0 * scale).rounded()))) }
    }

    /// RMS in dBFS of `samples` (-200 for digital silence).
    public static func levelDBFS(_ samples: [Int16]) -> Double {
        guard !samples.isEmpty else { return -200 }
        let energy = samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(samples.count)
        return energy > 0 ? 10 * log10(energy) - 20 * log10(32768) : -200
    }
}
