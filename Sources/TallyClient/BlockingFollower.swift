@preconcurrency import Glibc
import TallyProtocol

/// One subscription followed over `BlockingTallyClient` connections
/// (`tally watch`): a lost connection is replaced a second later — by one
/// to the next hub of the list, going round it, when there are several —
/// and the subscription resumed from the last seq seen, so nothing is
/// missed or repeated while the hub's change log reaches back (else the hub
/// answers with the current state, a resnapshot). Hubs of one cluster
/// share their seqs, so the resume holds across them.
public struct BlockingFollower {
    public enum Event {
        /// A connection after a lost one is subscribed again.
        case reconnected(url: String)
        /// The hub's log no longer reaches back to `since`: the current
        /// state follows instead of the missed changes.
        case resnapshot(since: Int64)
        /// The subscribe reply when it holds the current state rather than
        /// changes (`record`, `records`, `list`; `resnapshot` when resumed too late).
        case snapshot(JSONObject)
        /// A change: replayed after `since`, or pushed.
        case change(JSONObject)
        /// The connection is gone; a new one follows.
        case lost(HubError)
    }

    public let access: HubAccess
    /// The subscribe message (`name` and `path`, or `prefix`), without `since`.
    public let subscribe: JSONObject
    /// The seq everything up to has been seen.
    public private(set) var since: Int64?

    public init(access: HubAccess, subscribe: JSONObject, since: Int64?) {
        (self.access, self.subscribe, self.since) = (access, subscribe, since)
    }

    /// Follows until `handle` returns false. The first connection's failure
    /// and a refused subscribe throw; later connection failures are retried.
    public mutating func run(_ handle: (Event) -> Bool) throws(HubError) {
        var firstAttempt = true
        var going = true
        /// The hub to try first: the one after the hub last lost.
        var start = 0
        /// Hands an event over; false once the caller wants no more.
        func deliver(_ event: Event) -> Bool {
            going = going && handle(event)
            return going
        }
        while going {
            let client: BlockingTallyClient
            do {
                client = try BlockingTallyClient(access: access.rotated(from: start))
            } catch {
                if firstAttempt { throw error }
                sleep(1)
                continue
            }
            let hubCount = access.hubs.count
            start = (start + client.hubIndex + 1) % hubCount
            var message = subscribe
            if let since { message["since"] = .number(JSONNumber(since)) }
            let reply: JSONObject
            do { reply = try client.request(message) } catch {
                client.close()
                throw error
            }
            if !firstAttempt { _ = deliver(.reconnected(url: client.url)) }
            firstAttempt = false
            if case .array(let replayed)? = reply["changes"] {
                for case .object(let change) in replayed {
                    saw(change)
                    _ = deliver(.change(change))
                }
            } else {
                if reply["resnapshot"] == .bool(true), let since { _ = deliver(.resnapshot(since: since)) }
                _ = deliver(.snapshot(reply))
                if case .number(let seq)? = reply["seq"] { since = seq.int64Value }
            }
            do {
                while going {
                    guard let push = try client.nextPush(timeoutMillis: 60_000) else { continue }
                    saw(push)
                    _ = deliver(.change(push))
                }
            } catch {
                client.close()
                if deliver(.lost(error)) { sleep(1) }
                continue
            }
            client.close()
        }
    }

    /// Everything up to a change's seq has been seen.
    private mutating func saw(_ change: JSONObject) {
        if case .number(let seq)? = change["seq"], let value = seq.int64Value { since = max(since ?? 0, value) }
    }
}
