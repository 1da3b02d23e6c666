import TallyProtocol

/// Who is subscribed to what, indexed so that finding a change's subscribers
/// costs a few dictionary lookups, never a scan of all subscriptions.
///
/// Subscribers are small integer slots (`makeSubscriber`), so deduplication —
/// a change that matches several subscriptions of one connection is sent to it
/// once — is a generation stamp per slot rather than a set per change.
///
/// Prefix subscriptions are found by length: for every distinct prefix length
/// in use, the name's first bytes of that length are one lookup. Subscribers
/// pick short, shared prefixes (`orders/`), so there are few distinct lengths.
public struct SubscriptionRegistry: Sendable {
    // Keyed by bytes, not canonical equivalence (see `ByteKey`). Each name's
    // subscribers are an `IndexedList`, so dropping one is O(1) however many
    // share the name (a connection closing with 100,000 path subscriptions
    // on one record, or one of 10,000 connections on `orders/`).
    private var records: [ByteKey: IndexedList<Int>] = [:]
    private var paths: [ByteKey: IndexedList<PathSubscriber>] = [:]
    private var lists: [ByteKey: IndexedList<Int>] = [:]
    private var prefixes: [ByteKey: IndexedList<Int>] = [:]
    /// Distinct prefix byte lengths in use, ascending, with how many prefixes have each.
    private var prefixLengths: [(length: Int, count: Int)] = []
    private var topics: [ByteKey: IndexedList<Int>] = [:]
    /// Live queries: their subscribers, and the distinct queries per prefix
    /// (found by prefix length, like prefix subscriptions).
    private var queries: [Query: IndexedList<Int>] = [:]
    private var queriesByPrefix: [ByteKey: [Query]] = [:]
    private var queryPrefixLengths: [(length: Int, count: Int)] = []
    private var bySlot: [Set<SubscriptionTarget>] = []
    private var freeSlots: [Int] = []
    private var stamps: [UInt32] = []
    private var generation: UInt32 = 0
    public private(set) var count = 0

    public init() {}

    // MARK: Subscribers

    public mutating func makeSubscriber() -> Int {
        if let slot = freeSlots.popLast() { return slot }
        bySlot.append([])
        stamps.append(0)
        return bySlot.count - 1
    }

    /// Drops every subscription of `slot` and frees it for reuse.
    ///
    /// Path subscriptions come in bulk (one connection, many paths of one
    /// record): where the connection holds a good share of a record's path
    /// subscriptions, they are dropped in one pass over that record's list
    /// instead of one hashed lookup each (100,000 on one record: 120 ms
    /// one by one, a few ms in one pass).
    public mutating func releaseSubscriber(_ slot: Int) {
        let targets = bySlot[slot]
        bySlot[slot] = []
        count -= targets.count
        freeSlots.append(slot)
        var pathsPerName: [ByteKey: Int] = [:]
        for target in targets {
            if case .path(let name, _) = target {
                pathsPerName[ByteKey(name), default: 0] += 1
            } else {
                unindex(target, slot: slot)
            }
        }
        guard !pathsPerName.isEmpty else { return }
        var oneByOne = Set<ByteKey>()
        for (key, mine) in pathsPerName {
            guard let total = paths[key]?.elements.count else { continue }
            if mine * 4 >= total {
                paths[key]!.removeAll { $0.slot == slot }
                if paths[key]!.isEmpty { paths[key] = nil }
            } else {
                oneByOne.insert(key)
            }
        }
        guard !oneByOne.isEmpty else { return }
        for target in targets {
            if case .path(let name, _) = target, oneByOne.contains(ByteKey(name)) { unindex(target, slot: slot) }
        }
    }

    public func subscriptions(of slot: Int) -> Set<SubscriptionTarget> { bySlot[slot] }

    /// How many subscriptions `slot` holds.
    public func count(of slot: Int) -> Int { bySlot[slot].count }

    // MARK: Adding and removing

    /// Returns false when `slot` already had this subscription.
    @discardableResult
    public mutating func add(_ target: SubscriptionTarget, slot: Int) -> Bool {
        guard bySlot[slot].insert(target).inserted else { return false }
        count += 1
        switch target {
        case .record(let name): records[ByteKey(name), default: IndexedList()].append(slot)
        case .path(let name, let path): paths[ByteKey(name), default: IndexedList()].append(PathSubscriber(slot: slot, path: path))
        case .list(let name): lists[ByteKey(name), default: IndexedList()].append(slot)
        case .topic(let topic): topics[ByteKey(topic), default: IndexedList()].append(slot)
        case .prefix(let prefix):
            let key = ByteKey(prefix)
            if prefixes[key] == nil { Self.adjust(&prefixLengths, length: prefix.utf8.count, by: 1) }
            prefixes[key, default: IndexedList()].append(slot)
        case .query(let query):
            if queries[query] == nil {
                let key = ByteKey(query.prefix)
                if queriesByPrefix[key] == nil { Self.adjust(&queryPrefixLengths, length: query.prefix.utf8.count, by: 1) }
                queriesByPrefix[key, default: []].append(query)
            }
            queries[query, default: IndexedList()].append(slot)
        }
        return true
    }

