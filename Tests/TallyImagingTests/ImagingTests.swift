import TallyImaging
import TallyTestSupport
import Testing

/// The photo pipeline on images drawn here: decode (upright, shrunk, grey),
/// thumbnails, codes, and refusals with a reason instead of a crash.
@Suite struct ImagingTests {
    private func photo(width: Int = 900, height: Int = 700, format: PhotoDecoder.Format = .jpeg,
                       marks: [(mark: [[Bool]], scale: Int, x: Int, y: Int)]) throws -> [UInt8] {
        var pixels = mottledCanvas(width: width, height: height)
        for m in marks { CodeDrawing.stamp(m.mark, scale: m.scale, quiet: 10, at: m.x, m.y, into: &pixels, width: width) }
        return try PhotoDecoder.encode(GreyImage(width: width, height: height, pixels: pixels), format: format)
    }

    @Test func readsAnEAN13AndADataMatrixInOnePhoto() throws {
        let bytes = try photo(marks: [(CodeDrawing.ean13("4006381333931"), 3, 20, 20),
                                      (CodeDrawing.dataMatrix("SN-4711"), 8, 450, 300)])
        let grey = try PhotoDecoder.grey(bytes, maxSide: 2048)
        #expect(grey.width == 900 && grey.height == 700)
        #expect(CodeReader.zbarCodes(in: grey) == [FoundCode(text: "4006381333931", symbology: "EAN-13")])
        #expect(CodeReader.dataMatrixCodes(in: grey, timeoutMillis: 5000) == [FoundCode(text: "SN-4711", symbology: "DataMatrix")])
    }

    @Test func everyFormatDecodes() throws {
        for format in [PhotoDecoder.Format.jpeg, .png, .webp] {
            let bytes = try photo(width: 400, height: 300, format: format, marks: [(CodeDrawing.ean13("4006381333931"), 2, 20, 20)])
            let grey = try PhotoDecoder.grey(bytes, maxSide: 2048)
            #expect(grey.width == 400, "\(format)")
            #expect(CodeReader.zbarCodes(in: grey).map(\.text) == ["4006381333931"], "\(format)")
        }
    }

    @Test func shrinksToFitAndNeverEnlarges() throws {
        let bytes = try photo(width: 1200, height: 600, marks: [])
        let small = try PhotoDecoder.grey(bytes, maxSide: 300)
        #expect(small.width == 300 && small.height == 150)
        let same = try PhotoDecoder.grey(bytes, maxSide: 5000)
        #expect(same.width == 1200 && same.height == 600)
    }

    @Test func thumbnailIsASmallJPEG() throws {
        let bytes = try photo(width: 1600, height: 1200, marks: [(CodeDrawing.ean13("4006381333931"), 4, 50, 50)])
        let thumb = try PhotoDecoder.thumbnail(bytes, width: 256)
        #expect(Array(thumb.prefix(3)) == [0xFF, 0xD8, 0xFF])
        #expect(try PhotoDecoder.size(of: thumb) == (256, 192))
        #expect(thumb.count * 10 < bytes.count)
        let webp = try PhotoDecoder.thumbnail(bytes, width: 128, format: .webp)
        #expect(Array(webp[8..<12]) == Array("WEBP".utf8))
    }

    @Test func aPhotoWithNoCodeHasNone() throws {
        let grey = try PhotoDecoder.grey(try photo(marks: []), maxSide: 2048)
        #expect(CodeReader.zbarCodes(in: grey).isEmpty)
        #expect(CodeReader.dataMatrixCodes(in: grey, timeoutMillis: 2000).isEmpty)
    }

    /// libdmtx's search over a large grainy photo runs for many seconds
    /// (10 s for this one, symbol found or not); once it has a symbol it
    /// goes on for `moreDataMatrixMillis` only (0.3 s in all).
    @Test func theDataMatrixSearchStopsSoonAfterItFindsOne() throws {
        let width = 2600, height = 1950
        var pixels = mottledCanvas(width: width, height: height)
        CodeDrawing.stamp(CodeDrawing.dataMatrix("SN-4711"), scale: 8, quiet: 2, at: 200, 200, into: &pixels, width: width)
        let grey = GreyImage(width: width, height: height, pixels: pixels)
        let started = PhotoAnalysis.now()
        #expect(CodeReader.dataMatrixCodes(in: grey, timeoutMillis: 60_000) == [FoundCode(text: "SN-4711", symbology: "DataMatrix")])
        let took = PhotoAnalysis.now() - started
        #expect(took < 5_000, "the search went on for \(took) ms after finding the symbol")
    }

    /// Tesseract looks for words in a photo's grain for seconds (19 s for
    /// this one in a debug build, 4 s with the deadline: its page layout
    /// pass runs before the deadline is first checked); the deadline cuts
    /// it short with what it read by then.
    @Test func textReadingStopsAtItsDeadline() throws {
        let width = 2600, height = 1950
        let grey = GreyImage(width: width, height: height, pixels: mottledCanvas(width: width, height: height, seed: 3))
        let reader = try TextReader()
        let started = PhotoAnalysis.now()
        _ = reader.lines(in: grey, timeoutMillis: 200)
        let took = PhotoAnalysis.now() - started
        #expect(took < 12_000, "Tesseract ran for \(took) ms past a 200 ms deadline")
    }

    @Test func damagedPhotosAreRefusedWithAReason() throws {
        let bytes = try photo(marks: [(CodeDrawing.ean13("4006381333931"), 3, 20, 20)])
        let cases: [(String, [UInt8])] = [
            ("empty", []),
            ("not an image", Array("hello, this is text".utf8)),
            ("truncated", Array(bytes.prefix(bytes.count / 2))),
            ("header only", Array(bytes.prefix(40))),
        ]
        for (label, damaged) in cases {
            #expect(throws: ImageError.self, "\(label)") { try PhotoDecoder.grey(damaged, maxSide: 2048) }
        }
        // A thumbnail shows what there is of a truncated photo rather than nothing.
        #expect(!(try PhotoDecoder.thumbnail(Array(bytes.prefix(bytes.count * 3 / 4)), width: 128)).isEmpty)
    }

    @Test func aHugeCanvasIsRefusedBeforeDecoding() throws {
        // A PNG whose header claims 20,000 × 20,000 pixels and carries almost nothing.
        let small = try PhotoDecoder.encode(GreyImage(width: 8, height: 8, pixels: Array(repeating: 200, count: 64)), format: .png)
        var huge = small
        let ihdr = 16 // width and height follow the IHDR tag: bytes 16…23
        for (offset, value) in [(ihdr, UInt32(20_000)), (ihdr + 4, UInt32(20_000))] {
            for i in 0..<4 { huge[offset + i] = UInt8(truncatingIfNeeded: value >> (24 - 8 * UInt32(i))) }
        }
        #expect(throws: ImageError.self) { try PhotoDecoder.grey(huge, maxSide: 1024) }
    }
}
