import TallyImaging

/// Photo analysis in this process, step by step, on 12 MP photos made here
/// (`PhotoDrawings`: a label with an EAN-13, a Data Matrix and printed
/// text): what the hub's analysis thread spends per photo, and what a
/// thumbnail costs.
///
/// Per photo, the steps `PhotoAnalysis.analyze` takes, each timed: decode
/// (grey, fitted in `PhotoAnalysis.scanSide`), ZBar on that, the reduction
/// to `PhotoAnalysis.reducedSide` plus libdmtx, Tesseract on the reduced
/// image; then `analyze` itself end to end (with text) as the hub calls
/// it, on the photo and on its background alone (nothing to find).
/// Thumbnails: `PhotoDecoder.thumbnail` at each width, JPEG and WebP.
public struct AnalysisBenchmark: Sendable {
    public var formats: [PhotoDecoder.Format] = [.jpeg, .webp, .png]
    /// Photos per format (each drawn differently).
    public var photos = 10
    public var width = 4000
    public var height = 3000
    /// Thumbnail widths timed (the hub's `?w=` set).
    public var thumbnailWidths = [256, 1024]
    /// libdmtx's time limit, as the hub gives it at most.
    public var dataMatrixMillis = PhotoAnalysis.dataMatrixMillis

    public init() {}

    public struct Step: Sendable {
        public var format: PhotoDecoder.Format
        public var name: String
        /// Milliseconds, one per photo.
        public var millis: [Double]
    }

    public struct Thumbnail: Sendable {
        public var format: PhotoDecoder.Format
        public var width: Int
        public var output: PhotoDecoder.Format
        public var millis: [Double]
        public var bytes: [Int]
    }

    public struct Result: Sendable {
        public var steps: [Step] = []
        public var thumbnails: [Thumbnail] = []
        /// Per format: mean photo size, photos whose EAN-13, Data Matrix
        /// and serial text (OCR) were all found, photos made.
        public var found: [(format: PhotoDecoder.Format, meanBytes: Int, codes: Int, text: Int, photos: Int)] = []
    }

    public enum Failure: Error, CustomStringConvertible {
        case drawing(PhotoDecoder.Format, ImageError)
        case decoding(PhotoDecoder.Format, ImageError)
        case ocr(ImageError)
        public var description: String {
            switch self {
            case .drawing(let format, let error): "making a \(format.rawValue) photo failed: \(error)"
            case .decoding(let format, let error): "a drawn \(format.rawValue) photo did not decode: \(error)"
            case .ocr(let error): "Tesseract could not start: \(error)"
            }
        }
    }

