/// Resync progress as text for standard error: a bar redrawn in place on a
/// terminal, a line per phase otherwise (and one when a counted phase is
/// complete); steps too small to matter (`ResyncState.worthShowing`) are
/// not shown. The run's log lines go through here too, so they never land
/// inside a bar. Each call returns what to write (often nothing); the
/// caller writes it and keeps the display under its lock.
public struct ResyncDisplay: Sendable {
    private let terminal: Bool
    private var key = ""
    private var percent = -1
    private var done = -1
    private var drawn = false

    /// - Parameter terminal: whether the text goes to a terminal (bars) or
    ///   not (lines).
    public init(terminal: Bool) { self.terminal = terminal }

    /// The text that shows `progress`; nil progress: the resync ended.
    public mutating func show(_ progress: ResyncState?) -> String {
        guard let progress, progress.worthShowing else {
            defer { (key, percent, done, drawn) = ("", -1, -1, false) }
            return drawn ? "\n" : ""
        }
        let key = "\(progress.phase.rawValue) \(progress.target ?? "")"
        let percent = progress.percent ?? -1
        let complete = percent == 100
        var text = ""
        if terminal {
            guard key != self.key || percent != self.percent || (percent < 0 && progress.done != done) else { return "" }
            var line = "resync: \(progress.summary)"
            if percent >= 0 {
                let filled = 30 * percent / 100
                line = "resync [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: 30 - filled))] \(progress.summary)"
            }
            text = "\r\(line)\u{1B}[K"
            drawn = true
            if complete {
                text += "\n"
                drawn = false
            }
        } else if key != self.key || (complete && self.percent != 100) {
            text = "tally: resync: \(progress.summary)\n"
        }
        (self.key, self.percent, done) = (key, percent, progress.done)
        return text
    }

    /// The text of one of the run's log lines, ending a bar first.
    public mutating func log(_ line: String) -> String {
        defer { drawn = false }
        return (drawn ? "\n" : "") + "tally: mirror: \(line)\n"
    }
}
