@preconcurrency import Glibc

extension IntakeOutbox {
    /// The outbox at `path` when its file exists, else nil: looking at the
    /// jobs (`tally intake status`) creates nothing.
    public static func existing(path: String) throws(OutboxError) -> IntakeOutbox? {
        if access(path, F_OK) != 0, errno == ENOENT { return nil }
        return try IntakeOutbox(path: path)
    }
}
