import Dispatch
import Synchronization
import TallyHTTP
import TallyImaging
import TallyNet
import TallyProtocol

/// `PUT` and `GET /v1/blobs/{sha256}` (contract, "Blobs"): photo bytes in
/// and out of a `BlobStore`.
///
/// Authorization and the cheap checks (name, type, size, signature) run on
/// the loop thread, so a refused upload is answered at once. Hashing up to
/// 16 MiB, fsyncing and reading files would stall every connection on the
/// loop, so that work runs on `BlobWorkers` and is answered through the
/// `HTTPResponder`, which may be called from any thread.
enum BlobRoutes {
    /// - Parameters:
    ///   - logger: where failures of the storage (a disk, the database) go,
    ///     one line per 10 s at most (`blob.storage_failed`), so that the
    ///     operator learns what clients are told with a 503.
    ///   - authorize: returns the response to send instead (401 or 403), or
    ///     nil to go on; called with operation `create` or `read` and the
    ///     name `blobs/<sha256>`.
    static func add(to router: inout HTTPRouter<HubRoutes.Route>, blobs: BlobStore, logger: Logger = .disabled,
                    authorize: @escaping @Sendable (HTTPRequest, _ operation: String, _ name: String) -> HTTPResponse?) {
        let workers = BlobWorkers(count: min(4, max(2, ServerConfiguration.coreCount)))
        let failures = LogRateLimit(burst: 1, intervalMillis: 10_000)
        let failed: @Sendable (BlobError) -> Void = { error in
            guard case .serviceUnavailable = status(of: error),
                  let dropped = failures.admit(now: HubCore.wallClockMillis()) else { return }
            logger.error("blob.storage_failed", ["error": error.description, "suppressed": String(dropped)])
        }
        let screen: @Sendable (HTTPRequest, [String: String]) -> HTTPResponse? = { head, parameters in
            authorize(head, "create", "blobs/\(parameters["sha256"] ?? "")")
        }
        router.add("PUT", "/v1/blobs/{sha256}", .deferred(screen: screen) { request, parameters, responder in
            let sha256 = parameters["sha256"] ?? ""
            if let refusal = authorize(request, "create", "blobs/\(sha256)") { return responder.respond(refusal) }
            do throws(BlobError) {
                _ = try blobs.check(sha256: sha256, contentType: request.headers["Content-Type"], bytes: request.body)
            } catch {
                return responder.respond(response(for: error))
            }
            workers.async { responder.respond(put(request, sha256: sha256, blobs: blobs, failed: failed)) }
        })
        router.add("GET", "/v1/blobs/{sha256}", .deferred(screen: nil) { request, parameters, responder in
            let sha256 = parameters["sha256"] ?? ""
            if let refusal = authorize(request, "read", "blobs/\(sha256)") { return responder.respond(refusal) }
            let width: Int?
            do throws(BlobError) {
                try BlobStore.validate(sha256: sha256)
                width = try thumbnailWidth(request)
            } catch {
                return responder.respond(response(for: error))
            }
            if let width {
                let key = BlobStore.ThumbnailKey(sha256: sha256, width: width, format: thumbnailFormat(request))
                workers.async { responder.respond(thumbnail(request, key, blobs: blobs, failed: failed)) }
            } else {
                workers.async { responder.respond(get(request, sha256: sha256, blobs: blobs, failed: failed)) }
            }
        })
    }

    /// Stores the body: 201 when new, 200 when it was already there (the
    /// upload is idempotent, so a client retries a lost answer freely).
    static func put(_ request: HTTPRequest, sha256: String, blobs: BlobStore,
                    failed: @Sendable (BlobError) -> Void) -> HTTPResponse {
        do {
            let (created, type) = try blobs.put(sha256: sha256, contentType: request.headers["Content-Type"],
                                                bytes: request.body)
            var writer = MessageWriter()
            writer.string("sha256", sha256)
            writer.int("size", Int64(request.body.count))
            writer.string("type", type)
            var response = HTTPResponse.json(created ? .created : .ok, writer.finish())
            response.headers.set("ETag", "\"\(sha256)\"")
            if created { response.headers.set("Location", "/v1/blobs/\(sha256)") }
            return response
        } catch {
            failed(error)
            return self.response(for: error)
        }
    }

