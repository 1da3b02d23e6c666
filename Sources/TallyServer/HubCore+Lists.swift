import TallyEngine
import TallyProtocol
import TallyStore

extension HubCore {
    /// What a list change does to the store's entry rows (the list's own
    /// row is a `putList` or `deleteList` beside them).
    static func mutations(of edit: ListEdit, list: String, into mutations: inout [StoreMutation]) {
        switch edit {
        case .insert(let row):
            mutations.append(.insertListEntry(list: list, row))
        case .remove(let keys):
            mutations.append(.deleteListEntries(list: list, keys))
        case .replace(let rows):
            mutations.append(.clearListEntries(list))
            for row in rows { mutations.append(.insertListEntry(list: list, row)) }
        case .delete:
            break // .deleteList removes the rows
        }
    }
}
