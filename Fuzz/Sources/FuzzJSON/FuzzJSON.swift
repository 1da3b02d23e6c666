// libFuzzer target for the JSON parser and serializer (TallyProtocol).
//
// Input layout:
//   byte 0  limits preset (bits 0-1)
//   rest    one JSON text
//
// Invariants: no crash and no trap whatever the input; a parsed value
// serializes to valid UTF-8 that parses back to an equal value and
// serializes to the same bytes again (deterministic output); what the
// parser accepts respects the limits; an accepted text is valid UTF-8.
import FuzzSupport
import TallyProtocol

@_cdecl("FuzzJSON_main")
func fuzzJSONMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzerDriver(argc: argc, argv: argv) { data, size in
        fuzzOne(FuzzInput(data, size))
        return 0
    }
}

func limitsPreset(_ index: UInt8) -> JSONLimits {
    var limits = JSONLimits()
    switch index & 3 {
    case 1:  // small, so short inputs reach every limit
        limits.maxDepth = 4
        limits.maxStringBytes = 16
        limits.maxArrayElements = 4
        limits.maxObjectMembers = 4
    case 2:
        limits.maxBytes = 64
    default:
        break
    }
    return limits
}

/// Nesting depth of a value (containers count one level each).
func depth(_ value: JSONValue) -> Int {
    switch value {
    case .array(let items): 1 + (items.map(depth).max() ?? 0)
    case .object(let object): 1 + (object.map { depth($0.value) }.max() ?? 0)
    default: 0
    }
}

func fuzzOne(_ input: FuzzInput) {
    var input = input
    let limits = limitsPreset(input.byte())
    let text = Array(input.rest)
    let parsed: JSONValue
    do {
        parsed = try JSONValue.parse(text, limits: limits)
    } catch {
        check(error.offset >= 0 && error.offset <= text.count, "error offset \(error.offset) outside the input")
        check(!error.message.isEmpty, "error without a message")
        return
    }
    check(isValidUTF8(text), "accepted invalid UTF-8")
    check(text.count <= limits.maxBytes, "accepted \(text.count) bytes over the limit")
    check(depth(parsed) <= limits.maxDepth, "accepted nesting deeper than \(limits.maxDepth)")

    let once = parsed.serialized()
    check(isValidUTF8(once), "serialized invalid UTF-8")
    var roomy = JSONLimits()
    roomy.maxBytes = Int.max
    roomy.maxStringBytes = Int.max
    let again: JSONValue
    do {
        again = try JSONValue.parse(once, limits: roomy)
    } catch {
        check(false, "serialized output does not parse: \(error.message)")
        return
    }
    check(again == parsed, "round trip changed the value")
    check(again.serialized() == once, "serialization is not deterministic")
}
