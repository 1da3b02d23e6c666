import TallyCommandLine
import Testing

/// The command line's parser: what it accepts is exactly what a command's
/// option table declares, every mistake is a usage error that says what to
/// write, and `help` renders the same table.
@Suite struct ArgumentsTests {
    private let table = OptionTable(column: 20, [
        Option("server", "URL", "the hub (default ws://127.0.0.1:8080)"),
        Option("json", nil, "print JSON"),
        Option.file("photo", "FILE", "a photo to upload;", "repeatable"),
        Option.pair(Option("url", "URL"), Option("hub-pid", "PID"), "measure a running hub"),
        Option("size", "BYTES"),
    ])

    private func parse(_ words: String...) throws(UsageError) -> Arguments {
        try Arguments(words[...], command: "demo", options: table)
    }

    private func refusal(_ words: String...) -> String? {
        do {
            _ = try Arguments(words[...], command: "demo", options: table)
            return nil
        } catch {
            return error.message
        }
    }

    @Test func valuesSwitchesAndPositionalsInAnyOrder() throws {
        let a = try parse("orders/", "--server", "ws://h:1", "--json", "--size=64K", "x", "--photo", "a.jpg",
                          "--photo", "b.jpg")
        #expect(a.positionals == ["orders/", "x"])
        #expect(a.string("server") == "ws://h:1")
        #expect(a.flag("json") && !a.flag("help"))
        #expect(a.strings("photo") == ["a.jpg", "b.jpg"])
        #expect(try a.bytes("size") == 64 << 10)
        #expect(a.string("url") == nil)
    }

    @Test func aDoubleDashEndsTheOptionsAndALoneDashIsAPositional() throws {
        let a = try parse("--json", "--", "--server", "-")
        #expect(a.flag("json"))
        #expect(a.positionals == ["--server", "-"])
        #expect(a.string("server") == nil)
    }

    @Test func theLastOfARepeatedValueWins() throws {
        #expect(try parse("--server", "a", "--server=b").string("server") == "b")
    }

    @Test func mistakesSayWhatToWrite() {
        #expect(refusal("--nope") == "unknown option --nope for 'tally demo'")
        #expect(refusal("--server") == "--server needs a value")
        #expect(refusal("--json=yes") == "--json takes no value")
        #expect(refusal("--photo", "--json")
                == "--photo needs a value (for a file whose name starts with '--', write ./--name)")
        #expect(refusal("-h") == nil, "a single-dash word is a positional")
    }

    @Test func aStrictOptionTakesADashedValueOnlyInline() throws {
        #expect(try parse("--photo=--odd.jpg").string("photo") == "--odd.jpg")
        #expect(try parse("--server", "--json").string("server") == "--json", "a plain option takes the next word")
    }

    @Test func numbersDurationsAndSizesAreChecked() throws {
        #expect(try parse("--size", "12").int("size", in: 1...64) == 12)
        #expect(throws: UsageError.self) { try parse("--size", "0").int("size", in: 1...64) }
        #expect(try parse("--size", "1.5").millis("size") == 1500)
        #expect(throws: UsageError.self) { try parse("--size", "-1").millis("size") }
        #expect(try parse("--size", "2M").bytes("size") == 2 << 20)
        #expect(try parse("--size", "3g").bytes("size") == 3 << 30)
        do {
            _ = try parse("--size", "12Q").bytes("size")
            Issue.record("12Q was taken as a size")
        } catch {
            #expect(error.message == "--size must be a size like 65536, 64K or 16M, not '12Q'")
        }
        #expect(try parse().int("size", in: 1...2) == nil)
    }

    @Test func noPositionalsNamesTheFirstExtra() throws {
        let a = try parse("one", "two")
        #expect(throws: UsageError.self) { try a.noPositionals("demo") }
        #expect(throws: Never.self) { try parse("--json").noPositionals("demo") }
    }

    @Test func helpListsEveryDescribedOptionAligned() {
        #expect(table.help == """
              --server URL      the hub (default ws://127.0.0.1:8080)
              --json            print JSON
              --photo FILE      a photo to upload;
                                repeatable
              --url URL --hub-pid PID  measure a running hub
            """)
        #expect(table.valued == ["server", "photo", "url", "hub-pid", "size"])
        #expect(table.flags == ["json"])
        #expect(table.strict == ["photo"])
    }

    @Test func severalTablesAreOneCommandsOptions() throws {
        let more = OptionTable(column: 0, [Option("store", "FILE")])
        let a = try Arguments(["--store", "m.sqlite", "--json"], command: "demo", options: table, more)
        #expect(a.string("store") == "m.sqlite" && a.flag("json"))
    }
}
