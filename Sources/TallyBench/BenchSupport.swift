@preconcurrency import Glibc
import Dispatch

/// Monotonic nanoseconds.
func nanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Percentiles of a sample of durations in nanoseconds.
public struct LatencySummary: Sendable {
    public var count: Int
    public var p50: Double
    public var p90: Double
    public var p99: Double
    public var max: Double

    init(_ samples: [UInt64]) {
        let sorted = samples.sorted()
        count = sorted.count
        func pick(_ q: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))]) / 1000
        }
        p50 = pick(0.50)
        p90 = pick(0.90)
        p99 = pick(0.99)
        max = Double(sorted.last ?? 0) / 1000
    }
}

/// Resident set size of a process in KiB, from /proc/PID/status (VmRSS).
public func residentKiB(pid: Int32) -> Int? {
    guard let file = fopen("/proc/\(pid)/status", "r") else { return nil }
    defer { fclose(file) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), file) != nil {
        let text = line.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        if text.hasPrefix("VmRSS:") {
            return Int(text.dropFirst(6).filter { $0.isNumber })
        }
    }
    return nil
}

/// Raises the open-file limit to the hard limit (10,000 connections need it).
public func raiseDescriptorLimit() {
    var limit = rlimit()
    if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}

/// Formats a table with aligned columns (first row is the header).
public func renderTable(_ rows: [[String]]) -> String {
    guard let first = rows.first else { return "" }
    var widths = Array(repeating: 0, count: first.count)
    for row in rows { for (i, cell) in row.enumerated() where i < widths.count { widths[i] = Swift.max(widths[i], cell.count) } }
    var out = ""
    for (index, row) in rows.enumerated() {
        let cells = row.enumerated().map { i, cell in cell + String(repeating: " ", count: widths[i] - cell.count) }
        out += "| " + cells.joined(separator: " | ") + " |\n"
        if index == 0 { out += "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|\n" }
    }
    return out
}

public func format(_ value: Double, _ digits: Int = 1) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    var text = String(rounded)
    if let dot = text.firstIndex(of: ".") {
        let decimals = text.distance(from: dot, to: text.endIndex) - 1
        if decimals < digits { text += String(repeating: "0", count: digits - decimals) }
    }
    return text
}
