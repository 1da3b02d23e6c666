import TallyProtocol

/// The requests behind `tally order`: stock orders (`orders/…`), whose
/// stages the hub's `orders/` workflow enforces.
public enum OrderRequests {
    /// A fresh order name: `orders/` and 16 random lowercase hex digits.
    public static func newName() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef")
        return "orders/" + String((0..<16).map { _ in digits[Int(generator.next() % 16)] })
    }

    /// A name under `prefix`: as given when it starts with it, else the id
    /// under it (`drill-01` → `items/drill-01`).
    public static func name(_ text: String, under prefix: String) -> String {
        text.hasPrefix(prefix) ? text : prefix + text
    }

    /// Creates the order `name` only if nothing has that name yet (version
    /// 0); the hub's workflow stamps its first stage. With `checkStock` the
    /// hub refuses an issue order for more than the item's stock
    /// (`insufficient_stock`); the item must exist either way (`not_found`).
    public static func create(_ name: String, item: String, qty: Int, kind: String,
                              checkStock: Bool = false) -> WriteOperation {
        var operation = WriteOperation.set(name, data: ["item": .string(item), "qty": .int(Int64(qty)), "kind": .string(kind)],
                                           version: 0)
        if checkStock { operation.json["checkStock"] = true }
        return operation
    }

    /// The `get` of orders: those at `stages`, through a live query on the
    /// stage field (what it reads does not grow with the orders finished
    /// long ago), or with `stages` nil every order (the prefix, paged).
    public static func list(stages: [String]?, stageField: String = "stage") -> JSONObject {
        guard let stages else { return ["op": "get", "prefix": "orders/"] }
        return ["op": "get", "query": ["prefix": "orders/", "where": [stageField: .array(stages.map(JSONValue.string))]]]
    }
}
