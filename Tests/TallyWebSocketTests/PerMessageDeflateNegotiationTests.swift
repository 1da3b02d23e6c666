import Testing
@testable import TallyWebSocket

/// Offer and answer parsing per RFC 7692 §5 and §7.1.
@Suite struct PerMessageDeflateNegotiationTests {
    private func accept(_ offers: [String], _ configure: (inout PerMessageDeflateConfig) -> Void = { _ in })
        -> (parameters: PerMessageDeflateParameters, responseHeader: String)? {
        var config = PerMessageDeflateConfig()
        configure(&config)
        return PerMessageDeflateNegotiation.accept(offers: offers, config: config)
    }

    @Test func plainOffer() {
        let result = accept(["permessage-deflate"])
        #expect(result?.responseHeader == "permessage-deflate")
        #expect(result?.parameters == PerMessageDeflateParameters())
    }

    @Test func browserOffer() {
        let result = accept(["permessage-deflate; client_max_window_bits"])
        #expect(result?.responseHeader == "permessage-deflate")
        #expect(result?.parameters.clientMaxWindowBits == 15)
    }

    @Test func serverLimitsTheClientWindowOnlyWhenOffered() {
        let limited = accept(["permessage-deflate; client_max_window_bits"]) { $0.clientMaxWindowBits = 10 }
        #expect(limited?.responseHeader == "permessage-deflate; client_max_window_bits=10")
        #expect(limited?.parameters.clientMaxWindowBits == 10)
        // §7.1.2.2: not offered, so it must not appear in the response.
        let unlimited = accept(["permessage-deflate"]) { $0.clientMaxWindowBits = 10 }
        #expect(unlimited?.responseHeader == "permessage-deflate")
        #expect(unlimited?.parameters.clientMaxWindowBits == 15)
    }

    @Test func clientWindowValueCapsTheServerChoice() {
        let result = accept(["permessage-deflate; client_max_window_bits=8"]) { $0.clientMaxWindowBits = 12 }
        #expect(result?.responseHeader == "permessage-deflate; client_max_window_bits=8")
        #expect(result?.parameters.clientMaxWindowBits == 8)
    }

