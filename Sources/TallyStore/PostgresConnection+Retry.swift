import TallyPostgres

extension PostgresConnection {
    /// Runs `body`, once more on a new session when it finds the session
    /// lost (a server restart, a terminated backend); a connection an
    /// earlier call left broken reconnects first. For single statements
    /// outside transactions, where running one again is what the caller
    /// would do anyway. A server still away throws `isConnectionLost`.
    func retryingLostSession<R>(_ body: (PostgresConnection) throws(PostgresError) -> R) throws(PostgresError) -> R {
        if !isConnected { try reconnect() }
        do throws(PostgresError) {
            return try body(self)
        } catch where error.isConnectionLost {
            try reconnect()
            return try body(self)
        }
    }
}
