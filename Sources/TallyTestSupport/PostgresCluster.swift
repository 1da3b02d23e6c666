@preconcurrency import Glibc
import Synchronization

/// A private PostgreSQL server for tests: its own data directory under
/// /tmp, a free 127.0.0.1 port, its Unix socket in that directory (not
/// /var/run/postgresql), trust authentication on loopback, superuser
/// `tally`. `shared()` starts one per test process, stopped at exit; each
/// suite takes a fresh database of it (`createDatabase`).
///
/// PostgreSQL refuses to run as root ("root execution of the PostgreSQL
/// server is not permitted"), and CI runs tests as root: then every server
/// program runs as the `postgres` user through `runuser`, in a directory
/// owned by that user. The programs come from `TALLY_PG_BINDIR`, else the
/// newest /usr/lib/postgresql/N/bin (Debian), else PATH; missing ones fail
/// the test with what to install — a skipped test would hide that.
///
/// Only what this type started is stopped: `pg_ctl stop` on its own data
/// directory, the watchdog by its PID. The watchdog (a `sh` in its own
/// session) stops the server and removes the directory if the test process
/// dies without running its exit handlers (SIGKILL, Ctrl-C), so a killed
/// run leaves no server behind.
public final class PostgresCluster: Sendable {
    /// The directory holding `data/` (the cluster), the socket and `server.log`.
    public let directory: String
    public let port: Int
    public let superuser = "tally"
    private let binaries: String
    /// The server's command-line options (port, socket directory, …), given
    /// again to every `pg_ctl start`.
    private let serverOptions: String
    private let runAs: ServerUser?
    private let watchdog: pid_t
    // Atomics rather than a lock: ThreadSanitizer sees atomic instructions
    // but not the futex calls `Synchronization.Mutex` makes on Linux (see
    // "Threads" in ARCHITECTURE.md), and these two need nothing more.
    private let databases = Atomic<Int>(0)
    private let destroyed = Atomic<Bool>(false)

    /// The account server programs run as when this process is root.
    private struct ServerUser: Sendable {
        let runuser: String
        let uid: uid_t
        let gid: gid_t
    }

    /// `postgres://tally@127.0.0.1:PORT/DATABASE`.
    public func url(database: String) -> String {
        "postgres://\(superuser)@127.0.0.1:\(port)/\(database)"
    }

    // MARK: The shared cluster

    /// Why the shared cluster did not start, kept for every later caller.
    private struct StartFailure: Error, Sendable {
        let message: String
    }

    /// Started on first use: a `static let` is initialized once, by the
    /// first thread to read it, while the others wait (swift_once).
    private static let sharedCluster: Result<PostgresCluster, StartFailure> = {
        do throws(TestFailure) {
            let cluster = try start()
            atexit { try? PostgresCluster.sharedCluster.get().destroy() }
            return .success(cluster)
        } catch {
            return .failure(StartFailure(message: error.description))
        }
    }()

    /// The test process's cluster, started on first use and destroyed at
    /// exit. A failed start is remembered: every test that asks fails with
    /// the same message instead of trying again.
    public static func shared() throws(TestFailure) -> PostgresCluster {
        switch sharedCluster {
        case .success(let cluster): return cluster
        case .failure(let failure): throw TestFailure(failure.message)
        }
    }

    // MARK: Start and stop

    /// initdb, then `pg_ctl start` on a free port (another one if the port
    /// was taken in between), waiting until the server accepts connections.
    /// - Parameter fsync: false trades durability for speed (`fsync=off`);
    ///   the default keeps PostgreSQL's own, so measured commit rates mean something.
    public static func start(fsync: Bool = true) throws(TestFailure) -> PostgresCluster {
        let binaries = try findBinaries()
        let runAs = try serverUser()
        let directory = try makeDirectory(owner: runAs)
        do throws(TestFailure) {
            let data = directory + "/data"
            try run(binaries + "/initdb", ["-D", data, "-U", "tally", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                    as: runAs, in: directory, what: "initdb")
            var lastError = TestFailure("no port tried")
            for _ in 0..<5 {
                let port = try freePort()
                let options = "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1" + (fsync ? "" : " -c fsync=off")
                do throws(TestFailure) {
                    try run(binaries + "/pg_ctl", ["-D", data, "-l", directory + "/server.log", "-w", "-t", "60",
                                                   "-o", options, "start"],
                            as: runAs, in: directory, what: "pg_ctl start")
                } catch {
                    lastError = error
                    // Another process took the port between freePort and the bind: try another.
                    if (try? String(contentsOf: directory + "/server.log"))?.contains("could not bind") == true { continue }
                    throw error
                }
                let watchdog = try startWatchdog(binaries: binaries, runAs: runAs, directory: directory)
                return PostgresCluster(directory: directory, port: port, binaries: binaries, serverOptions: options,
                                       runAs: runAs, watchdog: watchdog)
            }
            throw lastError
        } catch {
            _ = try? run(binaries + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "stop"],
                         as: runAs, in: directory, what: "pg_ctl stop")
            removeTree(directory)
            throw error
        }
    }

