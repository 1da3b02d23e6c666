/// Numbers (RFC 8259 §6):
/// `number = [ minus ] int [ frac ] [ exp ]`, `int = zero / ( digit1-9 *DIGIT )`,
/// `frac = decimal-point 1*DIGIT`, `exp = e [ minus / plus ] 1*DIGIT`.
///
/// So `01`, `+1`, `.5`, `1.`, `1e` and `-` are errors, and NaN/Infinity are
/// not numbers at all (they fail as "expected a JSON value").
extension JSONParser {
    /// Parses the number starting at `position` (a '-' or a digit).
    ///
    /// An integer literal that fits Int64 is accumulated digit by digit and
    /// kept exact. Everything else goes through the standard library's
    /// correctly rounded `Double(_: String)`, after the grammar above has been
    /// checked here (that initializer also accepts `inf`, hex and `+1`).
    /// `-0` becomes the Double -0.0, so the sign a peer wrote survives.
    mutating func parseNumber() throws(JSONError) -> JSONNumber {
        let start = position
        var negative = false
        if bytes[position] == ASCII.minus {
            negative = true
            position += 1
        }
        guard position < bytes.count else {
            throw failure(.invalidNumber, "expected a digit after '-', but the input ended")
        }
        var magnitude: UInt64 = 0
        var overflow = false
        let first = bytes[position]
        if first == ASCII.zero {
            position += 1
            if position < bytes.count, isDigit(bytes[position]) {
                throw failure(.invalidNumber, "leading zeros are not allowed in numbers", at: position - 1)
            }
        } else if isDigit(first) {
            while position < bytes.count, isDigit(bytes[position]) {
                if !overflow {
                    let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
                    let (sum, o2) = times10.addingReportingOverflow(UInt64(bytes[position] - ASCII.zero))
                    magnitude = sum
                    overflow = o1 || o2
                }
                position += 1
            }
        } else {
            throw failure(.invalidNumber, "expected a digit after '-', found \(describeNext())")
        }

        var integral = true
        if position < bytes.count, bytes[position] == ASCII.dot {
            integral = false
            position += 1
            try skipDigits(after: "the decimal point")
        }
        if position < bytes.count, bytes[position] == ASCII.e || bytes[position] == ASCII.upperE {
            integral = false
            position += 1
            if position < bytes.count, bytes[position] == ASCII.plus || bytes[position] == ASCII.minus {
                position += 1
            }
            try skipDigits(after: "the exponent marker")
        }

        if integral, !overflow {
            if !negative, magnitude <= UInt64(Int64.max) {
                return JSONNumber(Int64(magnitude))
            }
            if negative, magnitude == 0 {
                return JSONNumber(finite: -0.0)
            }
            if negative, magnitude <= UInt64(Int64.max) + 1 {
                return JSONNumber(Int64(bitPattern: 0 &- magnitude))
            }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw failure(.numberOutOfRange, "number is too large for a 64-bit float", at: start)
        }
        return JSONNumber(finite: value)
    }

    /// `1*DIGIT`: at least one digit.
    private mutating func skipDigits(after what: String) throws(JSONError) {
        guard position < bytes.count else {
            throw failure(.invalidNumber, "expected a digit after \(what), but the input ended")
        }
        guard isDigit(bytes[position]) else {
            throw failure(.invalidNumber, "expected a digit after \(what), found \(describeNext())")
        }
        while position < bytes.count, isDigit(bytes[position]) { position += 1 }
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= ASCII.zero && byte <= ASCII.nine }
}
