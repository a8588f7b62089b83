/// A hash of a file's content computed in pieces (BLAKE2b-256 over the whole file: what
/// `b2sum -l 256 FILE` prints). The core declares it; the Sodium module implements it with
/// libsodium's `crypto_generichash`, and tests may bring their own.
public protocol ContentHasher {
    /// Adds the next bytes of the content.
    mutating func update(_ bytes: UnsafeRawBufferPointer)
    /// Adds `count` zero bytes (a hole in a sparse file). A requirement, so that a hasher which
    /// can fold zeros without touching them (the fuzz target's stand-in) need not loop over them.
    mutating func updateWithZeros(_ count: UInt64)
    /// The hash of everything added (``TransferWire/hashBytes`` bytes). Call once.
    mutating func finish() -> [UInt8]
}

extension ContentHasher {
    public mutating func update(_ bytes: some Collection<UInt8>) {
        if let done: Void = bytes.withContiguousStorageIfAvailable({ update(UnsafeRawBufferPointer($0)) }) { return done }
        let copy = Array(bytes)
        copy.withUnsafeBytes { update($0) }
    }

    /// Adds `count` zero bytes a block at a time: what a real hash has to do.
    public mutating func updateWithZeros(_ count: UInt64) {
        let block = [UInt8](repeating: 0, count: 64 * 1024)
        var left = count
        block.withUnsafeBytes { zeros in
            while left > 0 {
                let step = Int(min(left, UInt64(zeros.count)))
                update(UnsafeRawBufferPointer(rebasing: zeros[0..<step]))
                left -= UInt64(step)
            }
        }
    }
}

/// Makes ``ContentHasher``s: what a transfer is given, so that it can hash each file afresh.
public protocol ContentHashing: Sendable {
    func makeHasher() -> any ContentHasher
}
