import CVips

/// What one photo held: the codes found in it and, when asked, its text.
public struct PhotoReport: Sendable, Equatable {
    /// Each code once, ZBar's first, then Data Matrix.
    public var codes: [FoundCode] = []
    /// Lines of label text (empty unless text was asked for).
    public var lines: [String] = []
    /// Why the photo could not be read (nil: it was).
    public var error: String?
    /// Milliseconds the analysis took.
    public var millis: Int = 0

    public init(codes: [FoundCode] = [], lines: [String] = [], error: String? = nil, millis: Int = 0) {
        self.codes = codes
        self.lines = lines
        self.error = error
        self.millis = millis
    }
}

/// The analysis of one photo, start to end: decode once at the size the
/// readers need, ZBar on it, libdmtx on a reduced copy (its search grows
/// with the pixels), Tesseract when a reader is given. Blocking; call it
/// on an analysis thread.
public enum PhotoAnalysis {
    /// Longest side ZBar scans: 12 MP photos come down to about 5 MP, where
    /// a label's barcode still has 2+ pixels per bar.
    public static let scanSide = 2600
    /// Longest side libdmtx and Tesseract get.
    public static let reducedSide = 1300
    /// Most time libdmtx gets per photo. Its search over a 1300 px photo
    /// of a textured scene takes 1.5 s or more when there is no symbol;
    /// symbols a label carries are found within the first few hundred ms.
    public static let dataMatrixMillis = 1500
    /// Most time Tesseract gets per photo: a label's lines take a few
    /// hundred ms; a textured photo without text would take seconds.
    public static let textMillis = 1500

    /// - Parameters:
    ///   - deadline: monotonic milliseconds (`PhotoAnalysis.now()`) past
    ///     which the slow readers are skipped; the report then says so.
    ///   - text: reads label text when given (one reader per thread).
    public static func analyze(_ bytes: [UInt8], deadline: Int64, text: TextReader? = nil) -> PhotoReport {
        let started = now()
        var report = PhotoReport()
        defer { report.millis = Int(now() - started) }
        let image: GreyImage
        do throws(ImageError) {
            image = try PhotoDecoder.grey(bytes, maxSide: scanSide)
        } catch {
            report.error = error.description
            return report
        }
        report.codes = CodeReader.zbarCodes(in: image)
        let reduced = reduce(image, to: reducedSide)
        let left = deadline - now()
        guard left > 0 else {
            report.error = "the time limit passed before Data Matrix and text were read"
            return report
        }
        for code in CodeReader.dataMatrixCodes(in: reduced, timeoutMillis: Int(min(left, Int64(dataMatrixMillis))))
        where !report.codes.contains(code) {
            report.codes.append(code)
        }
        if let text {
            guard deadline - now() > 0 else {
                report.error = "the time limit passed before text was read"
                return report
            }
            report.lines = text.lines(in: reduced, timeoutMillis: Int(min(deadline - now(), Int64(textMillis))))
        }
        return report
    }

    /// `image` halved until its longer side is at most `side`, or until it
    /// cannot be halved: a photo one pixel thin (1 × 3000) stays as it is
    /// rather than loop forever (`halved()` returns it unchanged).
    public static func reduce(_ image: GreyImage, to side: Int) -> GreyImage {
        var reduced = image
        while max(reduced.width, reduced.height) > side {
            let smaller = reduced.halved()
            guard smaller.width < reduced.width || smaller.height < reduced.height else { break }
            reduced = smaller
        }
        return reduced
    }

    /// Monotonic milliseconds.
    public static func now() -> Int64 {
        Int64(g_get_monotonic_time() / 1000)
    }
}
