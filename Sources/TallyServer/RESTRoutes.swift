import TallyHTTP
import TallyProtocol

/// The `/v1/…` REST routes: each parses its request into a `RESTCall`
/// operation on the loop thread; bad input is answered there and never
/// reaches the core.
enum RESTRoutes {
    static func add(to router: inout HTTPRouter<HubRoutes.Route>, limits: JSONLimits) {
        router.add("GET", "/v1/records", .rest { request, _ throws(ProtocolError) in
            let query = try REST.query(request)
            let prefix = query["prefix"] ?? ""
            try Names.validatePrefix(prefix, field: "prefix")
            let limit = try REST.integer(query["limit"], field: "limit", default: Int64(Request.maxPageSize),
                                         range: 1...Int64(Request.maxPageSize))
            return .records(prefix: prefix, after: query["after"], limit: Int(limit))
        })
        router.add("GET", "/v1/records/{name...}", .rest { _, parameters throws(ProtocolError) in
            .getRecord(try REST.name(parameters["name"]!, field: "name"))
        })
        router.add("PUT", "/v1/records/{name...}", .rest { request, parameters throws(ProtocolError) in
            let data = try objectBody(request, limits: limits, "the body of a PUT is the record's data: a JSON object")
            // `?checkStock=true` is the WebSocket set's "checkStock": true.
            let checkStock: Bool
            switch try REST.query(request)["checkStock"] {
            case nil, "false"?: checkStock = false
            case "true"?: checkStock = true
            case let other?:
                throw .badField("checkStock", "checkStock must be true or false, not '\(other)'")
            }
            return try recordWrite(request, parameters, .set(data), checkStock: checkStock)
        })
        router.add("PATCH", "/v1/records/{name...}", .rest { request, parameters throws(ProtocolError) in
            let patch = try objectBody(request, limits: limits,
                                       "the body of a PATCH is a JSON merge patch (RFC 7396): a JSON object")
            return try recordWrite(request, parameters, .merge(patch))
        })
        router.add("DELETE", "/v1/records/{name...}", .rest { request, parameters throws(ProtocolError) in
            try recordWrite(request, parameters, .delete)
        })
        // List names may contain slashes, so the list routes split the rest
        // of the path themselves at the first `entries` segment.
        router.add("GET", "/v1/lists/{rest...}", .rest { request, parameters throws(ProtocolError) in
            let query = try REST.query(request)
            let limit = try query["limit"].map { text throws(ProtocolError) in
                Int(try REST.integer(text, field: "limit", default: 0, range: 1...Int64(Request.maxListPage)))
            }
            return .getList(try REST.name(parameters["rest"]!, field: "list"),
                            cursor: try Request.listCursor(query["cursor"]), limit: limit)
        })
        router.add("POST", "/v1/lists/{rest...}", .rest { request, parameters throws(ProtocolError) in
            let (list, entry) = try listAndEntry(parameters["rest"]!)
            guard entry == nil, let list else {
                throw ProtocolError(.badName, "POST to /v1/lists/NAME/entries with the entry as a JSON string",
                                    details: ["field": "list"])
            }
            guard case .string(let added) = try REST.body(request, limits: limits) else {
                throw ProtocolError.badField("entry", "the body is the entry to add: a JSON string such as \"orders/42\"")
            }
            try Names.validate(added, field: "entry")
            let query = try REST.query(request)
            let at = try query["at"].map { text throws(ProtocolError) in
                Int(try REST.integer(text, field: "at", default: 0, range: 0...Int64(RecordPath.maxIndex)))
            }
            return .writeList(Write(name: list, action: .addEntry(added, at: at)), key: try REST.idempotencyKey(request))
        })
        router.add("DELETE", "/v1/lists/{rest...}", .rest { request, parameters throws(ProtocolError) in
            let (list, entry) = try listAndEntry(parameters["rest"]!)
            guard let list, let entry else {
                throw ProtocolError(.badName, "DELETE /v1/lists/NAME/entries/ENTRY removes one entry",
                                    details: ["field": "entry"])
            }
            return .writeList(Write(name: list, action: .removeEntry(entry, at: nil)), key: try REST.idempotencyKey(request))
        })
        router.add("GET", "/v1/changes", .rest { request, _ throws(ProtocolError) in
            let query = try REST.query(request)
            guard let sinceText = query["since"] else {
                throw .badField("since", "give since=N: the last seq you have (0 for everything)")
            }
            let since = try REST.integer(sinceText, field: "since", default: 0, range: 0...Int64.max)
            let limit = try REST.integer(query["limit"], field: "limit", default: 1000, range: 1...10_000)
            return .changes(since: since, limit: Int(limit))
        })
        // POST is only ever an advance: /v1/records/{name}/advance.
        router.add("POST", "/v1/records/{name...}", .rest { request, parameters throws(ProtocolError) in
            let raw = parameters["name"]!
            guard raw.hasSuffix("/advance"), raw.utf8.count > 8 else {
                throw ProtocolError(.badName, "POST /v1/records/NAME/advance moves a workflow record to its next stage; other writes use PUT, PATCH or DELETE",
                                    details: ["field": "name"])
            }
            let name = try REST.name(String(raw.dropLast(8)), field: "name")
            var step = Advance()
            if !request.body.isEmpty {
                let body = try objectBody(request, limits: limits, "the body of an advance is {\"from\", \"to\", \"reason\", \"data\"} (all optional)")
                for (key, _) in body where !["from", "to", "reason", "data"].contains(key) {
                    throw ProtocolError.badField(key, "unknown member \"\(key)\"; an advance takes from, to, reason and data")
                }
                var message = body
                message["op"] = "advance"
                message["name"] = .string(name)
                guard case .write(let writes, _) = try Request.decode(.object(message)).operation,
                      case .advance(let decoded) = writes[0].action else {
                    throw ProtocolError.badField("data", "not an advance")
                }
                step = decoded
            }
            return .advance(name, step, key: try REST.idempotencyKey(request))
        })
        router.add("GET", "/v1/workflows", .rest { _, _ throws(ProtocolError) in .workflows })
        router.add("GET", "/v1/resolve/{code...}", .rest { _, parameters throws(ProtocolError) in
            // The HTTP parser has decoded the path once; decoding again would
            // read an escaped '%' as the start of another escape (A%2541 → AA).
            let code = parameters["code"]!
            guard !code.isEmpty, code.utf8.count <= 2048 else {
                throw ProtocolError.badField("code", "the code must be 1 to 2048 bytes of percent-encoded UTF-8")
            }
            return .resolve(code)
        })
        router.add("GET", "/v1/items", .rest { request, _ throws(ProtocolError) in
            let query = try REST.query(request)
            let limit = Int(try REST.integer(query["limit"], field: "limit", default: 20, range: 1...100))
            guard let text = query["q"] else {
                let after = query["after"]
                if let after { try Names.validatePrefix(after, field: "after") }
                return .items(after: after, limit: limit)
            }
            guard !text.isEmpty, text.utf8.count <= 2048 else {
                throw ProtocolError.badField("q", "give q: what to search for (1 to 2048 bytes): a name, SKU, serial, code or item id; leave it out for a page of items")
            }
            return .searchItems(text, limit: limit)
        })
        router.add("POST", "/v1/events/{topic...}", .rest { request, parameters throws(ProtocolError) in
            .publish(topic: try REST.name(parameters["topic"]!, field: "topic"), data: try REST.body(request, limits: limits))
        })
    }

