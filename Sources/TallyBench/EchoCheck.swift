import TallyNet
import TallyTLS
import TallyWebSocket

/// Sends messages of many sizes and kinds to an echo endpoint and checks each
/// answer byte for byte: the interop check against other implementations.
public struct EchoCheck: Sendable {
    public var url: String
    public var sizes: [Int] = [0, 1, 125, 126, 127, 65535, 65536, 1 << 20, 16 << 20]
    public var fragmentSize: Int?
    public var options = WebSocketOptions()
    public var tls: TLSContext?
    public init(url: String) { self.url = url }

    /// Runs every case and returns (passed, failed, report lines).
    public func run(on loop: EventLoop, log: (String) -> Void) throws(ClientError) -> (passed: Int, failed: Int) {
        let socket = try BlockingWebSocket(url: url, loop: loop, options: options, tls: tls)
        var passed = 0, failed = 0
        let compression = socket.deflate.map { "\($0)" } ?? "no compression"
        log("connected to \(url) (\(compression))")
        for size in sizes {
            for kind in [WebSocketMessageKind.text, .binary] {
                let payload = EchoCheck.payload(kind: kind, size: size)
                socket.send(kind, payload, fragmentSize: fragmentSize)
                let label = "\(kind) \(size) bytes\(fragmentSize.map { " in fragments of \($0)" } ?? "")"
                switch socket.receive(timeoutMillis: 60_000) {
                case .message(let gotKind, let got) where gotKind == kind && got == payload:
                    passed += 1
                    log("ok   \(label)")
                case .message(let gotKind, let got):
                    failed += 1
                    log("FAIL \(label): got \(gotKind) \(got.count) bytes")
                case .closed(let code, let reason):
                    failed += 1
                    log("FAIL \(label): closed \(code.rawValue) \(reason)")
                    return (passed, failed + 1)
                case nil:
                    failed += 1
                    log("FAIL \(label): no answer within 60 s")
                    return (passed, failed)
                }
            }
        }
        socket.close()
        if case .closed(let code, _)? = socket.receive(timeoutMillis: 5_000), code == .normal {
            passed += 1
            log("ok   close handshake (1000)")
        } else {
            failed += 1
            log("FAIL close handshake")
        }
        return (passed, failed)
    }

    /// Deterministic payloads; text mixes 1- to 4-byte UTF-8 sequences so
    /// fragment boundaries fall inside code points.
    static func payload(kind: WebSocketMessageKind, size: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(size)
        switch kind {
        case .binary:
            var x: UInt32 = 2_463_534_242
            while bytes.count < size {
                x ^= x << 13; x ^= x >> 17; x ^= x << 5
                bytes.append(UInt8(truncatingIfNeeded: x))
            }
        case .text:
            let pieces: [[UInt8]] = [Array("tally ".utf8), Array("é".utf8), Array("€".utf8), Array("𝄞".utf8), Array("0123456789".utf8)]
            var i = 0
            while bytes.count < size {
                let piece = pieces[i % pieces.count]
                if bytes.count + piece.count > size {
                    bytes.append(contentsOf: repeatElement(UInt8(ascii: "x"), count: size - bytes.count))
                } else {
                    bytes.append(contentsOf: piece)
                }
                i += 1
            }
        }
        return bytes
    }
}
