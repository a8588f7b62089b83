import Foundation
import PeerVoiceAppModel
import XCTest

final class AppModelTests: XCTestCase {
    private var model: AppModel!
    private var changes: [AppModel.Change] = []

    override func setUp() {
        model = AppModel()
        changes = []
        model.onChange = { [unowned self] in changes.append($0) }
    }

    /// The service's objects as the bus client decodes them: each row a peer object (under
    /// `peers/` when paired, else `found/`).
    private func list(_ rows: PeerRow...) {
        model.objectsListed(Dictionary(uniqueKeysWithValues: rows.map {
            (($0.isPaired ? "/org/example/PeerVoice/peers/" : "/org/example/PeerVoice/found/") + $0.id, ServiceObject.peer($0))
        }))
    }

    func testSettingsFollowTheServiceAndNeedOneThatHasThem() {
        model.serviceAppeared()
        XCTAssertFalse(model.settingsAvailable, "a service that has not said its Name (or has none)")
        changes = []
        model.settingsChanged(name: "Ada", visible: ["bluetooth", "lan"])
        XCTAssertEqual(changes, [.settings])
        XCTAssertTrue(model.settingsAvailable)
        XCTAssertTrue(model.isVisible(on: "lan"))
        model.settingsChanged(name: nil, visible: ["bluetooth"])
        XCTAssertEqual(model.displayName, "Ada", "a PropertiesChanged without Name keeps it")
        XCTAssertFalse(model.isVisible(on: "lan"))
        changes = []
        model.settingsChanged(name: "Ada", visible: nil)
        XCTAssertEqual(changes, [], "nothing new, nothing to render")
        model.serviceVanished()
        XCTAssertFalse(model.settingsAvailable)
    }

    func testFoundPeersJoinTheKnownOnesAndLeaveWhenLost() {
        list(PeerRow(id: "ip:10.0.0.2:47800", name: "Ada", transport: "ip", state: .disconnected))
        model.peerFound("AA:BB:CC:DD:EE:FF", name: "Phone", transport: "bluetooth")
        XCTAssertEqual(model.peers.map(\.displayName), ["Ada", "Phone"])
        XCTAssertEqual(model.peers[1].state, .nearby)

        model.peerLost("ip:10.0.0.2:47800")
        model.peerLost("AA:BB:CC:DD:EE:FF")
        XCTAssertEqual(model.peers.map(\.id), ["ip:10.0.0.2:47800"], "a known peer stays when out of range")
    }

    func testARelistKeepsFoundOnlyRows() {
        model.peerFound("AA:BB:CC:DD:EE:FF", name: "Phone", transport: "bluetooth")
        list(PeerRow(id: "ip:10.0.0.2:47800", name: "Ada", transport: "ip", state: .connected))
        XCTAssertEqual(Set(model.peers.map(\.id)), ["ip:10.0.0.2:47800", "AA:BB:CC:DD:EE:FF"])
    }

    func testARelistWithoutTheSelectedPeerClearsTheSelection() {
        model.peerStateChanged("ip:10.0.0.9:1", state: .connecting, transport: "")
        model.select("ip:10.0.0.9:1")
        list()
        XCTAssertNil(model.selectedPeer)
        XCTAssertTrue(model.peers.isEmpty)
    }

    func testARowWithoutANameShowsItsID() {
        model.peerStateChanged("ip:10.0.0.9:1", state: .connecting, transport: "ip")
        XCTAssertEqual(model.peers.first?.displayName, "ip:10.0.0.9:1")
    }

    func testPeerIdentifiedRenamesTheRowItsChatSelectionAndQuestion() {
        model.peerStateChanged("ip:10.0.0.2:47800", state: .pairing, transport: "ip")
        model.select("ip:10.0.0.2:47800")
        model.messageQueued(to: "ip:10.0.0.2:47800", id: "m1", text: "hi", timeMs: 1)
        model.pairingRequested(peer: "ip:10.0.0.2:47800", name: "Ada", passkey: "123456", kind: .confirm)

        model.peerIdentified(address: "ip:10.0.0.2:47800", as: "pv:abc")

        XCTAssertEqual(model.peers.map(\.id), ["pv:abc"])
        XCTAssertEqual(model.selectedPeer, "pv:abc")
        XCTAssertEqual(model.messages(with: "pv:abc").map(\.text), ["hi"])
        XCTAssertTrue(model.messages(with: "ip:10.0.0.2:47800").isEmpty)
        XCTAssertEqual(model.question?.peer, "pv:abc")
    }

