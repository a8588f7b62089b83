import GIO
import Glibc

/// Interface and address changes, from the kernel's rtnetlink broadcasts (links, IPv4 and IPv6
/// addresses), reported once they settle: a DHCP renewal or a Wi-Fi roam comes as a burst of
/// messages. Only that something changed matters here, so the messages are not parsed.
final class NetworkMonitor {
    /// A burst of changes is one report, this long after its last message.
    static let settle: Duration = .seconds(1)
    // linux/rtnetlink.h (not in Glibc's module): the multicast groups.
    private static let linkGroup: UInt32 = 0x1
    private static let ipv4AddressGroup: UInt32 = 0x10
    private static let ipv6AddressGroup: UInt32 = 0x100
    private static let netlinkRoute: Int32 = 0

    var changed: () -> Void = {}
    private var fd: Int32 = -1
    private var watch: EventSource?
    private var settling: EventSource?

    /// Starts listening; without a netlink socket (a sandbox) it logs why and stays quiet.
    func start() {
        let fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
                        Self.netlinkRoute)
        guard fd >= 0 else { return Log.info("network changes are not followed: no netlink socket (\(String(cString: strerror(errno))))") }
        // struct sockaddr_nl: family (u16), pad (u16), pid (u32, 0: the kernel picks), groups (u32).
        var address = sockaddr_storage()
        withUnsafeMutableBytes(of: &address) { bytes in
            bytes.storeBytes(of: UInt16(AF_NETLINK), toByteOffset: 0, as: UInt16.self)
            bytes.storeBytes(of: Self.linkGroup | Self.ipv4AddressGroup | Self.ipv6AddressGroup, toByteOffset: 8, as: UInt32.self)
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, 12) }
        }
        guard bound == 0 else {
            Log.info("network changes are not followed: netlink bind failed (\(String(cString: strerror(errno))))")
            close(fd)
            return
        }
        self.fd = fd
        watch = FDWatch.add(fd: fd, events: .readable) { [weak self] _ in
            self?.drain()
            return true
        }
    }

    func stop() {
        watch = nil
        settling = nil
        if fd >= 0 { close(fd) }
        fd = -1
    }

    private func drain() {
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while recv(fd, &buffer, buffer.count, 0) > 0 {}
        settling = Timer.after(Self.settle) { [weak self] in
            self?.settling = nil
            Log.info("the network changed: advertising afresh and redialling peers with messages waiting")
            self?.changed()
        }
    }
}
