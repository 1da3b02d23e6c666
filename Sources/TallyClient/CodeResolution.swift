import TallyHTTP
import TallyProtocol

/// What the hub says a scanned code names (`GET /v1/resolve/{code}`): the
/// item, the name a new item for it would get, or a refusal. `body` is the
/// hub's answer as JSON, for callers that show it whole.
public enum CodeResolution: Sendable {
    case found(item: String, body: JSONObject)
    /// No item has the code; `suggested` is the name a new one would get.
    case unknown(suggested: String?, body: JSONObject?)
    /// The hub answered with something else (an error, or a success that is
    /// not the expected object: `error` nil).
    case refused(HubError?, body: JSONObject?)

    /// Asks the hub; transport failures throw.
    public static func resolve(_ code: String, access: HubAccess) throws(HubError) -> CodeResolution {
        let response = try RESTClient(access: access).get("/v1/resolve/\(RESTClient.percentEncode(code))")
        return CodeResolution(response)
    }

    init(_ response: HTTPClientResponse) {
        let body = response.json
        switch response.status {
        case 200:
            if let body, let name = body["name"]?.stringValue { self = .found(item: name, body: body) } else {
                self = .refused(nil, body: body)
            }
        case 404 where body?["found"] == .bool(false):
            self = .unknown(suggested: body?["name"]?.stringValue, body: body)
        default:
            self = .refused(response.refusal, body: body)
        }
    }
}
