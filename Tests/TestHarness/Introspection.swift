import Foundation
import FoundationXML

/// Every method, signal and property of `interface` in introspection XML, one readable line each
/// (`method Send(in s peer, in s text, out s message_id)`, `property Muted b read`): what a test
/// compares between an object's live `Introspect` and the dbus/ XML that documents it.
public func interfaceMembers(ofXML xml: String, interface name: String) throws -> Set<String> {
    let document = try XMLDocument(xmlString: xml)
    guard let interface = try document.nodes(forXPath: "/node/interface[@name='\(name)']").first as? XMLElement else {
        throw HarnessError("no interface \(name) in \(xml.prefix(200))")
    }
    var members = Set<String>()
    for element in interface.children?.compactMap({ $0 as? XMLElement }) ?? [] {
        let memberName = element.attribute(forName: "name")?.stringValue ?? "?"
        switch element.name {
        case "property":
            let type = element.attribute(forName: "type")?.stringValue ?? "?"
            let access = element.attribute(forName: "access")?.stringValue ?? "?"
            members.insert("property \(memberName) \(type) \(access)")
        case "method", "signal":
            let arguments = element.elements(forName: "arg").map { arg in
                let direction = arg.attribute(forName: "direction")?.stringValue ?? (element.name == "method" ? "in" : "")
                return [direction, arg.attribute(forName: "type")?.stringValue ?? "", arg.attribute(forName: "name")?.stringValue ?? ""]
                    .filter { !$0.isEmpty }.joined(separator: " ")
            }
            members.insert("\(element.name!) \(memberName)(\(arguments.joined(separator: ", ")))")
        default:
            // Annotations and comments say nothing about the interface's shape.
            break
        }
    }
    return members
}
