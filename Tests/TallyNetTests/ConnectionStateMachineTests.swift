import Testing
@testable import TallyNet

/// The connection's timing rules, driven with plain numbers: no socket,
/// no loop, no clock. Each test walks one timeout to its edge and past it.
@Suite struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine

    /// The hub's defaults (ServerConfiguration, WebSocketOptions): the
    /// values these tests check must not move.
    static let server = Machine.Timeouts(server: ServerConfiguration())
    static let client = Machine.Timeouts(client: WebSocketOptions())

    @Test func defaultsKeepTheirValues() {
        #expect(Self.server == Machine.Timeouts(handshakeMillis: 10_000, requestMillis: 15_000, keepAliveMillis: 60_000,
                                                pingIntervalMillis: 30_000, idleMillis: 75_000, closeMillis: 5_000))
        #expect(Self.client == Machine.Timeouts(handshakeMillis: 10_000, requestMillis: nil, keepAliveMillis: nil,
                                                pingIntervalMillis: 30_000, idleMillis: 75_000, closeMillis: 5_000))
    }

    @Test func aSilentWebSocketIsPingedOnceThenClosed() {
        var machine = Machine(phase: .webSocket, timeouts: Self.server, now: 0)
        #expect(machine.tick(at: 30_000) == .none)
        #expect(machine.tick(at: 30_001) == .sendPing)
        #expect(machine.tick(at: 60_000) == .none, "one ping per silence")
        #expect(machine.tick(at: 75_000) == .none)
        #expect(machine.tick(at: 75_001) == .idleTimedOut(limitMillis: 75_000))
    }

    @Test func anythingReceivedRestartsTheSilence() {
        var machine = Machine(phase: .webSocket, timeouts: Self.server, now: 0)
        #expect(machine.tick(at: 30_001) == .sendPing)
        machine.received(at: 40_000)  // the pong
        #expect(machine.tick(at: 70_000) == .none)
        #expect(machine.tick(at: 70_001) == .sendPing, "a new silence earns a new ping")
        #expect(machine.tick(at: 115_000) == .none, "75 s from the pong, not from the start")
        #expect(machine.tick(at: 115_001) == .idleTimedOut(limitMillis: 75_000))
    }

    @Test func anIncompleteRequestTimesOut() {
        var machine = Machine(phase: .http, timeouts: Self.server, now: 0)
        machine.requestStarted(at: 100)
        machine.requestStarted(at: 5_000)  // more bytes of the same request
        #expect(machine.tick(at: 15_100) == .none)
        #expect(machine.tick(at: 15_101) == .requestTimedOut(limitMillis: 15_000))
    }

    @Test func anIdleKeepAliveConnectionExpiresButIsNotARequestTimeout() {
        var machine = Machine(phase: .http, timeouts: Self.server, now: 0)
        machine.requestStarted(at: 10)
        machine.received(at: 20)
        machine.requestEnded()
        #expect(machine.tick(at: 15_100) == .none, "no request is in progress")
        #expect(machine.tick(at: 60_020) == .none)
        #expect(machine.tick(at: 60_021) == .keepAliveExpired)
    }

    @Test func aDeferredRequestIsNeverTimedOutAndItsAnswerRestartsKeepAlive() {
        var machine = Machine(phase: .http, timeouts: Self.server, now: 0)
        machine.requestStarted(at: 0)
        machine.requestEnded()
        machine.responseDeferred()
        #expect(machine.awaitingResponse)
        #expect(machine.tick(at: 1_000_000) == .none)
        machine.deferredResponseReleased(at: 1_000_000)
        #expect(!machine.awaitingResponse)
        #expect(machine.tick(at: 1_060_000) == .none)
        #expect(machine.tick(at: 1_060_001) == .keepAliveExpired)
    }

    @Test func aClientWithoutHTTPPhaseHasNoRequestTimeouts() {
        var machine = Machine(phase: .http, timeouts: Self.client, now: 0)
        machine.requestStarted(at: 0)
        #expect(machine.tick(at: 10_000_000) == .none)
    }

    @Test func handshakesAreBoundedFromTheirPhasesStart() {
        for phase in [Machine.Phase.connecting, .tlsHandshake, .clientHandshake] {
            var machine = Machine(phase: .connecting, timeouts: Self.server, now: 0)
            machine.enter(phase, at: 500)
            machine.received(at: 9_000)  // bytes do not extend a handshake
            #expect(machine.tick(at: 10_500) == .none)
            #expect(machine.tick(at: 10_501) == .handshakeTimedOut(limitMillis: 10_000))
        }
    }

    @Test func closingWaitsForThePeerThenGivesUp() {
        var machine = Machine(phase: .webSocket, timeouts: Self.server, now: 0)
        machine.enter(.closing, at: 1_000)
        machine.received(at: 3_000)  // frames after our close do not extend it
        #expect(machine.tick(at: 6_000) == .none)
        #expect(machine.tick(at: 6_001) == .closeTimedOut)
    }

    @Test func aClosedConnectionHasNothingDue() {
        var machine = Machine(phase: .webSocket, timeouts: Self.server, now: 0)
        machine.closed()
        #expect(machine.phase == .closed)
        #expect(machine.tick(at: 10_000_000) == .none)
    }
}
