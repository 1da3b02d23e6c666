/// Items posted by any thread and taken all at once by one consumer: the
/// way work crosses to an event loop or a client's queue.
///
/// Taking everything at once is the point: a consumer woken once (eventfd
/// and queue wake-ups coalesce) handles every item that arrived meanwhile,
/// and the arrays are swapped rather than copied, so a busy mailbox
/// reallocates nothing. `post` says whether the mailbox was empty, which
/// is when the poster must wake the consumer; a consumer that drains
/// everything per wake-up then misses nothing.
public struct Mailbox<Item> {
    @usableFromInline
    let storage: LockStorage<[Item]>

    public init() {
        storage = .make([])
    }

    /// Appends `item`. Returns true when the mailbox was empty before.
    @inlinable
    @discardableResult
    public func post(_ item: Item) -> Bool {
        storage.withLockedValue { items in
            items.append(item)
            return items.count == 1
        }
    }

    /// Appends `batch` in order. Returns true when the mailbox was empty
    /// before and `batch` is not.
    @inlinable
    @discardableResult
    public func post(contentsOf batch: [Item]) -> Bool {
        storage.withLockedValue { items in
            let wasEmpty = items.isEmpty
            items.append(contentsOf: batch)
            return wasEmpty && !batch.isEmpty
        }
    }

    /// Moves everything posted into `batch` (emptied first; its storage
    /// becomes the mailbox's, so two arrays take turns and neither is
    /// reallocated). Returns false when there was nothing.
    @inlinable
    @discardableResult
    public func takeAll(into batch: inout [Item]) -> Bool {
        batch.removeAll(keepingCapacity: true)
        return storage.withLockedValue { items in
            guard !items.isEmpty else { return false }
            swap(&items, &batch)
            return true
        }
    }

    /// Whether nothing is waiting (a snapshot: another thread may post at once).
    @inlinable
    public var isEmpty: Bool {
        storage.withLockedValue { $0.isEmpty }
    }
}

/// `@unchecked`: the items are reached only with the lock held (the storage,
/// a `ManagedBuffer`, cannot be Sendable itself).
extension Mailbox: @unchecked Sendable where Item: Sendable {}
