import Testing
import TallyClient

/// Where the mirror's store and the intake outbox go when not told.
@Suite("UserDataFile")
struct UserDataFileTests {
    static func path(_ environment: [String: String]) -> String? {
        UserDataFile.path("outbox.sqlite", variable: "TALLY_OUTBOX") { environment[$0] }
    }

    @Test func theVariableThenXDGThenHome() {
        #expect(Self.path(["TALLY_OUTBOX": "/o.sqlite", "XDG_DATA_HOME": "/x", "HOME": "/h"]) == "/o.sqlite")
        #expect(Self.path(["TALLY_OUTBOX": "", "XDG_DATA_HOME": "/x", "HOME": "/h"]) == "/x/tally/outbox.sqlite")
        #expect(Self.path(["XDG_DATA_HOME": "", "HOME": "/h"]) == "/h/.local/share/tally/outbox.sqlite")
        #expect(Self.path([:]) == nil)
    }
}
