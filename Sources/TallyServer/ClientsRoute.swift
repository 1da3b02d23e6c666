import TallyEngine
import TallyHTTP
import TallyProtocol

/// `GET /v1/admin/clients` (admin only): the sync health of every client of
/// this hub and, on a shared PostgreSQL database, of the other hubs'.
///
/// Authorized on the loop; then the core hands out its sessions' rows
/// (`HubCore.Input.clientRows`) and the answer is built from them and the
/// other hubs' rows `ClientHealth` holds — no database round trip on the
/// way, so the core is held for one pass over its sessions.
enum ClientsRoute {
    static func add(to router: inout HTTPRouter<HubRoutes.Route>, core: HubCore, health: ClientHealth) {
        router.add("GET", "/v1/admin/clients", .deferred(screen: nil) { request, _, responder in
            let actor: Actor
            switch HubRoutes.authenticate(core: core, request, headerRequired: true) {
            case .known(let known): actor = known!
            case .refused(let refusal): return responder.respond(refusal)
            }
            guard actor.role == "admin" else {
                let error = ProtocolError(.forbidden, "role \"\(actor.role)\" may not read the client list; that needs admin",
                                          details: ["role": .string(actor.role), "operation": "read", "name": "admin/clients"])
                core.noteRefusalFromLoop(error, actor: actor)
                return responder.respond(REST.response(for: error))
            }
            core.post(.clientRows { rows in
                core.metrics.requests.add(1, ordering: .relaxed)
                guard !responder.isCancelled else { return }
                responder.respond(.json(.ok, health.report(local: rows)))
            })
        })
    }
}
