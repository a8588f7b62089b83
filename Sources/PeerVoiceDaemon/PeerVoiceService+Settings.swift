import PeerVoiceCore

/// `SetName` and `SetVisible`: the service's side of `ServiceSettings`. A new name goes into the
/// HELLO of every link opened from now on and, while discovering, into the LAN advertisement's
/// TXT record; visibility chooses the methods StartDiscovery uses, and applies at once while
/// discovering.
extension PeerVoiceService {
    func setName(_ name: String) throws(ServiceError) {
        guard try settings.setName(name) else { return }
        Log.info("display name changed")
        lan?.updateAdvertisement(ownLANAdvertisement)
        emit(.propertiesChanged([.name]))
    }

    func setVisible(_ methodName: String, _ isVisible: Bool) throws(ServiceError) {
        guard let method = DiscoveryMethod(rawValue: methodName) else {
            let known = DiscoveryMethod.allCases.map(\.rawValue).joined(separator: ", ")
            throw .invalidArgument("\"\(methodName)\" is not a discovery method: use one of \(known)")
        }
        guard try settings.setVisible(method, isVisible) else { return }
        Log.info("\(isVisible ? "visible" : "not visible") on \(method.rawValue) from now on")
        emit(.propertiesChanged([.visible]))
        guard isDiscovering else { return }
        // Discovery is on: the method follows now (its failure is no failure of the setting).
        let applied: (Result<Void, ServiceError>) -> Void = { [unowned self] result in
            if case .failure(let error) = result { Log.info("SetVisible(\(method.rawValue)): \(error.message)") }
            emit(.propertiesChanged([.discovering]))
        }
        switch (method, isVisible) {
        case (.lan, true): applied(startLANDiscovery())
        case (.lan, false): _ = stopLANDiscovery()
        case (.bluetooth, true): startBluetoothDiscovery(completion: applied)
        case (.bluetooth, false): stopBluetoothDiscovery(completion: applied)
        }
    }

    /// StartDiscovery's Bluetooth half, when this device is to be visible over Bluetooth.
    func startVisibleBluetoothDiscovery(completion: @escaping (Result<Void, ServiceError>) -> Void) {
        guard settings.visible.contains(.bluetooth) else { return completion(.failure(Self.notVisible(on: .bluetooth))) }
        startBluetoothDiscovery(completion: completion)
    }

    static func notVisible(on method: DiscoveryMethod) -> ServiceError {
        .notAvailable(method == .lan ? "not visible on the LAN (SetVisible lan true turns it on)"
                                     : "not visible over Bluetooth (SetVisible bluetooth true turns it on)")
    }
}
