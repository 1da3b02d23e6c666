/// Where a PostgreSQL database is and who connects to it, read from a URL:
///
///     postgres://USER[:PASSWORD]@HOST[:PORT][,HOST2[:PORT2]…]/DATABASE[?KEY=VALUE&…]
///
/// The shape of libpq's connection URIs ("Connection URIs", section
/// "Connection Strings" of the libpq manual): scheme `postgres://` or
/// `postgresql://`, percent-encoded parts, several hosts for libpq to try in
/// turn, and libpq parameter key words in the query (`sslmode=require`,
/// `target_session_attrs=read-write`). Validated here, so a mistake is
/// named before any connection is tried, and handed to libpq as key words,
/// never as a string libpq would parse again.
///
/// `description` hides the password; nothing in this module prints it.
public struct PostgresURL: Sendable, Equatable, CustomStringConvertible {
    /// One server to try.
    public struct Endpoint: Sendable, Equatable {
        /// A name, an IPv4 or IPv6 address, or (starting with `/`) the
        /// directory of a Unix-domain socket.
        public var host: String
        public var port: Int

        public init(host: String, port: Int = PostgresURL.defaultPort) {
            self.host = host
            self.port = port
        }
    }

    /// A libpq connection parameter from the URL's query.
    public struct Parameter: Sendable, Equatable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public static let defaultPort = 5432

    public var user: String
    public var password: String?
    public var endpoints: [Endpoint]
    public var database: String
    public var parameters: [Parameter]

    /// Key words the URL's own parts set; the query may not set them again.
    static let structuralKeywords: Set<String> = ["host", "hostaddr", "port", "user", "password", "dbname"]

    public init(user: String, password: String? = nil, endpoints: [Endpoint], database: String,
                parameters: [Parameter] = []) {
        self.user = user
        self.password = password
        self.endpoints = endpoints
        self.database = database
        self.parameters = parameters
    }

    /// Reads `text`; a mistake throws a `.usage` error that says what to fix
    /// (and never quotes the password).
    public init(parsing text: String) throws(PostgresError) {
        func fail(_ message: String) -> PostgresError {
            .usage("\(message) (the form is postgres://USER:PASSWORD@HOST:PORT/DATABASE)",
                   operation: "read the PostgreSQL URL")
        }
        guard let schemeEnd = text.firstRange(of: "://") else {
            throw fail("not a URL: it has no scheme; start it with postgres://")
        }
        let scheme = text[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw fail("the scheme is '\(scheme.prefix(20))', not postgres:// or postgresql://")
        }
        var rest = Substring(text[schemeEnd.upperBound...])
        var query: Substring = ""
        if let mark = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        guard let at = rest.lastIndex(of: "@") else {
            throw fail("the URL names no user: put USER@ before the host")
        }
        if let slash = rest.firstIndex(of: "/"), slash < at {
            throw fail("a '/' comes before the '@': percent-encode '/' in the user or password as %2F (and '@' as %40)")
        }
        let userInfo = rest[..<at]
        let afterAt = rest[rest.index(after: at)...]
        let hostPart: Substring
        let path: Substring
        if let slash = afterAt.firstIndex(of: "/") {
            hostPart = afterAt[..<slash]
            path = afterAt[afterAt.index(after: slash)...]
        } else {
            hostPart = afterAt
            path = ""
        }

        let rawUser: Substring
        var rawPassword: Substring?
        if let colon = userInfo.firstIndex(of: ":") {
            rawUser = userInfo[..<colon]
            rawPassword = userInfo[userInfo.index(after: colon)...]
        } else {
            rawUser = userInfo
        }
        guard let user = Self.percentDecoded(rawUser) else { throw fail("the user name has a bad %-escape") }
        guard !user.isEmpty else { throw fail("the URL names no user: put USER@ before the host") }
        var password: String?
        if let rawPassword {
            guard let decoded = Self.percentDecoded(rawPassword) else {
                throw fail("the password has a bad %-escape (write '%' itself as %25)")
            }
            password = decoded
        }

        var endpoints: [Endpoint] = []
        for item in hostPart.split(separator: ",", omittingEmptySubsequences: false) {
            endpoints.append(try Self.endpoint(item, fail))
        }

        guard !path.isEmpty else { throw fail("the URL names no database: add /DATABASE after the host") }
        guard !path.contains("/") else { throw fail("the database name has a '/': percent-encode it as %2F") }
        guard let database = Self.percentDecoded(path), !database.isEmpty else {
            throw fail("the database name has a bad %-escape")
        }

        var parameters: [Parameter] = []
        for pair in query.split(separator: "&") {
            guard let equals = pair.firstIndex(of: "=") else {
                throw fail("the query part '\(pair.prefix(40))' is not KEY=VALUE")
            }
            guard let name = Self.percentDecoded(pair[..<equals]),
                  let value = Self.percentDecoded(pair[pair.index(after: equals)...]) else {
                throw fail("the query has a bad %-escape")
            }
            if name == "password" {
                throw fail("put the password before the '@' (USER:PASSWORD@), not in the query")
            }
            if Self.structuralKeywords.contains(name) {
                throw fail("'\(name)' comes from the URL itself (user, host, port, database), not from the query")
            }
            guard PostgresConnection.knownKeywords.contains(name) else {
                throw fail("'\(name.prefix(40))' is not a libpq connection parameter (see \"Parameter Key Words\" in the libpq manual)")
            }
            parameters.append(Parameter(name: name, value: value))
        }
        self.init(user: user, password: password, endpoints: endpoints, database: database, parameters: parameters)
    }

