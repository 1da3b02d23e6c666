import TallyClient
import TallyCommandLine

extension Arguments {
    /// A file of the user's data: `--OPTION FILE`, else where
    /// `UserDataFile` places it (`$VARIABLE`, then the XDG data directory).
    static func dataFile(_ flag: String?, option: String, variable: String, name: String,
                         what: String) throws(UsageError) -> String {
        if let flag {
            guard !flag.isEmpty else { throw UsageError(message: "--\(option) needs a file name") }
            return flag
        }
        guard let path = UserDataFile.path(name, variable: variable) else {
            throw UsageError(message: "cannot place \(what): HOME is not set; use --\(option) FILE or \(variable)")
        }
        return path
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs.
    var trimmingSpaces: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