    private init(directory: String, port: Int, binaries: String, serverOptions: String, runAs: ServerUser?, watchdog: pid_t) {
        self.directory = directory
        self.port = port
        self.binaries = binaries
        self.serverOptions = serverOptions
        self.runAs = runAs
        self.watchdog = watchdog
    }

    /// A new, empty database owned by `tally`, named after `prefix`; its URL.
    public func createDatabase(_ prefix: String) throws(TestFailure) -> String {
        let number = databases.add(1, ordering: .relaxed).newValue
        let stem = String(prefix.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "_" }.prefix(40))
        let name = "\(stem)_\(number)"
        try Self.run(binaries + "/createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", superuser, name],
                     as: nil, in: directory, what: "createdb \(name)")
        return url(database: name)
    }

    /// `pg_ctl stop -m fast`: sessions are ended ("terminating connection
    /// due to administrator command"), then the server exits.
    public func stop() throws(TestFailure) {
        try pgCtl(["-m", "fast", "-w", "stop"], what: "pg_ctl stop")
    }

    /// Starts a stopped server again, on the same port.
    public func start() throws(TestFailure) {
        try pgCtl(["-l", directory + "/server.log", "-w", "-t", "60", "-o", serverOptions, "start"], what: "pg_ctl start")
    }

    /// `pg_ctl restart -m fast`: stop, then start with the same options.
    public func restart() throws(TestFailure) {
        try pgCtl(["-m", "fast", "-l", directory + "/server.log", "-w", "-t", "60", "-o", serverOptions, "restart"],
                  what: "pg_ctl restart")
    }

    /// Stops the server, ends the watchdog and removes the directory. Idempotent.
    public func destroy() {
        guard !destroyed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        kill(watchdog, SIGTERM)
        var status: Int32 = 0
        while waitpid(watchdog, &status, 0) < 0 && errno == EINTR {}
        _ = try? pgCtl(["-m", "fast", "-w", "stop"], what: "pg_ctl stop")
        Self.removeTree(directory)
    }

    private func pgCtl(_ arguments: [String], what: String) throws(TestFailure) {
        try Self.run(binaries + "/pg_ctl", ["-D", directory + "/data"] + arguments, as: runAs, in: directory, what: what)
    }

    /// The end of the server's log, for a failure message.
    public func serverLogTail(lines: Int = 20) -> String {
        Self.tail(of: directory + "/server.log", lines: lines)
    }

    // MARK: Finding things

    private static func findBinaries() throws(TestFailure) -> String {
        func hasServer(_ directory: String) -> Bool {
            access(directory + "/initdb", X_OK) == 0 && access(directory + "/pg_ctl", X_OK) == 0
        }
        if let chosen = getenv("TALLY_PG_BINDIR").map({ String(cString: $0) }), !chosen.isEmpty {
            guard hasServer(chosen) else {
                throw TestFailure("TALLY_PG_BINDIR=\(chosen) has no executable initdb and pg_ctl")
            }
            return chosen
        }
        // Debian keeps each major version's programs in /usr/lib/postgresql/N/bin.
        let versions = listDirectory("/usr/lib/postgresql").compactMap(Int.init).sorted(by: >)
        for version in versions where hasServer("/usr/lib/postgresql/\(version)/bin") {
            return "/usr/lib/postgresql/\(version)/bin"
        }
        let path = getenv("PATH").map { String(cString: $0) } ?? ""
        for directory in path.split(separator: ":").map(String.init) where hasServer(directory) {
            return directory
        }
        throw TestFailure("""
            PostgreSQL's server programs (initdb, pg_ctl) were not found in /usr/lib/postgresql/N/bin or on PATH. \
            Install them — on Debian `apt-get install -y postgresql` (or `scripts/install-deps.sh test`) — \
            or set TALLY_PG_BINDIR to the directory that holds them.
            """)
    }

    private static func serverUser() throws(TestFailure) -> ServerUser? {
        guard geteuid() == 0 else { return nil }
        guard let entry = getpwnam("postgres") else {
            throw TestFailure("""
                the tests run as root and PostgreSQL refuses to; there is no `postgres` user to run it as \
                (the Debian package postgresql creates it: `apt-get install -y postgresql`)
                """)
        }
        let candidates: [String] = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        guard let runuser = candidates.first(where: { access($0, X_OK) == 0 }) else {
            throw TestFailure("the tests run as root and need runuser (Debian package util-linux) to start PostgreSQL as `postgres`")
        }
        return ServerUser(runuser: runuser, uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
    }

    private static func makeDirectory(owner: ServerUser?) throws(TestFailure) -> String {
        var template = Array("/tmp/tally-pg-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer -> String? in
            guard let base = buffer.baseAddress, let result = mkdtemp(base) else { return nil }
            return String(cString: result)
        }
        guard let made else { throw TestFailure("mkdtemp /tmp/tally-pg-XXXXXX: \(String(cString: strerror(errno)))") }
        if let owner, chown(made, owner.uid, owner.gid) != 0 {
            let reason = String(cString: strerror(errno))
            rmdir(made)
            throw TestFailure("chown \(made) to postgres: \(reason)")
        }
        return made
    }

    /// A port nothing listens on now: bind port 0 on 127.0.0.1, read it back, close.
    private static func freePort() throws(TestFailure) -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = INADDR_LOOPBACK.bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0
            }
        }
        guard bound else { throw TestFailure("bind 127.0.0.1:0: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    // MARK: Processes

    /// Numbers each command's log, so commands run at once keep theirs apart.
    private static let commands = Atomic<Int>(0)

    /// Runs a program to its end (as the server's user when given), its
    /// output in DIRECTORY/command-N.log; a non-zero exit throws with the
    /// command and its output.
    private static func run(_ program: String, _ arguments: [String], as user: ServerUser?, in directory: String,
                            what: String) throws(TestFailure) {
        let log = directory + "/command-\(commands.add(1, ordering: .relaxed).newValue).log"
        let argv = (user.map { [$0.runuser, "-u", "postgres", "--"] } ?? []) + [program] + arguments
        let pid = try spawn(argv, output: log, directory: directory, newSession: false)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw TestFailure("\(what): waitpid: \(String(cString: strerror(errno)))") }
        }
        // WIFEXITED / WEXITSTATUS, which do not import: the low 7 bits are the
        // signal (0 for an exit), the next byte the exit status.
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            var message = "\(what) failed (wait status \(status)): \(argv.joined(separator: " "))\n" + tail(of: log, lines: 20)
            if what.hasPrefix("pg_ctl") { message += "\nserver.log:\n" + tail(of: directory + "/server.log", lines: 20) }
            throw TestFailure(message)
        }
    }

    /// `sh`, in its own session (so a Ctrl-C to the test run does not reach
    /// it), polls this process every second; once it is gone, stops the
    /// server and removes the directory.
    private static func startWatchdog(binaries: String, runAs: ServerUser?, directory: String) throws(TestFailure) -> pid_t {
        let script = """
            owner=$1 data=$2 dir=$3; shift 3
            while kill -0 "$owner" 2>/dev/null; do sleep 1; done
            "$@" -D "$data" -m immediate -w stop >/dev/null 2>&1
            rm -rf "$dir"
            """
        let command = (runAs.map { [$0.runuser, "-u", "postgres", "--"] } ?? []) + [binaries + "/pg_ctl"]
        let argv = ["/bin/sh", "-c", script, "tally-pg-watchdog", String(getpid()), directory + "/data", directory] + command
        return try spawn(argv, output: "/dev/null", directory: "/", newSession: true)
    }

    private static func spawn(_ argv: [String], output: String, directory: String, newSession: Bool) throws(TestFailure) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Glibc's module leaves out the GNU extensions (_GNU_SOURCE), so these
        // two come from the C library by name (glibc 2.29 and 2.34).
        typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, UnsafePointer<CChar>?) -> Int32
        typealias AddClosefrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32
        let libc = dlopen(nil, RTLD_NOW)
        guard let chdirSymbol = dlsym(libc, "posix_spawn_file_actions_addchdir_np"),
              let closefromSymbol = dlsym(libc, "posix_spawn_file_actions_addclosefrom_np") else {
            throw TestFailure("this C library lacks posix_spawn_file_actions_addchdir_np/addclosefrom_np (glibc 2.34 has them)")
        }
        // The postgres user may not enter the test's working directory.
        _ = unsafeBitCast(chdirSymbol, to: AddChdir.self)(&actions, directory)
        // A daemonized server must not hold the test run's pipes open.
        _ = unsafeBitCast(closefromSymbol, to: AddClosefrom.self)(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // POSIX_SPAWN_SETSID (a GNU flag, 0x80 in <spawn.h>): the child starts a session of its own.
        if newSession { posix_spawnattr_setflags(&attributes, 0x80) }
        let copies = argv.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = (copies + [nil]).withUnsafeBufferPointer { pointers in
            posix_spawn(&pid, argv[0], &actions, &attributes, pointers.baseAddress!, environ)
        }
        guard rc == 0 else { throw TestFailure("posix_spawn \(argv[0]): \(String(cString: strerror(rc)))") }
        return pid
    }

    private static func removeTree(_ path: String) {
        guard path.hasPrefix("/tmp/tally-pg-") else { return }
        if let pid = try? spawn(["/bin/rm", "-rf", "--", path], output: "/dev/null", directory: "/", newSession: false) {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
    }

    // MARK: Files

    private static func listDirectory(_ path: String) -> [String] {
        guard let directory = opendir(path) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    private static func tail(of path: String, lines: Int) -> String {
        guard let text = try? String(contentsOf: path) else { return "(no \(path))" }
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }
}

private extension String {
    /// A whole (small) file as UTF-8.
    init(contentsOf path: String) throws(TestFailure) {
        guard let file = fopen(path, "r") else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count <= 0 { break }
            bytes.append(contentsOf: buffer[0..<count])
        }
        self = String(decoding: bytes, as: UTF8.self)
    }
}
