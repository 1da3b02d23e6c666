@preconcurrency import Glibc
import Dispatch
import TallyHTTP
import TallyNet

/// The dashboard's files (`Clients/` of a checkout): `GET /` and
/// `/app/{path...}` from `<root>/web`, `/js/{path...}` from `<root>/js`.
///
/// Only what is under those two directories can be served: a request path
/// is checked segment by segment (no `..`, `.`, empty or hidden segments, no
/// NUL or backslash) and then, after symlinks are resolved by realpath(3),
/// must still lie inside the directory it was asked of. Answers carry a
/// validator (`ETag` from the file's size and modification time, RFC 9110
/// §8.8.3) and `Cache-Control: no-cache`, so a browser revalidates each load
/// and gets 304 without the bytes while the file is unchanged (§13.1.2).
///
/// Files are read off the loop, on one serial queue: the dashboard is a few
/// small files, so one thread is plenty, and a slow disk cannot stall the
/// sockets of every connection on the loop.
public struct StaticFiles: Sendable {
    /// The `Clients` directory, holding `web/` and `js/`.
    public let root: String
    /// Where pages may connect besides their own hub: the peers' WebSocket
    /// origins (`ws://10.0.0.2:8080`), so the board can move to one.
    public let connectSources: [String]
    /// A file bigger than this is refused (500), not read: the dashboard
    /// serves small text and images, and the body is held in memory.
    static let maxFileBytes = 8 << 20

    public init(root: String, connectSources: [String] = []) {
        self.root = root
        self.connectSources = connectSources
    }

