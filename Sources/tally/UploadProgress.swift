@preconcurrency import Glibc
import TallyIntake

/// Draws the intake runner's photo uploads on stderr: a progress bar
/// redrawn in place when stderr is a terminal, else one line per photo when
/// it is stored (logs and pipes get no carriage returns).
final class UploadProgress {
    private let isTerminal = isatty(STDERR_FILENO) == 1
    private var label = ""
    private var lastDraw: Int64 = 0
    private var lastPercent = -1
    private var drawn = false

    func show(_ event: PhotoUploadEvent) {
        switch event {
        case .started(let label, let size): start(label: label, size: size)
        case .sent(let sent, let total): update(sent: sent, total: total)
        case .stored(let label, let sha256, let size, let new): finish(label: label, sha256: sha256, size: size, new: new)
        case .abandoned: abandon()
        }
    }

    private func start(label: String, size: Int) {
        self.label = label
        lastPercent = -1
        lastDraw = 0
        drawn = false
        update(sent: 0, total: size)
    }

    /// Redraws the bar at most every 100 ms or whole percent.
    private func update(sent: Int, total: Int) {
        guard isTerminal else { return }
        let percent = total > 0 ? sent * 100 / total : 100
        let now = Self.monotonicMillis()
        guard percent != lastPercent, now - lastDraw >= 100 || percent == 100 || lastPercent < 0 else { return }
        lastPercent = percent
        lastDraw = now
        let width = 30
        let filled = width * percent / 100
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        fputs("\r\(label) [\(bar)] \(percent)% \(Self.size(sent))/\(Self.size(total))\u{1B}[K", stderr)
        drawn = true
    }

    /// The photo is stored: ends the bar (terminal) or prints its one line.
    private func finish(label: String, sha256: String, size: Int, new: Bool) {
        let line = "\(label) \(sha256.prefix(12)) \(Self.size(size)) \(new ? "stored" : "already stored")"
        if isTerminal {
            fputs("\r\(line)\u{1B}[K\n", stderr)
        } else {
            fputs("tally: \(line)\n", stderr)
        }
        drawn = false
    }

    /// The upload stopped before the photo was stored: ends the bar's line.
    private func abandon() {
        if drawn { fputs("\n", stderr) }
        drawn = false
    }

    static func size(_ bytes: Int) -> String {
        if bytes < 1024 { return "\(bytes) B" }
        if bytes < 1 << 20 { return "\(bytes >> 10) KiB" }
        let tenths = bytes * 10 / (1 << 20)
        return "\(tenths / 10).\(tenths % 10) MiB"
    }

    static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
