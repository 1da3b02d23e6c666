/// `tally intake new|resume|status` (stub; being written).
enum IntakeCommand {
    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        throw UsageError(message: "tally intake is not built yet")
    }
}
