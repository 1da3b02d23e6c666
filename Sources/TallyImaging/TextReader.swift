import CTesseract

/// Printed text in grey pixels, through Tesseract's C API with the English
/// model (`tesseract-ocr-eng`).
///
/// One reader holds one Tesseract engine (some 20 MB, and about 100 ms to
/// load): keep one per analysis thread; a reader is not for two threads at
/// once.
public final class TextReader {
    private let engine: OpaquePointer

    /// Loads the model for `language` from Tesseract's data directory
    /// (nil: the one Debian installs).
    /// - Throws: `.unavailable` when the model is not installed.
    public init(language: String = "eng", dataPath: String? = nil) throws(ImageError) {
        guard let engine = TessBaseAPICreate() else { throw .unavailable("Tesseract could not start") }
        guard TessBaseAPIInit3(engine, dataPath, language) == 0 else {
            TessBaseAPIDelete(engine)
            throw .unavailable("Tesseract has no \"\(language)\" model (install tesseract-ocr-\(language))")
        }
        // Labels hold scattered lines, not a page of prose: find what text there is.
        TessBaseAPISetPageSegMode(engine, PSM_SPARSE_TEXT)
        self.engine = engine
    }

    deinit {
        TessBaseAPIEnd(engine)
        TessBaseAPIDelete(engine)
    }

    /// The lines of text found, trimmed, empty ones left out; with
    /// `timeoutMillis`, what was recognised by then (Tesseract's own
    /// deadline, checked between words: a textured photo with no text can
    /// otherwise take seconds of looking for words in the grain).
    public func lines(in image: GreyImage, timeoutMillis: Int? = nil) -> [String] {
        guard image.width > 2, image.height > 2 else { return [] }
        let text: String? = image.pixels.withUnsafeBufferPointer { buffer in
            TessBaseAPISetImage(engine, buffer.baseAddress, Int32(image.width), Int32(image.height), 1, Int32(image.width))
            // Photos carry no resolution Tesseract trusts; a label at this scale reads as ~300 dpi.
            TessBaseAPISetSourceResolution(engine, 300)
            defer { TessBaseAPIClear(engine) }
            if let timeoutMillis, let monitor = TessMonitorCreate() {
                defer { TessMonitorDelete(monitor) }
                TessMonitorSetDeadlineMSecs(monitor, Int32(clamping: max(1, timeoutMillis)))
                // Non-zero when the deadline cut it short: the text so far stands.
                _ = TessBaseAPIRecognize(engine, monitor)
            }
            guard let raw = TessBaseAPIGetUTF8Text(engine) else { return nil }
            defer { TessDeleteText(raw) }
            return String(cString: raw)
        }
        return (text ?? "").split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: " \t") }
            .filter { !$0.isEmpty }
    }
}

private extension Substring {
    func trimmingCharacters(in set: String) -> String {
        let skip = Set(set)
        return String(drop(while: skip.contains).reversed().drop(while: skip.contains).reversed())
    }
}
