import Testing
import TallyClient
import TallyProtocol

@Suite struct BackoffTests {
    @Test func ceilingDoublesFromTheBaseUpToTheCap() {
        let backoff = Backoff()
        #expect((1...9).map { backoff.ceiling(attempt: $0) } == [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000])
        #expect(backoff.ceiling(attempt: 1_000) == 30_000)
    }

    @Test func fullJitterDrawsFromZeroToTheCeiling() {
        var generator = SystemRandomNumberGenerator()
        let backoff = Backoff(baseMillis: 100, capMillis: 800)
        for attempt in 1...6 {
            let delays = (0..<200).map { _ in backoff.delay(attempt: attempt, using: &generator) }
            #expect(delays.allSatisfy { (0...backoff.ceiling(attempt: attempt)).contains($0) })
            // Spread over the window, not bunched at its end.
            #expect(Set(delays).count > 20)
        }
    }
}

@Suite struct ChangeTests {
    func change(_ text: String) -> Change {
        Change(push: .parse(text))!
    }

    @Test func recordChangesApplyToACopy() throws {
        let start: JSONObject = .parse(#"{"qty":1,"meta":{"tags":["a"]}}"#)
        #expect(try change(#"{"op":"change","seq":2,"name":"x","version":2,"kind":"setPath","path":"meta.tags[1]","value":"b"}"#)
            .applied(to: start) == .parse(#"{"qty":1,"meta":{"tags":["a","b"]}}"#))
        #expect(try change(#"{"op":"change","seq":3,"name":"x","version":3,"kind":"deletePath","path":"qty"}"#)
            .applied(to: start) == .parse(#"{"meta":{"tags":["a"]}}"#))
        #expect(try change(#"{"op":"change","seq":4,"name":"x","version":4,"kind":"set","data":{"z":true}}"#)
            .applied(to: start) == .parse(#"{"z":true}"#))
        #expect(try change(#"{"op":"change","seq":5,"name":"x","version":5,"kind":"delete"}"#).applied(to: start) == nil)
        // A path change to a record this copy lacks starts from {}.
        #expect(try change(#"{"op":"change","seq":6,"name":"x","version":1,"kind":"setPath","path":"a.b","value":1}"#)
            .applied(to: nil) == .parse(#"{"a":{"b":1}}"#))
    }

    @Test func listChangesApplyToEntries() throws {
        let add = change(#"{"op":"change","seq":1,"list":"l","version":2,"kind":"addEntry","entry":"c","index":1}"#)
        #expect(try add.applied(toEntries: ["a", "b"]) == ["a", "c", "b"])
        let remove = change(#"{"op":"change","seq":2,"list":"l","version":3,"kind":"removeEntry","entry":"a","indexes":[0,2]}"#)
        #expect(try remove.applied(toEntries: ["a", "b", "a"]) == ["b"])
        let set = change(#"{"op":"change","seq":3,"list":"l","version":4,"kind":"setEntries","entries":["x"]}"#)
        #expect(try set.applied(toEntries: nil) == ["x"])
    }

    @Test func observedRecordsReportInsertedDeletedAndModifiedKeys() {
        var state = ObservedRecords()
        let initial = state.reset(to: [RecordEnvelope(name: "o/1", version: 1, seq: 1, data: .parse(#"{"a":1,"b":2}"#))])
        #expect(initial.inserted == ["o/1"])
        let update = state.apply([
            change(#"{"op":"change","seq":2,"name":"o/1","version":2,"kind":"setPath","path":"a","value":5}"#),
            change(#"{"op":"change","seq":3,"name":"o/2","version":1,"kind":"set","data":{"x":1}}"#),
            change(#"{"op":"change","seq":4,"name":"o/1","version":3,"kind":"set","data":{"a":5,"c":3}}"#),
        ])
        #expect(update == ChangeSet(inserted: ["o/2"], modified: ["o/1": ["a", "b", "c"]]))
        // A redelivered change (seq already seen) changes nothing.
        #expect(state.apply([change(#"{"op":"change","seq":3,"name":"o/2","version":1,"kind":"set","data":{"x":9}}"#)]).isEmpty)
        let gone = state.apply([change(#"{"op":"change","seq":5,"name":"o/2","version":2,"kind":"delete"}"#)])
        #expect(gone == ChangeSet(deleted: ["o/2"]))
        // A resnapshot is diffed against what was held.
        let again = state.reset(to: [RecordEnvelope(name: "o/3", version: 1, seq: 9, data: [:]),
                                     RecordEnvelope(name: "o/1", version: 4, seq: 8, data: .parse(#"{"a":5,"c":4}"#))])
        #expect(again == ChangeSet(inserted: ["o/3"], modified: ["o/1": ["c"]]))
    }
}
