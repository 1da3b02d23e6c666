import CDmtx
import CZBar

/// A code found in a photo: its text and what kind of symbol carried it.
public struct FoundCode: Sendable, Equatable, Hashable {
    /// The decoded text (a SKU, a serial, a URL, …).
    public var text: String
    /// The symbology as users name it: "QR-Code", "CODE-128", "EAN-13",
    /// "DataMatrix", … (ZBar's names, and "DataMatrix" from libdmtx).
    public var symbology: String

    public init(text: String, symbology: String) {
        self.text = text
        self.symbology = symbology
    }
}

/// Barcodes, QR codes and Data Matrix symbols in grey pixels: ZBar for the
/// first two, libdmtx for the third. Pure functions of the pixels; each
/// call makes and frees its own decoder, so any thread may call.
public enum CodeReader {
    /// Every QR code and linear barcode ZBar finds (each text once per
    /// symbology). ZBar scans rows and columns, so a linear code is read up
    /// to about 30° off either axis; QR codes at any angle.
    public static func zbarCodes(in image: GreyImage) -> [FoundCode] {
        guard image.width > 0, image.height > 0, let scanner = zbar_image_scanner_create() else { return [] }
        defer { zbar_image_scanner_destroy(scanner) }
        // Every symbology ZBar knows (symbol type 0 = all of them).
        zbar_image_scanner_set_config(scanner, zbar_symbol_type_t(rawValue: 0), ZBAR_CFG_ENABLE, 1)
        guard let zimage = zbar_image_create() else { return [] }
        defer { zbar_image_destroy(zimage) }
        zbar_image_set_format(zimage, tally_zbar_y800())
        zbar_image_set_size(zimage, UInt32(image.width), UInt32(image.height))
        var found: [FoundCode] = []
        image.pixels.withUnsafeBytes { raw in
            // No cleanup handler: the bytes are Swift's, alive for this scope.
            zbar_image_set_data(zimage, raw.baseAddress, UInt(raw.count), nil)
            guard zbar_scan_image(scanner, zimage) > 0 else { return }
            var symbol = zbar_image_first_symbol(zimage)
            while let current = symbol {
                let length = Int(zbar_symbol_get_data_length(current))
                if let data = zbar_symbol_get_data(current) {
                    let bytes = UnsafeRawBufferPointer(start: data, count: length)
                    let name = String(cString: zbar_get_symbol_name(zbar_symbol_get_type(current)))
                    let code = FoundCode(text: String(decoding: bytes, as: UTF8.self), symbology: name)
                    if !found.contains(code) { found.append(code) }
                }
                symbol = zbar_symbol_next(current)
            }
            // Detach the Swift bytes before the scope ends.
            zbar_image_set_data(zimage, nil, 0, nil)
        }
        return found
    }

    /// Images narrower or shorter than this hold no Data Matrix (10 × 10
    /// modules at one pixel each), and libdmtx is not asked.
    public static let minDataMatrixSide = 10

    /// Once a symbol is found, how much longer the search goes on for more:
    /// a label seldom carries two, and libdmtx's full search over a busy
    /// photo takes seconds whether it finds one early or none.
    public static let moreDataMatrixMillis = 250

    /// Every Data Matrix libdmtx finds before `timeoutMillis` runs out, or
    /// `moreDataMatrixMillis` after the first (its search is slow on large
    /// images: pass a reduced one).
    public static func dataMatrixCodes(in image: GreyImage, timeoutMillis: Int, limit: Int = 8) -> [FoundCode] {
        // The smallest symbol is 10 × 10 modules. Below that libdmtx is not
        // only useless but fatal: its scan grid asserts `maxExtent > 1`
        // (dmtxscangrid.c), aborting the process on a 1 × 1 or 2 × 2 photo.
        guard image.width >= minDataMatrixSide, image.height >= minDataMatrixSide else { return [] }
        var pixels = image.pixels
        var found: [FoundCode] = []
        pixels.withUnsafeMutableBufferPointer { buffer in
            guard let dimage = dmtxImageCreate(buffer.baseAddress, Int32(image.width), Int32(image.height),
                                               Int32(DmtxPack8bppK.rawValue)) else { return }
            var dimageRef: UnsafeMutablePointer<DmtxImage>? = dimage
            defer { dmtxImageDestroy(&dimageRef) }
            // Rows run top to bottom in our pixels; libdmtx's default is bottom-up.
            dmtxImageSetProp(dimage, Int32(DmtxPropImageFlip.rawValue), Int32(DmtxFlipNone.rawValue))
            guard let decoder = dmtxDecodeCreate(dimage, 1) else { return }
            var decoderRef: UnsafeMutablePointer<DmtxDecode>? = decoder
            defer { dmtxDecodeDestroy(&decoderRef) }
            var deadline = dmtxTimeAdd(dmtxTimeNow(), timeoutMillis)
            while found.count < limit, let region = dmtxRegionFindNext(decoder, &deadline) {
                var regionRef: UnsafeMutablePointer<DmtxRegion>? = region
                defer { dmtxRegionDestroy(&regionRef) }
                guard let message = dmtxDecodeMatrixRegion(decoder, region, DmtxUndefined) else { continue }
                var messageRef: UnsafeMutablePointer<DmtxMessage>? = message
                defer { dmtxMessageDestroy(&messageRef) }
                let length = Int(message.pointee.outputIdx)
                guard let output = message.pointee.output, length > 0 else { continue }
                let text = String(decoding: UnsafeBufferPointer(start: output, count: length), as: UTF8.self)
                let code = FoundCode(text: text, symbology: "DataMatrix")
                guard !found.contains(code) else { continue }
                found.append(code)
                if found.count == 1 {
                    let soon = dmtxTimeAdd(dmtxTimeNow(), moreDataMatrixMillis)
                    if (soon.sec, soon.usec) < (deadline.sec, deadline.usec) { deadline = soon }
                }
            }
        }
        return found
    }
}
