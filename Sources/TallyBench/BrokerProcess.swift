@preconcurrency import Glibc
import TallyConcurrency
import TallyClient
import TallyHTTP
import TallyNet

/// A broker under test, run as a child process: a Tally hub (this same
/// binary, `serve`) or Debian's Mosquitto. The benchmarks read its CPU time
/// from /proc and stop it by PID with SIGTERM.
public final class BrokerProcess: @unchecked Sendable {
    public enum Kind: String, Sendable, CaseIterable {
        case tally, mosquitto
    }

    public let kind: Kind
    public let pid: Int32
    /// The WebSocket port.
    public let port: Int
    /// Nanoseconds from just before exec to the moment the broker was ready
    /// (Tally: its "listening" line; Mosquitto: its port accepted a connection).
    public let readyNanos: UInt64
    /// Directory holding the broker's log (and, for Tally, its data unless given).
    public let workDirectory: String
    private var stdoutFD: Int32
    private var exited = false

    public enum Failure: Error, CustomStringConvertible {
        case spawn(String)
        case notReady(String)
        public var description: String {
            switch self {
            case .spawn(let m): "cannot start the broker: \(m)"
            case .notReady(let m): "the broker did not become ready: \(m)"
            }
        }
    }

    private init(kind: Kind, pid: Int32, port: Int, readyNanos: UInt64, workDirectory: String, stdoutFD: Int32) {
        self.kind = kind
        self.pid = pid
        self.port = port
        self.readyNanos = readyNanos
        self.workDirectory = workDirectory
        self.stdoutFD = stdoutFD
    }

    deinit {
        if !exited { terminate() }
    }

    /// The WebSocket URL a client connects to.
    public var url: String {
        switch kind {
        case .tally: "ws://127.0.0.1:\(port)/v1/ws"
        case .mosquitto: "ws://127.0.0.1:\(port)/"
        }
    }

