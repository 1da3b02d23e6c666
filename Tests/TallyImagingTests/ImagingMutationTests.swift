import TallyImaging
import TallyTestSupport
import Testing

/// Damaged photos through the decoding entry, deterministically: drawn
/// labels in each format, bit-flipped, truncated, spliced and with their
/// headers scribbled on. Every variant either decodes to a sane image or is
/// refused with an `ImageError` that says why; nothing traps or aborts (a
/// quick, repeatable sibling of Fuzz/'s FuzzImageDecoder).
@Suite struct ImagingMutationTests {
    /// splitmix64: the same variants on every run.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { n <= 0 ? 0 : Int(next() % UInt64(n)) }
    }

    /// A 240 × 160 label with an EAN-13 and a Data Matrix in every format.
    static let photos: [(format: PhotoDecoder.Format, bytes: [UInt8])] = {
        let width = 240, height = 160
        var pixels = mottledCanvas(width: width, height: height)
        CodeDrawing.stamp(CodeDrawing.ean13("4006381333931", height: 30), scale: 2, quiet: 8, at: 4, 4, into: &pixels, width: width)
        CodeDrawing.stamp(CodeDrawing.dataMatrix("SN-4711"), scale: 4, quiet: 2, at: 160, 80, into: &pixels, width: width)
        let grey = GreyImage(width: width, height: height, pixels: pixels)
        return [PhotoDecoder.Format.jpeg, .png, .webp].map { format in
            (format, (try? PhotoDecoder.encode(grey, format: format, quality: 70)) ?? [])
        }
    }()

    /// Runs one input through every entry and checks what comes back.
    /// Returns whether the strict decode succeeded.
    @discardableResult
    static func exercise(_ bytes: [UInt8], _ label: String) -> Bool {
        let side = 256
        var header: (width: Int, height: Int)?
        do throws(ImageError) {
            header = try PhotoDecoder.size(of: bytes)
        } catch {
            #expect(!error.description.isEmpty, "\(label)")
        }
        var strictDecoded = false
        for strict in [true, false] {
            do throws(ImageError) {
                let image = try PhotoDecoder.grey(bytes, maxSide: side, strict: strict)
                #expect(header != nil, "\(label): decoded without a readable header")
                #expect(image.width >= 1 && image.width <= side && image.height >= 1 && image.height <= side, "\(label)")
                #expect(image.pixels.count == image.width * image.height, "\(label)")
                _ = CodeReader.zbarCodes(in: image)
                if strict { strictDecoded = true }
            } catch {
                #expect(!error.description.isEmpty, "\(label)")
            }
        }
        do throws(ImageError) {
            let thumb = try PhotoDecoder.thumbnail(bytes, width: 64)
            let size = try PhotoDecoder.size(of: thumb)
            #expect(size.width <= 64 && size.height <= 64, "\(label): thumbnail \(size)")
        } catch {
            #expect(!error.description.isEmpty, "\(label)")
        }
        let report = PhotoAnalysis.analyze(bytes, deadline: PhotoAnalysis.now() + 10)
        if !strictDecoded {
            #expect(report.error != nil && report.codes.isEmpty, "\(label): \(report)")
        }
        return strictDecoded
    }

    @Test func theUndamagedPhotosDecodeAndCarryTheirCodes() throws {
        for (format, bytes) in Self.photos {
            #expect(!bytes.isEmpty, "\(format)")
            #expect(Self.exercise(bytes, "\(format) as drawn"), "\(format)")
            let report = PhotoAnalysis.analyze(bytes, deadline: PhotoAnalysis.now() + 5000)
            #expect(report.codes.map(\.text).sorted() == ["4006381333931", "SN-4711"], "\(format): \(report)")
        }
    }

    @Test func bitFlipsDecodeOrAreRefused() {
        var random = Random(state: 18)
        for (format, bytes) in Self.photos {
            for round in 0..<60 {
                var damaged = bytes
                // 1…8 flips, half of the rounds in the first 200 bytes (the headers).
                for _ in 0...random.below(8) {
                    let span = round % 2 == 0 ? min(200, damaged.count) : damaged.count
                    damaged[random.below(span)] ^= UInt8(1) << UInt8(random.below(8))
                }
                Self.exercise(damaged, "\(format) flip round \(round)")
            }
        }
    }

    @Test func everyTruncationIsRefusedStrictly() {
        var random = Random(state: 4711)
        for (format, bytes) in Self.photos {
            // Short prefixes, then cuts anywhere up to the last byte.
            let cuts = [0, 1, 2, 3, 4, 8, 12, 16, 30, 64, bytes.count - 1] + (0..<30).map { _ in random.below(bytes.count) }
            for cut in cuts {
                let decoded = Self.exercise(Array(bytes.prefix(cut)), "\(format) cut at \(cut) of \(bytes.count)")
                #expect(!decoded, "\(format): the first \(cut) of \(bytes.count) bytes decoded strictly")
            }
        }
    }

    @Test func splicesAndScribbledHeadersDecodeOrAreRefused() {
        var random = Random(state: 2024)
        let all = Self.photos.map(\.bytes)
        for round in 0..<60 {
            let a = all[round % all.count], b = all[(round / all.count + 1 + round) % all.count]
            // A's start on B's end (the header of one format over the body of another, or of itself).
            let spliced = Array(a.prefix(random.below(a.count))) + Array(b.suffix(random.below(b.count)))
            Self.exercise(spliced, "splice round \(round)")
            // A run of one byte value written over the header.
            var scribbled = a
            let start = random.below(min(64, a.count)), value = UInt8(truncatingIfNeeded: random.next())
            for i in start..<min(a.count, start + 1 + random.below(16)) { scribbled[i] = value }
            Self.exercise(scribbled, "scribble round \(round)")
            // A block of A repeated inside it (a duplicated chunk or segment).
            let from = random.below(a.count), length = random.below(min(512, a.count - from))
            var repeated = a
            repeated.insert(contentsOf: a[from..<from + length], at: random.below(a.count))
            Self.exercise(repeated, "repeat round \(round)")
        }
    }

    @Test func thinPhotosAnalyseWithoutSpinning() throws {
        // halved() cannot shrink a side of 1 pixel: the analysis looped
        // forever on a 1 × 3000 photo (Fuzz/regressions/FuzzImageDecoder).
        for (width, height) in [(1, 3000), (3000, 1), (1, 1400), (2, 5000)] {
            let image = GreyImage(width: width, height: height, pixels: Array(repeating: 200, count: width * height))
            let bytes = try PhotoDecoder.encode(image, format: .png)
            let started = PhotoAnalysis.now()
            let report = PhotoAnalysis.analyze(bytes, deadline: started + 5000)
            #expect(report.codes.isEmpty && report.error == nil, "\(width)×\(height): \(report)")
            #expect(PhotoAnalysis.now() - started < 4000, "\(width)×\(height)")
            let reduced = PhotoAnalysis.reduce(image, to: 1300)
            #expect(reduced.width <= image.width && reduced.height <= image.height)
        }
    }

    @Test func tinyImagesGoThroughTheCodeReaders() throws {
        // libdmtx aborts the process on a 1 × 1 image (Fuzz/regressions/FuzzImageDecoder).
        for (width, height) in [(1, 1), (2, 2), (1, 40), (40, 1), (3, 3), (9, 9), (2, 300)] {
            let image = GreyImage(width: width, height: height, pixels: Array(repeating: 200, count: width * height))
            #expect(CodeReader.dataMatrixCodes(in: image, timeoutMillis: 50).isEmpty)
            #expect(CodeReader.zbarCodes(in: image).isEmpty)
            for format in [PhotoDecoder.Format.png, .jpeg, .webp] {
                let bytes = try PhotoDecoder.encode(image, format: format)
                let report = PhotoAnalysis.analyze(bytes, deadline: PhotoAnalysis.now() + 1000)
                #expect(report.codes.isEmpty && report.error == nil, "\(width)×\(height) \(format): \(report)")
            }
        }
    }
}
