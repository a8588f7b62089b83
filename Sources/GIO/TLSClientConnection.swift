import CGio
import Glibc

/// A TLS client stream to `host:port` through GIO: `GSocketClient` for the TCP connection,
/// `GTlsClientConnection` (glib-networking's GnuTLS backend) for TLS. Main context only: every
/// callback runs on the thread-default main context that opened it.
///
/// Certificates are not judged here: the handshake accepts any server certificate (Mumble servers
/// sign their own), and the caller pins `peerCertificateFingerprint` before sending anything.
public final class TLSClientConnection {
    /// Why a connection could not be made or ended; `message` is GIO's, for people.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let message: String
        /// The TCP connection was made and the TLS handshake failed.
        public var inHandshake = false
        public var description: String { message }
    }

    /// Bytes as they arrive (at most 64 KiB per call).
    public var onReceive: ([UInt8]) -> Void = { _ in }
    /// The stream ended: nil when the server closed it, else the error. Called once, never after `close()`.
    public var onClosed: (Failure?) -> Void = { _ in }

    /// SHA-256 of the server's certificate (DER), as `openssl x509 -fingerprint -sha256` prints
    /// it: upper-case hex pairs joined by colons.
    public private(set) var peerCertificateFingerprint = ""
    /// The numeric address and port the TCP connection reached (after name resolution): where
    /// a protocol with a UDP side, such as Mumble's voice, sends its datagrams.
    public private(set) var peerAddress: (host: String, port: UInt16)?

    private let cancellable: UnsafeMutablePointer<GCancellable>
    private var stream: UnsafeMutablePointer<GIOStream>?
    private var socketConnection: UnsafeMutablePointer<GSocketConnection>?
    private let readBuffer = UnsafeMutableRawPointer.allocate(byteCount: TLSClientConnection.readSize, alignment: 8)
    private static let readSize = 64 * 1024
    private var pendingWrites: [[UInt8]] = []
    /// The write GIO holds now (kept alive until its callback).
    private var writing: [UInt8]?
    private var isClosed = false
    private var connected: ((Result<TLSClientConnection, Failure>) -> Void)?
    private var timeout: EventSource?
    private var clientCertificate: String?

    private init() {
        cancellable = g_cancellable_new()
    }

    deinit {
        g_cancellable_cancel(cancellable)
        if let stream { g_object_unref(stream) }
        if let socketConnection { g_object_unref(socketConnection) }
        g_object_unref(cancellable)
        readBuffer.deallocate()
    }

    /// Connects and completes the TLS handshake within `timeout`, then starts reading;
    /// `completion` runs once on the main context. `clientCertificate`: a PEM file holding our
    /// certificate and its private key, presented when the server asks.
    public static func connect(host: String, port: UInt16, timeout: Duration, clientCertificate: String? = nil,
                               completion: @escaping (Result<TLSClientConnection, Failure>) -> Void) {
        let connection = TLSClientConnection()
        connection.clientCertificate = clientCertificate
        connection.connected = completion
        connection.timeout = Timer.after(timeout) { [weak connection] in
            guard let connection, connection.connected != nil else { return }
            connection.finishConnecting(.failure(Failure(message: "no TLS connection to \(host):\(port) within \(timeout)")))
        }
        let client = g_socket_client_new()!
        defer { g_object_unref(client) }
        g_socket_client_connect_to_host_async(client, host, port, connection.cancellable, socketConnected,
                                              Unmanaged.passRetained(connection).toOpaque())
    }

    /// Writes queued and not yet handed to GIO (the one in flight counts too).
    public var queuedWrites: Int { pendingWrites.count + (writing == nil ? 0 : 1) }

    /// Queues bytes; they go in order, one GIO write at a time.
    public func send(_ bytes: [UInt8]) {
        guard !isClosed, !bytes.isEmpty else { return }
        pendingWrites.append(bytes)
        writeNext()
    }

    /// Ends the connection now; what is queued is dropped, and `onClosed` is not called.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        timeout?.cancel()
        pendingWrites = []
        g_cancellable_cancel(cancellable)
        if let stream { g_io_stream_close_async(stream, G_PRIORITY_DEFAULT, nil, nil, nil) }
    }

    private func finishConnecting(_ result: Result<TLSClientConnection, Failure>) {
        guard let completion = connected else { return }
        connected = nil
        timeout?.cancel()
        timeout = nil
        if case .failure = result { close() }
        completion(result)
        if case .success = result { readNext() }
    }

    fileprivate func socketDidConnect(_ socket: UnsafeMutablePointer<GSocketConnection>) {
        socketConnection = socket
        var error: UnsafeMutablePointer<GError>?
        // Small writes (20 ms voice packets) go at once, not held by Nagle's algorithm for an ACK
        // (Mumble's own client asks for the same).
        _ = g_socket_set_option(g_socket_connection_get_socket(socket), gint(IPPROTO_TCP), gint(TCP_NODELAY), 1, nil)
        if let remote = g_socket_connection_get_remote_address(socket, nil) {
            if g_type_check_instance_is_a(UnsafeMutableRawPointer(remote).assumingMemoryBound(to: GTypeInstance.self),
                                          g_inet_socket_address_get_type()) != 0 {
                let inet = UnsafeMutableRawPointer(remote).assumingMemoryBound(to: GInetSocketAddress.self)
                if let text = g_inet_address_to_string(g_inet_socket_address_get_address(inet)) {
                    peerAddress = (String(cString: text), g_inet_socket_address_get_port(inet))
                    g_free(text)
                }
            }
            g_object_unref(remote)
        }
        guard let tls = g_tls_client_connection_new(socket.withMemoryRebound(to: GIOStream.self, capacity: 1) { $0 }, nil, &error) else {
            return finishConnecting(.failure(Failure(consuming: error)))
        }
        let tlsStream = UnsafeMutableRawPointer(tls).assumingMemoryBound(to: GIOStream.self)
        stream = tlsStream
        if let clientCertificate {
            guard let certificate = g_tls_certificate_new_from_file(clientCertificate, &error) else {
                return finishConnecting(.failure(Failure(consuming: error)))
            }
            g_tls_connection_set_certificate(tlsConnection(tls), certificate)
            g_object_unref(certificate)
        }
        // Any certificate: the caller pins it (see the type's comment).
        g_signal_connect_data(tls, "accept-certificate", unsafeBitCast(acceptAnyCertificate, to: GCallback.self), nil, nil, GConnectFlags(0))
        g_tls_connection_handshake_async(tlsConnection(tls), G_PRIORITY_DEFAULT, cancellable, handshakeDone,
                                         Unmanaged.passRetained(self).toOpaque())
    }

    fileprivate func handshakeDidEnd(_ error: UnsafeMutablePointer<GError>?) {
        if let error {
            var failure = Failure(consuming: error)
            failure.inHandshake = stream != nil
            return finishConnecting(.failure(failure))
        }
        guard let stream, let certificate = g_tls_connection_get_peer_certificate(tlsConnection(stream)) else {
            return finishConnecting(.failure(Failure(message: "the server sent no certificate")))
        }
        var value = GValue()
        g_value_init(&value, g_byte_array_get_type())
        g_object_get_property(UnsafeMutableRawPointer(certificate).assumingMemoryBound(to: GObject.self), "certificate", &value)
        if let der = g_value_get_boxed(&value)?.assumingMemoryBound(to: GByteArray.self),
           let hex = g_compute_checksum_for_data(G_CHECKSUM_SHA256, der.pointee.data, gsize(der.pointee.len)) {
            let digits = Array(String(cString: hex).uppercased())
            g_free(hex)
            peerCertificateFingerprint = stride(from: 0, to: digits.count, by: 2).map { String(digits[$0..<$0 + 2]) }.joined(separator: ":")
        }
        g_value_unset(&value)
        finishConnecting(.success(self))
    }

    private func readNext() {
        guard !isClosed, let stream else { return }
        g_input_stream_read_async(g_io_stream_get_input_stream(stream), readBuffer, gsize(Self.readSize), G_PRIORITY_DEFAULT,
                                  cancellable, readDone, Unmanaged.passRetained(self).toOpaque())
    }

    fileprivate func readDidEnd(count: Int, error: UnsafeMutablePointer<GError>?) {
        if isClosed {
            if let error { g_error_free(error) }
            return
        }
        if count > 0 {
            onReceive(Array(UnsafeRawBufferPointer(start: readBuffer, count: count)))
            return readNext()
        }
        end(error.map { Failure(consuming: $0) })
    }

    private func writeNext() {
        guard writing == nil, !pendingWrites.isEmpty, let stream else { return }
        let bytes = pendingWrites.removeFirst()
        writing = bytes
        bytes.withUnsafeBytes { buffer in
            // The array's storage stays alive (and unmoved) in `writing` until the callback.
            g_output_stream_write_all_async(g_io_stream_get_output_stream(stream), buffer.baseAddress, gsize(buffer.count),
                                            G_PRIORITY_DEFAULT, cancellable, writeDone, Unmanaged.passRetained(self).toOpaque())
        }
    }

    fileprivate func writeDidEnd(error: UnsafeMutablePointer<GError>?) {
        writing = nil
        if isClosed {
            if let error { g_error_free(error) }
            return
        }
        if let error { return end(Failure(consuming: error)) }
        writeNext()
    }

    private func end(_ failure: Failure?) {
        guard !isClosed else { return }
        close()
        onClosed(failure)
    }
}

