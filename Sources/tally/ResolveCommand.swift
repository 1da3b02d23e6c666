/// `tally resolve CODE` (stub; being written).
enum ResolveCommand {
    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        throw UsageError(message: "tally resolve is not built yet")
    }
}