    func testPeerIdentifiedMergesIntoAnExistingRow() {
        list(PeerRow(id: "pv:abc", name: "Ada", transport: "ip", state: .disconnected))
        model.peerStateChanged("ip:10.0.0.2:47800", state: .connected, transport: "ip")
        model.peerIdentified(address: "ip:10.0.0.2:47800", as: "pv:abc")
        XCTAssertEqual(model.peers, [PeerRow(id: "pv:abc", name: "Ada", transport: "ip", state: .connected)])
    }

    func testThePairingCodeIsGroupedAndAShowOnlyCodeDoesNotAsk() {
        model.pairingRequested(peer: "p", name: "Ada", passkey: "042917", kind: .confirm)
        XCTAssertEqual(model.question?.groupedPasskey, "042 917")
        XCTAssertEqual(model.question?.asks, true)
        model.pairingRequested(peer: "p", name: "Ada", passkey: "042917", kind: .show)
        XCTAssertEqual(model.question?.asks, false)
    }

    func testTheQuestionIsWithdrawnWhenSettledForItsPeerOnly() {
        model.pairingRequested(peer: "p", name: "Ada", passkey: "042917", kind: .confirm)
        model.pairingSettled(peer: "other", accepted: true)
        XCTAssertNotNil(model.question)
        model.pairingSettled(peer: "p", accepted: false)
        XCTAssertNil(model.question)
        XCTAssertTrue(changes.contains(.question))
    }

    func testAShownCodeIsWithdrawnWhenThePeerConnects() {
        model.peerStateChanged("p", state: .pairing, transport: "bluetooth")
        model.pairingRequested(peer: "p", name: "Phone", passkey: "123456", kind: .show)
        model.peerStateChanged("p", state: .connected, transport: "bluetooth")
        XCTAssertNil(model.question)
    }

    func testSentMessagesGoFromQueuedToDeliveredOrFailed() {
        model.messageQueued(to: "p", id: "m1", text: "one", timeMs: 10)
        model.messageQueued(to: "p", id: "m2", text: "two", timeMs: 20)
        model.messageDelivered(to: "p", id: "m1")
        model.messageFailed(to: "p", id: "m2", reason: "the peer was removed")
        XCTAssertEqual(model.messages(with: "p").map(\.state), [.delivered, .failed("the peer was removed")])
    }

    func testADeliveryThatOvertakesTheSendReplyIsKept() {
        model.messageDelivered(to: "p", id: "m1")
        model.messageQueued(to: "p", id: "m1", text: "fast", timeMs: 10)
        XCTAssertEqual(model.messages(with: "p"), [ChatMessage(id: "m1", incoming: false, text: "fast", state: .delivered, timeMs: 0)])
    }

    func testHistoryAndLiveMessagesMergeInTimeOrder() {
        model.messageReceived(from: "p", id: "m3", text: "live", timeMs: 30)
        model.history(of: "p", [ChatMessage(historyID: "m1", status: "delivered", timeMs: 10, text: "old"),
                                ChatMessage(historyID: "m2", status: "received", timeMs: 20, text: "reply")])
        XCTAssertEqual(model.messages(with: "p").map(\.text), ["old", "reply", "live"])
        XCTAssertEqual(model.messages(with: "p").map(\.incoming), [false, true, true])
    }

    func testHoldToMuteMutesWhileHeldAndOnlyOnce() {
        XCTAssertEqual(model.holdPressed(), true)
        XCTAssertNil(model.holdPressed(), "key repeat is not a second press")
        XCTAssertEqual(model.holdReleased(), false)
        XCTAssertNil(model.holdReleased(), "focus loss after the release changes nothing")
    }

