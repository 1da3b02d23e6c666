import TallyPostgres
import TallyTestSupport
import Testing

extension PostgresTests {
    /// Every parameter type goes to the server in binary and comes back in
    /// binary with every bit: through PQexecParams, through a prepared
    /// statement, and through a table.
    @Suite struct Values {
        static let samples: [PostgresValue] = [
            .text(""), .text("snow ☃, tab\t, quote ' and \" and \\, emoji 🧯"),
            .int8(0), .int8(-1), .int8(.max), .int8(.min),
            .float8(0), .float8(-0.0), .float8(.pi), .float8(-.leastNormalMagnitude / 4), .float8(.greatestFiniteMagnitude),
            .float8(.infinity), .float8(-.infinity),
            .bool(true), .bool(false),
            .bytea([]), .bytea((0...255).map { UInt8($0) }), .bytea([0, 0, 0]),
            .int8Array([]), .int8Array([1, -2, .max]),
            .textArray([]), .textArray(["a", "", "☃", "with,comma and {brace}"]),
            .byteaArray([]), .byteaArray([[], [0], [0xff, 0x00, 0x7f]]),
        ]

        @Test func everyTypeRoundTripsThroughQuery() throws {
            let db = try freshConnection("values")
            for value in Self.samples {
                let row = try db.query("SELECT $1", [value]).firstRow()
                #expect(try row.value(0) == value, "\(value)")
            }
            // Not-a-number is not equal to itself: compare its bits.
            let nan = try db.query("SELECT $1", [.float8(.nan)]).firstRow().double(0)
            #expect(nan.isNaN)
        }

        @Test func everyTypeRoundTripsThroughAPreparedStatementAndATable() throws {
            let db = try freshConnection("values_table")
            try db.execute(script: """
                CREATE TABLE t (k int8 PRIMARY KEY, s text, i int8, f float8, b bool, y bytea,
                                ia int8[], ta text[], ya bytea[])
                """)
            let insert = PostgresStatement("insert t", "INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                                           parameters: [.int8, .text, .int8, .float8, .bool, .bytea, .int8Array, .textArray, .byteaArray])
            let rows: [[PostgresValue]] = [
                [.int8(1), .text("a ☃"), .int8(.min), .float8(-0.0), .bool(true), .bytea([0, 1, 0xff]),
                 .int8Array([3, 2, 1]), .textArray(["x", ""]), .byteaArray([[1], []])],
                [.int8(2), .text(""), .int8(0), .float8(1e300), .bool(false), .bytea([]),
                 .int8Array([]), .textArray([]), .byteaArray([])],
                // NULL fits every declared type.
                [.int8(3), .null, .null, .null, .null, .null, .null, .null, .null],
            ]
            for row in rows { try db.execute(insert, row) }
            let read = try db.query("SELECT * FROM t ORDER BY k")
            #expect(read.count == 3)
            #expect(read.columnCount == 9)
            #expect(read.columnName(5) == "y")
            for (index, row) in read.enumerated() {
                #expect(try (0..<9).map { try row.value($0) } == rows[index])
            }
            #expect(read[2].isNull(1))
        }

        @Test func nullIsNullForEveryType() throws {
            let db = try freshConnection("nulls")
            let row = try db.query("SELECT $1::text IS NULL, $2::int8 IS NULL, $3::float8 IS NULL, $4::bool IS NULL, $5::bytea IS NULL, $6",
                                   [.null, .null, .null, .null, .null, .null]).firstRow()
            #expect(try (0..<5).allSatisfy { try row.bool($0) })
            #expect(try row.value(5) == .null)
            let optional: Int64? = try row.get(5)
            #expect(optional == nil)
        }

        @Test func aLargeByteaTravelsWhole() throws {
            let db = try freshConnection("large")
            var generator = SplitMix(state: 7)
            let blob = (0..<(1 << 20)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            let row = try db.query("SELECT $1::bytea, length($1::bytea)", [.bytea(blob)]).firstRow()
            #expect(try row.bytes(0) == blob)
            #expect(try row.int64(1) == Int64(blob.count))
        }

        @Test func narrowerColumnTypesReadWidened() throws {
            let db = try freshConnection("widen")
            let row = try db.query("SELECT 7::int2, -8::int4, 9::oid, 1.5::float4, 'n'::name, 'v'::varchar, 'c'::char(2), '{\"a\":1}'::json").firstRow()
            #expect(try row.int64(0) == 7)
            #expect(try row.int64(1) == -8)
            #expect(try row.int64(2) == 9)
            #expect(try row.double(3) == 1.5)
            #expect(try row.text(4) == "n")
            #expect(try row.text(5) == "v")
            #expect(try row.text(6) == "c ")
            #expect(try row.text(7) == "{\"a\":1}")
        }

        @Test func aFieldReadAsTheWrongTypeNamesTheColumn() throws {
            let db = try freshConnection("mismatch")
            let row = try db.query("SELECT 1::int8 AS seq, NULL::text AS note, 1.5::numeric AS amount").firstRow()
            let asText = postgresError { _ = try row.text(0) }
            #expect(asText?.kind == .usage)
            #expect(asText?.message.contains("column 0 (seq)") == true, "\(String(describing: asText))")
            let nullText = postgresError { _ = try row.text(1) }
            #expect(nullText?.message.contains("is NULL") == true)
            let numeric = postgresError { _ = try row.value(2) }
            #expect(numeric?.message.contains("cast it in SQL") == true)
            #expect(try db.query("SELECT 1.5::numeric::text").firstRow().text(0) == "1.5")
            let missing = postgresError { _ = try row.int64(3) }
            #expect(missing?.message.contains("does not exist") == true)
        }

        @Test func aPreparedStatementRefusesAValueOfTheWrongTypeBeforeSending() throws {
            let db = try freshConnection("declared")
            let statement = PostgresStatement("add", "SELECT $1 + 1", parameters: [.int8])
            #expect(try db.execute(statement, [.int8(41)]).firstRow().int64(0) == 42)
            let wrongType = postgresError { try db.execute(statement, [.text("41")]) }
            #expect(wrongType?.kind == .usage)
            #expect(wrongType?.description == "add: parameter $1 is text, declared int8")
            let wrongCount = postgresError { try db.execute(statement, []) }
            #expect(wrongCount?.message == "given 0 parameters, declared 1")
            #expect(try db.execute(statement, [.null]).firstRow().isNull(0))
        }

        @Test func affectedRowsAndCommandStatus() throws {
            let db = try freshConnection("affected")
            try db.execute(script: "CREATE TABLE t (k int8 PRIMARY KEY)")
            let insert = try db.query("INSERT INTO t SELECT * FROM unnest($1::int8[])", [.int8Array([1, 2, 3])])
            #expect(insert.affectedRows == 3)
            #expect(insert.commandStatus == "INSERT 0 3")
            #expect(try db.query("DELETE FROM t WHERE k > $1", [.int8(1)]).affectedRows == 2)
            #expect(try db.query("SELECT k FROM t").map { try $0.int64(0) } == [1])
        }
    }
}
