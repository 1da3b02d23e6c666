/// A statement declared once (usually as a `static let`) and prepared on
/// each connection the first time it runs there (PQprepare), then run by its
/// server-side name (PQexecPrepared): the server parses and plans it once per
/// session, not once per call.
///
/// The parameter types are part of the declaration and are sent with
/// PQprepare, so the server never has to infer them; each call's values are
/// checked against them before anything is sent (binary parameters of the
/// wrong type would be misread, not refused).
///
/// A connection forgets what it prepared when it reconnects (prepared
/// statements live in the server session) and prepares again on next use.
package struct PostgresStatement: Sendable, Hashable {
    /// What the statement does, for errors ("insert change").
    package let name: String
    package let sql: String
    package let parameterTypes: [PostgresType]

    package init(_ name: String, _ sql: String, parameters: [PostgresType] = []) {
        self.name = name
        self.sql = sql
        parameterTypes = parameters
    }

    /// Checks `values` against the declared types: NULL fits any.
    func check(_ values: [PostgresValue]) throws(PostgresError) {
        guard values.count == parameterTypes.count else {
            throw .usage("given \(values.count) parameters, declared \(parameterTypes.count)", operation: name)
        }
        for (index, value) in values.enumerated() {
            if let type = value.type, type != parameterTypes[index] {
                throw .usage("parameter $\(index + 1) is \(type), declared \(parameterTypes[index])", operation: name)
            }
        }
    }
}