    /// The bytes, cacheable forever: the name is their hash, so they never
    /// change. `If-None-Match` with the ETag answers 304 without the bytes.
    static func get(_ request: HTTPRequest, sha256: String, blobs: BlobStore,
                    failed: @Sendable (BlobError) -> Void) -> HTTPResponse {
        let etag = "\"\(sha256)\""
        var headers = HTTPHeaders()
        headers.set("ETag", etag)
        headers.set("Cache-Control", "public, max-age=31536000, immutable")
        if matches(request.headers.values("If-None-Match"), sha256: sha256), blobs.exists(sha256: sha256) {
            return HTTPResponse(status: .notModified, headers: headers)
        }
        let blob: (bytes: [UInt8], type: String)?
        do { blob = try blobs.get(sha256: sha256) } catch {
            failed(error)
            return response(for: error)
        }
        guard let blob else {
            return .error(.notFound, code: "not_found",
                          message: "no blob \(sha256); PUT its bytes to /v1/blobs/\(sha256) first")
        }
        headers.set("Content-Type", blob.type)
        // The type was checked against the bytes on upload; browsers must
        // not second-guess it (an "image" that sniffs as HTML).
        headers.set("X-Content-Type-Options", "nosniff")
        return HTTPResponse(status: .ok, headers: headers, body: blob.bytes)
    }

    /// A smaller copy (`?w=N`), made on first request and kept: cacheable
    /// forever under its own ETag. `Vary: Accept`, since the same URL is
    /// JPEG or WebP by what the client accepts.
    static func thumbnail(_ request: HTTPRequest, _ key: BlobStore.ThumbnailKey, blobs: BlobStore,
                          failed: @Sendable (BlobError) -> Void) -> HTTPResponse {
        var headers = HTTPHeaders()
        headers.set("ETag", key.etag)
        headers.set("Cache-Control", "public, max-age=31536000, immutable")
        headers.set("Vary", "Accept")
        if matches(request.headers.values("If-None-Match"), etag: key.etag), blobs.exists(sha256: key.sha256) {
            return HTTPResponse(status: .notModified, headers: headers)
        }
        let made: (bytes: [UInt8], type: String, made: Bool)?
        do { made = try blobs.thumbnail(key) } catch {
            failed(error)
            var refusal = response(for: error)
            refusal.headers.set("Vary", "Accept")
            return refusal
        }
        guard let made else {
            return .error(.notFound, code: "not_found",
                          message: "no blob \(key.sha256); PUT its bytes to /v1/blobs/\(key.sha256) first")
        }
        headers.set("Content-Type", made.type)
        headers.set("X-Content-Type-Options", "nosniff")
        return HTTPResponse(status: .ok, headers: headers, body: made.bytes)
    }

    /// The `w` query parameter: nil when absent (the original), else one
    /// of `BlobStore.thumbnailWidths`.
    static func thumbnailWidth(_ request: HTTPRequest) throws(BlobError) -> Int? {
        guard let query = request.query, !query.isEmpty else { return nil }
        let parameters: [String: String]
        do throws(ProtocolError) { parameters = try REST.query(request) } catch { throw .badWidth(query) }
        guard let raw = parameters["w"] else { return nil }
        // One spelling per width ("0128" is not 128): one URL per thumbnail
        // for every cache on the way.
        guard let width = BlobStore.thumbnailWidths.first(where: { String($0) == raw }) else { throw .badWidth(raw) }
        return width
    }

    /// WebP when the `Accept` header lists `image/webp` (with a q above 0),
    /// else JPEG, which every client shows.
    static func thumbnailFormat(_ request: HTTPRequest) -> PhotoDecoder.Format {
        for field in request.headers.values("Accept") {
            for element in field.split(separator: ",") {
                let parts = element.split(separator: ";").map { REST.trimmed(String($0)).lowercased() }
                guard parts.first == "image/webp" else { continue }
                let zero = parts.dropFirst().contains { parameter in
                    parameter.hasPrefix("q=") && (Double(parameter.dropFirst(2)) ?? 1) <= 0
                }
                if !zero { return .webp }
            }
        }
        return .jpeg
    }

