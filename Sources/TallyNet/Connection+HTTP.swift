import TallyHTTP
import TallyWebSocket

/// Server side HTTP/1.1: requests in, responses out, and the WebSocket upgrade.
extension Connection {
    func processHTTP(_ bytes: UnsafeRawBufferPointer) {
        // Bytes already held go first: new ones queue behind them.
        if awaitingResponse || readPaused || !heldInput.isEmpty { return holdPipelined(bytes) }
        var rest = bytes
        while phase == .http, !rest.isEmpty, httpParser != nil {
            let (consumed, result) = httpParser!.parse(rest)
            rest = UnsafeRawBufferPointer(rebasing: rest[consumed...])
            switch result {
            case .needMore:
                if !(httpParser?.isIdle ?? true) { requestStarted() }
                if consumed == 0 { return }
            case .head(let head):
                requestStarted()
                // Refused on its headers alone: the body is never read (the
                // connection closes, discarding what still arrives), so a
                // client without a token cannot make the hub hold one.
                if let refusal = server?.application.screen(head, context: RequestContext(loop: loop, isTLS: tls != nil)) {
                    loop.metrics.add(.httpRequests)
                    return respondAndClose(refusal)
                }
                // RFC 9110 §10.1.1: a client that sent `Expect: 100-continue`
                // waits for this before sending the body.
                if httpParser?.takeExpectContinue() == true {
                    enqueue(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
                }
            case .request(let request):
                requestEnded()
                handle(request)
                if awaitingResponse { return holdPipelined(rest) }
                // Bytes after an upgrade request are the first WebSocket frames.
                if phase == .webSocket, !rest.isEmpty { processWebSocket(rest) }
                // A client that pipelines requests without reading the
                // answers: later requests wait until it has read these.
                if phase == .http, outbound.byteCount > Self.maxQueuedHTTPBytes {
                    pauseReading()
                    return holdPipelined(rest)
                }
            case .failure(let error):
                respondAndClose(.error(error.status, code: HTTPResponse.errorCode(for: error.status),
                                       message: error.message))
                return
            }
        }
    }

    private func handle(_ request: HTTPRequest) {
        guard let server else { return }
        loop.metrics.add(.httpRequests)
        let context = RequestContext(loop: loop, isTLS: tls != nil)
        // RFC 9110 §9.3.2: HEAD is GET without the body, so the application
        // only ever routes GET and the body is dropped here.
        var routed = request
        if request.method == "HEAD" { routed.method = "GET" }
        switch server.application.handle(routed, context: context) {
        case .respond(let response):
            respond(response, to: request)
        case .upgrade(let route):
            upgrade(request, route: route)
        case .deferred(let start):
            responseDeferred()
            let responder = HTTPResponder(connection: self, request: request)
            pendingResponder = responder
            start(responder)
        }
    }

    /// Keeps bytes that arrive while a deferred request is unanswered.
    private func holdPipelined(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        guard heldInput.count + bytes.count <= Connection.maxHeldInput else {
            return abort()
        }
        heldInput.append(contentsOf: bytes)
    }

    /// The deferred answer arrived (on the loop thread): send it, then parse
    /// what was pipelined behind it.
    func finishDeferred(_ response: HTTPResponse, to request: HTTPRequest) {
        guard phase == .http, awaitingResponse else { return }
        deferredResponseReleased()
        pendingResponder = nil
        respond(response, to: request)
        processHeldInput()
    }

    /// Parses what was held back while a request was deferred or reading paused.
    func processHeldInput() {
        guard !heldInput.isEmpty, phase == .http, !awaitingResponse, !readPaused else { return }
        let held = heldInput
        heldInput = []
        held.withUnsafeBytes { processHTTP($0) }
    }

    /// Answers `request`, keeping the connection when it asked to.
    func respond(_ response: HTTPResponse, to request: HTTPRequest) {
        var bytes: [UInt8] = []
        response.serialize(keepAlive: request.keepAlive, headRequest: request.method == "HEAD", into: &bytes)
        enqueue(bytes)
        if !request.keepAlive { finishHTTP() }
    }

    /// Answers and closes: for malformed requests and timeouts, after which
    /// the byte stream cannot be trusted.
    func respondAndClose(_ response: HTTPResponse) {
        enqueue(response.serialize(keepAlive: false))
        finishHTTP()
    }

    private func finishHTTP() {
        httpParser = nil
        requestEnded()
        closeAfterFlush = true
        enter(.closing)
    }

    /// Validates the opening handshake (RFC 6455 §4.2.1) and switches
    /// protocols, or answers with the status §4.2.2 calls for.
    private func upgrade(_ request: HTTPRequest, route: WebSocketRoute) {
        guard !loop.isShuttingDown else {
            var response = HTTPResponse.error(.serviceUnavailable, code: "shutting_down",
                                              message: "the server is shutting down; reconnect shortly")
            response.headers.set("Retry-After", "1")
            return respondAndClose(response)
        }
        let headers = request.headers
        guard headers.containsToken("Upgrade", "websocket") else {
            var response = HTTPResponse.error(.upgradeRequired, code: "upgrade_required",
                message: "this endpoint speaks WebSocket: send a GET with 'Upgrade: websocket' and 'Connection: Upgrade'")
            response.headers.set("Upgrade", "websocket")
            response.headers.set("Sec-WebSocket-Version", "13")
            respond(response, to: request)
            return
        }
        func refuse(_ status: HTTPStatus, _ code: String, _ message: String, _ extra: [(String, String)] = []) {
            var response = HTTPResponse.error(status, code: code, message: message)
            for (name, value) in extra { response.headers.set(name, value) }
            respondAndClose(response)
        }
        guard request.method == "GET" else {
            return refuse(.methodNotAllowed, "method_not_allowed",
                          "a WebSocket handshake must be a GET, not \(request.method)", [("Allow", "GET")])
        }
        guard request.version.major == 1, request.version.minor >= 1 else {
            return refuse(.badRequest, "bad_handshake", "a WebSocket handshake needs HTTP/1.1")
        }
        guard headers.containsToken("Connection", "upgrade") else {
            return refuse(.badRequest, "bad_handshake", "the 'Connection' header must include 'Upgrade'")
        }
        let versions = headers.values("Sec-WebSocket-Version")
        guard versions.count == 1, versions[0].trimmingSpaces == "13" else {
            return refuse(.upgradeRequired, "unsupported_version",
                          "only WebSocket version 13 is supported; send 'Sec-WebSocket-Version: 13'",
                          [("Sec-WebSocket-Version", "13")])
        }
        let keys = headers.values("Sec-WebSocket-Key")
        guard keys.count == 1, WebSocketHandshake.isValidKey(keys[0].trimmingSpaces) else {
            return refuse(.badRequest, "bad_handshake",
                          "'Sec-WebSocket-Key' must be one base64-encoded 16-byte value")
        }

        let offered = headers.values("Sec-WebSocket-Protocol")
            .flatMap { $0.split(separator: ",") }.map { String($0).trimmingSpaces }
        let chosenProtocol = route.subprotocols.first { offered.contains($0) }
        if chosenProtocol == nil, route.requiresSubprotocol {
            return refuse(.badRequest, "unsupported_subprotocol",
                          "offer one of these subprotocols in 'Sec-WebSocket-Protocol': \(route.subprotocols.joined(separator: ", "))")
        }

        var response = HTTPResponse(status: .switchingProtocols)
        response.headers.add("Upgrade", "websocket")
        response.headers.add("Connection", "Upgrade")
        response.headers.add("Sec-WebSocket-Accept", WebSocketHandshake.acceptValue(forKey: keys[0].trimmingSpaces))
        if let chosenProtocol { response.headers.add("Sec-WebSocket-Protocol", chosenProtocol) }
        var deflate: PerMessageDeflateParameters?
        if options.deflate.enabled,
           let agreed = PerMessageDeflateNegotiation.accept(offers: headers.values("Sec-WebSocket-Extensions"),
                                                            config: options.deflate) {
            deflate = agreed.parameters
            response.headers.add("Sec-WebSocket-Extensions", agreed.responseHeader)
        }
        enqueue(response.serialize(keepAlive: true))
        httpParser = nil
        openWebSocket(subprotocol: chosenProtocol, deflate: deflate, makeHandler: route.makeHandler)
    }
}

extension HTTPResponse {
    /// The machine-readable error code for a status the parser reports.
    static func errorCode(for status: HTTPStatus) -> String {
        switch status.code {
        case 400: "bad_request"
        case 408: "request_timeout"
        case 413: "too_large"
        case 414: "uri_too_long"
        case 431: "headers_too_large"
        case 501: "not_implemented"
        case 505: "http_version_not_supported"
        default: "http_\(status.code)"
        }
    }
}

extension String {
    /// Without leading and trailing spaces and tabs (HTTP's OWS).
    var trimmingSpaces: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
