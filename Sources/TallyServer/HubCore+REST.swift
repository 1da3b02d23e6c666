import TallyEngine
import TallyHTTP
import TallyNet
import TallyProtocol
import TallyStore

/// REST calls, answered with the same semantics as the WebSocket operations.
extension HubCore {
    func handle(_ call: RESTCall) {
        // The connection closed while the call waited: nobody reads the answer.
        guard !call.responder.isCancelled else { return }
        metrics.requests.add(1, ordering: .relaxed)
        if case .changes(let since, _) = call.operation { catchUpIfBehind(since: since) }
        // Read when answering: a read may catch up on other hubs' commits.
        var head: Int64 { headSeq }
        var ifMatch = false
        do throws(ProtocolError) {
            switch call.operation {
            case .getRecord(let name):
                let record = try cache.record(name)
                try policy.check(call.actor, .read, name: name, owner: record?.owner)
                guard let record else { throw ProtocolError(.notFound, "no record named \"\(name)\"") }
                respond(call, .ok, record.envelope(), etag: record.version, after: head)
            case .records(let prefix, let after, let limit):
                let (records, more) = try readableRecords(prefix: prefix, after: after, limit: limit, actor: call.actor)
                var writer = MessageWriter()
                writer.int("seq", head)
                writer.rawArray("records", records.map { $0.envelope() })
                writer.bool("more", more)
                respond(call, .ok, writer.finish(), after: head)
            case .writeRecord(let write, let key, let usedIfMatch):
                ifMatch = usedIfMatch
                let result = try self.write([write], atomic: false, key: key, actor: call.actor).get()
                if case .delete = write.action {
                    var writer = MessageWriter()
                    writer.members(of: result.reply)
                    writer.bool("deleted", true)
                    respond(call, .ok, writer.finish(), after: result.seq)
                } else {
                    // The envelope of the record as this write left it (a
                    // retried key answers with the record as it is now).
                    guard let record = try cache.record(write.name) else {
                        throw ProtocolError(.notFound, "no record named \"\(write.name)\"")
                    }
                    // Version 1 only ever comes from creating the record, so a
                    // retried key answers 201 exactly when the first did.
                    let created = result.reply["version"] == .number(JSONNumber(1))
                    respond(call, created ? .created : .ok, envelope(of: record, reply: result.reply, for: call.actor),
                            etag: record.version, after: max(result.seq, record.seq))
                }
                fanOut(result.changes)
            case .getList(let name, let cursor, let limit):
                try policy.check(call.actor, .read, name: name, owner: nil)
                guard let list = try cache.list(name) else { throw ProtocolError(.notFound, "no list named \"\(name)\"") }
                let page = try cache.listPage(name, after: cursor, limit: limit ?? configuration.maxSnapshotEntries)
                respond(call, .ok, list.envelope(page: page, nameKey: "name"), etag: list.version, after: head)
            case .writeList(let write, let key):
                let result = try self.write([write], atomic: false, key: key, actor: call.actor).get()
                if let list = try cache.list(write.name) {
                    let body = mayRead(call.actor, name: list.name)
                        ? list.envelope(page: try cache.listPage(list.name, after: nil, limit: configuration.maxSnapshotEntries),
                                        nameKey: "name")
                        : Self.members(of: result.reply)
                    respond(call, .ok, body, etag: list.version, after: max(result.seq, list.seq))
                } else {
                    var writer = MessageWriter()
                    writer.members(of: result.reply)
                    writer.bool("deleted", true)
                    respond(call, .ok, writer.finish(), after: result.seq)
                }
                fanOut(result.changes)
            case .changes(let since, let limit):
                // The log holds every record's changes: it is for roles that may read everything.
                guard policy.decide(call.actor, .read, prefix: "") == .allowed else {
                    throw AccessPolicy.denied(call.actor, .read, name: "the change log")
                }
                let floor: Int64
                let stored: [StoredChange]
                do {
                    floor = try cache.reader.sequenceBounds().floor
                    stored = since < floor ? [] : try cache.reader.changes(after: since, limit: limit + 1)
                        .prefix { $0.seq <= head }
                } catch {
                    throw .storage(error)
                }
                guard since >= floor else {
                    throw ProtocolError(.resnapshot, "the change log starts after seq \(floor); since=\(since) is too old: read the records again",
                                        details: ["floor": .number(JSONNumber(floor))])
                }
                // A seq this hub never reached was seen on a hub whose data was
                // restored from an older backup: what the caller holds may
                // include changes this hub does not have (PROTOCOL.md, "since above
                // the head"), so it starts over, as from below the floor.
                guard since <= head else {
                    throw ProtocolError(.resnapshot, "since=\(since) is past this hub's head seq \(head) (its data was restored from an older backup): read the records again",
                                        details: ["floor": .number(JSONNumber(floor))])
                }
                var pushes = stored.prefix(limit).map(\.message)
                var more = stored.count > limit
                if !more {
                    let last = stored.last?.seq ?? since
                    for change in uncommitted where change.seq > last {
                        guard pushes.count < limit else { more = true; break }
                        pushes.append(change.push)
                    }
                }
                var writer = MessageWriter()
                writer.int("seq", head)
                writer.int("floor", floor)
                writer.rawArray("changes", pushes)
                writer.bool("more", more)
                respond(call, .ok, writer.finish(), after: head)
            case .advance(let name, let step, let key):
                let result = try self.write([Write(name: name, action: .advance(step))], atomic: false, key: key,
                                            actor: call.actor).get()
                guard let record = try cache.record(name) else { throw ProtocolError(.notFound, "no record named \"\(name)\"") }
                respond(call, .ok, envelope(of: record, reply: result.reply, for: call.actor),
                        etag: record.version, after: max(result.seq, record.seq))
                fanOut(result.changes)
            case .resolve(let code):
                try resolve(code, call: call, head: head)
            case .searchItems(let text, let limit):
                try searchItems(text, limit: limit, call: call, head: head)
            case .items(let after, let limit):
                try pageItems(after: after, limit: limit, call: call, head: head)
            case .workflows:
                respond(call, .ok, workflowsReport(), after: 0)
            case .publish(let topic, let data):
                try policy.check(call.actor, .publish, name: topic, owner: nil)
                publish(topic: topic, data: data) { count in
                    var writer = MessageWriter()
                    writer.int("delivered", Int64(count))
                    respond(call, .ok, writer.finish(), after: 0)
                }
            }
        } catch {
            metrics.requestErrors.add(1, ordering: .relaxed)
            noteRefusal(error, actor: call.actor)
            emit(.http(call.responder, REST.response(for: error, ifMatch: ifMatch)), after: 0)
        }
    }

    /// The answer to a write: the record's envelope (plus an advance's
    /// `from` and `to`), or — for a caller that may write the record but
    /// not read it — only the write's reply members, as over WebSocket.
    private func envelope(of record: RecordState, reply: JSONObject, for actor: Actor) -> [UInt8] {
        guard mayRead(actor, name: record.name, owner: record.owner) else { return Self.members(of: reply) }
        var writer = MessageWriter(capacity: record.dataBytes.count + 128)
        record.envelope(into: &writer)
        if let from = reply["from"] { writer.value("from", from) }
        if let to = reply["to"] { writer.value("to", to) }
        return writer.finish()
    }

    static func members(of reply: JSONObject) -> [UInt8] {
        var writer = MessageWriter()
        writer.members(of: reply)
        return writer.finish()
    }

    func respond(_ call: RESTCall, _ status: HTTPStatus, _ body: [UInt8], etag: Int64? = nil, after seq: Int64) {
        var response = HTTPResponse.json(status, body)
        if let etag { response.headers.set("ETag", "\"\(etag)\"") }
        emit(.http(call.responder, response), after: seq)
    }
}
