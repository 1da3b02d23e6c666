/// What the intake runner reports while it stores a job's photos and while
/// it waits for the hub to analyse them, for a display its caller draws
/// (the CLI: a bar redrawn on a terminal, a line per photo otherwise). The
/// runner itself writes nothing.
public enum PhotoUploadEvent: Sendable, Equatable {
    /// A photo's upload begins (`label`: "photo 2/3").
    case started(label: String, size: Int)
    /// `sent` bytes of `total` have gone out.
    case sent(Int, of: Int)
    /// The hub has the photo; `new`: stored now, not already there.
    case stored(label: String, sha256: String, size: Int, new: Bool)
    /// The upload stopped before the photo was stored.
    case abandoned
    /// The runner waits for the hub's analysis of `photos` photos; sent
    /// when the wait starts (`waited` 0) and about every second after.
    case analysing(photos: Int, waited: Int64)
    /// The wait ended (the runner's next line says how).
    case analysisEnded
}
