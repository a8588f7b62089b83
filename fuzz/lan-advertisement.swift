// libFuzzer target: what Avahi hands us about other people's advertisements, before anything is
// dialled (Sources/PeerVoiceCore/LAN/): the TXT record decoder and the resolver-answer decoder.
//
// Input layout (missing bytes read as 0):
//   byte 0      bit 0: the input is a resolver answer, else a TXT record
//   TXT record  entries, each a u8 length then that many bytes (the last one may be short);
//               one length byte of 255 followed by a u8 n makes an entry of 255 + n bytes, so
//               entries over the limit are reached
//   resolver    u8 protocol (as signed: 0 IPv4, 1 IPv6, others), u16 port, u8 length and the
//               interface name (length 0: none), then the address text (the rest)
//
// Checked on every TXT record:
//   - decoding does not depend on the order of the entries (same result or same kind of error;
//     RFC 6763 keeps no order);
//   - an accepted record has version 1, a name of 1-250 bytes of UTF-8 without control
//     characters, a fingerprint of 64 lower-case hex digits; it re-encodes into entries of at
//     most 255 bytes that decode to the same advertisement (unknown keys are dropped on the way).
// Checked on every resolver answer:
//   - an accepted route has a port, its description is ip:HOST:PORT or ip:[HOST]:PORT, and a zone
//     exactly when the address is IPv6 link-local; without a zone, PeerID accepts the
//     description as the same address.
#if canImport(Glibc)
import Glibc
#endif
import PeerVoiceCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Input(Array(UnsafeBufferPointer(start: data, count: size)))
    if input.u8() & 1 == 0 {
        txtRecord(&input)
    } else {
        resolverAnswer(&input)
    }
    return 0
}

func txtRecord(_ input: inout Input) {
    var entries: [[UInt8]] = []
    while !input.isEmpty {
        var length = Int(input.u8())
        if length == 255 { length += Int(input.u8()) }
        entries.append(input.take(length))
    }
    trace("TXT \(entries.map { String(decoding: $0, as: UTF8.self) })")
    let forward = Result { () throws(LANAdvertisementError) in try LANAdvertisement(txtEntries: entries) }
    let backward = Result { () throws(LANAdvertisementError) in try LANAdvertisement(txtEntries: entries.reversed()) }
    switch (forward, backward) {
    case (.success(let a), .success(let b)):
        check(a == b, "order changed the result: \(a) vs \(b)")
        checkAccepted(a)
    case (.failure(let a), .failure(let b)):
        // Which duplicate or which bad entry is found first may depend on the order; the kind may not.
        check(kind(a) == kind(b) || isEntryError(a) && isEntryError(b), "order changed the error: \(a) vs \(b)")
    default:
        check(false, "order decided acceptance: \(forward) vs \(backward)")
    }
}

func checkAccepted(_ ad: LANAdvertisement) {
    if let name = ad.name {
        check(!name.isEmpty && name.utf8.count <= 250, "name of \(name.utf8.count) bytes")
        check(!name.unicodeScalars.contains { $0.properties.generalCategory == .control }, "control character in name")
    }
    if let fingerprint = ad.fingerprint {
        check(fingerprint.utf8.count == 64 && fingerprint.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) },
              "fingerprint \(fingerprint)")
    }
    let encoded = ad.txtEntries
    check(encoded.allSatisfy { $0.count <= 255 }, "an encoded entry over 255 bytes")
    check(encoded.first == Array("pv=1".utf8), "version not first")
    guard let again = try? LANAdvertisement(txtEntries: encoded) else { return check(false, "re-encoded record refused") }
    check(again == ad, "re-encoding changed \(ad) into \(again)")
}

/// The error without its detail (which key, how many bytes).
func kind(_ error: LANAdvertisementError) -> String {
    String(describing: error).split(separator: " ").prefix(2).joined(separator: " ")
}

/// Errors about one entry: with several bad entries, either may be met first.
func isEntryError(_ error: LANAdvertisementError) -> Bool {
    switch error {
    case .entryTooLong, .emptyEntry, .malformedKey, .duplicateKey, .malformedValue, .invalidUTF8, .unsupportedVersion, .missingVersion:
        true
    case .tooManyEntries:
        false
    }
}

func resolverAnswer(_ input: inout Input) {
    let proto = Int32(Int8(bitPattern: input.u8()))
    let port = UInt16(input.u16())
    let nameLength = Int(input.u8())
    let interface = nameLength == 0 ? nil : String(decoding: input.take(nameLength), as: UTF8.self)
    let address = String(decoding: input.rest, as: UTF8.self)
    trace("resolver proto \(proto) port \(port) interface \(interface ?? "-") address \(address)")
    guard let route = try? LANRoute(addressProtocol: proto, address: address, port: port, interfaceName: interface) else { return }
    check(route.port == port && port != 0, "port \(route.port) from \(port)")
    let text = route.description
    check(text.hasPrefix("ip:") && text.hasSuffix(":\(port)"), "description \(text)")
    let zoned = route.host.contains("%")
    let first = address.lowercased().split(separator: ":", omittingEmptySubsequences: false).first ?? ""
    let linkLocal = proto == 1 && first.count == 4 && (UInt16(first, radix: 16).map { $0 & 0xFFC0 == 0xFE80 } ?? false)
    check(zoned == linkLocal, "zone \(zoned) for link-local \(linkLocal): \(text)")
    // Connect takes every route the resolver gives, link-local ones with their zone too.
    guard let parsed = try? PeerAddress(parsing: text) else { return check(false, "PeerAddress refuses \(text)") }
    check(parsed.description == text, "PeerAddress reads \(text) as \(parsed)")
}
