/// Extension negotiation (RFC 7692 §5, §7.1).
///
/// The server takes the first offer it can honour and says exactly what it
/// agreed to; the client checks that answer against what it offered. Window
/// sizes of 8 bits are never agreed for a side this codec compresses for:
/// zlib's raw deflate cannot produce them (it silently uses 9), and RFC 7692
/// §7.1.2.1 forbids answering with a larger window than was asked for.
public enum PerMessageDeflateNegotiation {
    static let extensionName = "permessage-deflate"

    /// Server side: picks the first acceptable permessage-deflate offer from
    /// the client's `Sec-WebSocket-Extensions` values. Returns nil when none
    /// is acceptable or compression is disabled (then no extension is used).
    ///
    /// Offers that are malformed, repeat a parameter, name an unknown one or
    /// carry a bad value are declined one by one (RFC 7692 §7.1); the next
    /// offer, in header order, gets its turn.
    public static func accept(offers: [String], config: PerMessageDeflateConfig)
        -> (parameters: PerMessageDeflateParameters, responseHeader: String)? {
        guard config.enabled else { return nil }
        for header in offers {
            for element in WebSocketExtensionHeader.parseList(header) {
                guard let element, element.name == extensionName,
                      let offer = try? PerMessageDeflateElement(element),
                      let answer = answer(offer, config: config) else { continue }
                return answer
            }
        }
        return nil
    }

    /// Client side: the `Sec-WebSocket-Extensions` value to offer.
    ///
    /// Always names `client_max_window_bits` (bare when the client is happy
    /// with 15): without it a server may not limit the client's window
    /// (RFC 7692 §7.1.2.2). Returns an empty string when compression is
    /// disabled; then send no header at all.
    public static func offer(config: PerMessageDeflateConfig) -> String {
        guard config.enabled else { return "" }
        var offer = extensionName
        if config.serverNoContextTakeover { offer += "; server_no_context_takeover" }
        if config.clientNoContextTakeover { offer += "; client_no_context_takeover" }
        let serverBits = config.clampedServerMaxWindowBits
        if serverBits < 15 { offer += "; server_max_window_bits=\(serverBits)" }
        let clientBits = config.clampedClientMaxWindowBits
        offer += clientBits < 15 ? "; client_max_window_bits=\(clientBits)" : "; client_max_window_bits"
        return offer
    }

    /// Client side: validates the server's answer against what was offered.
    ///
    /// RFC 7692 §7.1: the client fails the connection when the response has
    /// "an extension parameter not defined for use in a response", an
    /// invalid value, repeated parameters, or a `client_max_window_bits`
    /// the client did not offer. Syntax errors throw 1002; a well-formed
    /// answer this client cannot use throws 1010 (mandatory extension).
    /// An answer that leaves out `server_no_context_takeover` or
    /// `server_max_window_bits` the client asked for is tolerated: the
    /// client then inflates with the full window and context, which decodes
    /// anything the server may send.
    public static func confirm(response: String, config: PerMessageDeflateConfig) throws(WebSocketFailure)
        -> PerMessageDeflateParameters {
        guard config.enabled else {
            throw refuse("the server enabled permessage-deflate, which was not offered")
        }
        let elements = WebSocketExtensionHeader.parseList(response)
        guard elements.count == 1 else {
            throw refuse("expected one extension in the response, got \(elements.count)")
        }
        guard let element = elements[0] else {
            throw WebSocketFailure(code: .protocolError, reason: "malformed Sec-WebSocket-Extensions response")
        }
        guard element.name == extensionName else {
            throw refuse("the server selected \(element.name), which was not offered")
        }
        let answer: PerMessageDeflateElement
        do {
            answer = try PerMessageDeflateElement(element)
        } catch {
            switch error.kind {
            case .unknownParameter: throw refuse("permessage-deflate response: \(error.reason)")
            case .malformed: throw WebSocketFailure(code: .protocolError, reason: "permessage-deflate response: \(error.reason)")
            }
        }
        let offeredClientBits = config.clampedClientMaxWindowBits
        var clientBits = offeredClientBits
        if answer.hasClientMaxWindowBits {
            // §7.1.2.2: in a response the parameter "MUST have a value".
            guard let bits = answer.clientMaxWindowBits else {
                throw WebSocketFailure(code: .protocolError,
                                       reason: "permessage-deflate response: client_max_window_bits without a value")
            }
            guard bits <= offeredClientBits else {
                throw refuse("client_max_window_bits=\(bits) is larger than the \(offeredClientBits) offered")
            }
            guard PerMessageDeflateConfig.supportedWindowBits.contains(bits) else {
                throw refuse("client_max_window_bits=\(bits) cannot be honoured (zlib needs at least 9)")
            }
            clientBits = bits
        }
        let offeredServerBits = config.clampedServerMaxWindowBits
        if let bits = answer.serverMaxWindowBits, offeredServerBits < 15, bits > offeredServerBits {
            throw refuse("server_max_window_bits=\(bits) is larger than the \(offeredServerBits) offered")
        }
        return PerMessageDeflateParameters(
            serverNoContextTakeover: answer.serverNoContextTakeover,
            clientNoContextTakeover: answer.clientNoContextTakeover || config.clientNoContextTakeover,
            serverMaxWindowBits: answer.serverMaxWindowBits ?? 15,
            clientMaxWindowBits: clientBits,
            compressionLevel: config.compressionLevel,
            minimumSize: config.minimumSize)
    }

