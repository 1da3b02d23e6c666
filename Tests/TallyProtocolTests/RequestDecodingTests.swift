import Testing
@testable import TallyProtocol

// Request.decode against PROTOCOL.md "Client messages" and "Errors": every op
// decodes to the operation it names, and every way a message can be wrong
// gives the documented code and the `field` (or `offset`, `index`) that says
// where.

private func message(_ text: String) -> JSONValue {
    do { return try JSONValue.parse(text) } catch { fatalError("test JSON does not parse: \(text): \(error)") }
}

private func decode(_ text: String) throws(ProtocolError) -> Request {
    try Request.decode(message(text))
}

/// The error `text` decodes to, or nil when it decodes.
private func decodeError(_ text: String) -> ProtocolError? {
    let value = message(text)
    do {
        _ = try Request.decode(value)
        return nil
    } catch {
        return error
    }
}

private func path(_ text: String) -> RecordPath {
    do { return try RecordPath(parsing: text) } catch { fatalError("bad test path \(text): \(error)") }
}

/// One refused message: the code and the `field` member it must carry (nil: none).
struct Refusal: CustomTestStringConvertible, Sendable {
    var text: String
    var code: ErrorCode
    var field: String?
    init(_ text: String, _ code: ErrorCode, _ field: String?) {
        self.text = text
        self.code = code
        self.field = field
    }
    var testDescription: String { text }
}

@Suite("Request: decoding client messages")
struct RequestDecodingTests {
    // MARK: Every op

