import TallyEngine
import TallyHTTP
import TallyProtocol

/// `GET /v1/resolve/{code}`: which item a scanned code names (seed 000: a
/// UUID, a link, an exact SKU or a serial number).
extension HubCore {
    static let itemPrefix = "items/"

    func resolve(_ code: String, call: RESTCall, head: Int64) throws(ProtocolError) {
        let key = Self.lookupKey(code)
        let index = try codeIndex()
        let name = index[key]?.min { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        guard let name, let record = try cache.record(name) else {
            var writer = MessageWriter()
            writer.value("error", ProtocolError(.notFound, "no item has the code \"\(code)\"; a new item for it would be \"\(Self.itemPrefix + Self.identifier(for: code))\"").json)
            writer.string("code", code)
            writer.bool("found", false)
            writer.string("name", Self.itemPrefix + Self.identifier(for: code))
            return emit(.http(call.responder, .json(.notFound, writer.finish())), after: 0)
        }
        try policy.check(call.actor, .read, name: name, owner: record.owner)
        var writer = MessageWriter(capacity: record.dataBytes.count + 128)
        writer.string("code", code)
        writer.bool("found", true)
        writer.string("name", name)
        writer.raw("record", record.envelope())
        var response = HTTPResponse.json(.ok, writer.finish())
        response.headers.set("ETag", "\"\(record.version)\"")
        emit(.http(call.responder, response), after: head)
    }

    /// Code → item names, built by reading every item once, then kept
    /// current by `indexCodes(of:)` as items change.
    func codeIndex() throws(ProtocolError) -> [String: Set<String>] {
        if let itemCodes { return itemCodes }
        var index: [String: Set<String>] = [:]
        var after: String?
        while true {
            let (page, more) = try records(prefix: Self.itemPrefix, after: after, limit: 1000)
            for record in page {
                for code in Self.codes(of: record) { index[code, default: []].insert(record.name) }
            }
            guard more, let last = page.last?.name else { break }
            after = last
        }
        itemCodes = index
        return index
    }

    /// Moves an item's codes in the index after a change to it.
    func indexCodes(of change: Change) {
        guard itemCodes != nil, change.name.hasBytePrefix(Self.itemPrefix),
              case .record(let before, let after, _) = change.target else { return }
        if let before { for code in Self.codes(of: before) { itemCodes![code]?.remove(before.name) } }
        if let after { for code in Self.codes(of: after) { itemCodes![code, default: []].insert(after.name) } }
    }

    /// Lookup keys of an item: its id, SKU, serials and extra codes.
    static func codes(of record: RecordState) -> Set<String> {
        var codes: Set<String> = [lookupKey(String(record.name.utf8.dropFirst(itemPrefix.utf8.count))!)]
        if let sku = record.data["sku"]?.stringValue { codes.insert(lookupKey(sku)) }
        for field in ["serials", "codes"] {
            for case .string(let code) in record.data[field]?.arrayValue ?? [] { codes.insert(lookupKey(code)) }
        }
        codes.remove("")
        return codes
    }

    /// Codes compare without case (UUIDs are printed both ways), and a link
    /// stands for the item id at its end (`https://host/items/ID?x` → ID).
    static func lookupKey(_ code: String) -> String {
        var text = Substring(code.trimmingCharacters(in: " \t\r\n"))
        if let scheme = text.firstRange(of: "://") {
            var path = text[scheme.upperBound...]
            path = path.prefix { $0 != "?" && $0 != "#" }
            if let items = path.firstRange(of: "/items/") {
                text = path[items.upperBound...]
            } else {
                text = path.split(separator: "/").last ?? path
            }
            while text.hasSuffix("/") { text = text.dropLast() }
        }
        return text.lowercased()
    }

    /// The id an unknown code becomes: characters outside `[A-Za-z0-9._-]`
    /// become `-`, at most 200 of them.
    static func identifier(for code: String) -> String {
        let key = lookupKey(code)
        let base = code.contains("://") ? key : code.trimmingCharacters(in: " \t\r\n")
        var id = ""
        for scalar in base.unicodeScalars.prefix(200) {
            let ok = scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || ".-_".unicodeScalars.contains(scalar))
            id.unicodeScalars.append(ok ? scalar : "-")
        }
        return id.isEmpty ? "item" : id
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        let drop = Set(set)
        return String(self.drop { drop.contains($0) }.reversed().drop { drop.contains($0) }.reversed())
    }
}
