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
    ///
    /// Works on the UTF-8 bytes: the index build runs it for every code of
    /// every item, and `String`'s Character-based trimming and searching
    /// cost about 20 µs an item — most of the 2.3 s a first resolve took
    /// with 100,000 items, with the core stalled meanwhile. Whitespace is
    /// ASCII space, tab, CR and LF, trimmed scalar by scalar.
    static func lookupKey(_ code: String) -> String {
        let bytes = Array(code.utf8)
        var (lo, hi) = trimmedRange(bytes)
        if let scheme = find(Self.schemeSeparator, in: bytes, lo, hi) {
            let start = scheme + Self.schemeSeparator.count
            var end = start
            while end < hi, bytes[end] != UInt8(ascii: "?"), bytes[end] != UInt8(ascii: "#") { end += 1 }
            if let items = find(Self.itemsSegment, in: bytes, start, end) {
                (lo, hi) = (items + Self.itemsSegment.count, end)
            } else {
                // The last non-empty segment, or the whole path when it has none.
                var segmentEnd = end
                while segmentEnd > start, bytes[segmentEnd - 1] == UInt8(ascii: "/") { segmentEnd -= 1 }
                var segmentStart = segmentEnd
                while segmentStart > start, bytes[segmentStart - 1] != UInt8(ascii: "/") { segmentStart -= 1 }
                (lo, hi) = segmentEnd > start ? (segmentStart, segmentEnd) : (start, end)
            }
            while hi > lo, bytes[hi - 1] == UInt8(ascii: "/") { hi -= 1 }
        }
        var lowered = [UInt8]()
        lowered.reserveCapacity(hi - lo)
        for byte in bytes[lo..<hi] {
            // Non-ASCII text lowers by Unicode's rules, as before.
            guard byte < 0x80 else { return String(decoding: bytes[lo..<hi], as: UTF8.self).lowercased() }
            lowered.append(byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte)
        }
        return String(decoding: lowered, as: UTF8.self)
    }

    private static let schemeSeparator = Array("://".utf8)
    private static let itemsSegment = Array("/items/".utf8)

    /// `bytes` without leading and trailing ASCII whitespace, as a range.
    private static func trimmedRange(_ bytes: [UInt8]) -> (Int, Int) {
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        var lo = 0, hi = bytes.count
        while lo < hi, isSpace(bytes[lo]) { lo += 1 }
        while hi > lo, isSpace(bytes[hi - 1]) { hi -= 1 }
        return (lo, hi)
    }

    /// The first index of `needle` in `bytes[lo..<hi]`.
    private static func find(_ needle: [UInt8], in bytes: [UInt8], _ lo: Int, _ hi: Int) -> Int? {
        guard hi - lo >= needle.count else { return nil }
        var i = lo
        while i + needle.count <= hi {
            if bytes[i] == needle[0], bytes[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }

    /// The id an unknown code becomes: characters outside `[A-Za-z0-9._-]`
    /// become `-`, at most 200 of them.
    static func identifier(for code: String) -> String {
        let key = lookupKey(code)
        let bytes = Array(code.utf8)
        let (lo, hi) = trimmedRange(bytes)
        let base = find(schemeSeparator, in: bytes, 0, bytes.count) != nil ? key : String(decoding: bytes[lo..<hi], as: UTF8.self)
        var id = ""
        for scalar in base.unicodeScalars.prefix(200) {
            let ok = scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || ".-_".unicodeScalars.contains(scalar))
            id.unicodeScalars.append(ok ? scalar : "-")
        }
        return id.isEmpty ? "item" : id
    }
}
