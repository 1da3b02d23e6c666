extension JSONObject {
    /// RFC 7396 §2 (JSON Merge Patch): members of `patch` replace this
    /// object's, `null` removes one, and objects merge recursively. The hub
    /// applies `merge` writes with it and the offline mirror its own copy of
    /// them, so both land on the same data.
    public func mergePatched(with patch: JSONObject) -> JSONObject {
        var result = self
        for (key, value) in patch {
            switch value {
            case .null:
                result[key] = nil
            case .object(let inner):
                result[key] = .object((result[key]?.objectValue ?? [:]).mergePatched(with: inner))
            default:
                result[key] = value
            }
        }
        return result
    }
}