    func testHoldToTalkOpensTheMicrophoneOnlyWhileHeld() {
        model.holdMode = .holdToTalk
        XCTAssertEqual(model.holdLabel, "Hold to talk")
        XCTAssertEqual(model.holdPressed(), false)
        XCTAssertEqual(model.holdReleased(), true)
    }

    func testActionsFollowTheSelectedPeersState() {
        model.serviceAppeared()
        model.peerStateChanged("p", state: .disconnected, transport: "ip")
        XCTAssertEqual(model.actions, PeerActions(), "nothing selected")
        model.select("p")
        XCTAssertTrue(model.actions.connect)
        XCTAssertFalse(model.actions.voice)
        model.peerStateChanged("p", state: .connected, transport: "ip")
        XCTAssertEqual(model.actions.connect, false)
        XCTAssertEqual(model.actions.disconnect, true)
        XCTAssertEqual(model.actions.voiceLabel, "Start voice")
        model.voiceStateChanged("p", active: true)
        XCTAssertEqual(model.actions.voiceLabel, "Stop voice")
    }

    func testMuteMirrorsTheServiceAndReportsOnlyChanges() {
        model.muteChanged(false)
        XCTAssertFalse(changes.contains(.mute))
        model.muteChanged(true)
        XCTAssertTrue(model.muted)
        XCTAssertEqual(changes, [.mute])
    }

    func testAChangedKeyOffersForgetAndPairAgain() {
        model.callFailed("Connect", peer: "p", errorName: "org.example.PeerVoice.Error.Rejected",
                         message: "p presented an identity key other than the pinned one: it may be an impostor.")
        XCTAssertEqual(model.notice?.remedy, .forgetAndPairAgain(peer: "p"))
    }

    func testServiceErrorsKeepTheServicesWords() {
        model.callFailed("Search nearby", peer: nil, errorName: "org.example.PeerVoice.Error.NotAvailable",
                         message: "Bluetooth is off: turn it on in Settings")
        XCTAssertEqual(model.notice, Notice(text: "Search nearby: Bluetooth is off: turn it on in Settings"))
    }

    func testAFailedActivationSaysWhyAndOffersRetryUntilTheServiceAppears() {
        XCTAssertEqual(model.peerListState, .starting)
        model.activationFailed(errorName: "org.freedesktop.DBus.Error.ServiceUnknown", message: "not provided by any .service files")
        guard case .serviceNotRunning(let reason) = model.peerListState else { return XCTFail("the list shows \(model.peerListState)") }
        XCTAssertTrue(reason.contains("not installed"), reason)
        model.activationRetried()
        XCTAssertEqual(model.peerListState, .starting, "Retry: starting until it appears or fails again")
        model.serviceAppeared()
        XCTAssertEqual(model.service, .running)
        XCTAssertNil(model.notice)
    }

    func testAnActivationFailureThatCrossedTheServicesStartIsIgnored() {
        model.serviceAppeared()
        model.activationFailed(errorName: "org.freedesktop.DBus.Error.ServiceUnknown", message: "no .service file")
        XCTAssertEqual(model.service, .running)
        XCTAssertNil(model.notice)
    }

    func testAServiceThatStopsSaysSoWithRetryButNotBeforeItFirstCame() {
        model.serviceVanished()
        XCTAssertEqual(model.peerListState, .starting, "the name watch reports no owner while activation is under way")
        model.serviceAppeared()
        model.pairingRequested(peer: "p", name: "Ada", passkey: "123456", kind: .confirm)
        model.serviceVanished()
        XCTAssertEqual(model.peerListState, .serviceNotRunning("The PeerVoice service is not running."))
        XCTAssertNil(model.question, "a question the service can no longer take an answer for")
    }

    func testACallThatFindsTheServiceGoneSaysSoInTheListNotInAToast() {
        model.serviceAppeared()
        model.callFailed("Send", peer: "p", errorName: "org.freedesktop.DBus.Error.NameHasNoOwner", message: "no owner")
        XCTAssertEqual(model.peerListState, .serviceNotRunning("The PeerVoice service is not running."))
        XCTAssertNil(model.notice)
    }

