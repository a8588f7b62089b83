import Glibc

/// Unbuffered output: each call is written at once with write(2), so `monitor` lines reach a pipe
/// or file as they happen. A reader that has gone away (EPIPE on stdout) ends the program quietly.
enum Output {
    static func line(_ text: String) { write(1, text + "\n") }
    static func error(_ text: String) { write(2, text + "\n") }

    static func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == EPIPE && fd == 1 { exit(0) }
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }
}

/// How values look on the terminal and in JSON.
enum Format {
    /// Local time in ISO 8601 with the UTC offset: `2025-05-01T14:03:07+02:00`, or with
    /// `.123` milliseconds after the seconds.
    static func localTime(milliseconds: UInt64, withMilliseconds: Bool) -> String {
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        localtime_r(&seconds, &parts)
        let offset = parts.tm_gmtoff
        let sign = offset < 0 ? "-" : "+"
        var text = "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))"
            + "T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
        if withMilliseconds {
            let ms = Int(milliseconds % 1000)
            text += "." + (ms < 10 ? "00" : ms < 100 ? "0" : "") + String(ms)
        }
        return text + "\(sign)\(two(Int32(abs(offset) / 3600))):\(two(Int32(abs(offset) % 3600 / 60)))"
    }

    static func nowMilliseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec / 1_000_000)
    }

    private static func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// `text` with backslashes and control characters escaped (`\\`, `\n`, `\r`, `\t`, `\u001b`),
    /// and `"` too when `quoting`: it can no longer break a line.
    static func escaped(_ text: String, quoting: Bool = false) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case "\"" where quoting: result += "\\\""
            default:
                if scalar.properties.generalCategory == .control {
                    result += "\\u" + hex4(scalar.value)
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result
    }

    /// `"text"` with escapes, for free text inside a `monitor` line.
    static func quoted(_ text: String) -> String { "\"" + escaped(text, quoting: true) + "\"" }

    /// A JSON string literal (UTF-8 kept as is, control characters escaped).
    static func jsonString(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7f {
                    result += "\\u" + hex4(scalar.value)
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }

    private static func hex4(_ value: UInt32) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// Rows as left-aligned columns separated by two spaces (the last column is not padded).
    static func table(_ rows: [[String]], indent: String = "") -> String {
        guard let columns = rows.map(\.count).max(), columns > 0 else { return "" }
        var widths = [Int](repeating: 0, count: columns)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        return rows.map { row in
            indent + row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count + 2)
            }.joined()
        }.joined(separator: "\n")
    }
}
