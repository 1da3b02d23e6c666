@preconcurrency import Glibc
import Synchronization

/// A small structured logger: one logfmt line per event on standard error,
/// `ts=… level=… event=… key=value…`. Libraries take one; the executable
/// decides the level. Never pass secrets as fields.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable {
        case debug, info, warning, error
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
        var name: String {
            switch self { case .debug: "debug"; case .info: "info"; case .warning: "warning"; case .error: "error" }
        }
    }

    public var level: Level
    private let sink: @Sendable (String) -> Void

    public init(level: Level = .info, sink: @escaping @Sendable (String) -> Void = Logger.standardError) {
        self.level = level
        self.sink = sink
    }

    /// A logger that drops everything (tests, benchmarks).
    public static let disabled = Logger(level: .error) { _ in }

    public static let standardError: @Sendable (String) -> Void = { line in
        line.withCString { _ = fputs($0, Glibc.stderr) }
    }

    public func debug(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.debug, event, fields) }
    public func info(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.info, event, fields) }
    public func warning(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.warning, event, fields) }
    public func error(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.error, event, fields) }

    public func log(_ level: Level, _ event: String, _ fields: KeyValuePairs<String, String>) {
        guard level >= self.level else { return }
        var line = "ts=\(Logger.timestamp()) level=\(level.name) event=\(event)"
        for (key, value) in fields {
            line += " \(key)=\(Logger.quoted(value))"
        }
        line += "\n"
        sink(line)
    }

    /// logfmt quoting: bare when the value has no space, quote or equals sign.
    static func quoted(_ value: String) -> String {
        if !value.isEmpty, !value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0 == "\n" }) {
            return value
        }
        var out = "\""
        for ch in value {
            switch ch {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.append(ch)
            }
        }
        return out + "\""
    }

    /// RFC 3339 UTC with milliseconds, without Foundation's date formatters.
    static func timestamp() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var t = time_t(ts.tv_sec)
        var parts = tm()
        gmtime_r(&t, &parts)
        func pad(_ v: Int32, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))."
            + "\(pad(Int32(ts.tv_nsec / 1_000_000), 3))Z"
    }
}
