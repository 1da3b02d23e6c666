import Testing
import TallyClient
@testable import TallyMirror
import TallyProtocol
import TallyTestSupport

/// `tally mirror run`'s start: one run per store, what to mirror from where
/// (as given, else as the last run had it), the token kept off clear text.
@Suite("MirrorRun")
struct MirrorRunTests {
    @Test func oneRunHoldsTheStoreUntilItReleases() throws {
        let directory = try TemporaryDirectory(prefix: "mirror-run")
        let path = "\(directory.path)/m.sqlite"
        let run = try MirrorRun(store: path, patterns: ["orders/"], access: HubAccess(server: "ws://127.0.0.1:9"))
        #expect(run.patterns == ["orders/"] && run.access.servers == ["ws://127.0.0.1:9"])
        #expect(throws: MirrorRun.Refusal.busy(store: path)) {
            try MirrorRun(store: path, patterns: ["orders/"], access: HubAccess())
        }
        run.release()
        try MirrorRun(store: path, patterns: ["items/"], access: HubAccess()).release()
    }

    @Test func withoutPatternsOrHubTheLastRunsAreUsed() throws {
        let directory = try TemporaryDirectory(prefix: "mirror-run")
        let path = "\(directory.path)/m.sqlite"
        #expect(throws: MirrorRun.Refusal.noPatterns) { try MirrorRun(store: path, patterns: [], access: HubAccess()) }
        // A refused start leaves the store free.
        #expect(try MirrorRunLock.isHeld(store: path) == false)
        try MirrorStore.open(path, create: false).setMeta(["patterns": #"["orders/","items/x"]"#, "hub": "http://127.0.0.1:7"])
        let run = try MirrorRun(store: path, patterns: [], access: HubAccess())
        defer { run.release() }
        #expect(run.patterns == ["orders/", "items/x"] && run.access.servers == ["http://127.0.0.1:7"])
        let configuration = run.configuration(policies: PolicyTable())
        #expect(configuration.url == "ws://127.0.0.1:7/v1/ws" && configuration.serverLabel == "http://127.0.0.1:7")
        #expect(configuration.patterns == ["orders/", "items/x"] && configuration.clientID.hasPrefix("mirror:"))
        #expect(configuration.options.pingIntervalMillis == 3_000 && configuration.options.idleTimeoutMillis == 10_000)
    }

    @Test func aListOfHubsIsKeptForTheNextRun() throws {
        let directory = try TemporaryDirectory(prefix: "mirror-run")
        let path = "\(directory.path)/m.sqlite"
        let given = HubAccess(servers: ["ws://127.0.0.1:7", "http://127.0.0.1:8"])
        let run = try MirrorRun(store: path, patterns: ["orders/"], access: given)
        let configuration = run.configuration(policies: PolicyTable())
        #expect(configuration.urls == ["ws://127.0.0.1:7/v1/ws", "ws://127.0.0.1:8/v1/ws"])
        #expect(configuration.serverLabel == "ws://127.0.0.1:7,http://127.0.0.1:8")
        run.release()
        // What the run stores as its hub (MirrorSync.begin) is the label; the
        // next run without --server reads the whole list back.
        try MirrorStore.open(path, create: false).setMeta(["hub": "ws://127.0.0.1:7,http://127.0.0.1:8", "patterns": #"["orders/"]"#])
        let next = try MirrorRun(store: path, patterns: [], access: HubAccess())
        defer { next.release() }
        #expect(next.access.servers == ["ws://127.0.0.1:7", "http://127.0.0.1:8"])
        #expect(next.configuration(policies: PolicyTable()).urls == configuration.urls)
    }

    @Test func aTokenInClearTextToAnotherHostIsRefused() throws {
        let directory = try TemporaryDirectory(prefix: "mirror-run")
        let path = "\(directory.path)/m.sqlite"
        #expect {
            try MirrorRun(store: path, patterns: ["orders/"], access: HubAccess(server: "ws://10.0.0.5:8080", token: "t"))
        } throws: { error in
            if case .insecureToken = error as? HubError { true } else { false }
        }
        #expect(try MirrorRunLock.isHeld(store: path) == false)
        // Any hub of a list: a failover must not send the token in clear either.
        #expect {
            try MirrorRun(store: path, patterns: ["orders/"],
                          access: HubAccess(servers: ["ws://127.0.0.1:8080", "ws://10.0.0.5:8080"], token: "t"))
        } throws: { error in
            if case .insecureToken(let url) = error as? HubError { url == "ws://10.0.0.5:8080/v1/ws" } else { false }
        }
        try MirrorRun(store: path, patterns: ["orders/"], access: HubAccess(server: "ws://10.0.0.5:8080", token: "t", insecure: true))
            .release()
    }
}

/// What the mirror commands print: resync progress, status, conflicts, verify.
@Suite("MirrorReports")
struct MirrorReportsTests {
    @Test func resyncOnAPipeIsALinePerPhaseAndOneWhenComplete() {
        var display = ResyncDisplay(terminal: false)
        var text = display.show(ResyncState(phase: .receiving, target: "orders/", done: 0, total: 5000))
        text += display.show(ResyncState(phase: .receiving, target: "orders/", done: 2500, total: 5000))
        text += display.show(ResyncState(phase: .receiving, target: "orders/", done: 5000, total: 5000))
        text += display.log("connected")
        text += display.show(nil)
        #expect(text.split(separator: "\n").filter { $0.hasPrefix("tally: resync: receiving") }.count == 2, "\(text)")
        #expect(text.hasSuffix("tally: mirror: connected\n"), "\(text)")
        #expect(!text.contains("\r"))
    }

    @Test func resyncOnATerminalIsABarAndALogLineEndsIt() {
        var display = ResyncDisplay(terminal: true)
        let bar = display.show(ResyncState(phase: .receiving, target: "orders/", done: 2500, total: 5000))
        #expect(bar.hasPrefix("\rresync [###############...............] ") && bar.hasSuffix("\u{1B}[K"), "\(bar)")
        #expect(display.show(ResyncState(phase: .receiving, target: "orders/", done: 2500, total: 5000)) == "", "no change, no redraw")
        #expect(display.log("reconnecting") == "\ntally: mirror: reconnecting\n")
        #expect(display.log("again") == "tally: mirror: again\n")
        _ = display.show(ResyncState(phase: .receiving, target: "orders/", done: 3000, total: 5000))
        #expect(display.show(nil) == "\n")
        #expect(display.show(nil) == "")
    }

    @Test func statusOfAStoreNotMadeYet() throws {
        let directory = try TemporaryDirectory(prefix: "mirror-status")
        let status = try MirrorStatus.read(store: "\(directory.path)/m.sqlite")
        #expect(status.lines == ["mirror \(directory.path)/m.sqlite: offline (no mirror store yet)"])
    }

    @Test func statusOfAStoreThatNeverRan() throws {
        let directory = try TemporaryDirectory(prefix: "mirror-status")
        let path = "\(directory.path)/m.sqlite"
        _ = try MirrorStore.open(path, create: true)
        #expect(try MirrorStatus.read(store: path).lines == [
            "mirror \(path): offline (no mirror run on this store)",
            "  hub          (never run)",
            "  patterns     (none)",
            "  last seq     0",
            "  outbox       0 writes waiting",
            "  conflicts    0 open",
            "  last error   none",
        ])
    }

    @Test func aConflictLineHasEveryValue() {
        let conflict = ConflictRecord(id: "c1", name: "notes/1", field: "text", local: "a", hub: "b", base: nil,
                                      policy: "both", created: 0, resolved: nil)
        #expect(conflict.line == #"c1  notes/1  text  local="a"  hub="b"  base=null  (both, open)"#)
    }

    @Test func verifySaysWhatDiffers() {
        let difference = MirrorDifference(name: "notes/1", isList: false, kind: .dataDiffers, fields: ["text"], mirrorVersion: 2,
                                          hubVersion: 3)
        #expect(MirrorComparison.summary([], outbox: 0, store: "m.sqlite", patterns: 1)
                == "the mirror m.sqlite and the hub agree (1 pattern)")
        #expect(MirrorComparison.summary([difference], outbox: 2, store: "m.sqlite", patterns: 1)
                == "1 difference; 2 local writes still waiting in the outbox")
        let json = MirrorComparison.json([difference], outbox: 2)
        #expect(json["equal"] == .bool(false) && json["outbox"] == .int(2))
        #expect(json["differences"]?.arrayValue?.first?["hubVersion"] == .int(3))
    }

    @Test func verifyNeedsAHubOrAnEarlierRun() throws {
        let directory = try TemporaryDirectory(prefix: "mirror-verify")
        let path = "\(directory.path)/m.sqlite"
        #expect(throws: MirrorStoreError.self, "no store: nothing to compare") {
            try MirrorComparison.verify(store: path, access: HubAccess())
        }
        _ = try MirrorStore.open(path, create: true)
        #expect {
            try MirrorComparison.verify(store: path, access: HubAccess())
        } throws: { error in
            if case .disconnected(let reason) = error as? HubError { reason.contains("never run against a hub") } else { false }
        }
    }
}
