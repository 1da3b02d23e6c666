@preconcurrency import Glibc
import Testing
import TallyHTTP
@testable import TallyServer
import TallyTestSupport

/// The dashboard's static files: only plain names under `web/` and `js/`
/// are served, with their type, a validator and 304 on a match.
@Suite struct StaticFilesTests {
    @Test func safePathsAreOnlyPlainNames() {
        for ok in ["index.html", "app.js", "test/vectors.html", "a b.css", "é.js"] {
            #expect(StaticFiles.isSafe(ok), "\(ok)")
        }
        for bad in ["", "..", "../x", "a/../b", "./a", "a/./b", ".git/config", "a//b", "a/", "/etc/passwd",
                    "a\\..\\b", "a\u{0}b", String(repeating: "a", count: 1025)] {
            #expect(!StaticFiles.isSafe(bad), "\(bad)")
        }
    }

    @Test func contentTypesByExtension() {
        #expect(StaticFiles.contentType("/x/index.html") == "text/html; charset=utf-8")
        #expect(StaticFiles.contentType("tally.js") == "text/javascript; charset=utf-8")
        #expect(StaticFiles.contentType("a.MJS") == "text/javascript; charset=utf-8")
        #expect(StaticFiles.contentType("style.css") == "text/css; charset=utf-8")
        #expect(StaticFiles.contentType("board.png") == "image/png")
        #expect(StaticFiles.contentType("README") == "application/octet-stream")
    }

    @Test func servesFilesWithValidatorsAndRefusesEscapes() throws {
        let root = try TemporaryDirectory(prefix: "tally-static")
        mkdir(root.path + "/web", 0o755)
        mkdir(root.path + "/js", 0o755)
        try write(root.path + "/web/index.html", "<!doctype html><title>t</title>")
        try write(root.path + "/js/tally.js", "export const x = 1;\n")
        try write(root.path + "/secret.txt", "no")
        symlink(root.path + "/secret.txt", root.path + "/web/link.txt")
        defer {
            for file in ["web/index.html", "web/link.txt", "js/tally.js", "secret.txt"] { unlink(root.path + "/" + file) }
            rmdir(root.path + "/web"); rmdir(root.path + "/js")
        }
        #expect(StaticFiles.isClientsDirectory(root.path))
        #expect(!StaticFiles.isClientsDirectory(root.path + "/js"))
        let files = StaticFiles(root: root.path)

        let page = files.response(for: request("/"), directory: "web", relative: "index.html")
        #expect(page.status == .ok)
        #expect(page.headers["Content-Type"] == "text/html; charset=utf-8")
        #expect(page.headers["Content-Security-Policy"] != nil)
        #expect(String(decoding: page.body, as: UTF8.self) == "<!doctype html><title>t</title>")
        let etag = try #require(page.headers["ETag"])

        let script = files.response(for: request("/js/tally.js"), directory: "js", relative: "tally.js")
        #expect(script.status == .ok && script.headers["Content-Type"] == "text/javascript; charset=utf-8")

        var conditional = request("/")
        conditional.headers.set("If-None-Match", "W/\"nope\", \(etag)")
        let notModified = files.response(for: conditional, directory: "web", relative: "index.html")
        #expect(notModified.status == .notModified && notModified.body.isEmpty && notModified.headers["ETag"] == etag)

        for (directory, relative) in [("web", "../secret.txt"), ("web", "link.txt"), ("web", "missing.js"),
                                      ("js", "../web/index.html"), ("web", ".")] {
            let refused = files.response(for: request("/app/" + relative), directory: directory, relative: relative)
            #expect(refused.status == .notFound, "\(directory)/\(relative)")
        }
    }

    private func request(_ path: String) -> HTTPRequest {
        HTTPRequest(method: "GET", target: path, path: path, query: nil, version: .http1_1,
                    headers: HTTPHeaders(), body: [], keepAlive: true)
    }

    private func write(_ path: String, _ text: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw TestFailure("open \(path): errno \(errno)") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        guard Glibc.write(fd, bytes, bytes.count) == bytes.count else { throw TestFailure("write \(path)") }
    }
}
