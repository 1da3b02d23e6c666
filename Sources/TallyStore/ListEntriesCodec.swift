import CSQLite

/// The stored form of a list's entries up to schema 3: a format byte (1),
/// then for each entry its UTF-8 length as an unsigned LEB128 varint and its
/// bytes. Schema 5 keeps entries as rows; migration 5 decodes these blobs
/// (and tests encode them to make older stores).
enum ListEntriesCodec {
    static let format: UInt8 = 1

    static func encode(_ entries: [String]) -> [UInt8] {
        var bytes: [UInt8] = [format]
        bytes.reserveCapacity(1 + entries.reduce(0) { $0 + $1.utf8.count + 2 })
        for entry in entries {
            var length = UInt64(entry.utf8.count)
            repeat {
                let low = UInt8(length & 0x7F)
                length >>= 7
                bytes.append(length == 0 ? low : low | 0x80)
            } while length != 0
            bytes.append(contentsOf: entry.utf8)
        }
        return bytes
    }

    static func decode(_ bytes: UnsafeRawBufferPointer) throws(StoreError) -> [String] {
        guard let first = bytes.first else { throw corrupt("empty") }
        guard first == format else { throw corrupt("unknown format \(first)") }
        var entries: [String] = []
        var offset = 1
        while offset < bytes.count {
            var length: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard offset < bytes.count, shift < 63 else { throw corrupt("bad length at \(offset)") }
                let byte = bytes[offset]
                offset += 1
                length |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { break }
                shift += 7
            }
            guard length <= UInt64(bytes.count - offset) else { throw corrupt("entry runs past the end") }
            let end = offset + Int(length)
            entries.append(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<end]), as: UTF8.self))
            offset = end
        }
        return entries
    }

    private static func corrupt(_ detail: String) -> StoreError {
        StoreError(code: SQLITE_CORRUPT, message: "list entries: \(detail)", operation: "decode list entries")
    }
}
