import TallyPostgres
import Testing

/// `PostgresURL`: the accepted forms, and for every mistake a message that
/// says what to fix and never shows the password.
@Suite struct PostgresURLTests {
    @Test func readsEveryPart() throws {
        let url = try PostgresURL(parsing: "postgres://ana:s%40cret@db.example:6543/stock?sslmode=require&application_name=hub-1")
        #expect(url.user == "ana")
        #expect(url.password == "s@cret")
        #expect(url.endpoints == [.init(host: "db.example", port: 6543)])
        #expect(url.database == "stock")
        #expect(url.parameters == [.init(name: "sslmode", value: "require"), .init(name: "application_name", value: "hub-1")])
        #expect(url.description == "postgres://ana:***@db.example:6543/stock?sslmode=require&application_name=hub-1")
    }

    @Test func defaultsThePortAndTakesSeveralHostsAndIPv6() throws {
        let url = try PostgresURL(parsing: "postgresql://tally@a,[::1]:5433,10.0.0.2:7/db")
        #expect(url.password == nil)
        #expect(url.endpoints == [.init(host: "a", port: 5432), .init(host: "::1", port: 5433), .init(host: "10.0.0.2", port: 7)])
        #expect(url.description == "postgres://tally@a:5432,[::1]:5433,10.0.0.2:7/db")
    }

    @Test func aSocketDirectoryIsAPercentEncodedHost() throws {
        let url = try PostgresURL(parsing: "postgres://tally@%2Ftmp%2Fpg:5432/db")
        #expect(url.endpoints == [.init(host: "/tmp/pg", port: 5432)])
    }

    @Test func theDescriptionReadsBackButForThePassword() throws {
        let url = try PostgresURL(parsing: "postgres://a%40b:pw@%2Ftmp%2Fpg,[fe80::1]:6000/stock%2Fmain?application_name=hub%201")
        #expect(url.user == "a@b")
        #expect(url.database == "stock/main")
        #expect(url.description == "postgres://a%40b:***@%2Ftmp%2Fpg:5432,[fe80::1]:6000/stock%2Fmain?application_name=hub%201")
        var again = try PostgresURL(parsing: url.description)
        #expect(again.password == "***")
        again.password = "pw"
        #expect(again == url)
    }

    @Test(arguments: [
        ("localhost:5432/db", "no scheme"),
        ("mysql://u:pw@h/db", "not postgres://"),
        ("postgres://h:5432/db", "names no user"),
        ("postgres://:pw@h/db", "names no user"),
        ("postgres://u:pw@/db", "names no host"),
        ("postgres://u:pw@:5432/db", "names no host"),
        ("postgres://u:pw@h:0/db", "from 1 to 65535"),
        ("postgres://u:pw@h:70000/db", "from 1 to 65535"),
        ("postgres://u:pw@h:54x/db", "from 1 to 65535"),
        ("postgres://u:pw@h:5432", "names no database"),
        ("postgres://u:pw@h:5432/", "names no database"),
        ("postgres://u:pw@h/a/b", "'/'"),
        ("postgres://u:p/w@h/db", "%2F"),
        ("postgres://u:pw%zz@h/db", "bad %-escape"),
        ("postgres://u:pw@[::1/db", "closing ']'"),
        ("postgres://u:pw@h/db?nonsense=1", "not a libpq connection parameter"),
        ("postgres://u:pw@h/db?password=x", "before the '@'"),
        ("postgres://u:pw@h/db?host=x", "comes from the URL itself"),
        ("postgres://u:pw@h/db?sslmode", "not KEY=VALUE"),
    ])
    func aBadURLSaysWhatToFix(text: String, hint: String) {
        do {
            _ = try PostgresURL(parsing: text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.kind == .usage)
            #expect(error.description.contains(hint), "\(error)")
            #expect(error.description.contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE"))
            #expect(!error.description.contains("pw"), "the password leaked: \(error)")
        }
    }
}