    @Test func helloDefaultsAndFields() throws {
        #expect(try decode(#"{"op":"hello"}"#) == Request(operation: .hello(Hello(protocols: [1]))))
        #expect(try decode(#"{"op":"hello","protocol":1,"client":"tally-cli/0.3","token":"t","since":120}"#)
            == Request(operation: .hello(Hello(protocols: [1], client: "tally-cli/0.3", token: "t", since: 120))))
        #expect(try decode(#"{"op":"hello","protocol":[2,1]}"#) == Request(operation: .hello(Hello(protocols: [2, 1]))))
        // Any positive version decodes; choosing one is the hub's business.
        #expect(try decode(#"{"op":"hello","protocol":7}"#) == Request(operation: .hello(Hello(protocols: [7]))))
    }

    @Test func getTargets() throws {
        #expect(try decode(#"{"op":"get","name":"orders/42"}"#).operation == .get(.record("orders/42", path: nil)))
        #expect(try decode(#"{"op":"get","name":"orders/42","path":"items[0]"}"#).operation
            == .get(.record("orders/42", path: path("items[0]"))))
        #expect(try decode(#"{"op":"get","list":"orders"}"#).operation == .get(.list("orders")))
        #expect(try decode(#"{"op":"get","prefix":"orders/","after":"orders/41","limit":100}"#).operation
            == .get(.prefix("orders/", after: "orders/41", limit: 100)))
        // Default and maximum page size is 1000; "" matches everything.
        #expect(try decode(#"{"op":"get","prefix":""}"#).operation == .get(.prefix("", after: nil, limit: 1000)))
        #expect(try decode(#"{"op":"get","prefix":"a","limit":1000}"#).operation == .get(.prefix("a", after: nil, limit: 1000)))
        #expect(try decode(#"{"op":"get","prefix":"a","limit":1}"#).operation == .get(.prefix("a", after: nil, limit: 1)))
    }

    @Test func subscribeAndUnsubscribeTargets() throws {
        #expect(try decode(#"{"op":"subscribe","name":"orders/42"}"#).operation == .subscribe(.record("orders/42"), since: nil))
        #expect(try decode(#"{"op":"subscribe","name":"orders/42","path":"stage"}"#).operation
            == .subscribe(.path("orders/42", path("stage")), since: nil))
        #expect(try decode(#"{"op":"subscribe","list":"orders","since":0}"#).operation == .subscribe(.list("orders"), since: 0))
        #expect(try decode(#"{"op":"subscribe","prefix":"orders/","since":57}"#).operation
            == .subscribe(.prefix("orders/"), since: 57))
        #expect(try decode(#"{"op":"subscribe","prefix":""}"#).operation == .subscribe(.prefix(""), since: nil))
        #expect(try decode(#"{"op":"subscribe","topic":"scanner"}"#).operation == .subscribe(.topic("scanner"), since: nil))
        #expect(try decode(#"{"op":"unsubscribe","name":"orders/42","path":"items[1].qty"}"#).operation
            == .unsubscribe(.path("orders/42", path("items[1].qty"))))
        #expect(try decode(#"{"op":"unsubscribe","topic":"scanner"}"#).operation == .unsubscribe(.topic("scanner")))
    }

    @Test func recordWrites() throws {
        #expect(try decode(#"{"op":"set","name":"orders/42","data":{"stage":"ready"}}"#).operation
            == .write([Write(name: "orders/42", action: .set(["stage": "ready"]))], atomic: false))
        #expect(try decode(#"{"op":"set","name":"orders/42","path":"items[2].qty","value":5,"version":3}"#).operation
            == .write([Write(name: "orders/42", action: .setPath(path("items[2].qty"), 5), baseVersion: 3)], atomic: false))
        // A null value is a value.
        #expect(try decode(#"{"op":"set","name":"a","path":"x","value":null}"#).operation
            == .write([Write(name: "a", action: .setPath(path("x"), .null))], atomic: false))
        #expect(try decode(#"{"op":"merge","name":"a","data":{"x":null},"version":0}"#).operation
            == .write([Write(name: "a", action: .merge(["x": .null]), baseVersion: 0)], atomic: false))
        #expect(try decode(#"{"op":"delete","name":"a"}"#).operation == .write([Write(name: "a", action: .delete)], atomic: false))
        #expect(try decode(#"{"op":"delete","name":"a","path":"items[0]"}"#).operation
            == .write([Write(name: "a", action: .deletePath(path("items[0]")))], atomic: false))
        #expect(try decode(#"{"op":"increment","name":"stats/scans","path":"count"}"#).operation
            == .write([Write(name: "stats/scans", action: .increment(path("count"), by: JSONNumber(1)))], atomic: false))
        #expect(try decode(#"{"op":"increment","name":"s","path":"c","by":-2.5}"#).operation
            == .write([Write(name: "s", action: .increment(path("c"), by: -2.5))], atomic: false))
    }

    @Test func listWrites() throws {
        #expect(try decode(#"{"op":"addEntry","list":"orders","entry":"orders/42"}"#).operation
            == .write([Write(name: "orders", action: .addEntry("orders/42", at: nil))], atomic: false))
        #expect(try decode(#"{"op":"addEntry","list":"orders","entry":"orders/42","at":0,"version":2}"#).operation
            == .write([Write(name: "orders", action: .addEntry("orders/42", at: 0), baseVersion: 2)], atomic: false))
        #expect(try decode(#"{"op":"removeEntry","list":"orders","entry":"orders/42"}"#).operation
            == .write([Write(name: "orders", action: .removeEntry("orders/42", at: nil))], atomic: false))
        #expect(try decode(#"{"op":"removeEntry","list":"orders","entry":"orders/42","at":3}"#).operation
            == .write([Write(name: "orders", action: .removeEntry("orders/42", at: 3))], atomic: false))
        #expect(try decode(#"{"op":"setEntries","list":"orders","entries":["a","b/c"]}"#).operation
            == .write([Write(name: "orders", action: .setEntries(["a", "b/c"]))], atomic: false))
        #expect(try decode(#"{"op":"setEntries","list":"orders","entries":[]}"#).operation
            == .write([Write(name: "orders", action: .setEntries([]))], atomic: false))
        #expect(try decode(#"{"op":"delete","list":"orders"}"#).operation
            == .write([Write(name: "orders", action: .deleteList)], atomic: false))
        for write in [Write(name: "l", action: .addEntry("e", at: nil)), Write(name: "l", action: .deleteList),
                      Write(name: "l", action: .setEntries([])), Write(name: "l", action: .removeEntry("e", at: nil))] {
            #expect(write.isListWrite)
        }
        #expect(!Write(name: "r", action: .delete).isListWrite)
    }

    @Test func atomicWriteAndIdempotencyKey() throws {
        let request = try decode(#"""
            {"op":"write","id":"w1","idem":"k-1","ops":[
              {"op":"set","name":"items/a","path":"stock","value":4,"version":2},
              {"op":"addEntry","list":"orders","entry":"orders/9"},
              {"op":"delete","name":"old","id":"ignored","idem":"ignored too"}]}
            """#)
        #expect(request == Request(id: "w1", operation: .write([
            Write(name: "items/a", action: .setPath(path("stock"), 4), baseVersion: 2),
            Write(name: "orders", action: .addEntry("orders/9", at: nil)),
            Write(name: "old", action: .delete),
        ], atomic: true), idempotencyKey: "k-1"))
        #expect(try decode(#"{"op":"set","name":"a","data":{},"idem":"x"}"#).idempotencyKey == "x")
        #expect(try decode(#"{"op":"set","name":"a","data":{},"idem":"\#(String(repeating: "k", count: 256))"}"#)
            .idempotencyKey?.utf8.count == 256)
        // Only writes carry a key.
        #expect(try decode(#"{"op":"get","name":"a","idem":"x"}"#).idempotencyKey == nil)
    }

    @Test func publishAndIds() throws {
        #expect(try decode(#"{"op":"publish","topic":"scanner","data":{"code":"123"}}"#).operation
            == .publish(topic: "scanner", data: ["code": "123"]))
        #expect(try decode(#"{"op":"publish","topic":"t","data":null}"#).operation == .publish(topic: "t", data: .null))
        #expect(try decode(#"{"op":"get","name":"a","id":"req-1"}"#).id == "req-1")
        #expect(try decode(#"{"op":"get","name":"a","id":-7}"#).id == -7)
        #expect(try decode(#"{"op":"get","name":"a","id":""}"#).id == "")
        #expect(try decode(#"{"op":"get","name":"a"}"#).id == nil)
        let longest = String(repeating: "i", count: 128)
        #expect(try decode(#"{"op":"get","name":"a","id":"\#(longest)"}"#).id == .string(longest))
        // Unknown members are ignored.
        #expect(try decode(#"{"op":"get","name":"a","future":[1,2]}"#).operation == .get(.record("a", path: nil)))
    }

    // MARK: Refusals

    static let refusals: [Refusal] = [
        // Not an object, no op.
        Refusal(#"[]"#, .badMessage, nil),
        Refusal(#""get""#, .badMessage, nil),
        Refusal(#"null"#, .badMessage, nil),
        Refusal(#"{}"#, .badMessage, nil),
        Refusal(#"{"name":"a","id":1}"#, .badMessage, nil),
        Refusal(#"{"op":5}"#, .badField, "op"),
        Refusal(#"{"op":"frobnicate"}"#, .unknownOp, nil),
        Refusal(#"{"op":"Get","name":"a"}"#, .unknownOp, nil),
        Refusal(#"{"op":"deletePath","name":"a","path":"x"}"#, .unknownOp, nil),
        // id types.
        Refusal(#"{"op":"get","name":"a","id":true}"#, .badField, "id"),
        Refusal(#"{"op":"get","name":"a","id":null}"#, .badField, "id"),
        Refusal(#"{"op":"get","name":"a","id":1.5}"#, .badField, "id"),
        Refusal(#"{"op":"get","name":"a","id":{"x":1}}"#, .badField, "id"),
        Refusal(#"{"op":"get","name":"a","id":[1]}"#, .badField, "id"),
        Refusal(#"{"op":"get","name":"a","id":"\#(String(repeating: "i", count: 129))"}"#, .badField, "id"),
        // hello.
        Refusal(#"{"op":"hello","protocol":0}"#, .badField, "protocol"),
        Refusal(#"{"op":"hello","protocol":-1}"#, .badField, "protocol"),
        Refusal(#"{"op":"hello","protocol":1.5}"#, .badField, "protocol"),
        Refusal(#"{"op":"hello","protocol":"1"}"#, .badField, "protocol"),
        Refusal(#"{"op":"hello","protocol":[]}"#, .badField, "protocol"),
        Refusal(#"{"op":"hello","protocol":[1,"2"]}"#, .badField, "protocol"),
        Refusal(#"{"op":"hello","client":7}"#, .badField, "client"),
        Refusal(#"{"op":"hello","client":"\#(String(repeating: "c", count: 129))"}"#, .badField, "client"),
        Refusal(#"{"op":"hello","token":false}"#, .badField, "token"),
        Refusal(#"{"op":"hello","since":-1}"#, .badField, "since"),
        Refusal(#"{"op":"hello","since":"1"}"#, .badField, "since"),
        // get.
        Refusal(#"{"op":"get"}"#, .badField, "name"),
        Refusal(#"{"op":"get","name":"a","list":"b"}"#, .badField, "name"),
        Refusal(#"{"op":"get","list":"b","prefix":"c"}"#, .badField, "list"),
        Refusal(#"{"op":"get","name":5}"#, .badField, "name"),
        Refusal(#"{"op":"get","list":null}"#, .badField, "list"),
        Refusal(#"{"op":"get","prefix":3}"#, .badField, "prefix"),
        Refusal(#"{"op":"get","name":"a","path":3}"#, .badField, "path"),
        Refusal(#"{"op":"get","prefix":"a","after":3}"#, .badField, "after"),
        Refusal(#"{"op":"get","prefix":"a","limit":0}"#, .badField, "limit"),
        Refusal(#"{"op":"get","prefix":"a","limit":1001}"#, .badField, "limit"),
        Refusal(#"{"op":"get","prefix":"a","limit":-5}"#, .badField, "limit"),
        Refusal(#"{"op":"get","prefix":"a","limit":10.5}"#, .badField, "limit"),
        Refusal(#"{"op":"get","prefix":"a","limit":"10"}"#, .badField, "limit"),
        // subscribe / unsubscribe.
        Refusal(#"{"op":"subscribe"}"#, .badField, "name"),
        Refusal(#"{"op":"subscribe","name":"a","topic":"t"}"#, .badField, "name"),
        Refusal(#"{"op":"subscribe","topic":1}"#, .badField, "topic"),
        Refusal(#"{"op":"subscribe","name":"a","since":-1}"#, .badField, "since"),
        Refusal(#"{"op":"subscribe","name":"a","since":1.5}"#, .badField, "since"),
        Refusal(#"{"op":"subscribe","name":"a","since":"3"}"#, .badField, "since"),
        Refusal(#"{"op":"unsubscribe"}"#, .badField, "name"),
        // Writes: missing and mistyped fields.
        Refusal(#"{"op":"set","data":{}}"#, .badField, "name"),
        Refusal(#"{"op":"set","name":"a"}"#, .badField, "data"),
        Refusal(#"{"op":"set","name":"a","data":[1]}"#, .badField, "data"),
        Refusal(#"{"op":"set","name":"a","data":"x"}"#, .badField, "data"),
        Refusal(#"{"op":"set","name":"a","path":"x"}"#, .badField, "value"),
        Refusal(#"{"op":"set","name":"a","data":{},"version":-1}"#, .badField, "version"),
        Refusal(#"{"op":"set","name":"a","data":{},"version":1.5}"#, .badField, "version"),
        Refusal(#"{"op":"set","name":"a","data":{},"version":"1"}"#, .badField, "version"),
        Refusal(#"{"op":"set","name":"a","data":{},"idem":""}"#, .badField, "idem"),
        Refusal(#"{"op":"set","name":"a","data":{},"idem":3}"#, .badField, "idem"),
        Refusal(#"{"op":"set","name":"a","data":{},"idem":"\#(String(repeating: "k", count: 257))"}"#, .badField, "idem"),
        Refusal(#"{"op":"merge","name":"a"}"#, .badField, "data"),
        Refusal(#"{"op":"merge","name":"a","data":null}"#, .badField, "data"),
        Refusal(#"{"op":"delete"}"#, .badField, "name"),
        Refusal(#"{"op":"increment","name":"a"}"#, .badField, "path"),
        Refusal(#"{"op":"increment","name":"a","path":"n","by":"1"}"#, .badField, "by"),
        Refusal(#"{"op":"increment","name":"a","path":"n","by":null}"#, .badField, "by"),
        Refusal(#"{"op":"addEntry","list":"l"}"#, .badField, "entry"),
        Refusal(#"{"op":"addEntry","entry":"e"}"#, .badField, "list"),
        Refusal(#"{"op":"addEntry","list":"l","entry":5}"#, .badField, "entry"),
        Refusal(#"{"op":"addEntry","list":"l","entry":"e","at":-1}"#, .badField, "at"),
        Refusal(#"{"op":"addEntry","list":"l","entry":"e","at":1.5}"#, .badField, "at"),
        Refusal(#"{"op":"addEntry","list":"l","entry":"e","at":1000001}"#, .badField, "at"),
        Refusal(#"{"op":"removeEntry","list":"l","entry":"e","at":-1}"#, .badField, "at"),
        Refusal(#"{"op":"setEntries","list":"l"}"#, .badField, "entries"),
        Refusal(#"{"op":"setEntries","list":"l","entries":"a"}"#, .badField, "entries"),
        Refusal(#"{"op":"setEntries","list":"l","entries":["a",2]}"#, .badField, "entries[1]"),
        Refusal(#"{"op":"setEntries","list":"l","entries":[null]}"#, .badField, "entries[0]"),
        Refusal(#"{"op":"publish","data":1}"#, .badField, "topic"),
        Refusal(#"{"op":"publish","topic":"t"}"#, .badField, "data"),
        Refusal(#"{"op":"write"}"#, .badField, "ops"),
        Refusal(#"{"op":"write","ops":[]}"#, .badField, "ops"),
        Refusal(#"{"op":"write","ops":{"op":"set"}}"#, .badField, "ops"),
        // Names.
        Refusal(#"{"op":"get","name":""}"#, .badName, "name"),
        Refusal(#"{"op":"get","name":"/a"}"#, .badName, "name"),
        Refusal(#"{"op":"get","name":"a/"}"#, .badName, "name"),
        Refusal(#"{"op":"get","name":"a//b"}"#, .badName, "name"),
        Refusal(#"{"op":"get","name":"a\u0000b"}"#, .badName, "name"),
        Refusal(#"{"op":"get","list":"l\tx"}"#, .badName, "list"),
        Refusal(#"{"op":"get","prefix":"/a"}"#, .badName, "prefix"),
        Refusal(#"{"op":"get","prefix":"a//"}"#, .badName, "prefix"),
        Refusal(#"{"op":"subscribe","prefix":"a\u007f"}"#, .badName, "prefix"),
        Refusal(#"{"op":"subscribe","topic":""}"#, .badName, "topic"),
        Refusal(#"{"op":"subscribe","list":"x/"}"#, .badName, "list"),
        Refusal(#"{"op":"set","name":"a/","data":{}}"#, .badName, "name"),
        Refusal(#"{"op":"addEntry","list":"l","entry":"/e"}"#, .badName, "entry"),
        Refusal(#"{"op":"removeEntry","list":"l","entry":""}"#, .badName, "entry"),
        Refusal(#"{"op":"setEntries","list":"l","entries":["ok","bad//name"]}"#, .badName, "entries[1]"),
        Refusal(#"{"op":"publish","topic":"t/","data":1}"#, .badName, "topic"),
        Refusal(#"{"op":"delete","list":""}"#, .badName, "list"),
    ]

    @Test(arguments: refusals)
    func refused(_ refusal: Refusal) {
        let error = decodeError(refusal.text)
        #expect(error?.code == refusal.code, "got \(String(describing: error))")
        #expect(error?.details["field"] == refusal.field.map(JSONValue.string))
        #expect(error?.details["index"] == nil)
        #expect(error?.message.isEmpty == false)
    }

    @Test func writeOpCountLimits() throws {
        let one = #"{"op":"addEntry","list":"l","entry":"e"}"#
        let ops = Array(repeating: one, count: 1000).joined(separator: ",")
        guard case .write(let writes, atomic: true) = try decode(#"{"op":"write","ops":[\#(ops)]}"#).operation else {
            Issue.record("not an atomic write")
            return
        }
        #expect(writes.count == 1000)
        let error = decodeError(#"{"op":"write","ops":[\#(ops),\#(one)]}"#)
        #expect(error?.code == .badField)
        #expect(error?.details["field"] == "ops")
    }

    // MARK: Paths

    @Test func badPathCarriesFieldAndOffset() {
        let error = decodeError(#"{"op":"get","name":"a","path":"a..b"}"#)
        #expect(error?.code == .badPath)
        #expect(error?.details["field"] == "path")
        #expect(error?.details["offset"] == 2)
        let index = decodeError(#"{"op":"set","name":"a","path":"items[01]","value":1}"#)
        #expect(index?.code == .badPath)
        #expect(index?.details["offset"] == 6)
        let empty = decodeError(#"{"op":"subscribe","name":"a","path":""}"#)
        #expect(empty?.code == .badPath)
        #expect(empty?.details["offset"] == 0)
        let increment = decodeError(#"{"op":"increment","name":"a","path":"n]"}"#)
        #expect(increment?.code == .badPath)
        #expect(increment?.details["field"] == "path")
        #expect(increment?.details["offset"] == 1)
        // A record's data is an object: a path starts with a key, everywhere.
        for text in [#"{"op":"get","name":"a","path":"[0]"}"#, #"{"op":"subscribe","name":"a","path":"[0].x"}"#,
                     #"{"op":"set","name":"a","path":"[1]","value":1}"#, #"{"op":"increment","name":"a","path":"[0]"}"#] {
            let error = decodeError(text)
            #expect(error?.code == .badPath, "\(text)")
            #expect(error?.details["field"] == "path", "\(text)")
            #expect(error?.details["offset"] == 0, "\(text)")
        }
        let deletion = decodeError(#"{"op":"delete","name":"a","path":"x[1000001]"}"#)
        #expect(deletion?.code == .badPath)
        #expect(deletion?.details["offset"] != nil)
    }

    // MARK: Inside `write`

    @Test func errorsInsideWriteNameTheOp() {
        let field = decodeError(#"{"op":"write","ops":[{"op":"set","name":"a","data":{}},{"op":"set","name":"b","data":7}]}"#)
        #expect(field?.code == .badField)
        #expect(field?.details["index"] == 1)
        #expect(field?.details["field"] == "ops[1].data")

        let name = decodeError(#"{"op":"write","ops":[{"op":"addEntry","list":"l","entry":"a//b"}]}"#)
        #expect(name?.code == .badName)
        #expect(name?.details["index"] == 0)
        #expect(name?.details["field"] == "ops[0].entry")

        let badPath = decodeError(#"{"op":"write","ops":[{"op":"delete","name":"a"},{"op":"delete","name":"a"},{"op":"increment","name":"a","path":"a..b"}]}"#)
        #expect(badPath?.code == .badPath)
        #expect(badPath?.details["index"] == 2)
        #expect(badPath?.details["field"] == "ops[2].path")
        #expect(badPath?.details["offset"] == 2)

        let version = decodeError(#"{"op":"write","ops":[{"op":"merge","name":"a","data":{},"version":-3}]}"#)
        #expect(version?.details["field"] == "ops[0].version")
        #expect(version?.details["index"] == 0)

        let entries = decodeError(#"{"op":"write","ops":[{"op":"setEntries","list":"l","entries":[1]}]}"#)
        #expect(entries?.details["field"] == "ops[0].entries[0]")

        // Not a write, or a nested write: unknown_op with the index, no field.
        for inner in [#"{"op":"get","name":"a"}"#, #"{"op":"write","ops":[]}"#, #"{"op":"publish","topic":"t","data":1}"#,
                      #"{"op":"nope"}"#] {
            let error = decodeError(#"{"op":"write","ops":[{"op":"delete","name":"a"},\#(inner)]}"#)
            #expect(error?.code == .unknownOp, "\(inner)")
            #expect(error?.details["index"] == 1, "\(inner)")
            #expect(error?.details["field"] == nil, "\(inner)")
        }
        // Outer fields are checked too.
        let idem = decodeError(#"{"op":"write","ops":[{"op":"delete","name":"a"}],"idem":""}"#)
        #expect(idem?.code == .badField)
        #expect(idem?.details["field"] == "idem")
    }

    @Test func nonObjectOpInsideWriteIsNamedByIndex() {
        for inner in [#"5"#, #"{"name":"a"}"#, #"{"op":3,"name":"a"}"#] {
            let error = decodeError(#"{"op":"write","ops":[{"op":"delete","name":"a"},\#(inner)]}"#)
            #expect(error?.code == .badField, "\(inner)")
            #expect(error?.details["field"] == "ops[1]", "\(inner)")
            // A malformed element of `ops` is named by its index like every other failure inside `write`.
            do {
                #expect(error?.details["index"] == 1, "\(inner)")
            }
        }
    }

    @Test func unknownOpWinsOverItsFields() {
        // An op that is not a write must be refused as unknown_op whatever
        // other members it carries.
        // An unknown op is reported as such even when its other fields are bad.
        do {
            #expect(decodeError(#"{"op":"frobnicate","version":-1}"#)?.code == .unknownOp)
            #expect(decodeError(#"{"op":"write","ops":[{"op":"frob","version":"x"}]}"#)?.code == .unknownOp)
        }
    }

    // MARK: id of a bad message

    @Test func idOfABadMessageIsRecoverable() {
        let cases: [(String, JSONValue?)] = [
            (#"{"id":"r1","op":"frobnicate"}"#, "r1"),
            (#"{"id":42}"#, 42),
            (#"{"id":7,"op":"get","name":"a//b"}"#, 7),
            (#"{"id":"w","op":"write","ops":[{"op":"set","name":"a","data":1}]}"#, "w"),
            (#"{"id":"p","op":"get","name":"a","path":"a..b"}"#, "p"),
            (#"{"op":"frobnicate"}"#, nil),
            (#"{"id":true,"op":"get","name":"a"}"#, nil),
            (#"{"id":1.5,"op":"get","name":"a"}"#, nil),
            (#"[{"id":1}]"#, nil),
            (#""x""#, nil),
        ]
        for (text, id) in cases {
            #expect(Request.id(of: message(text)) == id, "\(text)")
            #expect(decodeError(text) != nil, "\(text)")
        }
    }

    // MARK: Error JSON

    @Test func errorJSONCarriesCodeMessageAndDetails() throws {
        let error = try #require(decodeError(#"{"op":"get","name":"a","path":"a..b"}"#))
        guard case .object(let json) = error.json else {
            Issue.record("error.json is not an object")
            return
        }
        #expect(Set(json.keys) == ["code", "message", "field", "offset"])
        #expect(json["code"] == "bad_path")
        #expect(json["message"] == .string(error.message))
        // It serializes to JSON that parses back to the same value.
        #expect(try JSONValue.parse(error.json.serialized()) == error.json)
    }
}
