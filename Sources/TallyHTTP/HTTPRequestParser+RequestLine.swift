extension HTTPRequestParser {
    /// Checks the version in `line` once its CR arrives, then clears `line`.
    ///
    /// RFC 9112 §2.3: `HTTP-version = HTTP-name "/" DIGIT "." DIGIT`, where
    /// HTTP-name is case-sensitive "HTTP". Any 1.x is served as HTTP/1.1
    /// would be ("a recipient can assume that a message with a higher minor
    /// version ... is backwards compatible"); another major version is a
    /// well-formed request we cannot speak, hence 505 rather than 400. This
    /// is also what the HTTP/2 connection preface (`PRI * HTTP/2.0`) gets.
    mutating func parseVersion() -> HTTPParseError? {
        defer { line.removeAll(keepingCapacity: true) }
        guard line.count == 8, line[0] == UInt8(ascii: "H"), line[1] == UInt8(ascii: "T"), line[2] == UInt8(ascii: "T"),
              line[3] == UInt8(ascii: "P"), line[4] == ASCII.slash,
              ASCII.isDigit(line[5]), line[6] == UInt8(ascii: "."), ASCII.isDigit(line[7]) else {
            let text = String(decoding: line, as: UTF8.self)
            return HTTPParseError(status: .badRequest,
                                  message: "malformed HTTP version '\(text)' (expected 'HTTP/1.1')")
        }
        let major = Int(line[5] - 0x30), minor = Int(line[7] - 0x30)
        guard major == 1 else {
            return HTTPParseError(status: .httpVersionNotSupported,
                                  message: "HTTP/\(major).\(minor) is not supported; this server speaks HTTP/1.1")
        }
        version = HTTPVersion(major: major, minor: minor)
        return nil
    }

    /// Splits a request-target into its decoded path and raw query.
    ///
    /// RFC 9112 §3.2 defines four forms. Origin-form (`/path?query`) is what
    /// clients send to a server; absolute-form (`http://host/path`) must be
    /// accepted too (§3.2.2: "a server MUST accept the absolute-form") and
    /// its authority is dropped here; asterisk-form (`*`) exists only for a
    /// server-wide OPTIONS (§3.2.4); authority-form only for CONNECT, which a
    /// hub does not proxy, so it is refused.
    static func splitTarget(_ target: [UInt8], method: String) throws(HTTPParseError) -> (path: String, query: String?) {
        if target.count == 1 && target[0] == UInt8(ascii: "*") {
            guard method == "OPTIONS" else {
                throw HTTPParseError(status: .badRequest, message: "the '*' request target is only allowed with OPTIONS")
            }
            return ("*", nil)
        }
        var pathStart = 0
        if target.first != ASCII.slash {
            guard let start = absoluteFormPathStart(target) else {
                throw HTTPParseError(status: .badRequest,
                                     message: "the request target must be a path starting with '/' (or an absolute http URL)")
            }
            pathStart = start
        }
        let queryMark = target[pathStart...].firstIndex(of: ASCII.question)
        let pathEnd = queryMark ?? target.count
        let query = queryMark.map { String(decoding: target[($0 + 1)...], as: UTF8.self) }
        let path = pathStart == pathEnd ? "/" : try percentDecoded(target[pathStart..<pathEnd])
        return (path, query)
    }

    /// Where the path of an absolute-form target (`http://authority/path`)
    /// starts, or nil if the target is not one.
    static func absoluteFormPathStart(_ target: [UInt8]) -> Int? {
        let schemes: [StaticString] = ["http://", "https://"]
        for scheme in schemes {
            let length = scheme.utf8CodeUnitCount
            guard target.count >= length,
                  target.withUnsafeBufferPointer({ ASCII.equalsIgnoringCase(UnsafeBufferPointer(rebasing: $0[..<length]), scheme) })
            else { continue }
            let authorityEnd = target[length...].firstIndex { $0 == ASCII.slash || $0 == ASCII.question } ?? target.count
            return authorityEnd == length ? nil : authorityEnd
        }
        return nil
    }

    /// Decodes `%XX` escapes (RFC 3986 §2.1). The result must be UTF-8,
    /// since routes and record names are Strings; `%2F` becomes `/`, which
    /// is why routes that take names with slashes use `{name...}`.
    static func percentDecoded(_ raw: ArraySlice<UInt8>) throws(HTTPParseError) -> String {
        guard raw.contains(ASCII.percent) else { return String(decoding: raw, as: UTF8.self) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(raw.count)
        var index = raw.startIndex
        while index < raw.endIndex {
            let byte = raw[index]
            index += 1
            guard byte == ASCII.percent else {
                bytes.append(byte)
                continue
            }
            guard index + 1 < raw.endIndex, let high = ASCII.hexValue(raw[index]), let low = ASCII.hexValue(raw[index + 1]) else {
                throw invalidEscape
            }
            index += 2
            bytes.append(UInt8(high << 4 | low))
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw HTTPParseError(status: .badRequest, message: "the request path is not valid UTF-8 once percent-decoded")
        }
        return decoded
    }

    static var invalidEscape: HTTPParseError {
        HTTPParseError(status: .badRequest, message: "invalid percent-escape in the request path ('%' must be followed by two hex digits)")
    }
}
