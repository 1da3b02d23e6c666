import TallyProtocol

/// `tally intake status`: a job as people read it.
extension IntakeJob {
    /// A head line (id, record, state, item, hub), the reason of a failed
    /// job, a line per stage (status and what the hub confirmed), the
    /// analysis when the hub made one (codes, text, proposals, accepted or
    /// not) and a line per photo.
    public var statusLines: [String] {
        var head = "job \(id) \(record) \(state.rawValue)"
        if let item { head += " item \(item)\(newItem ? " (new)" : "")" }
        var lines = [head + " hub \(hub)"]
        if let reason { lines.append("  reason: \(reason)") }
        for row in stages {
            var line = "  " + Self.column(row.stage.rawValue) + Self.column(row.status.rawValue)
            if row.stage == .upload {
                line += "\(photos.filter(\.uploaded).count)/\(photos.count) photos stored"
                if let seq = row.result?["seq"], !seq.isNull { line += ", seq \(seq)" }
            } else if row.stage == .analyzed, let result = row.result {
                if result["timeout"] == .bool(true) {
                    let waited = result["waited"]?.numberValue?.int64Value ?? 0
                    line += "no analysis within \(IntakeRunner.seconds(waited)) (record at media-uploaded)"
                } else {
                    line += result.filter { $0.key != "analysis" }
                        .map { "\($0.key) \($0.value.stringValue ?? $0.value.serializedString)" }.joined(separator: ", ")
                }
            } else if let result = row.result {
                line += result.map { "\($0.key) \($0.value.stringValue ?? $0.value.serializedString)" }.joined(separator: ", ")
            }
            lines.append(line)
        }
        if let analysis { lines += analysis.statusLines(job: id) }
        for photo in photos {
            lines.append("  photo \(photo.position + 1) \(photo.sha256) \(photo.type) \(PhotoUploadDisplay.size(photo.size))"
                         + "\(photo.uploaded ? " stored" : "") \(photo.source)")
        }
        return lines
    }

    /// Left-aligned in a column of 10 characters (a space after a longer text).
    private static func column(_ text: String) -> String {
        text.count >= 10 ? text + " " : text + String(repeating: " ", count: 10 - text.count)
    }
}