    /// Whether an `If-None-Match` field names this blob's ETag or `*`.
    static func matches(_ fields: [String], sha256: String) -> Bool {
        matches(fields, etag: "\"\(sha256)\"")
    }

    /// Whether an `If-None-Match` field names `etag` (quoted) or `*`.
    /// RFC 9110 §13.1.2: the comparison is weak, so `W/"…"` matches too.
    static func matches(_ fields: [String], etag: String) -> Bool {
        for field in fields {
            for element in field.split(separator: ",") {
                var tag = Substring(REST.trimmed(String(element)))
                if tag == "*" { return true }
                if tag.hasPrefix("W/") { tag = tag.dropFirst(2) }
                if tag == etag { return true }
            }
        }
        return false
    }

    /// The one mapping from a blob error to its HTTP answer, in the REST
    /// error envelope (`{"error":{"code","message",…}}`).
    static func response(for error: BlobError) -> HTTPResponse {
        var details: JSONObject = [:]
        let status = status(of: error)
        switch error {
        case .badSHA256: details["field"] = "sha256"
        case .unsupportedType, .signatureMismatch: details["field"] = "Content-Type"
        case .tooLarge(_, let limit): details["limit"] = .number(JSONNumber(limit))
        case .quotaExceeded(_, _, let quota): details["quota"] = .number(JSONNumber(quota))
        case .checksumMismatch(_, let actual): details["actual"] = .string(actual)
        case .badWidth: details["field"] = "w"; details["allowed"] = .array(BlobStore.thumbnailWidths.map { .number(JSONNumber($0)) })
        case .undecodablePhoto(let reason): details["reason"] = .string(reason)
        case .storageFailed, .databaseFailed, .imagingUnavailable: break
        }
        let failure = ProtocolError(ErrorCode(rawValue: error.code), error.message, details: details)
        var writer = MessageWriter()
        writer.value("error", failure.json)
        var response = HTTPResponse.json(status, writer.finish())
        if status == .serviceUnavailable { response.headers.set("Retry-After", String(REST.storageRetryAfterSeconds)) }
        return response
    }

    /// The HTTP status of each error: the client's mistakes are 4xx, the
    /// hub's storage 503 (retry later).
    static func status(of error: BlobError) -> HTTPStatus {
        switch error {
        case .badSHA256, .checksumMismatch, .badWidth: .badRequest
        // RFC 9110 §15.5.21: the request was understood, but the photo it
        // names cannot be processed.
        case .undecodablePhoto: HTTPStatus(422, "Unprocessable Content")
        case .imagingUnavailable: .serviceUnavailable
        case .unsupportedType, .signatureMismatch: .unsupportedMediaType
        case .tooLarge: .payloadTooLarge
        // RFC 4918 §11.5: "unable to store the representation needed to
        // successfully complete the request".
        case .quotaExceeded: HTTPStatus(507, "Insufficient Storage")
        case .storageFailed, .databaseFailed: .serviceUnavailable
        }
    }
}

/// A few serial queues taken in turn: enough to hash and fsync uploads in
/// parallel, few enough that large uploads cannot claim every thread of the
/// machine (a concurrent queue would start a thread per blocked fsync).
final class BlobWorkers: Sendable {
    private let queues: [DispatchQueue]
    private let next = Atomic<Int>(0)

    init(count: Int) {
        queues = (0..<max(1, count)).map { DispatchQueue(label: "tally.blobs.\($0)") }
    }

    func async(_ work: @escaping @Sendable () -> Void) {
        let turn = next.add(1, ordering: .relaxed).oldValue
        // The counter wraps on overflow, hence the bit pattern.
        queues[Int(UInt(bitPattern: turn) % UInt(queues.count))].async(execute: work)
    }
}