    // MARK: - Server side

    /// The parameters and response for one acceptable offer, or nil to
    /// decline it.
    private static func answer(_ offer: PerMessageDeflateElement, config: PerMessageDeflateConfig)
        -> (parameters: PerMessageDeflateParameters, responseHeader: String)? {
        // §7.1.2.1: the server answers with "the same or smaller value as
        // the offer", and may name a window even when the offer did not.
        // A request for 8 cannot be met (zlib compresses with 9 at least,
        // and 9 is larger than 8), so that offer is declined.
        var serverBits = config.clampedServerMaxWindowBits
        if let requested = offer.serverMaxWindowBits {
            guard PerMessageDeflateConfig.supportedWindowBits.contains(requested) else { return nil }
            serverBits = min(serverBits, requested)
        }
        let announceServerBits = offer.serverMaxWindowBits != nil || serverBits < 15

        // §7.1.2.2: the response may limit the client's window only if the
        // offer named client_max_window_bits, and to no more than its value.
        var clientBits = 15
        if offer.hasClientMaxWindowBits {
            clientBits = min(offer.clientMaxWindowBits ?? 15, config.clampedClientMaxWindowBits)
        }
        let announceClientBits = offer.hasClientMaxWindowBits && clientBits < 15

        // §7.1.1.1: accepting server_no_context_takeover means echoing it;
        // the server may also add it on its own. §7.1.1.2: the server may
        // add client_no_context_takeover; an offered one is echoed, since
        // the decoder relies on it only once the response binds the client.
        let serverNoContextTakeover = offer.serverNoContextTakeover || config.serverNoContextTakeover
        let clientNoContextTakeover = offer.clientNoContextTakeover || config.clientNoContextTakeover

        var response = extensionName
        if serverNoContextTakeover { response += "; server_no_context_takeover" }
        if clientNoContextTakeover { response += "; client_no_context_takeover" }
        if announceServerBits { response += "; server_max_window_bits=\(serverBits)" }
        if announceClientBits { response += "; client_max_window_bits=\(clientBits)" }

        let parameters = PerMessageDeflateParameters(
            serverNoContextTakeover: serverNoContextTakeover,
            clientNoContextTakeover: clientNoContextTakeover,
            serverMaxWindowBits: serverBits,
            clientMaxWindowBits: clientBits,
            compressionLevel: config.compressionLevel,
            minimumSize: config.minimumSize)
        return (parameters, response)
    }

    private static func refuse(_ reason: String) -> WebSocketFailure {
        WebSocketFailure(code: .mandatoryExtension, reason: reason)
    }
}
