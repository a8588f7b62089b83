import CGio

/// An immutable GLib `GVariant`: the values D-Bus messages carry.
///
/// Holds one strong reference (floating references are sunk on creation), so a `Variant` can be
/// kept, passed around and handed to GDBus, which takes its own reference.
///
/// `@unchecked Sendable`: a GVariant never changes after construction and its reference count is atomic.
public final class Variant: @unchecked Sendable {
    let pointer: OpaquePointer

    /// Adopts `pointer`, sinking a floating reference or taking a new one.
    init(adopting pointer: OpaquePointer) {
        self.pointer = g_variant_ref_sink(pointer)
    }

    /// Takes over a reference the caller already owns (a `(transfer full)` return value).
    init(owning pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit { g_variant_unref(pointer) }

    /// Runs `body` with the `GVariant*` while this value is guaranteed alive: in optimised builds a
    /// temporary `Variant` may otherwise be released before C has taken its own reference.
    func withPointer<Result, Failure: Error>(_ body: (OpaquePointer) throws(Failure) -> Result) throws(Failure) -> Result {
        try withExtendedLifetime(self) { () throws(Failure) in try body(pointer) }
    }

    /// Like `withPointer`, for an array of children.
    static func withPointers<Result>(_ items: [Variant], _ body: (inout [OpaquePointer?]) -> Result) -> Result {
        withExtendedLifetime(items) {
            var pointers: [OpaquePointer?] = items.map { $0.pointer }
            return body(&pointers)
        }
    }

    public convenience init(_ string: String) { self.init(adopting: g_variant_new_string(string)) }
    public convenience init(_ bool: Bool) { self.init(adopting: g_variant_new_boolean(bool ? 1 : 0)) }
    public convenience init(_ value: UInt32) { self.init(adopting: g_variant_new_uint32(value)) }
    public convenience init(_ value: UInt64) { self.init(adopting: g_variant_new_uint64(guint64(value))) }
    public convenience init(_ value: Int32) { self.init(adopting: g_variant_new_int32(value)) }
    public convenience init(_ value: Double) { self.init(adopting: g_variant_new_double(value)) }

    /// A byte array (`ay`), e.g. one DNS-SD TXT entry.
    public convenience init(bytes: [UInt8]) {
        self.init(adopting: bytes.withUnsafeBufferPointer {
            g_variant_new_fixed_array(cgio_type_from_string("y"), $0.baseAddress, gsize($0.count), 1)
        })
    }

    /// A file descriptor's index into the message's descriptor list (`h`).
    public convenience init(handle: Int32) { self.init(adopting: g_variant_new_handle(handle)) }

    /// A D-Bus object path (`o`).
    public convenience init(objectPath: String) { self.init(adopting: g_variant_new_object_path(objectPath)) }

    /// A tuple (the body of every D-Bus message): `Variant(tuple: [Variant("x"), Variant(true)])` is `("x", true)`.
    public convenience init(tuple items: [Variant]) {
        self.init(adopting: Variant.withPointers(items) { g_variant_new_tuple(&$0, gsize($0.count)) })
    }

    /// An array whose elements have the D-Bus type `elementType` (needed when `items` is empty).
    public convenience init(array items: [Variant], elementType: String) {
        let type = g_variant_type_new(elementType)!
        defer { g_variant_type_free(type) }
        self.init(adopting: Variant.withPointers(items) { g_variant_new_array(type, &$0, gsize($0.count)) })
    }

    /// A `v` box around `value`.
    public convenience init(boxing value: Variant) { self.init(adopting: value.withPointer { g_variant_new_variant($0) }) }

    /// A dictionary `a{sv}`.
    public convenience init(dictionary: [(String, Variant)]) {
        self.init(array: dictionary.map { Variant(dictionaryEntry: Variant($0), Variant(boxing: $1)) }, elementType: "{sv}")
    }

    /// One `{kv}` entry of a dictionary (`a{kv}` is an array of them), e.g. `{oa{sa{sv}}}`.
    public convenience init(dictionaryEntry key: Variant, _ value: Variant) {
        self.init(adopting: key.withPointer { key in value.withPointer { g_variant_new_dict_entry(key, $0) } })
    }

    /// Parses GVariant text format, e.g. `Variant(parsing: "('a', uint32 3)")`; nil if malformed.
    public convenience init?(parsing text: String) {
        guard let value = g_variant_parse(nil, text, nil, nil, nil) else { return nil }
        self.init(owning: value)
    }

    /// The D-Bus type string, e.g. `(ss)`.
    public var typeString: String { String(cString: g_variant_get_type_string(pointer)) }

    public var string: String? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("s")) != 0
            || g_variant_is_of_type(pointer, cgio_type_from_string("o")) != 0 else { return nil }
        return String(cString: g_variant_get_string(pointer, nil))
    }

    public var bool: Bool? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("b")) != 0 else { return nil }
        return g_variant_get_boolean(pointer) != 0
    }

    public var uint32: UInt32? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("u")) != 0 else { return nil }
        return g_variant_get_uint32(pointer)
    }

    public var double: Double? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("d")) != 0 else { return nil }
        return g_variant_get_double(pointer)
    }

    public var int32: Int32? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("i")) != 0 else { return nil }
        return g_variant_get_int32(pointer)
    }

    /// The bytes of an `ay`.
    public var bytes: [UInt8]? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("ay")) != 0 else { return nil }
        var count: gsize = 0
        guard let base = g_variant_get_fixed_array(pointer, &count, 1), count > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: Int(count)))
    }

    public var uint64: UInt64? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("t")) != 0 else { return nil }
        return UInt64(g_variant_get_uint64(pointer))
    }

    /// The value inside a `v` box.
    public var unboxed: Variant? {
        guard g_variant_is_of_type(pointer, cgio_type_from_string("v")) != 0 else { return nil }
        return Variant(owning: g_variant_get_variant(pointer))
    }

    /// Number of children of a tuple, array or dictionary entry; 0 for basic values.
    public var count: Int {
        g_variant_is_container(pointer) != 0 ? Int(g_variant_n_children(pointer)) : 0
    }

    public subscript(index: Int) -> Variant {
        precondition(index >= 0 && index < count, "Variant index \(index) out of range 0..<\(count)")
        return Variant(owning: g_variant_get_child_value(pointer, gsize(index)))
    }

    public var children: [Variant] { (0..<count).map { self[$0] } }

    /// Looks up `key` in an `a{sv}` dictionary.
    public func lookup(_ key: String) -> Variant? {
        guard let value = g_variant_lookup_value(pointer, key, nil) else { return nil }
        return Variant(owning: value)
    }
}

extension Variant: CustomStringConvertible {
    /// GVariant text format with type annotations, as `gdbus` prints it.
    public var description: String {
        let text = g_variant_print(pointer, 1)!
        defer { g_free(text) }
        return String(cString: text)
    }
}

extension Variant: Equatable {
    public static func == (lhs: Variant, rhs: Variant) -> Bool {
        lhs.withPointer { l in rhs.withPointer { r in g_variant_equal(UnsafeRawPointer(l), UnsafeRawPointer(r)) != 0 } }
    }
}
