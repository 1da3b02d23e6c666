import TallyEngine
import TallyHTTP
import TallyProtocol
import TallyStore

/// `GET /v1/items?q=TEXT&limit=N`: the items a person at the counter means
/// by what they typed or scanned. Three reads, each O(log n + found),
/// whatever the number of items:
/// - the item whose code it is (`/v1/resolve`'s code index: id, SKU,
///   serial, extra codes, a link);
/// - the items whose display name (`name`) has a word starting with each
///   word typed (a word-prefix index kept in the store like the code index:
///   each name word's first 2 to 6 letters, lowercased);
/// - the items whose record name starts with `items/TEXT`.
extension HubCore {
    /// The id of the name-word index among the store's record indexes.
    static let wordIndexID = itemPrefix + "\u{1F}\u{1F}words"
    /// Index rows per word: its prefixes of 2 to 6 letters. A longer word
    /// typed is looked up by its first 6 letters, the rest checked on the
    /// item itself.
    static let wordPrefixes = 2...6
    /// Words of a name that are indexed (a longer name is a data mistake).
    static let maxIndexedWords = 32
    /// Index candidates read per search at most: a 6-letter prefix shared
    /// by more items than this finds the first ones by name only.
    static let maxSearchCandidates = 1000

    func searchItems(_ text: String, limit: Int, call: RESTCall, head: Int64) throws(ProtocolError) {
        var found: [RecordState] = []
        var seen: Set<String> = []
        func add(_ record: RecordState) {
            guard found.count < limit, !seen.contains(record.name),
                  mayRead(call.actor, name: record.name, owner: record.owner) else { return }
            seen.insert(record.name)
            found.append(record)
        }
        let key = Self.lookupKey(text)
        if !key.isEmpty, let record = try item(withCode: key) { add(record) }
        for record in try itemsNamed(like: text, limit: limit) { add(record) }
        let idPrefix = Self.itemPrefix + text.trimmingASCIISpaces
        if found.count < limit, idPrefix != Self.itemPrefix, (try? Names.validatePrefix(idPrefix, field: "q")) != nil,
           policy.decide(call.actor, .read, prefix: idPrefix) != .denied {
            for record in try readableRecords(prefix: idPrefix, after: nil, limit: limit, actor: call.actor).0 { add(record) }
        }
        var writer = MessageWriter()
        writer.int("seq", head)
        writer.string("q", text)
        writer.int("lowStock", Int64(configuration.lowStock))
        writer.rawArray("items", found.map { $0.envelope() })
        respond(call, .ok, writer.finish(), after: head)
    }

    /// `GET /v1/items?after=NAME&limit=N`: a page of the items by record
    /// name (`GET /v1/records?prefix=items/`, with the config's `lowStock`).
    func pageItems(after: String?, limit: Int, call: RESTCall, head: Int64) throws(ProtocolError) {
        let (records, more) = try readableRecords(prefix: Self.itemPrefix, after: after, limit: limit, actor: call.actor)
        var writer = MessageWriter()
        writer.int("seq", head)
        writer.int("lowStock", Int64(configuration.lowStock))
        writer.rawArray("items", records.map { $0.envelope() })
        writer.bool("more", more)
        respond(call, .ok, writer.finish(), after: head)
    }

    /// Items whose display name has, for each word of `text`, a word it
    /// begins (case-insensitive), by record name, at most `limit`: the word
    /// index read for the longest word typed (its first 6 letters), the
    /// uncommitted items laid over it, each candidate checked as it is now.
    private func itemsNamed(like text: String, limit: Int) throws(ProtocolError) -> [RecordState] {
        let typed = Self.words(of: text)
        guard let longest = typed.max(by: { $0.unicodeScalars.count < $1.unicodeScalars.count }),
              longest.unicodeScalars.count >= Self.wordPrefixes.lowerBound else { return [] }
        let value = Array(String(String.UnicodeScalarView(longest.unicodeScalars.prefix(Self.wordPrefixes.upperBound))).utf8)
        func matches(_ record: RecordState) -> Bool {
            guard let name = record.data["name"]?.stringValue else { return false }
            let words = Self.words(of: name)
            return typed.allSatisfy { word in words.contains { $0.hasPrefix(word) } }
        }
        var found: [RecordState] = []
        var checked: Set<String> = []
        for name in cache.pendingRecordNames(prefix: Self.itemPrefix) where checked.insert(name).inserted {
            if let record = try cache.record(name), matches(record) { found.append(record) }
        }
        var after: String?
        var read = 0
        while read < Self.maxSearchCandidates {
            let page: [String]
            do {
                page = try cache.reader.indexedNames(index: Self.wordIndexID, value: value, prefix: Self.itemPrefix,
                                                     after: after, limit: min(200, Self.maxSearchCandidates - read))
            } catch {
                throw .storage(error)
            }
            for name in page where checked.insert(name).inserted {
                if let record = try cache.record(name), matches(record) { found.append(record) }
            }
            read += page.count
            // Enough found before this page's end: later names sort after them.
            if page.count < 200 || found.count >= limit + cache.pendingRecordCount { break }
            after = page.last
        }
        found.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        return Array(found.prefix(limit))
    }

    /// The word index rows an item change moves (appended to its store unit).
    func wordMutations(of change: Change, into mutations: inout [StoreMutation]) {
        guard change.name.hasBytePrefix(Self.itemPrefix), case .record(let before, let after, _) = change.target else { return }
        let old = before.map(Self.wordKeys(of:)) ?? []
        let new = after.map(Self.wordKeys(of:)) ?? []
        for key in old where !new.contains(key) {
            mutations.append(.deleteIndexEntry(index: Self.wordIndexID, value: Array(key.utf8), name: change.name))
        }
        for key in new where !old.contains(key) {
            mutations.append(.putIndexEntry(StoredIndexEntry(index: Self.wordIndexID, value: Array(key.utf8),
                                                             name: change.name, updated: after?.updated ?? 0)))
        }
    }

    /// The word index values of an item: each word of its display name cut
    /// to 2…6 letters.
    static func wordKeys(of record: RecordState) -> Set<String> {
        guard let name = record.data["name"]?.stringValue else { return [] }
        var keys: Set<String> = []
        for word in words(of: name).prefix(maxIndexedWords) {
            let scalars = Array(word.unicodeScalars)
            for length in wordPrefixes where length <= scalars.count {
                keys.insert(String(String.UnicodeScalarView(scalars[0..<length])))
            }
        }
        return keys
    }

    /// The words of a text, lowercased: runs of letters and digits.
    static func words(of text: String) -> [String] {
        var words: [String] = []
        var current = String.UnicodeScalarView()
        for scalar in text.lowercased().unicodeScalars {
            if scalar.properties.isAlphabetic || scalar.properties.numericType != nil {
                current.append(scalar)
            } else if !current.isEmpty {
                words.append(String(current))
                current = String.UnicodeScalarView()
            }
        }
        if !current.isEmpty { words.append(String(current)) }
        return words
    }
}

private extension String {
    /// Without leading and trailing ASCII spaces, tabs, CRs and LFs.
    var trimmingASCIISpaces: String {
        let scalars = Array(unicodeScalars)
        let space: (Unicode.Scalar) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
        guard let first = scalars.firstIndex(where: { !space($0) }), let last = scalars.lastIndex(where: { !space($0) }) else {
            return ""
        }
        return String(String.UnicodeScalarView(scalars[first...last]))
    }
}
