/// A hash of a file's content computed in pieces, over the whole file (``ContentHashAlgorithm``:
/// what `b2sum -l 256 FILE` or `sha256sum FILE` prints). The core declares it; the Sodium module
/// implements BLAKE2b-256 with libsodium's `crypto_generichash`, the OpenSSLCrypto module SHA-256
/// with libcrypto, and tests may bring their own.
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

/// Makes ``ContentHasher``s of one algorithm: what a transfer stream is given, so that it can
/// hash each file afresh.
public protocol ContentHashing: Sendable {
    var algorithm: ContentHashAlgorithm { get }
    func makeHasher() -> any ContentHasher
}

/// The hash of a transfer's files (docs/PROTOCOL.md §15.1): 32 bytes either way.
public enum ContentHashAlgorithm: Sendable, Equatable, CustomStringConvertible {
    /// Every link that carries transfers can (version 9).
    case blake2b256
    /// A link where both sides announce ``Capabilities/sha256FileHashes`` (version 10): about
    /// twice BLAKE2b's speed on a CPU with SHA instructions (with BLAKE2b, hashing at both ends
    /// was the largest share of a transfer's CPU: bench/files/README.md).
    case sha256

    /// Its name for people (in the error of a file that fails it).
    public var description: String {
        switch self {
        case .blake2b256: "BLAKE2b-256"
        case .sha256: "SHA-256"
        }
    }
}

/// The content hashes one side implements, and which of them a stream uses: SHA-256 on a link
/// that carries ``Capabilities/sha256FileHashes`` (both sides announced it), else BLAKE2b-256.
/// Both ends of a stream read the same link's terms, so they choose alike without a word on the
/// stream; every attempt chooses afresh (a resumed file's prefix is hashed again at both ends).
public struct ContentHashes: Sendable {
    /// The version that brought SHA-256 file hashes.
    public static let sha256Version: UInt16 = Capabilities.sha256FileHashes.introducedIn!

    private let blake2b256: any ContentHashing
    private let sha256: (any ContentHashing)?

    /// `sha256` nil: this side neither announces nor uses SHA-256.
    public init(blake2b256: any ContentHashing, sha256: (any ContentHashing)?) {
        precondition(blake2b256.algorithm == .blake2b256 && (sha256?.algorithm ?? .sha256) == .sha256, "hashings swapped")
        self.blake2b256 = blake2b256
        self.sha256 = sha256
    }

    /// What this side's HELLO announces for them.
    public var capabilities: Capabilities { sha256 == nil ? [] : .sha256FileHashes }

    /// The hashing of a stream on a link at `negotiated` (nil, no link known: BLAKE2b-256, which
    /// every side that carries transfers has).
    public func hashing(on negotiated: LinkProtocol?) -> any ContentHashing {
        guard let sha256, negotiated?.capabilities.contains(.sha256FileHashes) == true else { return blake2b256 }
        return sha256
    }
}