    func testTheEmptyListSaysWhetherBluetoothOrTheNetworkCanSearch() {
        model.serviceAppeared()
        XCTAssertEqual(model.peerListState, .noOneNearby(searching: false), "a service that has not said searches over Bluetooth")
        model.capabilitiesChanged(discoveryMethods: [], audioProcessing: nil)
        XCTAssertEqual(model.peerListState, .bluetoothOff(canSearchNetwork: false, searching: false))
        model.capabilitiesChanged(discoveryMethods: ["lan"], audioProcessing: nil)
        model.discoveringChanged(true)
        XCTAssertEqual(model.peerListState, .bluetoothOff(canSearchNetwork: true, searching: true))
        changes = []
        model.capabilitiesChanged(discoveryMethods: ["bluetooth", "lan"], audioProcessing: nil)
        XCTAssertEqual(changes, [.service])
        XCTAssertEqual(model.peerListState, .noOneNearby(searching: true))
        model.peerFound("AA:BB:CC:DD:EE:FF", name: "Phone", transport: "bluetooth")
        XCTAssertEqual(model.peerListState, .peers)
    }

    func testPeerObjectsFallIntoPairedPeersAndNearbyDevicesByName() {
        list(PeerRow(id: "pv:c", name: "charlie", transport: "ip", state: .connected, isPaired: true),
             PeerRow(id: "pv:a", name: "Alpha", transport: "ip", state: .disconnected, isPaired: true),
             PeerRow(id: "AA:BB:CC:DD:EE:01", name: "", transport: "bluetooth", state: .pairing))
        model.peerFound("ip:10.0.0.7:47800", name: "Bravo’s desk", transport: "ip")
        XCTAssertEqual(model.pairedPeers.map(\.displayName), ["Alpha", "charlie"])
        XCTAssertEqual(model.nearbyPeers.map(\.displayName), ["AA:BB:CC:DD:EE:01", "Bravo’s desk"])

        model.filterPeers("AR")
        XCTAssertEqual(model.pairedPeers.map(\.displayName), ["charlie"], "any case")
        XCTAssertEqual(model.nearbyPeers.map(\.displayName), [])
        model.filterPeers("")
        XCTAssertEqual(model.peers.count, 4)
    }

    func testAFoundDeviceBecomesAPairedPeerWithItsSelectionAndChat() {
        let address = "ip:10.0.0.2:47800"
        list(PeerRow(id: address, name: "", transport: "ip", state: .pairing))
        model.select(address)
        model.messageQueued(to: address, id: "m1", text: "hi", timeMs: 1)
        // The service's order: PeerIdentified, then the found object goes and the peer object comes.
        model.peerIdentified(address: address, as: "pv:a")
        list(PeerRow(id: "pv:a", name: "Ada", transport: "ip", state: .connected, isPaired: true))
        XCTAssertEqual(model.selectedPeer, "pv:a")
        XCTAssertEqual(model.pairedPeers.map(\.id), ["pv:a"])
        XCTAssertEqual(model.nearbyPeers, [])
        XCTAssertEqual(model.messages(with: "pv:a").map(\.text), ["hi"])
    }

    /// Under load the listing read after `PeerIdentified` can still hold the found object (the
    /// service removes it in the same turn): it stands for the peer until the peer's object comes,
    /// so the selection stays; a found object at that address later is a device of its own again.
    func testAListingThatLagsBehindPeerIdentifiedKeepsTheRowAndSelection() {
        let address = "ip:10.0.0.2:47800"
        model.peerStateChanged(address, state: .connecting, transport: "")
        model.select(address)
        model.peerIdentified(address: address, as: "pv:a")
        list(PeerRow(id: address, name: "", transport: "ip", state: .connecting))
        XCTAssertEqual(model.selectedPeer, "pv:a")
        XCTAssertEqual(model.peers.map(\.id), ["pv:a"])
        list(PeerRow(id: address, name: "", transport: "ip", state: .connecting),
             PeerRow(id: "pv:a", name: "Ada", transport: "ip", state: .pairing))
        XCTAssertEqual(model.peers.map(\.id), ["pv:a"], "the peer's own object wins")
        XCTAssertEqual(model.selectedRow?.state, .pairing)
        list(PeerRow(id: "pv:a", name: "Ada", transport: "ip", state: .connected, isPaired: true))
        XCTAssertEqual(model.selectedPeer, "pv:a")
        list(PeerRow(id: "pv:a", name: "Ada", transport: "ip", state: .connected, isPaired: true),
             PeerRow(id: address, name: "", transport: "ip", state: .connecting))
        XCTAssertEqual(Set(model.peers.map(\.id)), ["pv:a", address], "once gone, a found object there is its own device")
    }