    /// The path of this executable (`/proc/self/exe` resolved).
    public static func selfExecutable() -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return "/proc/self/exe" }
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Starts `tally serve` on a free port with its data in `dataDirectory`
    /// and waits for its "listening" line (at most `timeoutSeconds`).
    public static func tally(dataDirectory: String, workDirectory: String, extraArguments: [String] = [],
                             timeoutSeconds: Double = 600) throws(Failure) -> BrokerProcess {
        let arguments = ["serve", "--host", "127.0.0.1", "--port", "0", "--data", dataDirectory, "--no-echo",
                         "--log-level", "warning"] + extraArguments
        let start = nanos()
        let (pid, out) = try spawn(selfExecutable(), arguments, stderrPath: workDirectory + "/tally.log")
        let deadline = start + UInt64(timeoutSeconds * 1e9)
        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let now = nanos()
            guard now < deadline else {
                kill(pid, SIGKILL); _ = reap(pid)
                throw .notReady("no 'listening' line within \(timeoutSeconds) s")
            }
            var pfd = pollfd(fd: out, events: Int16(POLLIN), revents: 0)
            let rc = poll(&pfd, 1, Int32(min(1000, (deadline - now) / 1_000_000 + 1)))
            if rc < 0 { if errno == EINTR { continue }; break }
            if rc == 0 { continue }
            let n = read(out, &chunk, chunk.count)
            if n <= 0 {
                _ = reap(pid)
                throw .notReady("the hub exited before listening (see \(workDirectory)/tally.log): "
                    + lastLines(of: workDirectory + "/tally.log"))
            }
            pending.append(contentsOf: chunk[..<n])
            while let newline = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                if line.contains("listening on"), let colon = line.lastIndex(of: ":"),
                   let port = Int(line[line.index(after: colon)...]) {
                    return BrokerProcess(kind: .tally, pid: pid, port: port, readyNanos: nanos() - start,
                                         workDirectory: workDirectory, stdoutFD: out)
                }
            }
        }
        kill(pid, SIGKILL); _ = reap(pid)
        throw .notReady("reading the hub's output failed")
    }

    /// Starts Mosquitto with a generated configuration: a WebSocket listener
    /// on a free port and, beside it, a loopback MQTT listener (Mosquitto 2.0
    /// with libwebsockets cannot start with only a WebSocket listener).
    public static func mosquitto(workDirectory: String, timeoutSeconds: Double = 20) throws(Failure) -> BrokerProcess {
        let candidates: [String] = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto", "/usr/local/sbin/mosquitto"]
        guard let binary = candidates.first(where: { access($0, X_OK) == 0 }) else {
            throw .spawn("mosquitto is not installed (apt-get install mosquitto)")
        }
        let wsPort = freePort(), plainPort = freePort()
        let config = """
        listener \(plainPort) 127.0.0.1
        listener \(wsPort)
        socket_domain ipv4
        protocol websockets
        allow_anonymous true
        max_connections -1
        persistence false
        max_queued_messages 100000
        log_dest stderr
        log_type error
        log_type warning

        """
        let path = workDirectory + "/mosquitto.conf"
        guard writeFile(path, config) else { throw .spawn("cannot write \(path)") }
        let start = nanos()
        let (pid, out) = try spawn(binary, ["-c", path], stderrPath: workDirectory + "/mosquitto.log")
        let deadline = start + UInt64(timeoutSeconds * 1e9)
        while nanos() < deadline {
            if canConnect(port: wsPort) {
                return BrokerProcess(kind: .mosquitto, pid: pid, port: wsPort, readyNanos: nanos() - start,
                                     workDirectory: workDirectory, stdoutFD: out)
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                close(out)
                throw .notReady("mosquitto exited: " + lastLines(of: workDirectory + "/mosquitto.log"))
            }
            usleep(20_000)
        }
        kill(pid, SIGKILL); _ = reap(pid); close(out)
        throw .notReady("mosquitto did not accept connections within \(timeoutSeconds) s")
    }

    /// User plus system CPU time of the whole process (every thread, live or
    /// ended), in seconds, from /proc/PID/stat.
    public func cpuSeconds() -> Double? { processCPUSeconds(pid: pid) }

    /// Resident set size in KiB.
    public func residentKiB() -> Int? { TallyBench.residentKiB(pid: pid) }

    /// SIGTERM, then waits for the exit (SIGKILL after `graceSeconds`).
    /// Returns the exit status as `waitpid` reports it.
    @discardableResult
    public func terminate(graceSeconds: Double = 30) -> Int32 {
        guard !exited else { return 0 }
        exited = true
        kill(pid, SIGTERM)
        let deadline = nanos() + UInt64(graceSeconds * 1e9)
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid || r < 0 { break }
            if nanos() > deadline { kill(pid, SIGKILL); waitpid(pid, &status, 0); break }
            usleep(5_000)
        }
        ChildRegistry.remove(pid)
        if stdoutFD >= 0 { close(stdoutFD); stdoutFD = -1 }
        return status
    }

    // MARK: Helpers

    /// posix_spawn with stdout to a pipe (returned) and stderr to a file.
    static func spawn(_ path: String, _ arguments: [String], stderrPath: String) throws(Failure) -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .spawn("pipe: \(String(cString: strerror(errno)))") }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        // The child starts with default signal dispositions and an empty mask.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var pid: pid_t = 0
        ChildRegistry.installSignalHandlers()
        let rc = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
        close(fds[1])
        guard rc == 0 else {
            close(fds[0])
            throw .spawn("\(path): \(String(cString: strerror(rc)))")
        }
        ChildRegistry.add(pid)
        return (pid, fds[0])
    }

    static func reap(_ pid: Int32) -> Int32 {
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        ChildRegistry.remove(pid)
        return status
    }

    /// A port that was free a moment ago (bind to 0, read it back, close).
    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    static func lastLines(of path: String) -> String {
        guard let text = readFile(path) else { return "" }
        return text.split(separator: "\n").suffix(5).joined(separator: " | ")
    }
}

/// The brokers this process has started and not yet reaped, so that an
/// interrupted benchmark (Ctrl-C, `timeout`) stops them instead of leaving
/// orphans. A fixed table of PIDs: the signal handler may only read memory
/// and call async-signal-safe functions (`kill`, `_exit`).
enum ChildRegistry {
    static let capacity = 64
    nonisolated(unsafe) static let slots: UnsafeMutablePointer<Int32> = {
        let p = UnsafeMutablePointer<Int32>.allocate(capacity: capacity)
        p.initialize(repeating: 0, count: capacity)
        return p
    }()
    static let lock = LockedValueBox<Bool>(false)

    static func add(_ pid: Int32) {
        lock.withLock { _ in
            for i in 0..<capacity where slots[i] == 0 { slots[i] = pid; return }
        }
    }

    static func remove(_ pid: Int32) {
        lock.withLock { _ in
            for i in 0..<capacity where slots[i] == pid { slots[i] = 0 }
        }
    }

