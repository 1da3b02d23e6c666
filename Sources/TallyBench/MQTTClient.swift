/// The few MQTT 3.1.1 packets the fan-out benchmark needs to drive Mosquitto
/// over its WebSocket listener (subprotocol "mqtt", binary frames): CONNECT,
/// SUBSCRIBE and PUBLISH at QoS 0, and a stream decoder for what comes back
/// (a WebSocket message may carry part of a packet or several).
enum MQTT {
    enum PacketType: UInt8 {
        case connect = 1, connack = 2, publish = 3, subscribe = 8, suback = 9, pingresp = 13
    }

    /// CONNECT, clean session, keep-alive `keepAlive` seconds (0: off).
    static func connect(clientID: String, keepAlive: UInt16 = 0) -> [UInt8] {
        var body: [UInt8] = []
        appendString("MQTT", to: &body)
        body.append(4)        // protocol level 3.1.1
        body.append(0x02)     // clean session
        body.append(UInt8(keepAlive >> 8)); body.append(UInt8(keepAlive & 0xff))
        appendString(clientID, to: &body)
        return packet(0x10, body)
    }

    /// SUBSCRIBE to one topic filter at QoS 0.
    static func subscribe(topic: String, packetID: UInt16 = 1) -> [UInt8] {
        var body: [UInt8] = [UInt8(packetID >> 8), UInt8(packetID & 0xff)]
        appendString(topic, to: &body)
        body.append(0)        // requested QoS
        return packet(0x82, body)
    }

    /// PUBLISH at QoS 0 (no packet id); `retain` keeps the last value in the broker.
    static func publish(topic: String, payload: [UInt8], retain: Bool = false) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(topic.utf8.count + 2 + payload.count)
        appendString(topic, to: &body)
        body.append(contentsOf: payload)
        return packet(retain ? 0x31 : 0x30, body)
    }

    static func packet(_ first: UInt8, _ body: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [first]
        var length = body.count
        repeat {
            var byte = UInt8(length % 128)
            length /= 128
            if length > 0 { byte |= 0x80 }
            out.append(byte)
        } while length > 0
        out.append(contentsOf: body)
        return out
    }

    static func appendString(_ text: String, to bytes: inout [UInt8]) {
        let utf8 = Array(text.utf8)
        bytes.append(UInt8(utf8.count >> 8)); bytes.append(UInt8(utf8.count & 0xff))
        bytes.append(contentsOf: utf8)
    }

    /// Splits a byte stream into packets. Feed it each received message; it
    /// calls `body(type, flags, packetBody)` for every complete packet.
    struct Decoder {
        private var buffer: [UInt8] = []

        mutating func feed(_ bytes: [UInt8], _ body: (UInt8, UInt8, UnsafeRawBufferPointer) -> Void) {
            if buffer.isEmpty {
                // Common case: the message holds whole packets; parse in place.
                let used = bytes.withUnsafeBytes { Decoder.parse($0, body) }
                if used < bytes.count { buffer.append(contentsOf: bytes[used...]) }
            } else {
                buffer.append(contentsOf: bytes)
                let used = buffer.withUnsafeBytes { Decoder.parse($0, body) }
                buffer.removeFirst(used)
            }
        }

        /// Parses complete packets from the start; returns the bytes consumed.
        private static func parse(_ bytes: UnsafeRawBufferPointer, _ body: (UInt8, UInt8, UnsafeRawBufferPointer) -> Void) -> Int {
            var offset = 0
            while offset < bytes.count {
                var length = 0, multiplier = 1, i = offset + 1
                var complete = false
                while i < bytes.count, i - offset <= 4 {
                    let byte = bytes[i]
                    length += Int(byte & 0x7f) * multiplier
                    multiplier *= 128
                    i += 1
                    if byte & 0x80 == 0 { complete = true; break }
                }
                guard complete, i + length <= bytes.count else { break }
                let first = bytes[offset]
                body(first >> 4, first & 0x0f, UnsafeRawBufferPointer(rebasing: bytes[i..<(i + length)]))
                offset = i + length
            }
            return offset
        }
    }

    /// The payload of a QoS 0 PUBLISH body (after the topic).
    static func publishPayload(_ body: UnsafeRawBufferPointer, flags: UInt8) -> UnsafeRawBufferPointer {
        guard body.count >= 2 else { return UnsafeRawBufferPointer(rebasing: body[0..<0]) }
        var start = 2 + (Int(body[0]) << 8 | Int(body[1]))
        if (flags >> 1) & 3 != 0 { start += 2 }   // QoS 1/2 carry a packet id
        return UnsafeRawBufferPointer(rebasing: body[min(start, body.count)...])
    }
}
