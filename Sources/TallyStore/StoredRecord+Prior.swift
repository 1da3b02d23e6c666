/// How a record's prior state travels in a shared store's change log
/// (`StoredChange.prior`, PostgreSQL column `tally_changes.prior`): one
/// value instead of five columns per change in the group's set-based
/// INSERT. Layout: version, seq, created, updated as 8-byte big-endian
/// integers, then the data's JSON text. The name is the change's own.
extension StoredRecord {
    /// The fixed part before the data.
    static let priorHeaderBytes = 32

    /// This record (without its name) in the prior layout.
    var priorBytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.priorHeaderBytes + data.count)
        for value in [version, seq, created, updated] {
            withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
        }
        bytes.append(contentsOf: data)
        return bytes
    }

    /// Reads the prior layout back; nil when `bytes` is too short to hold it.
    init?(name: String, priorBytes bytes: [UInt8]) {
        guard bytes.count >= Self.priorHeaderBytes else { return nil }
        func integer(at offset: Int) -> Int64 {
            var value: UInt64 = 0
            for byte in bytes[offset..<offset + 8] { value = value << 8 | UInt64(byte) }
            return Int64(bitPattern: value)
        }
        self.init(name: name, version: integer(at: 0), seq: integer(at: 8), created: integer(at: 16),
                  updated: integer(at: 24), data: Array(bytes[Self.priorHeaderBytes...]))
    }
}