    /// SIGINT, SIGTERM and SIGHUP: SIGTERM every registered child, then let
    /// the signal do what it would have done without this handler.
    ///
    /// The library does not exit the process or pick an exit code: it puts
    /// the default action back and raises the signal again, which is
    /// delivered once the handler returns (the signal is blocked while it
    /// runs) and ends the process as if no handler had been installed. A
    /// shell sees the same status as before, 128 + the signal's number.
    static func installSignalHandlers() {
        lock.withLock { installed in
            guard !installed else { return }
            installed = true
            _ = slots
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                for i in 0..<ChildRegistry.capacity {
                    let pid = ChildRegistry.slots[i]
                    if pid > 0 { kill(pid, SIGTERM) }
                }
                // Both async-signal-safe (signal-safety(7)).
                signal(number, SIG_DFL)
                raise(number)
            }
            sigemptyset(&action.sa_mask)
            for signal in [SIGINT, SIGTERM, SIGHUP] { sigaction(signal, &action, nil) }
        }
    }
}

/// CPU seconds of a process: the sum of its threads' run time in
/// nanoseconds from /proc/PID/task/*/schedstat (the scheduler's own
/// account), which a benchmark of a few seconds needs — user plus system
/// time in /proc/PID/stat counts in 10 ms ticks. Threads that have ended are
/// not in that sum: the brokers measured keep theirs. Without schedstat,
/// falls back to /proc/PID/stat (fields 14 and 15, ended threads included).
public func processCPUSeconds(pid: Int32) -> Double? {
    if let nanos = threadRunNanos(pid: pid) { return Double(nanos) / 1e9 }
    guard let text = readFile("/proc/\(pid)/stat"), let paren = text.lastIndex(of: ")") else { return nil }
    let fields = text[text.index(after: paren)...].split(separator: " ")
    // fields[0] is field 3 (state); utime is field 14, stime 15.
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// The summed `sum_exec_runtime` (first field of schedstat) of every thread
/// of `pid`; nil when the kernel has no schedstat or the process is gone.
private func threadRunNanos(pid: Int32) -> UInt64? {
    guard let tids = directoryNames("/proc/\(pid)/task") else { return nil }
    var total: UInt64 = 0
    var threads = 0
    for tid in tids {
        guard let text = readFile("/proc/\(pid)/task/\(tid)/schedstat"),
              let first = text.split(separator: " ").first, let nanos = UInt64(first) else { continue }
        total += nanos
        threads += 1
    }
    return threads > 0 ? total : nil
}

/// The names in `directory`, without "." and ".."; nil when it cannot be read.
private func directoryNames(_ directory: String) -> [String]? {
    guard let dir = opendir(directory) else { return nil }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}

func readFile(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = read(fd, &chunk, chunk.count)
        if n <= 0 { break }
        bytes.append(contentsOf: chunk[..<n])
    }
    return String(decoding: bytes, as: UTF8.self)
}

func writeFile(_ path: String, _ text: String) -> Bool {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    return bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count
}

/// A fresh directory under /tmp; `removeTree` deletes it.
public func makeTemporaryDirectory(_ prefix: String = "tally-bench") -> String {
    var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
    return template.withUnsafeMutableBufferPointer { buffer in
        guard let made = mkdtemp(buffer.baseAddress!) else { return "/tmp/\(prefix)-\(getpid())-\(nanos())" }
        return String(cString: made)
    }
}

/// Deletes a directory tree (by running `rm -rf`, which is simplest and safe
/// for the temporary directories the benchmarks make).
public func removeTree(_ path: String) {
    guard path.hasPrefix("/tmp/") else { return }
    if let (pid, out) = try? BrokerProcess.spawn("/bin/rm", ["-rf", path], stderrPath: "/dev/null") {
        close(out)
        _ = BrokerProcess.reap(pid)
    }
}

/// Total size in bytes of the regular files directly in `directory`.
public func directoryBytes(_ directory: String) -> Int {
    var total = 0
    for name in directoryNames(directory) ?? [] {
        var info = stat()
        if stat(directory + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG { total += Int(info.st_size) }
    }
    return total
}

/// Sleeps until the monotonic clock reaches `deadline` (nanoseconds).
func sleep(untilNanos deadline: UInt64) {
    var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
}

/// A blocking GET on loopback (for /metrics) through the one REST client;
/// the body, or nil.
public func httpGet(port: Int, path: String) -> String? {
    let client = RESTClient(access: HubAccess(server: "http://127.0.0.1:\(port)"))
    guard let response = try? client.get(path), response.status == 200 else { return nil }
    return String(decoding: response.body, as: UTF8.self)
}

/// A value of a Prometheus text metric without labels.
public func prometheusValue(_ text: String, _ name: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
        return Double(line.dropFirst(name.count + 1))
    }
    return nil
}
