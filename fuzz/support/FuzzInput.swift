// What every libFuzzer target of fuzz/ shares: reading the input, checking invariants, tracing.
// fuzz/run.sh compiles this file into each target.
#if canImport(Glibc)
import Glibc
#endif

/// FUZZ_TRACE=1 in the environment prints every step (for reading a reproducer).
let tracing = getenv("FUZZ_TRACE") != nil

func trace(_ line: @autoclosure () -> String) {
    guard tracing else { return }
    printToStandardError(line())
}

/// Writes `line` and a newline to standard error, unbuffered, as libFuzzer's own output is.
func printToStandardError(_ line: String) {
    _ = (line + "\n").withCString { write(2, $0, strlen($0)) }
}

/// Traps (libFuzzer records a crash) when an invariant does not hold.
@inline(never)
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
           file: StaticString = #file, line: UInt = #line) {
    if !condition() { fatalError("invariant violated: \(message())", file: file, line: line) }
}

/// The calls into the code under test that a target counts. A target that runs a script makes many
/// of them per execution (a dial-proof input decides about 50 dials), so the campaign's figures give
/// both. Printed at a normal exit (a time or run limit) as `stat::calls_NAME: N` after libFuzzer's
/// own stats; a run stopped by SIGINT prints none (libFuzzer leaves without exit handlers).
enum Call: Int, CaseIterable {
    case readMessage, open, decide

    var name: String {
        switch self {
        case .readMessage: "Handshake.readMessage"
        case .open: "RecordOpener.open"
        case .decide: "DialGate.decide"
        }
    }
}

nonisolated(unsafe) private var callCounts: [Int] = []

/// Counts one call of `call`.
func count(_ call: Call) {
    if callCounts.isEmpty {
        callCounts = Array(repeating: 0, count: Call.allCases.count)
        atexit {
            for call in Call.allCases where callCounts[call.rawValue] > 0 {
                printToStandardError("stat::calls_\(call.name): \(callCounts[call.rawValue])")
            }
        }
    }
    callCounts[call.rawValue] += 1
}

/// The fuzzer's bytes, read front to back, big-endian; past the end every byte reads as 0.
struct Input {
    let bytes: [UInt8]
    var position = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    var isEmpty: Bool { position >= bytes.count }
    /// What has not been read.
    var rest: ArraySlice<UInt8> { bytes[min(position, bytes.count)...] }
    mutating func u8() -> UInt8 {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return bytes[position]
    }
    mutating func u16() -> Int { Int(u8()) << 8 | Int(u8()) }
    mutating func u32() -> UInt32 { UInt32(u16()) << 16 | UInt32(u16()) }
    mutating func u64() -> UInt64 { UInt64(u32()) << 32 | UInt64(u32()) }
    /// Up to `count` bytes (fewer at the end of the input).
    mutating func take(_ count: Int) -> [UInt8] {
        let start = min(position, bytes.count)
        let end = min(bytes.count, start + max(0, count))
        position = end
        return Array(bytes[start..<end])
    }
    /// Exactly `count` bytes: the input's, then zeros.
    mutating func fill(_ count: Int) -> [UInt8] {
        let bytes = take(count)
        return bytes + [UInt8](repeating: 0, count: count - bytes.count)
    }
}
