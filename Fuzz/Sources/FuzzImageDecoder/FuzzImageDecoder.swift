// libFuzzer target for the photo decoding entry (TallyImaging over libvips,
// ZBar and libdmtx): what the hub runs on every uploaded photo.
//
// Input layout: the whole input is one image file (JPEG, PNG, WebP, GIF,
// HEIC or anything else), so a crash artifact is the photo that caused it.
//
// Each input goes through:
//   PhotoDecoder.size                     (the header alone)
//   PhotoDecoder.grey, strict and not     (fitted in 128 × 128)
//   PhotoDecoder.thumbnail                (64 wide; JPEG, WebP or PNG by input length mod 3)
//   CodeReader.zbarCodes, dataMatrixCodes (on what decoded; libdmtx gets 10 ms)
//   PhotoAnalysis.analyze                 (the hub's call; 40 ms deadline, photos up to 4 MP)
//
// Invariants: nothing crashes or traps; every refusal is an ImageError with a
// description; a decoded image is 1…128 pixels on each side and its header
// reads; what decodes strictly also decodes leniently to the same size; a
// thumbnail is a readable image of the asked format within 64 × 64; a code
// found has a symbology; an analysis that could not decode found nothing.
//
// libvips, libjpeg, libpng, libwebp, giflib, libheif, ZBar and libdmtx are
// Debian's builds (not instrumented): libFuzzer's coverage feedback comes
// from TallyImaging's Swift code and the shim, and mostly the dictionary
// (dict/FuzzImageDecoder.dict: markers, chunks and boxes of each format)
// steers the mutations into the loaders. ASan still sees every heap block
// the libraries allocate through malloc (overflows into them, double frees,
// leaks), and any abort() inside a library (libdmtx's asserts) is a crash.
import FuzzSupport
import TallyImaging

@_cdecl("FuzzImageDecoder_main")
func fuzzImageDecoderMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzerDriver(argc: argc, argv: argv) { data, size in
        fuzzOne(FuzzInput(data, size).bytes)
        return 0
    }
}

/// The side grey images are fitted in: small, so each input stays fast.
let greySide = 128
/// The thumbnail width asked for.
let thumbSide = 64
/// The largest photo the hub's whole analysis runs on here (larger ones
/// still go through every other entry).
let analysisPixels = 4_000_000

func refused(_ error: ImageError, _ entry: String) {
    check(!error.description.isEmpty, "\(entry): an ImageError without a description")
    trace("\(entry): \(error)")
}

func fuzzOne(_ bytes: [UInt8]) {
    var header: (width: Int, height: Int)?
    do throws(ImageError) {
        let size = try PhotoDecoder.size(of: bytes)
        check(size.width > 0 && size.height > 0, "size: \(size.width)×\(size.height)")
        header = size
        trace("size: \(size.width)×\(size.height)")
    } catch {
        refused(error, "size")
    }

    var strictImage: GreyImage?
    do throws(ImageError) {
        let image = try PhotoDecoder.grey(bytes, maxSide: greySide, strict: true)
        checkGrey(image, header: header, "grey strict")
        strictImage = image
    } catch {
        refused(error, "grey strict")
    }

    var lenientImage: GreyImage?
    do throws(ImageError) {
        let image = try PhotoDecoder.grey(bytes, maxSide: greySide, strict: false)
        checkGrey(image, header: header, "grey")
        lenientImage = image
    } catch {
        refused(error, "grey")
    }
    if let strict = strictImage {
        check(lenientImage.map { $0.width == strict.width && $0.height == strict.height } ?? false,
              "decoded strictly to \(strict.width)×\(strict.height) but leniently to \(lenientImage.map { "\($0.width)×\($0.height)" } ?? "an error")")
    }

    let formats: [PhotoDecoder.Format] = [.jpeg, .webp, .png]
    let format = formats[bytes.count % formats.count]
    do throws(ImageError) {
        let thumb = try PhotoDecoder.thumbnail(bytes, width: thumbSide, format: format, quality: 50)
        check(header != nil, "a thumbnail of bytes whose header does not read")
        let magic: [UInt8] = switch format {
        case .jpeg: [0xFF, 0xD8, 0xFF]
        case .webp: Array("RIFF".utf8)
        case .png: [0x89, 0x50, 0x4E, 0x47]
        }
        check(thumb.starts(with: magic), "the \(format) thumbnail starts \(thumb.prefix(4))")
        do throws(ImageError) {
            let size = try PhotoDecoder.size(of: thumb)
            check(size.width >= 1 && size.width <= thumbSide && size.height >= 1 && size.height <= thumbSide,
                  "thumbnail \(size.width)×\(size.height), asked for \(thumbSide)")
        } catch {
            check(false, "the \(format) thumbnail does not read back: \(error)")
        }
        trace("thumbnail: \(thumb.count) bytes of \(format)")
    } catch {
        refused(error, "thumbnail")
    }

    if let image = strictImage ?? lenientImage {
        let codes = CodeReader.zbarCodes(in: image) + CodeReader.dataMatrixCodes(in: image, timeoutMillis: 10, limit: 2)
        for code in codes { check(!code.symbology.isEmpty, "a code without a symbology: \(code.text)") }
        trace("codes: \(codes.map { "\($0.symbology) \($0.text)" })")
    }

    if let header, header.width * header.height <= analysisPixels {
        let report = PhotoAnalysis.analyze(bytes, deadline: PhotoAnalysis.now() + 40)
        if let error = report.error, !error.contains("time limit") {
            check(report.codes.isEmpty && report.lines.isEmpty, "an analysis that could not decode found codes: \(report)")
        }
        trace("analysis: \(report.codes.count) codes, \(report.millis) ms, \(report.error ?? "no error")")
    }
}

func checkGrey(_ image: GreyImage, header: (width: Int, height: Int)?, _ entry: String) {
    check(header != nil, "\(entry): decoded bytes whose header does not read")
    check(image.width >= 1 && image.width <= greySide && image.height >= 1 && image.height <= greySide,
          "\(entry): \(image.width)×\(image.height), asked to fit \(greySide)")
    check(image.pixels.count == image.width * image.height, "\(entry): \(image.pixels.count) pixels")
    trace("\(entry): \(image.width)×\(image.height)")
}
