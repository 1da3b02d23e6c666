@preconcurrency import Glibc
import Dispatch
import TallyConcurrency
import TallyNet

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
    guard value.isFinite else { return "n/a" }
    if digits <= 0 { return String(Int(value.rounded())) }
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

/// Carries an object made on one thread to a loop that uses it from then on,
/// while the maker reads it again only after the loop's work is over (a
/// benchmark phase's jobs: made on the main thread, run on the loops, their
/// tallies read once every connection stopped).
///
/// `@unchecked Sendable`: never touched by two threads at once, by the
/// protocol above (the phase's end is an acquiring load of its counters).
struct Handoff<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// Opens `count` WebSocket client connections across `group`, at most
/// `concurrency` handshakes in flight, and waits for all of them. Returns the
/// open sockets (each with its loop) and the first failure, if any.
func openConnections(
    count: Int, url: String, group: EventLoopGroup, concurrency: Int = 200, options: WebSocketOptions,
    subprotocols: [String] = [], makeHandler: @escaping @Sendable (Int, WebSocket) -> any WebSocketHandler
) -> (sockets: [LoopBound<WebSocket>], failed: Int, firstError: ClientError?) {
    let slots = DispatchSemaphore(value: concurrency)
    let finished = CountdownLatch(count: count)
    let tally = LockedValueBox<(sockets: [LoopBound<WebSocket>], failed: Int, firstError: ClientError?)>(([], 0, nil))
    for index in 0..<count {
        slots.wait()
        WebSocketClient.connect(to: url, on: group.next(), options: options, subprotocols: subprotocols,
                                handler: { socket in makeHandler(index, socket) }) { result in
            tally.withLock { t in
                switch result {
                case .success(let socket): t.sockets.append(LoopBound(socket, on: socket.loop))
                case .failure(let error): t.failed += 1; if t.firstError == nil { t.firstError = error }
                }
            }
            slots.signal()
            finished.countDown()
        }
    }
    finished.wait()
    return tally.withLock { $0 }
}

/// Polls `condition` every 2 ms until it holds or `seconds` pass; returns whether it held.
func waitUntil(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = nanos() + UInt64(seconds * 1e9)
    while !condition() {
        if nanos() >= deadline { return false }
        usleep(2_000)
    }
    return true
}

/// The integer after the first `"t":` in a JSON text (the benchmarks' send
/// timestamp), or nil. A byte scan, not a parser: cheap enough not to load
/// the client.
func scanTimestamp(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
    let n = bytes.count
    guard n >= 5 else { return nil }
    var i = 0
    while i + 4 < n {
        if bytes[i] == 0x22, bytes[i + 1] == 0x74, bytes[i + 2] == 0x22, bytes[i + 3] == 0x3A {
            var j = i + 4
            while j < n, bytes[j] == 0x20 { j += 1 }
            var value: UInt64 = 0
            var digits = 0
            while j < n, bytes[j] >= 0x30, bytes[j] <= 0x39 {
                value = value &* 10 &+ UInt64(bytes[j] - 0x30)
                j += 1
                digits += 1
            }
            return digits > 0 ? value : nil
        }
        i += 1
    }
    return nil
}

/// A small xorshift generator (deterministic per seed, no locking).
struct XorShift {
    var state: UInt64
    init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }
    mutating func next() -> UInt64 {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        return state
    }
    mutating func next(below bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
