import Testing
@testable import TallyProtocol

private func decode(_ text: String) throws -> Request {
    try Request.decode(try JSONValue.parse(text))
}

private func refusal(_ text: String) -> ProtocolError? {
    do {
        _ = try decode(text)
        return nil
    } catch let error as ProtocolError {
        return error
    } catch {
        return nil
    }
}

/// `query` in subscribe, unsubscribe and get (PROTOCOL.md, "Live queries").
@Suite struct QueryDecodingTests {
    @Test func subscribeGetAndUnsubscribeTakeAQuery() throws {
        let text = #"{"prefix":"orders/","where":{"stage":["received","ready"],"owner":["cleo"]},"order":"updated","limit":20}"#
        guard case .subscribe(.query(let query), nil) = try decode(#"{"op":"subscribe","query":\#(text)}"#).operation else {
            Issue.record("not a query subscription")
            return
        }
        #expect(query.prefix == "orders/")
        #expect(query.conditions.map(\.path.description) == ["owner", "stage"])
        #expect(query.order == .updated)
        #expect(query.limit == 20)
        guard case .unsubscribe(.query(let same)) = try decode(#"{"op":"unsubscribe","query":\#(text)}"#).operation else {
            Issue.record("not a query unsubscription")
            return
        }
        #expect(same == query)
        guard case .get(.query(let got, let after, let limit)) =
            try decode(#"{"op":"get","query":{"prefix":"o/","where":{"n":[1,true,null]}},"after":"o/9","limit":50}"#).operation else {
            Issue.record("not a query get")
            return
        }
        #expect(got.conditions[0].values.count == 3)
        #expect(got.limit == nil && got.order == nil)
        #expect(after == "o/9" && limit == 50)
    }

    @Test func aLimitDefaultsToNewestFirst() throws {
        guard case .subscribe(.query(let query), _) =
            try decode(#"{"op":"subscribe","query":{"prefix":"o/","where":{"s":["x"]},"limit":3}}"#).operation else {
            Issue.record("not a query subscription")
            return
        }
        #expect(query.order == .newestFirst)
    }

    @Test(arguments: [
        (#"{"op":"subscribe","query":"orders/"}"#, "query"),
        (#"{"op":"subscribe","query":{"where":{"s":["x"]}}}"#, "query.prefix"),
        (#"{"op":"subscribe","query":{"prefix":"o/"}}"#, "query.where"),
        (#"{"op":"subscribe","query":{"prefix":"o/","where":{"[0]":["x"]}}}"#, "query.where.[0]"),
        (#"{"op":"subscribe","query":{"prefix":"o/","where":{"s":[[1]]}}}"#, "query.where.s"),
        (#"{"op":"subscribe","query":{"prefix":"o/","where":{"s":["x"]},"limit":1001}}"#, "limit"),
        (#"{"op":"subscribe","query":{"prefix":"o/","where":{"s":["x"]},"order":"-updated"}}"#, "query.order"),
        (#"{"op":"subscribe","query":{"prefix":"o/","where":{"s":["x"]},"own":1}}"#, "query.own"),
        (#"{"op":"subscribe","query":{"prefix":"o/","where":{"s":["x"]},"extra":1}}"#, "query.extra"),
        (#"{"op":"subscribe","prefix":"o/","query":{"prefix":"o/","where":{"s":["x"]}}}"#, "prefix"),
    ])
    func badQueriesNameTheField(text: String, field: String) {
        let error = refusal(text)
        #expect(error?.code == .badField || error?.code == .badPath, "\(text)")
        #expect(error?.details["field"] == .string(field), "\(text): \(String(describing: error))")
    }
}