    /// Returns false when `slot` had no such subscription.
    @discardableResult
    public mutating func remove(_ target: SubscriptionTarget, slot: Int) -> Bool {
        guard bySlot[slot].remove(target) != nil else { return false }
        count -= 1
        unindex(target, slot: slot)
        return true
    }

    /// Drops `slot`'s entry for `target` from the name tables.
    private mutating func unindex(_ target: SubscriptionTarget, slot: Int) {
        /// Drops `element` from the name's list; true when that emptied it.
        func drop<Element>(_ table: inout [ByteKey: IndexedList<Element>], _ name: String, _ element: Element) -> Bool {
            let key = ByteKey(name)
            table[key]?.remove(element)
            guard table[key]?.isEmpty == true else { return false }
            table[key] = nil
            return true
        }
        switch target {
        case .record(let name): _ = drop(&records, name, slot)
        case .list(let name): _ = drop(&lists, name, slot)
        case .topic(let topic): _ = drop(&topics, topic, slot)
        case .path(let name, let path): _ = drop(&paths, name, PathSubscriber(slot: slot, path: path))
        case .prefix(let prefix):
            if drop(&prefixes, prefix, slot) { Self.adjust(&prefixLengths, length: prefix.utf8.count, by: -1) }
        case .query(let query):
            queries[query]?.remove(slot)
            guard queries[query]?.isEmpty == true else { return }
            queries[query] = nil
            let key = ByteKey(query.prefix)
            queriesByPrefix[key]?.removeAll { $0 == query }
            if queriesByPrefix[key]?.isEmpty == true {
                queriesByPrefix[key] = nil
                Self.adjust(&queryPrefixLengths, length: query.prefix.utf8.count, by: -1)
            }
        }
    }

    private static func adjust(_ lengths: inout [(length: Int, count: Int)], length: Int, by delta: Int) {
        if let index = lengths.firstIndex(where: { $0.length == length }) {
            lengths[index].count += delta
            if lengths[index].count == 0 { lengths.remove(at: index) }
        } else {
            lengths.append((length, delta))
            lengths.sort { $0.length < $1.length }
        }
    }

    // MARK: Matching

    /// Appends to `into` each slot that must see `change` once.
    public mutating func subscribers(of change: Change, into slots: inout [Int]) {
        generation &+= 1
        if generation == 0 { stamps = Array(repeating: 0, count: stamps.count); generation = 1 }
        switch change.target {
        case .list:
            if let list = lists[ByteKey(change.name)] { for slot in list.elements { mark(slot, into: &slots) } }
        case .record(let before, let after, let scope):
            let name = ByteKey(change.name)
            if let whole = records[name] { for slot in whole.elements { mark(slot, into: &slots) } }
            if let subscribed = paths[name] {
                for subscriber in subscribed.elements
                where Self.concerns(path: subscriber.path, before: before, after: after, scope: scope) {
                    mark(subscriber.slot, into: &slots)
                }
            }
            if !prefixLengths.isEmpty { matchPrefixes(of: change.name, into: &slots) }
        }
    }

    /// Subscribers of list `name` (one subscription per slot per list).
    public func subscribers(ofList name: String, into slots: inout [Int]) {
        if let list = lists[ByteKey(name)] { slots.append(contentsOf: list.elements) }
    }

    /// Subscribers of an event topic (one subscription per slot per topic).
    public func subscribers(ofTopic topic: String) -> [Int] { topics[ByteKey(topic)]?.elements ?? [] }

    /// Whether `target` would see a change to record `name` (for replaying the log).
    public static func matches(_ target: SubscriptionTarget, recordNamed name: String) -> Bool {
        switch target {
        case .record(let record), .path(let record, _): record.sameBytes(as: name)
        case .prefix(let prefix): name.hasBytePrefix(prefix)
        case .list, .topic, .query: false
        }
    }

    // MARK: Live queries

