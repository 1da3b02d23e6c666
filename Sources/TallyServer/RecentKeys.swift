import TallyProtocol

/// Idempotency keys of accepted writes that are not committed yet, with
/// their replies: a retry that arrives before the commit finds its answer
/// here. Once a write is committed its key and reply are in the store
/// (`StoreReading.idempotency`, kept 24 hours), which answers later retries,
/// so the entry leaves at the commit — the map holds what the store does not
/// have yet, never a history of keys.
///
/// (It used to keep every key until 100,000 had gathered: 8 MiB of keys and
/// replies at the soak's 840 keyed writes a second, refilled every two
/// minutes.)
struct RecentKeys {
    private var replies: [ByteKey: (seq: Int64, reply: [UInt8])] = [:]
    /// Keys in the order their writes were accepted (seq order), to drop on commit.
    private var order: [(seq: Int64, key: ByteKey)] = []
    private var head = 0

    /// The reply of the accepted write that carried `key`, until it is committed.
    subscript(key: ByteKey) -> (seq: Int64, reply: [UInt8])? {
        get { replies[key] }
        set {
            replies[key] = newValue
            if let newValue { order.append((newValue.seq, key)) }
        }
    }

    var count: Int { replies.count }

    /// A commit failed and everything after `seq` was rolled back: those
    /// writes never happened, so a retry of their keys must apply again.
    mutating func rolledBack(after seq: Int64) {
        replies = replies.filter { $0.value.seq <= seq }
        order = order[head...].filter { $0.seq <= seq }
        head = 0
    }

    /// Everything up to `seq` is in the store: forget those keys.
    mutating func committed(through seq: Int64) {
        while head < order.count, order[head].seq <= seq {
            let key = order[head].key
            if let entry = replies[key], entry.seq <= seq { replies[key] = nil }
            head += 1
        }
        if head == order.count {
            order.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024, head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