    public func run(log: (String) -> Void) throws(Failure) -> Result {
        let reader: TextReader
        do { reader = try TextReader() } catch { throw .ocr(error) }
        var result = Result()
        for format in formats {
            // Step name → milliseconds per photo, in the order first timed.
            var names: [String] = []
            var times: [String: [Double]] = [:]
            var thumbs: [String: Thumbnail] = [:]
            var sizes: [Int] = [], codesFound = 0, textFound = 0
            var started = nanos()
            func lap(_ name: String) {
                let now = nanos()
                defer { started = now }
                if times[name] == nil { names.append(name) }
                times[name, default: []].append(Double(now - started) / 1e6)
            }
            /// Each step `analyze` takes, timed alone, then `analyze` whole;
            /// step names end with `suffix`.
            func analyse(_ bytes: [UInt8], _ suffix: String) throws(Failure) -> (codes: [FoundCode], lines: [String]) {
                started = nanos()
                let image: GreyImage
                do { image = try PhotoDecoder.grey(bytes, maxSide: PhotoAnalysis.scanSide) } catch {
                    throw .decoding(format, error)
                }
                lap("decode" + suffix)
                var codes = CodeReader.zbarCodes(in: image)
                lap("zbar" + suffix)
                let reduced = PhotoAnalysis.reduce(image, to: PhotoAnalysis.reducedSide)
                codes += CodeReader.dataMatrixCodes(in: reduced, timeoutMillis: dataMatrixMillis)
                lap("dmtx" + suffix)
                let lines = reader.lines(in: reduced, timeoutMillis: PhotoAnalysis.textMillis)
                lap("ocr" + suffix)
                let steps = ["decode", "zbar", "dmtx", "ocr"].map { times[$0 + suffix]!.last! }
                if times["total" + suffix] == nil { names.append("total" + suffix) }
                times["total" + suffix, default: []].append(steps.reduce(0, +))
                started = nanos()
                _ = PhotoAnalysis.analyze(bytes, deadline: PhotoAnalysis.now() + 30_000, text: reader)
                lap("analyze()" + suffix)
                return (codes, lines)
            }
            log("\(photos) \(width)×\(height) \(format.rawValue) photos: drawing and analysing")
            for index in 0..<photos {
                let bytes: [UInt8], empty: [UInt8]
                do {
                    bytes = try PhotoDrawings.photo(width: width, height: height, seed: UInt64(index + 1), format: format)
                    // The same background without the label: nothing to find.
                    empty = try PhotoDrawings.photo(width: width, height: height, seed: UInt64(index + 1), format: format,
                                                    label: false)
                } catch { throw .drawing(format, error) }
                sizes.append(bytes.count)
                let (codes, lines) = try analyse(bytes, "")
                let texts = Set(codes.map(\.text))
                if texts.contains(PhotoDrawings.ean) && texts.contains(PhotoDrawings.serial) { codesFound += 1 }
                if lines.contains(where: { $0.contains(PhotoDrawings.serial) }) { textFound += 1 }
                _ = try analyse(empty, ", no label")

                for thumbWidth in thumbnailWidths {
                    for output in [PhotoDecoder.Format.jpeg, .webp] {
                        let before = nanos()
                        let made = (try? PhotoDecoder.thumbnail(bytes, width: thumbWidth, format: output)) ?? []
                        let ms = Double(nanos() - before) / 1e6
                        let key = "\(thumbWidth) \(output.rawValue)"
                        var t = thumbs[key] ?? Thumbnail(format: format, width: thumbWidth, output: output, millis: [], bytes: [])
                        t.millis.append(ms)
                        t.bytes.append(made.count)
                        thumbs[key] = t
                    }
                }
            }
            result.steps += names.map { Step(format: format, name: $0, millis: times[$0]!) }
            for thumbWidth in thumbnailWidths {
                for output in [PhotoDecoder.Format.jpeg, .webp] {
                    if let t = thumbs["\(thumbWidth) \(output.rawValue)"] { result.thumbnails.append(t) }
                }
            }
            result.found.append((format, sizes.reduce(0, +) / max(1, sizes.count), codesFound, textFound, photos))
        }
        return result
    }

    /// The value at quantile `q` of `values` (nearest rank).
    static func quantile(_ values: [Double], _ q: Double) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * q).rounded(.up)) - 1))]
    }

    public func report(_ r: Result) -> [[[String]]] {
        var steps: [[String]] = [["format", "photo (KiB)", "step", "p50 (ms)", "p95 (ms)", "max (ms)"]]
        for step in r.steps {
            let size = r.found.first { $0.format == step.format }.map { format(Double($0.meanBytes) / 1024, 0) } ?? ""
            steps.append([step.format.rawValue, step.name == "decode" ? size : "", step.name,
                          format(Self.quantile(step.millis, 0.5), 1), format(Self.quantile(step.millis, 0.95), 1),
                          format(step.millis.max() ?? .nan, 1)])
        }
        var found: [[String]] = [["format", "photos", "EAN-13 + Data Matrix read", "serial read by OCR"]]
        for f in r.found { found.append([f.format.rawValue, String(f.photos), "\(f.codes)/\(f.photos)", "\(f.text)/\(f.photos)"]) }
        var thumbs: [[String]] = [["photo", "width", "thumbnail", "p50 (ms)", "p95 (ms)", "mean size (KiB)"]]
        for t in r.thumbnails {
            let mean = Double(t.bytes.reduce(0, +)) / Double(max(1, t.bytes.count)) / 1024
            thumbs.append([t.format.rawValue, String(t.width), t.output.rawValue, format(Self.quantile(t.millis, 0.5), 1),
                           format(Self.quantile(t.millis, 0.95), 1), format(mean, 1)])
        }
        return [steps, found, thumbs]
    }
}
