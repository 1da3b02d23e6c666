import FoundationEssentials
import TallyProtocol
import TallyTestSupport
import Testing
@testable import TallyStore
import TallySQLite

/// A store written by tally 0.3.0 (schema 3, lists as blobs; made by
/// Tests/fixtures/make_store_fixture.py) opens with this build: migration 4
/// turns every list into rows, and every record, list entry (in order), seq
/// and version is what the 0.3.0 hub reported (the manifest).
@Suite struct StoreFixtureTests {
    static let fixtures = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "fixtures")

    /// A copy of the fixture in a fresh directory, as the hub names its file.
    static func copy() throws -> TemporaryDirectory {
        let directory = try TemporaryDirectory(prefix: "tally-fixture")
        let bytes = try Data(contentsOf: fixtures.appending(path: "store-0.3.0-schema3.sqlite"))
        try bytes.write(to: URL(filePath: directory.path + "/" + SQLiteStore.fileName))
        return directory
    }

    static func manifest() throws -> JSONObject {
        let bytes = try Data(contentsOf: fixtures.appending(path: "store-0.3.0-schema3.manifest.json"))
        return try #require(try JSONValue.parse([UInt8](bytes), limits: .stored).objectValue)
    }

    @Test func aStoreFromRelease030OpensWithEverythingKept() throws {
        let directory = try Self.copy()
        let manifest = try Self.manifest()
        let h = try StoreHarness(.sqlite, directory: directory)
        let reader = try #require(h.reader as? SQLiteReader)
        #expect(try reader.connection.queryInt("PRAGMA user_version") == SQLiteSchema.latestVersion)

        let records = try #require(manifest["records"]?.arrayValue)
        #expect(records.count == 3390)
        for case .object(let expected) in records {
            let name = try #require(expected["name"]?.stringValue)
            let record = try #require(try h.reader.record(name), "\(name)")
            #expect(.number(JSONNumber(record.version)) == expected["version"], "\(name)")
            #expect(.number(JSONNumber(record.seq)) == expected["seq"], "\(name)")
        }
        let state = try h.reader.state()
        #expect(state.recordCount == records.count)
        #expect(.number(JSONNumber(state.headSeq)) == manifest["headSeq"])

        let lists = try #require(manifest["lists"]?.arrayValue)
        for case .object(let expected) in lists {
            let name = try #require(expected["name"]?.stringValue)
            let list = try #require(try h.reader.list(name), "\(name)")
            let entries = try #require(expected["entries"]?.arrayValue).compactMap(\.stringValue)
            #expect(.number(JSONNumber(list.version)) == expected["version"], "\(name)")
            #expect(.number(JSONNumber(list.seq)) == expected["seq"], "\(name)")
            #expect(list.count == Int64(entries.count), "\(name)")
            #expect(try h.reader.entries(name) == entries, "\(name) in order")
            #expect(try h.reader.entries(name, descending: true) == entries.reversed(), "\(name) backwards")
        }
        #expect(try h.reader.list("gone") == nil)
        #expect(state.listCount == lists.count)
        #expect(try h.reader.entries("big").count == 10_000)
        // The migration counted the entries into blocks: any index is found
        // by rank, and ranks agree with the manifest's order.
        let big = try #require(lists.compactMap(\.objectValue).first { $0["name"] == "big" }?["entries"]?.arrayValue)
        for index in [0, 1, 1_023, 1_024, 5_000, 9_999] {
            let row = try #require(try h.reader.listEntry("big", at: index), "big[\(index)]")
            #expect(.string(row.entry) == big[index])
            #expect(try h.reader.listRank("big", below: row.key, holding: [row.key]) == (index, [true]))
        }
        #expect(try h.reader.listEntry("big", at: 10_000) == nil)
        #expect(try h.reader.listKeys("dupes", holding: "b").count == 3)
        #expect(try h.reader.listKeys("awkward", holding: "orders/ü-ñ-ç").count == 2)

        // The migrated list takes an append and a removal, as rows.
        let last = try #require(try h.reader.listEntries("big", descending: true, after: nil).next())
        let first = try #require(try h.reader.listEntries("big", descending: false, after: nil).next())
        try h.commit([.putList(StoredList(name: "big", version: 10_001, seq: state.headSeq + 1, created: 0, updated: 0, count: 10_000)),
                      .insertListEntry(list: "big", ListRow(key: try #require(last.key.after()), entry: "appended")),
                      .deleteListEntries(list: "big", [first.key])],
                     changes: [StoredChange(seq: state.headSeq + 1, time: testNow, kind: .list, name: "big", message: [])])
        let after = try h.reader.entries("big")
        #expect(after.count == 10_000)
        #expect(after.first == "entries/00001")
        #expect(after.last == "appended")
    }

    /// Opens a copy of the fixture after `prepare` changed it behind the
    /// store's back, expects the open to fail with `refusal` in its message,
    /// then hands the file, as the failed open left it, to `check`.
    static func refusedOpen(after prepare: String, refusal: String,
                            check: (SQLiteConnection) throws -> Void) throws -> TemporaryDirectory {
        let directory = try copy()
        let path = directory.path + "/" + SQLiteStore.fileName
        let before = try SQLiteConnection(path: path, role: .writer, synchronous: .full)
        try before.execute(prepare)
        before.close()
        #expect {
            _ = try SQLiteStore(directory: directory.path)
        } throws: { error in
            "\(error)".contains(refusal)
        }
        let after = try SQLiteConnection(path: path, role: .writer, synchronous: .full)
        defer { after.close() }
        try check(after)
        return directory
    }

    /// The migration is one transaction: a store it fails on is left as
    /// the older build wrote it, and opens once the cause is gone.
    @Test func aFailedMigrationLeavesSchema3Untouched() throws {
        // A table in the way of migration 5's CREATE TABLE: migration 4
        // (record indexes) is undone with it, all steps are one transaction.
        let directory = try Self.refusedOpen(after: "CREATE TABLE list_entries(x)", refusal: "migrate to 5") { raw in
            #expect(try raw.queryInt("SELECT count(*) FROM sqlite_master WHERE name = 'record_index'") == 0)
            #expect(try raw.queryInt("PRAGMA user_version") == 3)
            #expect(try raw.queryInt("SELECT count(*) FROM lists WHERE length(entries) > 0") == 5)
            try raw.execute("DROP TABLE list_entries")
        }
        let h = try StoreHarness(.sqlite, directory: directory)
        #expect(try h.reader.entries("big").count == 10_000)
    }

    /// A store from a newer schema (one this build does not know, such as
    /// a later migration 5) is refused and left as it is.
    @Test func aStoreFromANewerSchemaIsRefusedAndLeftAlone() throws {
        let newer = SQLiteSchema.latestVersion + 1
        _ = try Self.refusedOpen(after: "PRAGMA user_version = \(newer)", refusal: "newer than this build") { (raw: SQLiteConnection) throws in
            #expect(try raw.queryInt("PRAGMA user_version") == newer)
            #expect(try raw.queryInt("SELECT count(*) FROM sqlite_master WHERE name = 'list_entries'") == 0,
                    "no migration step ran")
        }
    }
}