    func testMessagesFromAPeerWhoseConversationIsNotOnScreenCountAsUnread() {
        list(PeerRow(id: "pv:a", name: "Ada", transport: "ip", state: .connected, isPaired: true),
             PeerRow(id: "pv:b", name: "Bo", transport: "ip", state: .connected, isPaired: true))
        model.select("pv:a")
        model.messageReceived(from: "pv:a", id: "m1", text: "seen", timeMs: 1)
        model.messageReceived(from: "pv:b", id: "m2", text: "one", timeMs: 2)
        model.messageReceived(from: "pv:b", id: "m3", text: "two", timeMs: 3)
        model.messageReceived(from: "pv:b", id: "m3", text: "two", timeMs: 3)
        XCTAssertEqual(model.unreadCount(of: "pv:a"), 0, "its conversation is on screen")
        XCTAssertEqual(model.unreadCount(of: "pv:b"), 2, "a message counts once")

        model.conversationShown(false)
        model.messageReceived(from: "pv:a", id: "m4", text: "while the list shows", timeMs: 4)
        XCTAssertEqual(model.unreadCount(of: "pv:a"), 1, "a folded window shows the list, not the conversation")
        model.conversationShown(true)
        XCTAssertEqual(model.unreadCount(of: "pv:a"), 0)
        model.select("pv:b")
        XCTAssertEqual(model.unreadCount(of: "pv:b"), 0, "opened: read")
    }

    func testAFailedMessageSentAgainTakesItsPlace() {
        model.messageQueued(to: "p", id: "m1", text: "lost", timeMs: 10)
        model.messageFailed(to: "p", id: "m1", reason: "the peer was removed")
        model.messageResent(to: "p", failedID: "m1", as: "m2", timeMs: 20)
        XCTAssertEqual(model.messages(with: "p"), [ChatMessage(id: "m2", incoming: false, text: "lost", state: .queued, timeMs: 20)])
        model.history(of: "p", [ChatMessage(historyID: "m1", status: "failed", timeMs: 10, text: "lost"),
                                ChatMessage(historyID: "m2", status: "delivered", timeMs: 20, text: "lost")])
        XCTAssertEqual(model.conversation(with: "p"),
                       [.message(ChatMessage(id: "m2", incoming: false, text: "lost", state: .delivered, timeMs: 20))],
                       "the service's history still lists the failed one: it stays replaced")
    }

    func testAudioProcessingShowsEachStageAndWhetherItRuns() {
        XCTAssertEqual(model.audioProcessingStages.map(\.on), [false, false, false, false], "not said yet")
        changes = []
        model.capabilitiesChanged(discoveryMethods: nil, audioProcessing: ["noise-suppression", "high-pass"])
        XCTAssertEqual(changes, [.settings])
        XCTAssertEqual(model.audioProcessingStages.map(\.stage), [.echoCancel, .noiseSuppression, .highPass, .gainControl])
        XCTAssertEqual(model.audioProcessingStages.map(\.on), [false, true, true, false])
    }

