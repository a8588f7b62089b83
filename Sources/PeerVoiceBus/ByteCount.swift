/// How the service and its clients show a number of bytes to a person: decimal units, as GNOME's
/// file manager does (`512 bytes`, `3.0 kB`, `4.2 GB`, `21 MB`): one decimal below 10, none above.
/// The service's messages (`Failed`: "needs 4.2 GB, 1.1 GB free on /home") use it, so clients
/// that show sizes next to them agree.
public enum ByteCount {
    private static let units = ["kB", "MB", "GB", "TB", "PB", "EB"]

    public static func text(_ bytes: UInt64) -> String {
        guard bytes >= 1000 else { return "\(bytes) bytes" }
        var value = Double(bytes) / 1000
        var unit = 0
        while value >= 1000 && unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        let tenths = (value * 10).rounded()
        if tenths < 100 { return "\(Int(tenths) / 10).\(Int(tenths) % 10) \(units[unit])" }
        return "\(Int(value.rounded())) \(units[unit])"
    }
}
