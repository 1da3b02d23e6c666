import CLibPQ

extension PostgresConnection {
    /// One statement of a `pipeline`.
    package enum PipelineStep {
        /// A statement without parameters (BEGIN, COMMIT).
        case command(String)
        /// A declared statement with its parameters.
        case statement(PostgresStatement, [PostgresValue])

        var operation: String {
            switch self {
            case .command(let sql): PostgresConnection.summary(sql)
            case .statement(let statement, _): statement.name
            }
        }
    }

    /// Sends every step at once and reads their results: one round trip
    /// instead of one per step (libpq's pipeline mode: "a client will wait
    /// less for the server, since multiple queries/results can be sent/
    /// received in a single network transaction"). Returns one result per
    /// step.
    ///
    /// Declared statements are prepared first, outside the pipeline (a
    /// synchronous call inside it is an error). The steps run in order; once
    /// one fails, the server skips the rest up to the pipeline's end
    /// (PGRES_PIPELINE_ABORTED) — a transaction it was in is left aborted,
    /// for the caller to roll back — and this throws the failed step's
    /// error once every result is read. A COMMIT among the steps whose
    /// answer is lost throws with `commitOutcomeUnknown`, as a plain one does.
    ///
    /// Blocking mode is safe here because the steps are few and their
    /// results small: the server never has to wait for the client to read
    /// a result before it can read the next step.
    package func pipeline(_ steps: [PipelineStep]) throws(PostgresError) -> [PostgresResult] {
        guard !isClosed else { throw .usage("the connection is closed", operation: "pipeline") }
        var names: [String?] = []
        var encoded: [EncodedParameters] = []
        for step in steps {
            switch step {
            case .command:
                names.append(nil)
                encoded.append(try EncodedParameters([], operation: step.operation))
            case .statement(let statement, let parameters):
                try statement.check(parameters)
                names.append(try preparedName(of: statement))
                encoded.append(try EncodedParameters(parameters, operation: statement.name))
            }
        }
        guard PQenterPipelineMode(handle) == 1 else { throw failure(nil, "enter pipeline mode") }
        for index in steps.indices {
            let sent: Int32 = encoded[index].withPointers { count, values, lengths, formats in
                if let name = names[index] {
                    return PQsendQueryPrepared(handle, name, count, values, lengths, formats, 1)
                }
                guard case .command(let sql) = steps[index] else { return 0 }
                return PQsendQueryParams(handle, sql, 0, nil, nil, nil, nil, 1)
            }
            guard sent == 1 else { throw leavePipeline(failure(nil, steps[index].operation)) }
        }
        guard PQpipelineSync(handle) == 1 else { throw leavePipeline(failure(nil, "pipeline sync")) }

        var results: [PostgresResult] = []
        var firstError: PostgresError?
        for step in steps {
            var kept: PostgresResult?
            // Each step's results end with a null pointer.
            while let result = PQgetResult(handle) {
                switch PQresultStatus(result) {
                case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
                    kept = PostgresResult(handle: result, operation: step.operation)
                case PGRES_PIPELINE_ABORTED:
                    PQclear(result)
                default:
                    if firstError == nil { firstError = failure(result, step.operation) }
                    PQclear(result)
                }
            }
            guard PQstatus(handle) == CONNECTION_OK else {
                var error = firstError ?? failure(nil, step.operation)
                if steps.contains(where: { if case .command("COMMIT") = $0 { true } else { false } }) {
                    error.commitOutcomeUnknown = true
                }
                throw leavePipeline(error)
            }
            if let kept { results.append(kept) }
        }
        if let sync = PQgetResult(handle) {
            PQclear(sync)
        }
        PQexitPipelineMode(handle)
        if let firstError { throw firstError }
        guard results.count == steps.count else {
            throw .usage("\(results.count) results for \(steps.count) statements", operation: "pipeline")
        }
        return results
    }

    /// Ends pipeline mode after a failure (possible only once libpq holds
    /// no pending results; a lost connection is reset by `reconnect`), and
    /// returns `error` for the caller to throw.
    private func leavePipeline(_ error: PostgresError) -> PostgresError {
        // Bounded: a connection in a state this does not foresee stays in
        // pipeline mode, and its next statement fails and says so.
        for _ in 0..<64 where PQstatus(handle) == CONNECTION_OK && PQpipelineStatus(handle) != PQ_PIPELINE_OFF {
            if PQexitPipelineMode(handle) == 1 { break }
            if let result = PQgetResult(handle) { PQclear(result) } else { _ = PQpipelineSync(handle) }
        }
        return error
    }
}
