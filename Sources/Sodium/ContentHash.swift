import CSodium
import PeerVoiceCore

/// PeerVoiceCore's ``ContentHashing`` with libsodium: BLAKE2b-256 in pieces
/// (`crypto_generichash_init`, `_update`, `_final`), the hash `b2sum -l 256` prints.
extension LibSodium: ContentHashing {
    public var algorithm: ContentHashAlgorithm { .blake2b256 }

    public func makeHasher() -> any ContentHasher { BLAKE2bHasher() }
}

/// One BLAKE2b-256 computation. Its state (`crypto_generichash_state`, 64-byte aligned) lives
/// on the heap; not `Sendable`: one thread uses it.
final class BLAKE2bHasher: ContentHasher {
    private let state: UnsafeMutableRawPointer
    private var finished = false

    init() {
        state = UnsafeMutableRawPointer.allocate(byteCount: crypto_generichash_statebytes(), alignment: 64)
        let result = crypto_generichash_init(OpaquePointer(state), nil, 0,
                                             Int(TransferWire.hashBytes))
        precondition(result == 0, "crypto_generichash_init failed")
    }

    deinit { state.deallocate() }

    func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(!finished, "update after finish")
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = crypto_generichash_update(OpaquePointer(state),
                                      base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    func finish() -> [UInt8] {
        precondition(!finished, "finish called twice")
        finished = true
        var digest = [UInt8](repeating: 0, count: TransferWire.hashBytes)
        let result = digest.withUnsafeMutableBufferPointer {
            crypto_generichash_final(OpaquePointer(state), $0.baseAddress!, $0.count)
        }
        precondition(result == 0, "crypto_generichash_final failed")
        return digest
    }
}