    /// The queries (with at least one subscriber) whose prefix `name` is under.
    public func queries(concerning name: String) -> [Query] {
        guard !queryPrefixLengths.isEmpty else { return [] }
        var found: [Query] = []
        Self.forEachPrefix(of: name, lengths: queryPrefixLengths) { key in
            if let matched = queriesByPrefix[key] { found.append(contentsOf: matched) }
        }
        return found
    }

    /// The subscribers of `query` (each slot once).
    public func subscribers(ofQuery query: Query) -> [Int] { queries[query]?.elements ?? [] }

    /// A path subscriber sees a change that touched an overlapping path, or a
    /// whole-record change that altered the value under its path.
    public static func concerns(path: RecordPath, before: RecordState?, after: RecordState?,
                                scope: Change.RecordScope) -> Bool {
        switch scope {
        case .path(let changed):
            // A path write to a missing record creates it (PROTOCOL.md:
            // creation reaches every path subscriber).
            return before == nil || changed.overlaps(path)
        case .whole:
            guard let before, let after else { return true }
            return JSONValue.object(before.data).value(at: path) != JSONValue.object(after.data).value(at: path)
        }
    }

    private mutating func mark(_ slot: Int, into slots: inout [Int]) {
        guard stamps[slot] != generation else { return }
        stamps[slot] = generation
        slots.append(slot)
    }

    private mutating func matchPrefixes(of name: String, into slots: inout [Int]) {
        let utf8 = name.utf8
        let total = utf8.count
        for (length, _) in prefixLengths {
            guard length <= total else { break }
            let end = utf8.index(utf8.startIndex, offsetBy: length)
            // A prefix ends on a scalar boundary; a continuation byte here
            // means no prefix of this length can match.
            if end < utf8.endIndex, utf8[end] & 0xC0 == 0x80 { continue }
            if let matched = prefixes[ByteKey(String(name.utf8[..<end])!)] {
                for slot in matched.elements { mark(slot, into: &slots) }
            }
        }
    }

    /// Calls `body` with `name`'s first bytes for each length in `lengths`
    /// (ascending) that ends on a scalar boundary (`matchPrefixes` inlines
    /// the same walk: it marks slots as it goes, without a closure).
    private static func forEachPrefix(of name: String, lengths: [(length: Int, count: Int)], _ body: (ByteKey) -> Void) {
        let utf8 = name.utf8
        let total = utf8.count
        for (length, _) in lengths {
            guard length <= total else { break }
            let end = utf8.index(utf8.startIndex, offsetBy: length)
            // A prefix ends on a scalar boundary; a continuation byte here
            // means no prefix of this length can match.
            if end < utf8.endIndex, utf8[end] & 0xC0 == 0x80 { continue }
            body(ByteKey(String(name.utf8[..<end])!))
        }
    }
}

/// One path subscription: who, and which path.
struct PathSubscriber: Hashable, Sendable {
    var slot: Int
    var path: RecordPath
}

/// An array that also finds its elements, once it is long enough for that to
/// matter: iteration (per change delivered) walks a plain array, and removal
/// swaps the element with the last one — O(1) with the position index, a
/// short scan below `indexedFrom` elements, where a dictionary would cost
/// more memory than the scan costs time. Order is not kept.
struct IndexedList<Element: Hashable & Sendable>: Sendable {
    private(set) var elements: [Element] = []
    /// Each element's position in `elements`; nil while the list is short.
    private var positions: [Element: Int]?
    static var indexedFrom: Int { 16 }

    var isEmpty: Bool { elements.isEmpty }

    /// Appends `element`, which the caller knows is not in the list.
    mutating func append(_ element: Element) {
        positions?[element] = elements.count
        elements.append(element)
        if positions == nil, elements.count > Self.indexedFrom { positions = Self.index(elements) }
    }

    private static func index(_ elements: [Element]) -> [Element: Int] {
        var built: [Element: Int] = [:]
        built.reserveCapacity(elements.count * 2)
        for (index, element) in elements.enumerated() { built[element] = index }
        return built
    }

    /// Removes every element that matches, in one pass (positions rebuilt).
    mutating func removeAll(where matches: (Element) -> Bool) {
        elements.removeAll(where: matches)
        guard positions != nil else { return }
        positions = elements.count > Self.indexedFrom ? Self.index(elements) : nil
    }

    /// Removes `element`; false when it was not there.
    @discardableResult
    mutating func remove(_ element: Element) -> Bool {
        let index: Int
        if positions != nil {
            guard let found = positions!.removeValue(forKey: element) else { return false }
            index = found
        } else {
            guard let found = elements.firstIndex(of: element) else { return false }
            index = found
        }
        let last = elements.removeLast()
        if index < elements.count {
            elements[index] = last
            positions?[last] = index
        }
        return true
    }
}
