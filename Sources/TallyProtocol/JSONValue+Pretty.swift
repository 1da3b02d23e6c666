extension JSONValue {
    /// Two-space indented JSON for people (`tally get`, `mirror get`): a
    /// member or element per line; empty containers and scalars as
    /// `serializedString` writes them.
    public var prettyString: String {
        var out = ""
        pretty(into: &out, indent: "")
        return out
    }

    private func pretty(into out: inout String, indent: String) {
        switch self {
        case .array(let values) where !values.isEmpty:
            out += "[\n"
            for (index, value) in values.enumerated() {
                out += indent + "  "
                value.pretty(into: &out, indent: indent + "  ")
                out += index == values.count - 1 ? "\n" : ",\n"
            }
            out += indent + "]"
        case .object(let object) where !object.isEmpty:
            out += "{\n"
            for (index, member) in object.enumerated() {
                out += indent + "  " + JSONValue.string(member.key).serializedString + ": "
                member.value.pretty(into: &out, indent: indent + "  ")
                out += index == object.count - 1 ? "\n" : ",\n"
            }
            out += indent + "}"
        default:
            out += serializedString
        }
    }
}