extension TLSClientConnection.Failure {
    init(consuming error: UnsafeMutablePointer<GError>?) {
        guard let error else {
            self.init(message: "failed without an error")
            return
        }
        self.init(message: String(cString: error.pointee.message))
        g_error_free(error)
    }
}

private func tlsConnection(_ object: UnsafeMutableRawPointer) -> UnsafeMutablePointer<GTlsConnection> {
    object.assumingMemoryBound(to: GTlsConnection.self)
}

private let acceptAnyCertificate: @convention(c) (gpointer?, gpointer?, UInt32, gpointer?) -> gboolean = { _, _, _, _ in 1 }

private let socketConnected: GAsyncReadyCallback = { source, result, userData in
    let connection = Unmanaged<TLSClientConnection>.fromOpaque(userData!).takeRetainedValue()
    var error: UnsafeMutablePointer<GError>?
    let client = UnsafeMutableRawPointer(source!).assumingMemoryBound(to: GSocketClient.self)
    if let socket = g_socket_client_connect_to_host_finish(client, result, &error) {
        connection.socketDidConnect(socket)
    } else {
        connection.handshakeDidEnd(error ?? g_error_new_literal(g_io_error_quark(), gint(G_IO_ERROR_FAILED.rawValue), "connection failed"))
    }
}

private let handshakeDone: GAsyncReadyCallback = { source, result, userData in
    let connection = Unmanaged<TLSClientConnection>.fromOpaque(userData!).takeRetainedValue()
    var error: UnsafeMutablePointer<GError>?
    _ = g_tls_connection_handshake_finish(tlsConnection(source!), result, &error)
    connection.handshakeDidEnd(error)
}

private let readDone: GAsyncReadyCallback = { source, result, userData in
    let connection = Unmanaged<TLSClientConnection>.fromOpaque(userData!).takeRetainedValue()
    var error: UnsafeMutablePointer<GError>?
    let count = g_input_stream_read_finish(UnsafeMutableRawPointer(source!).assumingMemoryBound(to: GInputStream.self), result, &error)
    connection.readDidEnd(count: max(0, count), error: error)
}

private let writeDone: GAsyncReadyCallback = { source, result, userData in
    let connection = Unmanaged<TLSClientConnection>.fromOpaque(userData!).takeRetainedValue()
    var error: UnsafeMutablePointer<GError>?
    var written: gsize = 0
    _ = g_output_stream_write_all_finish(UnsafeMutableRawPointer(source!).assumingMemoryBound(to: GOutputStream.self), result, &written, &error)
    connection.writeDidEnd(error: error)
}
