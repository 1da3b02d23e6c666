import Testing
import TallyEngine
import TallyProtocol
@testable import TallyServer
@_spi(Testing) @testable import TallyStore
import TallyTestSupport
import TallySQLite

/// `GET /v1/items`: a search by code, by the words of an item's name
/// (a word-prefix index kept in the store, id `HubCore.wordIndexID`) and by
/// record name; without `q`, a page of items. Both report `lowStock`.
@Suite struct HubItemSearchTests {
    func search(_ hub: HubFixture, _ query: String) throws -> [String] {
        let result = try hub.http("GET", "/v1/items?\(query)")
        #expect(result.status == 200, "\(query): \(String(decoding: result.body, as: UTF8.self))")
        return try result.json["items"]?.arrayValue?.compactMap { $0.objectValue?["name"]?.stringValue } ?? []
    }

    @Test func findsByCodeNameWordsAndRecordName() throws {
        let directory = try TemporaryDirectory(prefix: "tally-search")
        try withHub(dataDirectory: directory.path) { hub throws in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"items/drill-01","data":{"name":"Cordless drill 18V","sku":"D-18","serials":["SN-77"]}}"#)
            try client.ok(#"{"op":"set","name":"items/drill-02","data":{"name":"Hammer drill","sku":"D-20"}}"#)
            try client.ok(#"{"op":"set","name":"items/saw","data":{"name":"Circular saw","sku":"S-1"}}"#)
            #expect(try search(hub, "q=sn-77") == ["items/drill-01"], "a serial")
            #expect(try search(hub, "q=D-20") == ["items/drill-02"], "a SKU")
            #expect(try search(hub, "q=drill") == ["items/drill-01", "items/drill-02"], "a name word, and the id")
            #expect(try search(hub, "q=cordl") == ["items/drill-01"], "a word's beginning")
            #expect(try search(hub, "q=CORDLESS%20dr") == ["items/drill-01"], "every word typed, any case")
            #expect(try search(hub, "q=cordlessness") == [], "a longer word than the name's")
            #expect(try search(hub, "q=ham%20saw") == [])
            #expect(try search(hub, "q=drill-0") == ["items/drill-01", "items/drill-02"], "a record name's beginning")
            #expect(try search(hub, "q=drill&limit=1") == ["items/drill-01"])
            // Renamed: the old words leave the index, the new ones enter it.
            try client.ok(#"{"op":"set","name":"items/saw","data":{"name":"Band saw"}}"#)
            #expect(try search(hub, "q=circ") == [])
            #expect(try search(hub, "q=band") == ["items/saw"])
            let reader = try hub.storeReader()
            #expect(try reader.builtIndexes().contains(HubCore.wordIndexID))
            #expect(try reader.indexedNames(index: HubCore.wordIndexID, value: Array("cordle".utf8), prefix: "items/",
                                            after: nil, limit: 10) == ["items/drill-01"])
            // A page of items, and the config's low-stock default.
            let page = try hub.http("GET", "/v1/items?limit=2")
            let body = try page.json
            #expect(body["lowStock"]?.numberValue?.int64Value == 5 && body["more"] == .bool(true))
            #expect(try search(hub, "after=items/drill-02") == ["items/saw"])
            #expect(try hub.http("GET", "/v1/items?q=").status == 400)
            #expect(try hub.http("GET", "/v1/items?limit=0").status == 400)
        }
        // A store from before the word index builds it once, at start.
        let raw = try SQLiteConnection(path: directory.path + "/" + SQLiteStore.fileName, role: .writer, synchronous: .full)
        try raw.execute("DELETE FROM record_index WHERE idx = '\(HubCore.wordIndexID)'; DELETE FROM record_indexes WHERE idx = '\(HubCore.wordIndexID)'")
        raw.close()
        try withHub(dataDirectory: directory.path, { $0.core.lowStock = 2 }) { hub throws in
            #expect(try search(hub, "q=hammer") == ["items/drill-02"])
            #expect(try hub.http("GET", "/v1/items?q=saw").json["lowStock"]?.numberValue?.int64Value == 2)
        }
    }

    @Test func wordsAreRunsOfLettersAndDigits() {
        #expect(HubCore.words(of: "Cordless drill, 18V (Bosch)") == ["cordless", "drill", "18v", "bosch"])
        let record = RecordState(name: "items/x", version: 1, seq: 1, created: 0, updated: 0, data: ["name": .string("Ab Cdefghij")], dataBytes: [])
        #expect(HubCore.wordKeys(of: record) == ["ab", "cd", "cde", "cdef", "cdefg", "cdefgh"])
    }
}
