import Testing
import TallyIntake

/// The upload display: a bar redrawn in place on a terminal (at most every
/// 100 ms or whole percent), one line per stored photo otherwise.
@Suite("PhotoUploadDisplay")
struct PhotoUploadDisplayTests {
    final class Screen {
        var text = ""
        var now: Int64 = 1_000
    }

    static func display(terminal: Bool, _ screen: Screen) -> PhotoUploadDisplay {
        PhotoUploadDisplay(terminal: terminal, clock: { screen.now }) { screen.text += $0 }
    }

    @Test func aPipeGetsOneLinePerStoredPhotoAndNoBars() {
        let screen = Screen()
        let display = Self.display(terminal: false, screen)
        display.show(.started(label: "photo 1/2", size: 4096))
        display.show(.sent(2048, of: 4096))
        display.show(.stored(label: "photo 1/2", sha256: String(repeating: "ab", count: 32), size: 4096, new: true))
        display.show(.started(label: "photo 2/2", size: 10))
        display.show(.stored(label: "photo 2/2", sha256: String(repeating: "cd", count: 32), size: 10, new: false))
        display.show(.abandoned)
        #expect(screen.text == "tally: photo 1/2 abababababab 4 KiB stored\ntally: photo 2/2 cdcdcdcdcdcd 10 B already stored\n")
    }

    @Test func aTerminalGetsABarRedrawnInPlace() {
        let screen = Screen()
        let display = Self.display(terminal: true, screen)
        display.show(.started(label: "photo 1/1", size: 2 << 20))
        #expect(screen.text == "\rphoto 1/1 [..............................] 0% 0 B/2.0 MiB\u{1B}[K")
        screen.text = ""
        display.show(.sent(1 << 20, of: 2 << 20))  // 50%, but within 100 ms of the last draw
        #expect(screen.text.isEmpty)
        screen.now += 100
        display.show(.sent(1 << 20, of: 2 << 20))
        #expect(screen.text == "\rphoto 1/1 [###############...............] 50% 1.0 MiB/2.0 MiB\u{1B}[K")
        screen.text = ""
        display.show(.abandoned)
        #expect(screen.text == "\n")
        screen.text = ""
        display.show(.abandoned)  // nothing drawn since
        #expect(screen.text.isEmpty)
    }

    @Test func sizesReadAsPeopleWriteThem() {
        #expect(PhotoUploadDisplay.size(1023) == "1023 B")
        #expect(PhotoUploadDisplay.size(1536) == "1 KiB")
        #expect(PhotoUploadDisplay.size(3 << 20 + 1 << 19) == "3.5 MiB")
    }
}
