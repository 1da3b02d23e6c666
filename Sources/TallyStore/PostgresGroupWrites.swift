import TallyPostgres

/// A group's record rows, record-index rows and idempotency answers,
/// gathered so that they go to the server in the group's closing statement
/// (`PostgresWriter.Statements.recordGroup`) instead of one round trip each:
/// a round trip costs about 0.15 ms on loopback, and a group of 50 writes
/// of orders holds a few hundred of these rows.
///
/// One statement can change a row once only ("ON CONFLICT DO UPDATE
/// command cannot affect row a second time"), so each key keeps the last
/// thing the group did to it: a put after a put replaces it, a delete after
/// a put becomes the delete, a put after a delete becomes the put (an
/// upsert leaves the row as a delete and an insert would). That is the
/// group's outcome whatever order the rows were written in, since nothing
/// else the group runs reads these tables. Lookups are by the key's bytes,
/// so replacing the entry of a name written earlier in the group is O(1).
struct PostgresGroupWrites {
    private enum Row<Value> {
        case put(Value)
        case delete
    }

    private struct IndexKey: Hashable {
        var index: [UInt8]
        var value: [UInt8]
        var name: [UInt8]
    }

    private var records: [[UInt8]: Row<StoredRecord>] = [:]
    private var recordOrder: [[UInt8]] = []
    private var indexRows: [IndexKey: Row<Int64>] = [:]
    private var indexOrder: [IndexKey] = []
    private var idempotency: [[UInt8]: StoredIdempotency] = [:]
    private var idempotencyOrder: [[UInt8]] = []

    var isEmpty: Bool { recordOrder.isEmpty && indexOrder.isEmpty && idempotencyOrder.isEmpty }

    /// Gathers `mutation` when it is one of the rows gathered here;
    /// false for one the writer runs itself (lists and their entries,
    /// index builds).
    mutating func take(_ mutation: StoreMutation) -> Bool {
        switch mutation {
        case .putRecord(let record): put(record)
        case .deleteRecord(let name): deleteRecord(name)
        case .putIndexEntry(let entry): put(entry)
        case .deleteIndexEntry(let index, let value, let name): deleteIndexEntry(index: index, value: value, name: name)
        case .dropIndex(let index):
            // The drop runs now, before the rows gathered so far would:
            // those of its index must go with it.
            let id = Array(index.utf8)
            indexOrder.removeAll { key in
                guard key.index == id else { return false }
                indexRows[key] = nil
                return true
            }
            return false
        case .putList, .deleteList, .markIndexBuilt, .insertListEntry, .deleteListEntries, .clearListEntries:
            return false
        }
        return true
    }

    mutating func put(_ record: StoredRecord) {
        remember(Array(record.name.utf8), .put(record), in: &records, order: &recordOrder)
    }

    mutating func deleteRecord(_ name: String) {
        remember(Array(name.utf8), .delete, in: &records, order: &recordOrder)
    }

    mutating func put(_ entry: StoredIndexEntry) {
        let key = IndexKey(index: Array(entry.index.utf8), value: entry.value, name: Array(entry.name.utf8))
        remember(key, .put(entry.updated), in: &indexRows, order: &indexOrder)
    }

    mutating func deleteIndexEntry(index: String, value: [UInt8], name: String) {
        let key = IndexKey(index: Array(index.utf8), value: value, name: Array(name.utf8))
        remember(key, .delete, in: &indexRows, order: &indexOrder)
    }

    mutating func remember(_ answer: StoredIdempotency) {
        let key = Array(answer.key.utf8)
        if idempotency.updateValue(answer, forKey: key) == nil { idempotencyOrder.append(key) }
    }

    private func remember<Key: Hashable, Value>(_ key: Key, _ row: Row<Value>, in rows: inout [Key: Row<Value>],
                                                order: inout [Key]) {
        if rows.updateValue(row, forKey: key) == nil { order.append(key) }
    }

    /// The closing statement's parameters after the group's own ($13 on):
    /// record deletes; record puts (name, version, seq, created, updated,
    /// data); index deletes (index, value, name); index puts (index, value,
    /// name, updated); idempotency (key, seq, time, response).
    var parameters: [PostgresValue] {
        var deletedNames: [[UInt8]] = []
        var names: [[UInt8]] = [], versions: [Int64] = [], seqs: [Int64] = [], created: [Int64] = []
        var updated: [Int64] = [], data: [[UInt8]] = []
        for name in recordOrder {
            switch records[name]! {
            case .delete: deletedNames.append(name)
            case .put(let record):
                names.append(name)
                versions.append(record.version)
                seqs.append(record.seq)
                created.append(record.created)
                updated.append(record.updated)
                data.append(record.data)
            }
        }
        var deletedIndex: ([[UInt8]], [[UInt8]], [[UInt8]]) = ([], [], [])
        var putIndex: ([[UInt8]], [[UInt8]], [[UInt8]], [Int64]) = ([], [], [], [])
        for key in indexOrder {
            switch indexRows[key]! {
            case .delete:
                deletedIndex.0.append(key.index)
                deletedIndex.1.append(key.value)
                deletedIndex.2.append(key.name)
            case .put(let time):
                putIndex.0.append(key.index)
                putIndex.1.append(key.value)
                putIndex.2.append(key.name)
                putIndex.3.append(time)
            }
        }
        var keys: [[UInt8]] = [], keySeqs: [Int64] = [], times: [Int64] = [], responses: [[UInt8]] = []
        for key in idempotencyOrder {
            let answer = idempotency[key]!
            keys.append(key)
            keySeqs.append(answer.seq)
            times.append(answer.time)
            responses.append(answer.response)
        }
        return [
            .byteaArray(deletedNames),
            .byteaArray(names), .int8Array(versions), .int8Array(seqs), .int8Array(created), .int8Array(updated),
            .byteaArray(data),
            .byteaArray(deletedIndex.0), .byteaArray(deletedIndex.1), .byteaArray(deletedIndex.2),
            .byteaArray(putIndex.0), .byteaArray(putIndex.1), .byteaArray(putIndex.2), .int8Array(putIndex.3),
            .byteaArray(keys), .int8Array(keySeqs), .int8Array(times), .byteaArray(responses),
        ]
    }

    /// The parameter types of `parameters`, in order.
    static let parameterTypes: [PostgresType] = [
        .byteaArray,
        .byteaArray, .int8Array, .int8Array, .int8Array, .int8Array, .byteaArray,
        .byteaArray, .byteaArray, .byteaArray,
        .byteaArray, .byteaArray, .byteaArray, .int8Array,
        .byteaArray, .int8Array, .int8Array, .byteaArray,
    ]
}