    @Test func serverWindow() {
        #expect(accept(["permessage-deflate; server_max_window_bits=10"])?.responseHeader
                == "permessage-deflate; server_max_window_bits=10")
        // The server may announce a smaller window of its own accord (§7.1.2.1).
        let own = accept(["permessage-deflate"]) { $0.serverMaxWindowBits = 11 }
        #expect(own?.responseHeader == "permessage-deflate; server_max_window_bits=11")
        #expect(own?.parameters.serverMaxWindowBits == 11)
        let smaller = accept(["permessage-deflate; server_max_window_bits=12"]) { $0.serverMaxWindowBits = 9 }
        #expect(smaller?.responseHeader == "permessage-deflate; server_max_window_bits=9")
    }

    @Test func serverWindowOf8IsDeclined() {
        // zlib cannot compress with 8 and answering 9 would exceed the offer.
        #expect(accept(["permessage-deflate; server_max_window_bits=8"]) == nil)
        // RFC 7692 §7.1.3's fallback offer: the second one is taken.
        let result = accept(["permessage-deflate; server_max_window_bits=8; client_max_window_bits, permessage-deflate; client_max_window_bits"])
        #expect(result?.responseHeader == "permessage-deflate")
    }

    @Test func contextTakeoverFlags() {
        let echoed = accept(["permessage-deflate; server_no_context_takeover; client_no_context_takeover"])
        #expect(echoed?.responseHeader == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
        #expect(echoed?.parameters.serverNoContextTakeover == true)
        #expect(echoed?.parameters.clientNoContextTakeover == true)
        let imposed = accept(["permessage-deflate"]) {
            $0.serverNoContextTakeover = true
            $0.clientNoContextTakeover = true
        }
        #expect(imposed?.responseHeader == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
    }

    @Test func severalOffersAndHeaders() {
        let result = accept(["x-webkit-deflate-frame", "foo; bar=1, permessage-deflate; server_max_window_bits=13, permessage-deflate"])
        #expect(result?.responseHeader == "permessage-deflate; server_max_window_bits=13")
    }

    @Test func nameIsCaseInsensitiveAndWhitespaceIsTolerated() {
        let result = accept(["  Permessage-Deflate ;\tServer_No_Context_Takeover  ,"])
        #expect(result?.responseHeader == "permessage-deflate; server_no_context_takeover")
    }

    @Test func quotedValues() {
        #expect(accept(["permessage-deflate; server_max_window_bits=\"10\""])?.parameters.serverMaxWindowBits == 10)
        #expect(accept(["permessage-deflate; client_max_window_bits=\"1\\2\""])?.parameters.clientMaxWindowBits == 12)
        #expect(accept(["permessage-deflate; server_max_window_bits=\"1 0\""]) == nil)
        #expect(accept(["permessage-deflate; server_max_window_bits=\"10"]) == nil)
        // A comma inside quotes does not split the list.
        #expect(accept(["permessage-deflate; x=\"a,b\", permessage-deflate"])?.responseHeader == "permessage-deflate")
    }

    @Test(arguments: [
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; client_max_window_bits; client_max_window_bits=10",
        "permessage-deflate; mystery",
        "permessage-deflate; server_no_context_takeover=1",
        "permessage-deflate; client_no_context_takeover=\"x\"",
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; server_max_window_bits=",
        "permessage-deflate; server_max_window_bits=7",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_max_window_bits=010",
        "permessage-deflate; client_max_window_bits=0x0f",
        "permessage-deflate; client_max_window_bits=-9",
        "permessage-deflate;; server_no_context_takeover",
        "permessage-deflate; =10",
    ])
    func badOffersAreDeclined(offer: String) {
        #expect(accept([offer]) == nil)
        // ...but do not stop a later good offer.
        #expect(accept([offer, "permessage-deflate"])?.responseHeader == "permessage-deflate")
    }

    @Test func disabledConfigAcceptsNothing() {
        #expect(accept(["permessage-deflate"]) { $0.enabled = false } == nil)
        #expect(PerMessageDeflateNegotiation.offer(config: { var c = PerMessageDeflateConfig(); c.enabled = false; return c }()) == "")
    }

    @Test func noOffers() {
        #expect(accept([]) == nil)
        #expect(accept([""]) == nil)
        #expect(accept(["foo, bar"]) == nil)
    }

    // MARK: Client side

    @Test func clientOffer() {
        var config = PerMessageDeflateConfig()
        #expect(PerMessageDeflateNegotiation.offer(config: config) == "permessage-deflate; client_max_window_bits")
        config.serverNoContextTakeover = true
        config.clientNoContextTakeover = true
        config.serverMaxWindowBits = 10
        config.clientMaxWindowBits = 12
        #expect(PerMessageDeflateNegotiation.offer(config: config)
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12")
    }

    @Test func clientConfirmsAnswers() throws {
        let config = PerMessageDeflateConfig()
        #expect(try PerMessageDeflateNegotiation.confirm(response: "permessage-deflate", config: config)
                == PerMessageDeflateParameters())
        let limited = try PerMessageDeflateNegotiation.confirm(
            response: "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9; client_max_window_bits=10",
            config: config)
        #expect(limited == PerMessageDeflateParameters(serverNoContextTakeover: true, clientNoContextTakeover: true,
                                                       serverMaxWindowBits: 9, clientMaxWindowBits: 10))
        var own = PerMessageDeflateConfig()
        own.clientNoContextTakeover = true
        own.clientMaxWindowBits = 11
        own.minimumSize = 10
        #expect(try PerMessageDeflateNegotiation.confirm(response: "permessage-deflate", config: own)
                == PerMessageDeflateParameters(clientNoContextTakeover: true, clientMaxWindowBits: 11, minimumSize: 10))
    }

    @Test(arguments: [
        ("permessage-deflate; mystery", WebSocketCloseCode.mandatoryExtension),
        ("permessage-deflate; server_no_context_takeover; server_no_context_takeover", .protocolError),
        ("permessage-deflate; client_max_window_bits", .protocolError),
        ("permessage-deflate; client_max_window_bits=8", .mandatoryExtension),
        ("permessage-deflate; server_max_window_bits=20", .protocolError),
        ("permessage-deflate; server_max_window_bits=\"10", .protocolError),
        ("x-webkit-deflate-frame", .mandatoryExtension),
        ("permessage-deflate, permessage-deflate", .mandatoryExtension),
        ("", .mandatoryExtension),
    ])
    func clientRejectsBadAnswers(response: String, code: WebSocketCloseCode) {
        #expect(throws: WebSocketFailure.self) {
            _ = try PerMessageDeflateNegotiation.confirm(response: response, config: PerMessageDeflateConfig())
        }
        do {
            _ = try PerMessageDeflateNegotiation.confirm(response: response, config: PerMessageDeflateConfig())
        } catch {
            #expect(error.code == code, "\(error.reason)")
            #expect(!error.reason.isEmpty)
        }
    }

    @Test func clientRejectsWindowsLargerThanOffered() {
        var config = PerMessageDeflateConfig()
        config.clientMaxWindowBits = 10
        config.serverMaxWindowBits = 10
        for response in ["permessage-deflate; client_max_window_bits=11", "permessage-deflate; server_max_window_bits=12"] {
            #expect(throws: WebSocketFailure.self) {
                _ = try PerMessageDeflateNegotiation.confirm(response: response, config: config)
            }
        }
    }

    @Test func clientRejectsAnyAnswerWhenDisabled() {
        var config = PerMessageDeflateConfig()
        config.enabled = false
        #expect(throws: WebSocketFailure(code: .mandatoryExtension,
                                         reason: "the server enabled permessage-deflate, which was not offered")) {
            _ = try PerMessageDeflateNegotiation.confirm(response: "permessage-deflate", config: config)
        }
    }

    /// Both ends agree on the same parameters and can talk with them.
    @Test(arguments: [(15, 15, false, false), (10, 12, true, false), (9, 9, true, true), (15, 11, false, true)])
    func endToEndNegotiation(serverBits: Int, clientBits: Int, serverNoTakeover: Bool, clientNoTakeover: Bool) throws {
        var clientConfig = PerMessageDeflateConfig()
        clientConfig.serverMaxWindowBits = serverBits
        clientConfig.clientMaxWindowBits = clientBits
        clientConfig.serverNoContextTakeover = serverNoTakeover
        clientConfig.minimumSize = 0
        var serverConfig = PerMessageDeflateConfig()
        serverConfig.clientNoContextTakeover = clientNoTakeover
        serverConfig.minimumSize = 0

        let offer = PerMessageDeflateNegotiation.offer(config: clientConfig)
        let accepted = try #require(PerMessageDeflateNegotiation.accept(offers: [offer], config: serverConfig))
        let confirmed = try PerMessageDeflateNegotiation.confirm(response: accepted.responseHeader, config: clientConfig)
        #expect(confirmed.serverNoContextTakeover == accepted.parameters.serverNoContextTakeover)
        #expect(confirmed.clientNoContextTakeover == accepted.parameters.clientNoContextTakeover)
        #expect(confirmed.serverMaxWindowBits == accepted.parameters.serverMaxWindowBits)
        #expect(confirmed.clientMaxWindowBits <= accepted.parameters.clientMaxWindowBits)
        #expect(accepted.parameters.serverMaxWindowBits == serverBits)

        var serverEncoder = WebSocketEncoder(role: .server, deflate: accepted.parameters)
        var clientDecoder = WebSocketDecoder(role: .client, maxMessageSize: 1 << 20, deflate: confirmed)
        var clientEncoder = WebSocketEncoder(role: .client, deflate: confirmed)
        var serverDecoder = WebSocketDecoder(role: .server, maxMessageSize: 1 << 20, deflate: accepted.parameters)
        for seed in 0..<3 {
            let payload = compressibleBytes(count: 20_000, seed: UInt64(seed))
            #expect(feed(&clientDecoder, serverEncoder.message(.text, payload), chunkSize: 999).events
                    == [.message(.text, payload)])
            #expect(feed(&serverDecoder, clientEncoder.message(.text, payload), chunkSize: 999).events
                    == [.message(.text, payload)])
        }
    }
}

@Suite struct PerMessageDeflateParametersDescriptionTests {
    @Test func describesInHeaderTerms() {
        let parameters = PerMessageDeflateParameters(serverNoContextTakeover: true, clientMaxWindowBits: 10)
        #expect(parameters.description
                == "permessage-deflate; server_no_context_takeover; server_max_window_bits=15; client_max_window_bits=10")
    }
}