    /// Whether `directory` looks like the `Clients` directory: it has
    /// `web/index.html`.
    public static func isClientsDirectory(_ directory: String) -> Bool {
        var info = stat()
        return stat(directory + "/web/index.html", &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }

    /// The `Clients` directory of the checkout this binary was built in,
    /// else of the current directory or one above it: the first of
    /// `<dir>/Clients` with `web/index.html` in it, for every ancestor `dir`
    /// of the executable (`.build/debug/tally` lives three levels below the
    /// checkout) and then of the working directory. Nil when there is none.
    public static func locateDefault() -> String? {
        var starts: [String] = []
        if let executable = realPath("/proc/self/exe") { starts.append(parent(executable)) }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        if getcwd(&buffer, buffer.count) != nil {
            starts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        for start in starts {
            var directory = start
            for _ in 0..<8 {
                let candidate = (directory == "/" ? "" : directory) + "/Clients"
                if isClientsDirectory(candidate) { return realPath(candidate) ?? candidate }
                if directory == "/" { break }
                directory = parent(directory)
            }
        }
        return nil
    }

    /// Adds `GET /` (the board), `/mine` and `/mine.html` (a requester's
    /// own orders), `/app/{path...}` and `/js/{path...}`.
    func add(to router: inout HTTPRouter<HubRoutes.Route>) {
        let files = self
        let queue = DispatchQueue(label: "tally.static")
        let serve: @Sendable (HTTPRequest, String, String, HTTPResponder) -> Void = { request, directory, relative, responder in
            queue.async { responder.respond(files.response(for: request, directory: directory, relative: relative)) }
        }
        router.add("GET", "/", .deferred(screen: nil) { request, _, responder in
            serve(request, "web", "index.html", responder)
        })
        for path in ["/mine", "/mine.html"] {
            router.add("GET", path, .deferred(screen: nil) { request, _, responder in
                serve(request, "web", "mine.html", responder)
            })
        }
        router.add("GET", "/app/{path...}", .deferred(screen: nil) { request, parameters, responder in
            serve(request, "web", parameters["path"] ?? "", responder)
        })
        router.add("GET", "/js/{path...}", .deferred(screen: nil) { request, parameters, responder in
            serve(request, "js", parameters["path"] ?? "", responder)
        })
    }

    /// The answer for `relative` (percent-decoded, from the route) under
    /// `<root>/<directory>`: 200 with the bytes, 304, or 404.
    func response(for request: HTTPRequest, directory: String, relative: String) -> HTTPResponse {
        guard Self.isSafe(relative), let base = Self.realPath("\(root)/\(directory)"),
              let path = Self.realPath("\(base)/\(relative)"), path.hasPrefix(base + "/") else {
            return notFound(request)
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return notFound(request) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return notFound(request) }
        guard Int(info.st_size) <= Self.maxFileBytes else {
            return .error(.internalServerError, code: "too_large", message: "\(request.path) is too large to serve")
        }
        let etag = "\"\(String(UInt64(info.st_size), radix: 16))-\(String(Int64(info.st_mtim.tv_sec), radix: 16))"
            + ".\(String(Int64(info.st_mtim.tv_nsec), radix: 16))\""
        var headers = HTTPHeaders()
        headers.set("ETag", etag)
        headers.set("Cache-Control", "no-cache")
        if Self.matches(request.headers.values("If-None-Match"), etag: etag) {
            return HTTPResponse(status: .notModified, headers: headers)
        }
        guard let bytes = Self.readAll(fd, size: Int(info.st_size)) else {
            return .error(.internalServerError, code: "read_failed", message: "could not read \(request.path)")
        }
        let type = Self.contentType(path)
        headers.set("Content-Type", type)
        headers.set("X-Content-Type-Options", "nosniff")
        if type.hasPrefix("text/html") {
            // The page talks only to its own hub and its peers; photos may be
            // blob: URLs (fetched with the token when the hub needs one).
            let connect = (["'self'"] + connectSources).joined(separator: " ")
            headers.set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob: data:; "
                + "connect-src \(connect); style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'")
            headers.set("Referrer-Policy", "no-referrer")
        }
        return HTTPResponse(status: .ok, headers: headers, body: bytes)
    }

    private func notFound(_ request: HTTPRequest) -> HTTPResponse {
        .error(.notFound, code: "not_found", message: "no file for \(request.path)")
    }

    /// A relative path is served only when every segment is a plain name:
    /// not empty, not `.` or `..`, not hidden (`.git`), without NUL or
    /// backslash, and the whole at most 1024 bytes.
    static func isSafe(_ relative: String) -> Bool {
        guard !relative.isEmpty, relative.utf8.count <= 1024 else { return false }
        for segment in relative.split(separator: "/", omittingEmptySubsequences: false) {
            guard let first = segment.utf8.first, first != UInt8(ascii: ".") else { return false }
            if segment.utf8.contains(where: { $0 == 0 || $0 == UInt8(ascii: "\\") }) { return false }
        }
        return true
    }

    /// The media type by extension; unknown ones are served as bytes.
    static func contentType(_ path: String) -> String {
        let name = path.split(separator: "/").last ?? ""
        guard let dot = name.lastIndex(of: ".") else { return "application/octet-stream" }
        switch name[name.index(after: dot)...].lowercased() {
        case "html", "htm": return "text/html; charset=utf-8"
        case "js", "mjs": return "text/javascript; charset=utf-8"
        case "css": return "text/css; charset=utf-8"
        case "json", "map": return "application/json"
        case "webmanifest": return "application/manifest+json"
        case "txt", "md": return "text/plain; charset=utf-8"
        case "svg": return "image/svg+xml"
        case "png": return "image/png"
        case "jpg", "jpeg": return "image/jpeg"
        case "gif": return "image/gif"
        case "webp": return "image/webp"
        case "ico": return "image/x-icon"
        case "woff2": return "font/woff2"
        default: return "application/octet-stream"
        }
    }

    /// Whether an `If-None-Match` field names `etag` or `*` (weak
    /// comparison, RFC 9110 §13.1.2).
    static func matches(_ fields: [String], etag: String) -> Bool {
        for field in fields {
            for element in field.split(separator: ",") {
                var tag = element.drop { $0 == " " || $0 == "\t" }
                while let last = tag.last, last == " " || last == "\t" { tag = tag.dropLast() }
                if tag == "*" { return true }
                if tag.hasPrefix("W/") { tag = tag.dropFirst(2) }
                if tag == etag { return true }
            }
        }
        return false
    }

    private static func readAll(_ fd: Int32, size: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: size)
        var done = 0
        while done < size {
            let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + done, size - done) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }  // shrank since fstat: serve what is there
            done += count
        }
        return done == size ? bytes : Array(bytes.prefix(done))
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    private static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }
}
