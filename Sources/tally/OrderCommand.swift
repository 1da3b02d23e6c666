/// `tally order new|advance|cancel|ls`.
enum OrderCommand {
    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        throw UsageError(message: "tally order is not built yet")
    }
}
