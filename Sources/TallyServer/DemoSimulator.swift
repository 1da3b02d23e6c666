@preconcurrency import Glibc
import Synchronization
import TallyConcurrency
import TallyEngine
import TallyProtocol

/// `tally serve --demo`: sample items, orders and intake jobs (with generated
/// photos), and a simulated stock room that moves them along at a human pace,
/// so a new user sees a live board at once. Everything goes through the core
/// like any client's writes: the stage rules, history and stats apply.
public final class DemoSimulator: Sendable {
    private let core: HubCore
    private let blobs: BlobStore?
    private let intervalMillis: Int
    private let running = Atomic<Bool>(false)
    private let finished = CountdownLatch(count: 1)

    static let staff = ["ana", "ben", "sam", "lea"]
    static let items: [(id: String, name: String, location: String, stock: Int)] = [
        ("drill-01", "Cordless drill", "A-1-03", 6), ("saw-02", "Circular saw", "A-1-07", 3),
        ("ladder-03", "Step ladder 2 m", "B-2-01", 4), ("meter-04", "Multimeter", "C-1-02", 8),
        ("gloves-05", "Work gloves (pair)", "C-3-05", 40), ("helmet-06", "Safety helmet", "C-3-01", 12),
        ("tape-07", "Measuring tape 5 m", "C-1-04", 15), ("reel-08", "Cable reel 25 m", "B-1-06", 2),
    ]

    public init(core: HubCore, blobs: BlobStore?, intervalMillis: Int = 2500) {
        self.core = core
        self.blobs = blobs
        self.intervalMillis = intervalMillis
    }

