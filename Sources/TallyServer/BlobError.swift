@preconcurrency import Glibc
import TallyImaging
import TallyStore

/// Why a blob was refused or could not be stored. `code` is the contract's
/// wire code; `BlobRoutes` maps each case to its HTTP status.
public enum BlobError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The name is not 64 lowercase hex digits (`bad_field`).
    case badSHA256(String)
    /// The declared type is missing or not one of `BlobSignature.types` (`unsupported_type`).
    case unsupportedType(String?)
    /// The bytes do not start with the declared type's signature (`unsupported_type`).
    case signatureMismatch(declared: String, found: String?, empty: Bool)
    /// Larger than the store's limit (`too_large`).
    case tooLarge(size: Int, limit: Int)
    /// Storing it would take the blobs past their quota (`quota_exceeded`).
    case quotaExceeded(size: Int, used: Int, quota: Int)
    /// The bytes hash to another name (`checksum_mismatch`).
    case checksumMismatch(expected: String, actual: String)
    /// The file system refused (`storage_failed`); `path` is for logs only.
    case storageFailed(operation: String, path: String, errno: Int32)
    /// The PostgreSQL database holding the photos could not be reached, or
    /// refused the statement (`storage_failed`); `detail` is for logs only.
    case databaseFailed(operation: String, unreachable: Bool, detail: String)
    /// A thumbnail's `w` is not one of `BlobStore.thumbnailWidths` (`bad_field`).
    case badWidth(String)
    /// The stored photo cannot be decoded to make a thumbnail of it
    /// (`undecodable_photo`): the decoder's reason. The original is still
    /// served as it was uploaded.
    case undecodablePhoto(String)
    /// The image library failed to start (`unavailable`): the hub's fault.
    case imagingUnavailable(String)

    public var code: String {
        switch self {
        case .badSHA256: "bad_field"
        case .unsupportedType, .signatureMismatch: "unsupported_type"
        case .tooLarge: "too_large"
        case .quotaExceeded: "quota_exceeded"
        case .checksumMismatch: "checksum_mismatch"
        case .storageFailed, .databaseFailed: "storage_failed"
        case .badWidth: "bad_field"
        case .undecodablePhoto: "undecodable_photo"
        case .imagingUnavailable: "unavailable"
        }
    }

    /// What to fix, fit for a client: it never names server paths.
    public var message: String {
        let types = BlobSignature.types.joined(separator: ", ")
        switch self {
        case .badSHA256(let name):
            let shown = name.utf8.count > 80 ? String(name.prefix(80)) + "…" : name
            return "the blob name must be the SHA-256 of its bytes as 64 lowercase hex digits, not \"\(shown)\""
        case .unsupportedType(nil):
            return "send the photo's Content-Type: one of \(types)"
        case .unsupportedType(let type?):
            return "Content-Type \(type) is not accepted; send one of \(types)"
        case .signatureMismatch(let declared, _, true):
            return "the body is empty; send the \(declared) bytes"
        case .signatureMismatch(let declared, let found?, false):
            return "the body is \(found) but Content-Type says \(declared); send the matching Content-Type"
        case .signatureMismatch(let declared, nil, false):
            return "the body does not start with the \(declared) signature; send an image of one of \(types)"
        case .tooLarge(let size, let limit):
            return "the blob is \(size) bytes; the limit is \(limit) (maxBlobSize): resize or recompress the photo"
        case .quotaExceeded(let size, let used, let quota):
            return "the hub's photo storage is full: this blob is \(size) bytes and \(used) of the \(quota) bytes "
                + "allowed are in use; the operator can raise blobQuota (tally serve --blob-quota) or free space"
        case .checksumMismatch(let expected, let actual):
            return "the body's SHA-256 is \(actual), not \(expected): hash the exact bytes you send and PUT them there"
        case .storageFailed(let operation, _, let errno):
            let reason = errno == 0 ? "internal error" : String(cString: strerror(errno))
            return "the hub could not \(operation) (\(reason)); retry later, and tell the operator if it persists"
        case .databaseFailed(let operation, true, _):
            return "the hub cannot reach its database to \(operation); retry later, and tell the operator if it persists"
        case .databaseFailed(let operation, false, _):
            return "the hub's database failed to \(operation); retry later, and tell the operator if it persists"
        case .badWidth(let width):
            let widths = BlobStore.thumbnailWidths.map(String.init).joined(separator: ", ")
            let shown = width.utf8.count > 20 ? String(width.prefix(20)) + "…" : width
            return "w must be one of \(widths) (the thumbnail's width in pixels), not \"\(shown)\"; "
                + "leave w out for the photo as uploaded"
        case .undecodablePhoto(let reason):
            return "no thumbnail can be made: \(reason); GET it without w for the bytes as uploaded"
        case .imagingUnavailable(let reason):
            return "the hub cannot make thumbnails (\(reason)); GET the photo without w, and tell the operator"
        }
    }

    public var description: String {
        switch self {
        case .storageFailed(_, let path, _) where !path.isEmpty: "\(code): \(message) [\(path)]"
        case .databaseFailed(_, _, let detail): "\(code): \(message) [\(detail)]"
        default: "\(code): \(message)"
        }
    }

    /// A photo the image library could not make smaller.
    init(_ error: ImageError) {
        switch error {
        case .undecodable, .tooLarge: self = .undecodablePhoto(error.description)
        case .unavailable(let why): self = .imagingUnavailable(why)
        }
    }

    /// A failure of the PostgreSQL photo table.
    init(_ error: SharedTableError) {
        self = .databaseFailed(operation: error.operation, unreachable: error.unreachable, detail: error.detail)
    }
}
