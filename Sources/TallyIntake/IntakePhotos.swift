@preconcurrency import Glibc
import COpenSSL

/// Photo files for intake jobs: what type a file's bytes are, and copying
/// them into the outbox's photo directory under their SHA-256.
public enum IntakePhotos {
    /// The most photos one job takes (the intake workflow's `photos` limit).
    public static let maxCount = 12

    /// The image type a file's first bytes announce, as the hub's blob
    /// store checks it (contract: image/jpeg, png, webp, gif, heic); nil
    /// for anything else.
    public static func contentType(of head: [UInt8]) -> String? {
        func starts(_ bytes: [UInt8], at offset: Int = 0) -> Bool {
            head.count >= offset + bytes.count && Array(head[offset..<offset + bytes.count]) == bytes
        }
        if starts([0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return "image/gif" }
        if starts(Array("RIFF".utf8)), starts(Array("WEBP".utf8), at: 8) { return "image/webp" }
        // ISO BMFF: a box size, then "ftyp" and the major brand (HEIF, ISO/IEC 23008-12).
        if starts(Array("ftyp".utf8), at: 4), head.count >= 12 {
            let brand = String(decoding: head[8..<12], as: UTF8.self)
            if ["heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1"].contains(brand) { return "image/heic" }
        }
        return nil
    }

    /// A photo the user named, checked before anything is written.
    public struct Checked: Sendable {
        public var path: String
        public var size: Int
        public var type: String
    }

    /// Why a photo the user named cannot be taken; the message names the file.
    public struct Unusable: Error, Sendable {
        public var message: String
    }

    /// Opens the file and reads its signature: a usage error naming the
    /// file when it is missing, unreadable, empty or not an image.
    public static func check(_ path: String) throws(Unusable) -> Checked {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw Unusable(message: "cannot read photo '\(path)': \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            throw Unusable(message: "photo '\(path)' is not a regular file")
        }
        guard info.st_size > 0 else { throw Unusable(message: "photo '\(path)' is empty") }
        var head = [UInt8](repeating: 0, count: 16)
        let count = head.withUnsafeMutableBytes { read(fd, $0.baseAddress, 16) }
        guard count > 0 else {
            throw Unusable(message: "cannot read photo '\(path)': \(String(cString: strerror(errno)))")
        }
        guard let type = contentType(of: Array(head[0..<count])) else {
            throw Unusable(message: "photo '\(path)' is not a JPEG, PNG, WebP, GIF or HEIC image (by its first bytes)")
        }
        return Checked(path: path, size: Int(info.st_size), type: type)
    }

    /// Copies `source` into `directory` as `<sha256>`: written to a
    /// temporary file, fsynced, renamed into place, and the directory
    /// fsynced, so a crash leaves either the whole photo or none under
    /// that name. Returns the SHA-256 (lowercase hex) and size.
    public static func copy(_ source: String, into directory: String) throws(OutboxError) -> (sha256: String, size: Int) {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw OutboxError("cannot read photo '\(source)': \(errnoText())") }
        defer { close(input) }
        let temporary = "\(directory)/.tmp-\(randomHex(8))"
        let output = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw OutboxError("cannot create '\(temporary)': \(errnoText())") }
        var keep = false
        defer { if !keep { unlink(temporary) } }
        var hasher = try SHA256Hasher()
        var size = 0
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { raw in
                var n: Int
                repeat { n = read(input, raw.baseAddress, raw.count) } while n < 0 && errno == EINTR
                return n
            }
            if count < 0 {
                close(output)
                throw OutboxError("cannot read photo '\(source)': \(errnoText())")
            }
            if count == 0 { break }
            hasher.update(buffer[0..<count])
            size += count
            var written = 0
            while written < count {
                let n = buffer[written..<count].withUnsafeBytes { write(output, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else {
                    let reason = errnoText()
                    close(output)
                    throw OutboxError("cannot write '\(temporary)': \(reason)")
                }
                written += n
            }
        }
        guard fsync(output) == 0 else {
            let reason = errnoText()
            close(output)
            throw OutboxError("cannot fsync '\(temporary)': \(reason)")
        }
        close(output)
        let sha = hasher.finish()
        let final = "\(directory)/\(sha)"
        guard rename(temporary, final) == 0 else {
            throw OutboxError("cannot move the photo into '\(final)': \(errnoText())")
        }
        keep = true
        try syncDirectory(directory)
        return (sha, size)
    }

    /// The SHA-256 of a file's bytes (lowercase hex), nil if it cannot be read.
    public static func sha256(ofFile path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard var hasher = try? SHA256Hasher() else { return nil }
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return hasher.finish() }
            hasher.update(buffer[0..<count])
        }
    }

    /// fsync on a directory makes a rename in it durable (rename(2) alone
    /// is atomic but not durable).
    static func syncDirectory(_ directory: String) throws(OutboxError) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw OutboxError("cannot open '\(directory)': \(errnoText())") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw OutboxError("cannot fsync '\(directory)': \(errnoText())") }
    }

    /// `count` random bytes as lowercase hex (job ids, temporary names).
    public static func randomHex(_ count: Int) -> String {
        var bytes = [UInt8](repeating: 0, count: count)
        if bytes.withUnsafeMutableBytes({ raw in
            raw.baseAddress.map { RAND_bytes($0.assumingMemoryBound(to: UInt8.self), Int32(count)) } ?? 0
        }) != 1 {
            var generator = SystemRandomNumberGenerator()
            for index in bytes.indices { bytes[index] = generator.next() }
        }
        return hex(bytes)
    }

    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// Incremental SHA-256 over OpenSSL's EVP digest interface.
struct SHA256Hasher: ~Copyable {
    private let context: OpaquePointer

    init() throws(OutboxError) {
        guard let context = EVP_MD_CTX_new() else { throw OutboxError("cannot start a SHA-256 digest (out of memory)") }
        guard EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
            EVP_MD_CTX_free(context)
            throw OutboxError("cannot start a SHA-256 digest")
        }
        self.context = context
    }

    mutating func update(_ bytes: ArraySlice<UInt8>) {
        bytes.withUnsafeBytes { _ = EVP_DigestUpdate(context, $0.baseAddress, $0.count) }
    }

    /// The digest as 64 lowercase hex digits.
    consuming func finish() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        digest.withUnsafeMutableBytes { raw in
            if let base = raw.baseAddress { _ = EVP_DigestFinal_ex(context, base.assumingMemoryBound(to: UInt8.self), &length) }
        }
        return IntakePhotos.hex(digest)
    }

    deinit { EVP_MD_CTX_free(context) }
}
