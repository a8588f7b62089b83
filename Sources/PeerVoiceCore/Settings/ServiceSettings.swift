import Foundation

/// The discovery methods a person can make this device visible on (`SetVisible`, `Visible`).
public enum DiscoveryMethod: String, CaseIterable, Codable, Sendable {
    case bluetooth, lan
}

/// What a person chose for this service at run time (`SetName`, `SetVisible`), kept across
/// restarts in one small file (`settings.json` in the state directory), rewritten atomically.
/// Until a name is set, the name is the one the service was started with (`--name`, the host name).
public final class ServiceSettings {
    /// Longest display name `SetName` accepts, in bytes of UTF-8 (fits HELLO and the LAN's TXT `n=`).
    public static let maxNameBytes = 128

    public private(set) var name: String
    /// The methods StartDiscovery makes this device visible on (and searches on); all by default.
    public private(set) var visible: Set<DiscoveryMethod>

    private let path: String
    private var chosenName: String?

    private struct File: Codable {
        var name: String?
        var hidden: [DiscoveryMethod]
    }

    /// Reads `path` if it exists; `defaultName` is the name until one is set.
    public init(path: String, defaultName: String) throws {
        self.path = path
        var file = File(name: nil, hidden: [])
        if let data = FileManager.default.contents(atPath: path) {
            file = try JSONDecoder().decode(File.self, from: data)
        }
        // A file edited by hand with a name SetName would refuse falls back to the default.
        chosenName = file.name.flatMap { try? Self.validatedName($0) }
        name = chosenName ?? defaultName
        visible = Set(DiscoveryMethod.allCases).subtracting(file.hidden)
    }

    /// `SetName`: a display name of 1 to `maxNameBytes` bytes without control characters
    /// (leading and trailing white space dropped). Returns whether it changed.
    public func setName(_ proposed: String) throws(ServiceError) -> Bool {
        let name = try Self.validatedName(proposed)
        guard name != self.name || chosenName == nil else { return false }
        let previous = chosenName
        chosenName = name
        do { try write() } catch {
            chosenName = previous
            throw .failed("could not keep the name in \(path): \(error.localizedDescription)")
        }
        let changed = name != self.name
        self.name = name
        return changed
    }

    /// `SetVisible`: whether StartDiscovery uses `method`. Returns whether it changed.
    public func setVisible(_ method: DiscoveryMethod, _ isVisible: Bool) throws(ServiceError) -> Bool {
        guard visible.contains(method) != isVisible else { return false }
        let previous = visible
        if isVisible { visible.insert(method) } else { visible.remove(method) }
        do { try write() } catch {
            visible = previous
            throw .failed("could not keep the setting in \(path): \(error.localizedDescription)")
        }
        return true
    }

    public static func validatedName(_ proposed: String) throws(ServiceError) -> String {
        let name = proposed.trimmingCharacters(in: .whitespacesAndNewlines)
        if name.isEmpty { throw .invalidArgument("the name is empty: give 1 to \(maxNameBytes) bytes of text") }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw .invalidArgument("the name contains control characters (such as a line break or tab): use printable text only")
        }
        let bytes = name.utf8.count
        if bytes > maxNameBytes { throw .invalidArgument("the name is \(bytes) bytes; the limit is \(maxNameBytes) bytes of UTF-8") }
        return name
    }

    private func write() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let hidden = DiscoveryMethod.allCases.filter { !visible.contains($0) }
        let data = try encoder.encode(File(name: chosenName, hidden: hidden))
        let temporary = path + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary])
        }
        if rename(temporary, path) != 0 { throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path]) }
    }
}
