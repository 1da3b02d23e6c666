import TallyWebSocket

/// The WebSocket phase: decoding, control frames, sending and the close handshake.
extension Connection {
    func openWebSocket(subprotocol: String?, deflate: PerMessageDeflateParameters?,
                       makeHandler: (WebSocket) -> any WebSocketHandler) {
        let codecRole: WebSocketRole = role == .server ? .server : .client
        decoder = WebSocketDecoder(role: codecRole, maxMessageSize: options.maxMessageSize, deflate: deflate)
        encoder = WebSocketEncoder(role: codecRole, deflate: deflate)
        enter(.webSocket)
        let socket = WebSocket(connection: self, loop: loop, subprotocol: subprotocol, deflate: deflate)
        self.socket = socket
        loop.metrics.add(.webSocketsOpen)
        loop.metrics.add(.webSocketUpgrades)
        let handler = makeHandler(socket)
        self.handler = handler
        handler.webSocketDidOpen(socket)
    }

    func processWebSocket(_ bytes: UnsafeRawBufferPointer) {
        // The decoder is taken out while it runs: handlers called from inside
        // `feed` may close the connection, which must not touch it meanwhile.
        guard var running = decoder.take() else { return }
        let failure = running.feed(bytes) { event in self.handle(event) }
        if let failure {
            protocolFailure(failure)
        } else if phase == .webSocket || (phase == .closing && !closeAfterFlush) {
            // Keep decoding while open, or while waiting for the peer's close frame.
            decoder = running
        }
    }

    private func handle(_ event: WebSocketEvent) {
        switch event {
        case .message(let kind, let payload):
            guard !closeFrameSent, let socket, let handler else { return }
            loop.metrics.add(.messagesIn)
            handler.webSocket(socket, didReceive: kind, payload)
        case .ping(let payload):
            guard !closeFrameSent else { return }
            guard let pong = payload.withUnsafeBytes({ encoder?.pong($0) }) else { return }
            enqueue(pong)
        case .pong:
            break
        case .close(let code, let reason):
            peerClosed(code: code, reason: reason)
        }
    }

    /// The peer's close frame: answer it if we have not sent ours, then
    /// close TCP once the answer is out (RFC 6455 §5.5.1, §7.1.1).
    private func peerClosed(code: WebSocketCloseCode, reason: String) {
        if !closeFrameSent {
            closeFrameSent = true
            let echo: WebSocketCloseCode = code == .noStatus ? .normal : code
            if let frame = encoder?.close(echo, reason: "") { enqueue(frame) }
            finishWebSocket(code, reason: reason)
        }
        closeAfterFlush = true
        if phase != .closing { enter(.closing) }
        scheduleFlush()
    }

    /// A protocol violation: close with its code and stop reading frames.
    private func protocolFailure(_ failure: WebSocketFailure) {
        loop.metrics.add(.protocolErrors)
        server?.configuration.logger.debug("websocket.protocol_error",
                                           ["code": String(failure.code.rawValue), "reason": failure.reason])
        decoder = nil
        if !closeFrameSent, let frame = encoder?.close(failure.code, reason: failure.reason) {
            closeFrameSent = true
            enqueue(frame)
        }
        finishWebSocket(failure.code, reason: failure.reason)
        closeAfterFlush = true
        if phase != .closing { enter(.closing) }
        scheduleFlush()
    }

    /// Starts the close handshake from our side (the application, an idle
    /// timeout or server shutdown), then waits for the peer's close frame.
    func startClose(_ code: WebSocketCloseCode, reason: String) {
        guard phase == .webSocket, !closeFrameSent else { return }
        closeFrameSent = true
        if let frame = encoder?.close(code, reason: reason) { enqueue(frame) }
        finishWebSocket(code, reason: reason)
        enter(.closing)
    }

    /// The outbound bound was passed: drop what has not started to go out,
    /// send 1008 and close. The client is expected to reconnect and resume.
    func slowConsumer() {
        loop.metrics.add(.slowConsumerDisconnects)
        server?.configuration.logger.info("websocket.slow_consumer",
                                          ["queued_bytes": String(outbound.byteCount)])
        outbound.discardUnstarted()
        let reason = "slow consumer: more than \(options.maxOutboundBytes) bytes queued"
        if !closeFrameSent, let frame = encoder?.close(.policyViolation, reason: reason) {
            closeFrameSent = true
            outbound.append(frame)
        }
        finishWebSocket(.policyViolation, reason: reason)
        decoder = nil
        closeAfterFlush = true
        enter(.closing)
        flush()
    }

    /// Tells the handler, once, that the WebSocket is no longer open.
    func finishWebSocket(_ code: WebSocketCloseCode, reason: String) {
        guard let socket, socket.isOpen else { return }
        socket.markClosed()
        loop.metrics.add(.webSocketsOpen, -1)
        let handler = self.handler
        self.handler = nil
        handler?.webSocketDidClose(socket, code: code, reason: reason)
    }

    // MARK: Sending

    func sendMessage(_ kind: WebSocketMessageKind, _ payload: [UInt8]) -> Bool {
        guard phase == .webSocket, !closeFrameSent,
              let frame = payload.withUnsafeBytes({ encoder?.message(kind, $0) }) else { return false }
        loop.metrics.add(.messagesOut)
        return enqueue(frame)
    }

    func sendFragmented(_ kind: WebSocketMessageKind, _ payload: [UInt8], fragmentSize: Int) -> Bool {
        guard phase == .webSocket, !closeFrameSent, let frames = payload.withUnsafeBytes({
            encoder?.fragmentedMessage(kind, $0, fragmentSize: max(1, fragmentSize))
        }) else { return false }
        loop.metrics.add(.messagesOut)
        return enqueue(frames)
    }

    /// Queues a shared frame as is when this connection sends plain frames
    /// (no copy: the queue holds another reference to the same bytes); a
    /// connection that compresses encodes its own copy.
    func sendShared(_ frame: SharedFrame) -> Bool {
        guard phase == .webSocket, !closeFrameSent, encoder != nil else { return false }
        // A compressing connection still takes the shared uncompressed frame
        // for messages below its compression threshold.
        if let deflate = socket?.deflate, frame.payload.count >= deflate.minimumSize {
            return sendMessage(frame.kind, frame.payload)
        }
        loop.metrics.add(.messagesOut)
        return enqueue(frame.bytes)
    }
}

extension Optional {
    /// Moves the value out, leaving nil (so the caller owns the only copy).
    mutating func take() -> Wrapped? {
        let value = self
        self = nil
        return value
    }
}
