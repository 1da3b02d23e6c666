import TallyEngine
import TallyHTTP
import TallyProtocol
import TallyStore

/// `GET /v1/resolve/{code}`: which item a scanned code names (seed 000: a
/// UUID, a link, an exact SKU or a serial number).
extension HubCore {
    static let itemPrefix = "items/"

    func resolve(_ code: String, call: RESTCall, head: Int64) throws(ProtocolError) {
        let key = Self.lookupKey(code)
        guard let record = try item(withCode: key) else {
            var writer = MessageWriter()
            writer.value("error", ProtocolError(.notFound, "no item has the code \"\(code)\"; a new item for it would be \"\(Self.itemPrefix + Self.identifier(for: code))\"").json)
            writer.string("code", code)
            writer.bool("found", false)
            writer.string("name", Self.itemPrefix + Self.identifier(for: code))
            return emit(.http(call.responder, .json(.notFound, writer.finish())), after: 0)
        }
        try policy.check(call.actor, .read, name: record.name, owner: record.owner)
        var writer = MessageWriter(capacity: record.dataBytes.count + 128)
        writer.string("code", code)
        writer.bool("found", true)
        writer.string("name", record.name)
        writer.raw("record", record.envelope())
        var response = HTTPResponse.json(.ok, writer.finish())
        response.headers.set("ETag", "\"\(record.version)\"")
        emit(.http(call.responder, response), after: head)
    }

    /// The item with lookup key `key` (the first by name when several have
    /// it): the store's code index, with the items not yet committed laid
    /// over it, each candidate checked against its current state. O(log n +
    /// found + uncommitted items), whatever the number of items.
    func item(withCode key: String) throws(ProtocolError) -> RecordState? {
        var names: [String]
        do {
            names = try cache.reader.indexedNames(index: Self.codeIndexID, value: Array(key.utf8), prefix: Self.itemPrefix,
                                                  after: nil, limit: Self.maxItemsPerCode)
        } catch {
            throw .storage(error)
        }
        names += cache.pendingRecordNames(prefix: Self.itemPrefix)
        names.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        for name in names {
            if let record = try cache.record(name), Self.codes(of: record).contains(key) { return record }
        }
        return nil
    }

    /// The id of the code index among the store's record indexes (U+001F
    /// twice: no live-query index, prefix U+001F path, has that id).
    static let codeIndexID = itemPrefix + "\u{1F}\u{1F}codes"
    /// Items read per code: more with one code is a data mistake, and the
    /// first by name answers anyway.
    static let maxItemsPerCode = 100

    /// The code index rows an item change moves: its old codes out, its
    /// new ones in (appended to its store unit).
    func codeMutations(of change: Change, into mutations: inout [StoreMutation]) {
        guard change.name.hasBytePrefix(Self.itemPrefix), case .record(let before, let after, _) = change.target else { return }
        let old = before.map(Self.codes(of:)) ?? []
        let new = after.map(Self.codes(of:)) ?? []
        for code in old where !new.contains(code) {
            mutations.append(.deleteIndexEntry(index: Self.codeIndexID, value: Array(code.utf8), name: change.name))
        }
        for code in new where !old.contains(code) {
            mutations.append(.putIndexEntry(StoredIndexEntry(index: Self.codeIndexID, value: Array(code.utf8),
                                                             name: change.name, updated: after?.updated ?? 0)))
        }
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
    /// Works on the UTF-8 bytes: building the code index runs it for every
    /// code of every item, and `String`'s Character-based trimming and
    /// searching cost about 20 µs an item. Whitespace is
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
