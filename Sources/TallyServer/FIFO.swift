/// A first-in, first-out queue on one array: taking from the front moves a
/// read index, and the taken slots are dropped once they are half the
/// array, so a queue that never quite drains (a steady stream of intake
/// jobs) stays the size of what waits in it, not of everything that passed.
struct FIFO<Element> {
    private var items: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }
    var count: Int { items.count - head }
    /// Slots the array holds, taken ones included (tests).
    var storedCount: Int { items.count }

    mutating func append(_ item: Element) {
        items.append(item)
    }

    mutating func popFirst() -> Element? {
        guard head < items.count else { return nil }
        let item = items[head]
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 32, head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return item
    }
}

extension FIFO: Sendable where Element: Sendable {}