    /// PUT, PATCH or DELETE of a record: `If-Match` is the base version,
    /// `Idempotency-Key` the key.
    static func recordWrite(_ request: HTTPRequest, _ parameters: [String: String],
                            _ action: Write.Action, checkStock: Bool = false) throws(ProtocolError) -> RESTCall.Operation {
        let name = try REST.name(parameters["name"]!, field: "name")
        let base = try REST.ifMatch(request)
        var write = Write(name: name, action: action, baseVersion: base)
        write.checkStock = checkStock
        return .writeRecord(write, key: try REST.idempotencyKey(request), ifMatch: base != nil)
    }

    static func objectBody(_ request: HTTPRequest, limits: JSONLimits, _ refusal: String) throws(ProtocolError) -> JSONObject {
        guard case .object(let object) = try REST.body(request, limits: limits) else {
            throw ProtocolError.badField("data", refusal)
        }
        return object
    }

    /// `orders/entries/orders/42` → ("orders", "orders/42"); `orders/entries` → ("orders", nil).
    static func listAndEntry(_ rest: String) throws(ProtocolError) -> (String?, String?) {
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard let marker = parts.firstIndex(of: "entries"), marker > 0 else { return (nil, nil) }
        let list = try REST.name(parts[..<marker].joined(separator: "/"), field: "list")
        let entryParts = parts[(marker + 1)...]
        guard !entryParts.isEmpty else { return (list, nil) }
        return (list, try REST.name(entryParts.joined(separator: "/"), field: "entry"))
    }
}