    private static func endpoint(_ item: Substring, _ fail: (String) -> PostgresError) throws(PostgresError) -> Endpoint {
        var host: String
        var portText: Substring?
        if item.hasPrefix("[") {
            // An IPv6 literal, as in RFC 3986: [::1]:5432.
            guard let close = item.firstIndex(of: "]") else { throw fail("the IPv6 address has no closing ']'") }
            host = String(item[item.index(after: item.startIndex)..<close])
            let after = item[item.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw fail("expected ':PORT' after the IPv6 address") }
                portText = after.dropFirst()
            }
        } else if let colon = item.firstIndex(of: ":") {
            guard let decoded = percentDecoded(item[..<colon]) else { throw fail("the host has a bad %-escape") }
            host = decoded
            portText = item[item.index(after: colon)...]
        } else {
            guard let decoded = percentDecoded(item) else { throw fail("the host has a bad %-escape") }
            host = decoded
        }
        guard !host.isEmpty else { throw fail("the URL names no host: put HOST (or HOST:PORT) after the '@'") }
        var port = defaultPort
        if let portText {
            guard let value = Int(portText), (1...65_535).contains(value) else {
                throw fail("the port '\(portText.prefix(12))' is not a number from 1 to 65535")
            }
            port = value
        }
        return Endpoint(host: host, port: port)
    }

    /// RFC 3986 percent-decoding; nil for a bad escape or bytes that are not UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        guard text.contains("%") else { return String(text) }
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The URL with `***` for the password: fit for logs and error messages,
    /// and read back by `init(parsing:)` as the same URL but for the password.
    public var description: String {
        var text = "postgres://\(Self.percentEncoded(user))"
        if password != nil { text += ":***" }
        text += "@"
        text += endpoints.map { endpoint in
            let host = endpoint.host.contains(":") ? "[\(endpoint.host)]" : Self.percentEncoded(endpoint.host)
            return "\(host):\(endpoint.port)"
        }.joined(separator: ",")
        text += "/\(Self.percentEncoded(database))"
        if !parameters.isEmpty {
            text += "?" + parameters.map { "\(Self.percentEncoded($0.name))=\(Self.percentEncoded($0.value))" }
                .joined(separator: "&")
        }
        return text
    }

    /// Escapes the characters that delimit a URL's parts (RFC 3986
    /// gen-delims and the ones this form splits on), and control bytes.
    static func percentEncoded(_ text: String) -> String {
        let delimiters = Set(":/?#[]@,&=% ".utf8)
        guard text.utf8.contains(where: { delimiters.contains($0) || $0 < 0x20 || $0 == 0x7f }) else { return text }
        let hex = Array("0123456789ABCDEF".utf8)
        var bytes: [UInt8] = []
        for byte in text.utf8 {
            if delimiters.contains(byte) || byte < 0x20 || byte == 0x7f {
                bytes += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xf)]]
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The libpq key words for this URL, in order (PQconnectdbParams).
    var keywords: [(String, String)] {
        var pairs: [(String, String)] = [
            ("host", endpoints.map(\.host).joined(separator: ",")),
            ("port", endpoints.map { String($0.port) }.joined(separator: ",")),
            ("user", user),
            ("dbname", database),
        ]
        if let password { pairs.append(("password", password)) }
        for parameter in parameters { pairs.append((parameter.name, parameter.value)) }
        return pairs
    }
}