    /// Starts the simulator thread, which first seeds the sample data unless
    /// there are items already (a restart keeps what the last run left).
    /// Photos are made and stored on that thread, never on the core's.
    public func start() {
        running.store(true, ordering: .relaxed)
        let box = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let simulator = Unmanaged<DemoSimulator>.fromOpaque(raw!).takeRetainedValue()
            simulator.run()
            return nil
        }, box.toOpaque())
        guard rc == 0 else { box.release(); running.store(false, ordering: .relaxed); finished.countDown(); return }
        pthread_detach(thread)
    }

    /// Stops the simulator; returns once its thread is done.
    public func stop() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        finished.wait()
    }

    // MARK: Seed

    private func seed() {
        for index in Self.items.indices { seedItem(index) }
        // Orders spread over the board: some just in, some in the works.
        for (index, target) in [0, 0, 1, 1, 2, 3, 0, 2].enumerated() {
            let item = Self.items[index % Self.items.count]
            let name = "orders/demo-\(index + 1)"
            core.submit([Write(name: name, action: .set(["item": .string("items/\(item.id)"), "qty": .number(JSONNumber(1 + index % 3)),
                                                           "kind": .string(index == 5 ? "receive" : "issue")]))],
                        as: actor())
            for _ in 0..<target { core.submit([Write(name: name, action: .advance(Advance()))], as: actor()) }
        }
        for index in 0..<3 { newIntake(index: index, advanceBy: index) }
    }

    /// Writes demo item `index` (an order needs its item to exist).
    private func seedItem(_ index: Int) {
        let item = Self.items[index]
        var data: JSONObject = ["sku": .string(item.id.uppercased()), "name": .string(item.name),
                                "location": .string(item.location), "stock": .number(JSONNumber(item.stock)),
                                "serials": .array([.string("SN-\(1000 + index * 37)")]), "codes": []]
        if let photo = photo(seed: UInt64(index), label: item.name) {
            data["photos"] = .array([.string(photo)])
            data["cover"] = .string(photo)
        }
        core.submit([Write(name: "items/\(item.id)", action: .set(data))], as: Actor(user: "demo", role: "admin"))
    }

    /// Stores a generated photo; its hash, or nil without a blob store.
    /// A demo photo stored as a blob; `code`, when given, on a tag in it.
    private func photo(seed: UInt64, label: String, code: String? = nil) -> String? {
        guard let blobs else { return nil }
        let png = DemoImage.png(width: 320, height: 240, seed: seed, label: label, code: code)
        guard let hash = try? BlobStore.sha256Hex(png),
              (try? blobs.put(sha256: hash, contentType: "image/png", bytes: png)) != nil else { return nil }
        return hash
    }

    /// The serial on the label of a simulated intake job's first photo.
    static func serial(_ number: Int) -> String { "SN-\(48_000 + number % 1000)" }

    private func newIntake(index: Int, advanceBy steps: Int) {
        let id = "demo-\(UInt32.random(in: 0...UInt32.max))"
        let itemName = "items/new-\(id)"
        // The first photo shows the new item's serial label.
        let photos = (0..<(2 + index % 2)).compactMap {
            photo(seed: UInt64(100 + index * 10 + $0), label: "Intake \(index + 1)", code: $0 == 0 ? Self.serial(index) : nil)
        }
        let job = "intake/\(id)"
        core.submit([Write(name: job, action: .set(["item": .string(itemName), "location": "Receiving",
                                                    "expectedPhotos": .number(JSONNumber(photos.count))]))], as: actor())
        let plan: [(Advance, [Write])] = [
            (Advance(to: "created"), [Write(name: itemName, action: .set(["name": .string("New item \(index + 1)"), "location": "Receiving",
                                                                          "stock": 0, "serials": [], "codes": []]))]),
            (Advance(to: "media-uploaded", data: ["photos": .array(photos.map(JSONValue.string))]), []),
            (Advance(to: "cover-set", data: photos.first.map { ["cover": .string($0)] }), []),
            (Advance(to: "done"), []),
        ]
        for (step, extra) in plan.prefix(steps) {
            core.submit(extra + [Write(name: job, action: .advance(step))], atomic: true, as: actor())
        }
    }

    // MARK: Simulation


    private func actor() -> Actor {
        Actor(user: Self.staff.randomElement()!, role: "staff")
    }

    /// Records under `prefix` (the first 1000), read through the core.
    private func records(_ prefix: String) -> [RecordState] {
        wait { done in core.scan(prefix: prefix, done: done) }
    }

    /// The open records of a workflow (its stage is one of `stages`): a
    /// live query's result, which does not grow with what finished.
    private func open(_ prefix: String, stages: [String]) -> [RecordState] {
        guard let stage = try? RecordPath(parsing: "stage") else { return [] }
        let query = Query(prefix: prefix, conditions: [Query.Condition(path: stage, values: stages.map {
            JSONValue.string($0).serialized()
        })])
        return wait { done in core.query(query, done: done) }
    }

    private func wait(_ read: (@escaping @Sendable ([RecordState]) -> Void) -> Void) -> [RecordState] {
        let result = ConditionLock<[RecordState]?>(nil)
        read { records in
            result.withLock { $0 = records }
            result.signal()
        }
        return result.wait { $0 }
    }

    private func run() {
        defer { finished.countDown() }
        if records("items/").isEmpty { seed() }
        var tick = 0
        while running.load(ordering: .relaxed) {
            let pause = intervalMillis / 2 + Int.random(in: 0...intervalMillis)
            var slept = 0
            while slept < pause, running.load(ordering: .relaxed) {
                usleep(100_000)
                slept += 100
            }
            guard running.load(ordering: .relaxed) else { return }
            tick += 1
            if tick % 3 == 0 { stepIntake(tick: tick) } else { stepOrders() }
        }
    }

    private func stepOrders() {
        let open = open("orders/", stages: ["received", "in-progress", "ready"])
        if open.count < 5 {
            let index = Self.items.indices.randomElement()!
            let kind = Int.random(in: 0..<5) == 0 ? "receive" : "issue"
            core.submit([Write(name: "orders/\(UInt32.random(in: 0...UInt32.max))",
                               action: .set(["item": .string("items/\(Self.items[index].id)"),
                                             "qty": .number(JSONNumber(Int.random(in: 1...3))),
                                             "kind": .string(kind)]))], as: actor()) { [self] result in
                // The hub refuses an order for an item that does not exist
                // (a store the demo did not seed, an item deleted): the demo
                // puts its item back for the next order.
                guard case .failure(let error) = result, error.code == .notFound else { return }
                seedItem(index)
            }
        }
        guard let order = open.randomElement() else { return }
        let cancel = Int.random(in: 0..<12) == 0
        core.submit([Write(name: order.name, action: .advance(Advance(to: cancel ? "cancelled" : nil)))], as: actor()) { [self] result in
            // Short of stock: someone orders more in.
            guard case .failure(let error) = result, error.code == .insufficientStock,
                  case .string(let item)? = error.details["item"] else { return }
            core.submit([Write(name: "orders/restock-\(UInt32.random(in: 0...UInt32.max))",
                               action: .set(["item": .string(item), "qty": 10, "kind": "receive"]))], as: actor())
        }
    }

    private func stepIntake(tick: Int) {
        let open = open("intake/", stages: ["queued", "created", "media-uploaded", "analyzed", "cover-set"])
        if open.count < 2 { return newIntake(index: tick, advanceBy: 0) }
        guard let job = open.randomElement(), let stage = job.data["stage"]?.stringValue,
              let item = job.data["item"]?.stringValue else { return }
        switch stage {
        case "queued":
            core.submit([Write(name: item, action: .set(["name": "New item", "location": "Receiving", "stock": 0,
                                                         "serials": [], "codes": []])),
                         Write(name: job.name, action: .advance(Advance(to: "created")))], atomic: true, as: actor())
        case "created":
            let photos = (0..<3).compactMap {
                photo(seed: UInt64(tick * 10 + $0), label: job.name, code: $0 == 0 ? Self.serial(tick) : nil)
            }
            core.submit([Write(name: job.name, action: .advance(Advance(to: "media-uploaded",
                                                                        data: ["photos": .array(photos.map(JSONValue.string))])))],
                        as: actor())
        case "media-uploaded":
            return  // the hub's own analysis moves it to analyzed
        default:
            let failed = Int.random(in: 0..<15) == 0
            core.submit([Write(name: job.name, action: .advance(failed ? Advance(to: "failed", reason: "photos too dark") : Advance()))],
                        as: actor())
        }
    }
}