    func testPreferencesRoundTripAndAFileMissingSomeKeepsTheRestDefault() throws {
        model.preferences = AppPreferences(holdMode: .holdToTalk, style: .dark)
        XCTAssertEqual(model.holdLabel, "Hold to talk")
        XCTAssertTrue(changes.contains(.style))
        let saved = try JSONEncoder().encode(model.preferences)
        XCTAssertEqual(try JSONDecoder().decode(AppPreferences.self, from: saved), AppPreferences(holdMode: .holdToTalk, style: .dark))
        XCTAssertEqual(try JSONDecoder().decode(AppPreferences.self, from: Data(#"{"style":"light","holdMode":"sideways"}"#.utf8)),
                       AppPreferences(holdMode: .holdToMute, style: .light))
    }

    func testSpeakingIndicatorsFollowTheServiceAndShowOnlyWhileVoiceRuns() {
        let bravo = PeerRow(id: "pv:b", name: "bravo", transport: "ip", state: .connected)
        list(bravo)
        XCTAssertNil(model.speakingIndicator(of: model.peers[0]), "no voice, nothing to hear")
        XCTAssertNil(model.microphoneIndicator, "voice runs with nobody")

        list(PeerRow(id: "pv:b", name: "bravo", transport: "ip", state: .connected, voiceActive: true))
        XCTAssertEqual(model.speakingIndicator(of: model.peers[0]), SpeakingIndicator(speaking: false, name: "Silent"))
        XCTAssertEqual(model.microphoneIndicator, SpeakingIndicator(speaking: false, name: "You are silent"))
        list(PeerRow(id: "pv:b", name: "bravo", transport: "ip", state: .connected, voiceActive: true, speaking: true))
        XCTAssertEqual(model.speakingIndicator(of: model.peers[0]), SpeakingIndicator(speaking: true, name: "Speaking"))

        changes = []
        model.microphoneSpeakingChanged(true)
        model.microphoneSpeakingChanged(true)
        XCTAssertEqual(changes, [.speaking], "only a flip is news")
        XCTAssertEqual(model.microphoneIndicator, SpeakingIndicator(speaking: true, name: "You are speaking"))
        model.peerStateChanged("pv:b", state: .disconnected, transport: "ip")
        XCTAssertNil(model.microphoneIndicator, "the link went, and voice with it")
    }

    func testTheVolumeSliderKeepsWhatAPersonSetUntilTheServiceShowsIt() {
        model.serviceAppeared()
        let row = { (volume: Double, muted: Bool) in
            PeerRow(id: "pv:b", name: "bravo", transport: "ip", state: .connected, volume: volume, mutedHere: muted)
        }
        list(row(1, false))
        XCTAssertNil(model.selectedPlayback, "no peer selected")
        model.select("pv:b")
        XCTAssertEqual(model.selectedPlayback, PeerPlayback(volume: 1, mutedHere: false))
        XCTAssertEqual(model.selectedPlayback?.percent, 100)

        changes = []
        XCTAssertEqual(model.volumeRequested(percent: 50, for: "pv:b"), 0.5)
        XCTAssertEqual(changes, [.playback])
        list(row(0.8, false))
        XCTAssertEqual(model.selectedPlayback?.volume, 0.5, "an older value from the service does not move the slider back")
        list(row(0.5, true))
        XCTAssertEqual(model.selectedPlayback, PeerPlayback(volume: 0.5, mutedHere: true))
        list(row(0.7, true))
        XCTAssertEqual(model.selectedPlayback?.volume, 0.7, "once shown, the service's volume rules again (set elsewhere)")

        XCTAssertEqual(model.volumeRequested(percent: 250.4, for: "pv:b"), 2, "within what SetVolume takes")
        XCTAssertEqual(model.volumeRequested(percent: 33.4, for: "pv:b"), 0.33, "whole percents")
        model.volumeNotSet(for: "pv:b")
        XCTAssertEqual(model.selectedPlayback?.volume, 0.7, "a refused volume springs back")

        model.peerFound("AA:BB:CC:DD:EE:FF", name: "Phone", transport: "bluetooth")
        model.select("AA:BB:CC:DD:EE:FF")
        XCTAssertNil(model.selectedPlayback, "a peer only found nearby is not known to the service")
        model.select("pv:b")
        model.serviceVanished()
        XCTAssertNil(model.selectedPlayback, "no service to ask")
    }

    func testStringsGoThroughTheLocalizer() {
        let german = AppModel(localize: { $0 == "Hold to mute" ? "Halten zum Stummschalten" : $0 })
        XCTAssertEqual(german.holdLabel, "Halten zum Stummschalten")
    }
}
