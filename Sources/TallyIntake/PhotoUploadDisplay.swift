@preconcurrency import Glibc

/// Draws the intake runner's photo uploads (`PhotoUploadEvent`) as text for
/// its caller to write (the CLI: standard error): a progress bar redrawn in
/// place on a terminal, else one line per photo when it is stored (logs and
/// pipes get no carriage returns).
public final class PhotoUploadDisplay {
    private let terminal: Bool
    private let write: (String) -> Void
    private let clock: () -> Int64
    private var label = ""
    private var lastDraw: Int64 = 0
    private var lastPercent = -1
    private var drawn = false

    /// - Parameters:
    ///   - terminal: whether `write` goes to a terminal (bars) or not (lines).
    ///   - clock: milliseconds, monotonic; bars are redrawn at most every 100 ms.
    public init(terminal: Bool, clock: @escaping () -> Int64 = PhotoUploadDisplay.monotonicMillis,
                write: @escaping (String) -> Void) {
        (self.terminal, self.clock, self.write) = (terminal, clock, write)
    }

    public func show(_ event: PhotoUploadEvent) {
        switch event {
        case .started(let label, let size):
            (self.label, lastPercent, lastDraw, drawn) = (label, -1, 0, false)
            update(sent: 0, total: size)
        case .sent(let sent, let total):
            update(sent: sent, total: total)
        case .stored(let label, let sha256, let size, let new):
            let line = "\(label) \(sha256.prefix(12)) \(Self.size(size)) \(new ? "stored" : "already stored")"
            write(terminal ? "\r\(line)\u{1B}[K\n" : "tally: \(line)\n")
            drawn = false
        case .abandoned:
            if drawn { write("\n") }
            drawn = false
        case .analysing(let photos, let waited):
            let line = "analysing \(photos) photo\(photos == 1 ? "" : "s")…"
            if terminal {
                write("\r\(line) \(waited / 1000)s\u{1B}[K")
                drawn = true
            } else if waited == 0 {
                write("tally: \(line)\n")
            }
        case .analysisEnded:
            if drawn { write("\r\u{1B}[K") }
            drawn = false
        }
    }

    /// Redraws the bar at most every 100 ms or whole percent.
    private func update(sent: Int, total: Int) {
        guard terminal else { return }
        let percent = total > 0 ? sent * 100 / total : 100
        let now = clock()
        guard percent != lastPercent, now - lastDraw >= 100 || percent == 100 || lastPercent < 0 else { return }
        (lastPercent, lastDraw) = (percent, now)
        let filled = 30 * percent / 100
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 30 - filled)
        write("\r\(label) [\(bar)] \(percent)% \(Self.size(sent))/\(Self.size(total))\u{1B}[K")
        drawn = true
    }

    /// A byte count for people: B, KiB, or MiB with one decimal.
    public static func size(_ bytes: Int) -> String {
        if bytes < 1024 { return "\(bytes) B" }
        if bytes < 1 << 20 { return "\(bytes >> 10) KiB" }
        let tenths = bytes * 10 / (1 << 20)
        return "\(tenths / 10).\(tenths % 10) MiB"
    }

    public static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
