@preconcurrency import Glibc
import Testing
import TallyEngine
import TallyImaging
import TallyProtocol
@testable import TallyServer
import TallyTestSupport

/// Issue 18 on the hub: a job that reaches media-uploaded is analysed off
/// the loops and moved to analyzed by the hub itself, with each code
/// resolved as /v1/resolve would, proposals, and every failure recorded
/// instead of blocking the job.
@Suite("Intake analysis on the hub")
struct IntakeAnalyzerTests {
    /// Stores `bytes` as a blob of the hub; its sha256.
    @discardableResult
    func store(_ bytes: [UInt8], in hub: HubFixture) throws -> String {
        let sha = try BlobStore.sha256Hex(bytes)
        _ = try hub.hub.blobs.put(sha256: sha, contentType: "image/jpeg", bytes: bytes)
        return sha
    }

    /// Writes `intake/ID` through created to media-uploaded with `photos`,
    /// as the CLI's intake runner does.
    func upload(_ client: SyncClient, id: String, item: String = "items/new-1", photos: [String]) throws {
        try client.ok(#"{"op":"set","name":"intake/\#(id)","data":{"item":"\#(item)","expectedPhotos":\#(photos.count)},"version":0}"#)
        try client.ok(#"{"op":"write","ops":[{"op":"set","name":"\#(item)","data":{"name":"new","codes":[],"serials":[],"stock":0}},{"op":"advance","name":"intake/\#(id)","from":"queued","to":"created"}]}"#)
        let list = photos.map { "\"\($0)\"" }.joined(separator: ",")
        try client.ok(#"{"op":"advance","name":"intake/\#(id)","from":"created","to":"media-uploaded","data":{"photos":[\#(list)]}}"#)
    }

    /// The record once its stage is `stage`, read every 20 ms until
    /// `timeoutMillis` passes.
    func record(_ client: SyncClient, _ name: String, stage: String = "analyzed",
                timeoutMillis: Int = 20_000) throws -> JSONObject {
        let deadline = PhotoAnalysis.now() + Int64(timeoutMillis)
        while true {
            let data = try #require(try client.ok(#"{"op":"get","name":"\#(name)"}"#)["data"]?.objectValue)
            if data["stage"]?.stringValue == stage { return data }
            guard PhotoAnalysis.now() < deadline else {
                throw TestFailure("\(name) did not reach \(stage) within \(timeoutMillis) ms: \(JSONValue.object(data))")
            }
            usleep(20_000)
        }
    }

    func codes(_ analysis: JSONValue?) -> [String: JSONValue] {
        var found: [String: JSONValue] = [:]
        for code in analysis?["codes"]?.arrayValue ?? [] {
            if let text = code["code"]?.stringValue { found[text] = code }
        }
        return found
    }

    @Test func codesAreFoundResolvedAndProposed() throws {
        try withHub { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"items/drill","data":{"name":"Drill","codes":["4006381333931"],"serials":[]}}"#)
            let photo = try store(Drawings.photo(marks: [(CodeDrawing.ean13("4006381333931"), 3, 20, 20),
                                                         (CodeDrawing.ean13("5901234123457"), 3, 20, 400),
                                                         (CodeDrawing.dataMatrix("SN-4711"), 8, 450, 300)]), in: hub)
            try upload(client, id: "j1", photos: [photo])
            let data = try record(client, "intake/j1")
            let analysis = data["analysis"]
            #expect(analysis?["status"] == "done")
            #expect(analysis?["reason"] == nil)
            let found = codes(analysis)
            #expect(found["4006381333931"]?["found"] == true)
            #expect(found["4006381333931"]?["name"] == "items/drill")
            #expect(found["4006381333931"]?["symbology"] == "EAN-13")
            #expect(found["SN-4711"]?["found"] == false)
            #expect(found["SN-4711"]?["name"] == "items/SN-4711")
            #expect(found["SN-4711"]?["symbology"] == "DataMatrix")
            #expect(found["SN-4711"]?["photo"] == .string(photo))
            #expect(found["5901234123457"]?["found"] == false)
            #expect(analysis?["photos"]?.arrayValue?.first?["codes"] == .number(JSONNumber(3)))
            #expect(analysis?["photos"]?.arrayValue?.first?["error"] == nil)
            #expect(analysis?["text"] == nil, "no OCR unless configured")
            // The serial is proposed, the unknown EAN too; the drill's code names the drill.
            #expect(analysis?["proposals"] == .object(["serials": ["SN-4711"], "codes": ["5901234123457"]]))
            let last = try #require(data["history"]?.arrayValue?.last)
            #expect(last["from"] == "media-uploaded" && last["to"] == "analyzed" && last["actor"] == "hub")
            // Nothing is written to the item before the owner accepts.
            let item = try client.ok(#"{"op":"get","name":"items/new-1"}"#)
            #expect(item["data"]?["serials"] == .array([]))
            // The stage shows in stats/intake.
            let stats = try client.ok(#"{"op":"get","name":"stats/intake"}"#)
            #expect(stats["data"]?["counts"]?["analyzed"] == .number(JSONNumber(1)))
            #expect(stats["data"]?["stageTime"]?["media-uploaded"]?["exits"] == .number(JSONNumber(1)))
        }
    }

    @Test func aPhotoWithNoCodeAnalysesToNothingAtOnce() throws {
        try withHub { hub in
            let client = try hub.connect()
            let photo = try store(Drawings.photo(marks: []), in: hub)
            let started = PhotoAnalysis.now()
            try upload(client, id: "blank", photos: [photo])
            let analysis = try record(client, "intake/blank")["analysis"]
            #expect(PhotoAnalysis.now() - started < 5_000)
            #expect(analysis?["status"] == "done")
            #expect(analysis?["codes"] == .array([]))
            #expect(analysis?["proposals"] == .object(["serials": [], "codes": []]))
        }
    }

    @Test func noPhotosMeansDoneWithNoCodes() throws {
        try withHub { hub in
            let client = try hub.connect()
            try upload(client, id: "none", photos: [])
            let analysis = try record(client, "intake/none")["analysis"]
            #expect(analysis?["status"] == "done")
            #expect(analysis?["photos"] == .array([]) && analysis?["codes"] == .array([]))
        }
    }

    @Test func aJobWithoutAPhotosMemberIsLeftToItsClient() throws {
        try withHub { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"intake/by-hand","data":{"code":"x"}}"#)
            try client.ok(#"{"op":"advance","name":"intake/by-hand","to":"created"}"#)
            try client.ok(#"{"op":"advance","name":"intake/by-hand","to":"media-uploaded"}"#)
            // Jobs are taken in order: once a later one is analysed, the first was passed over.
            try upload(client, id: "later", photos: [])
            _ = try record(client, "intake/later")
            _ = try record(client, "intake/by-hand", stage: "media-uploaded", timeoutMillis: 0)
            try client.ok(#"{"op":"advance","name":"intake/by-hand","from":"media-uploaded","to":"analyzed"}"#)
        }
    }

    @Test func aDamagedOrMissingPhotoIsRecordedAndTheJobGoesOn() throws {
        try withHub { hub in
            let client = try hub.connect()
            let good = try Drawings.photo(marks: [(CodeDrawing.ean13("4006381333931"), 3, 20, 20)])
            let goodSha = try store(good, in: hub)
            let truncated = try store(Array(good.prefix(good.count / 2)), in: hub)
            let garbage = try store([0xFF, 0xD8, 0xFF, 0xE0] + Array("not a photo at all".utf8), in: hub)
            let missing = String(repeating: "ab", count: 32)
            try upload(client, id: "mixed", photos: [truncated, garbage, missing, goodSha])
            let analysis = try record(client, "intake/mixed")["analysis"]
            #expect(analysis?["status"] == "done")
            let photos = analysis?["photos"]?.arrayValue ?? []
            #expect(photos.count == 4)
            for index in 0..<3 {
                #expect(photos[index]["error"]?.stringValue?.isEmpty == false, "photo \(index): \(photos[index])")
            }
            #expect(photos[2]["error"] == "the photo is not in the hub's blob store")
            #expect(photos[3]["error"] == nil)
            #expect(codes(analysis)["4006381333931"] != nil)

            // Nothing readable at all: the job still moves on, as failed analysis.
            try upload(client, id: "bad", item: "items/new-2", photos: [truncated, garbage])
            let bad = try record(client, "intake/bad")["analysis"]
            #expect(bad?["status"] == "failed")
            #expect(bad?["reason"]?.stringValue?.hasPrefix("no photo could be read") == true)
            // The hub still answers.
            try client.ok(#"{"op":"get","name":"intake/bad"}"#)
        }
    }

    @Test func analysisOffMovesTheJobOnAsSkipped() throws {
        try withHub({ $0.analysis.enabled = false }) { hub in
            let client = try hub.connect()
            let photo = try store(Drawings.photo(marks: [(CodeDrawing.ean13("4006381333931"), 3, 20, 20)]), in: hub)
            try upload(client, id: "off", photos: [photo])
            let analysis = try record(client, "intake/off")["analysis"]
            #expect(analysis?["status"] == "skipped")
            #expect(analysis?["reason"]?.stringValue?.contains("analysis.enabled") == true)
            #expect(analysis?["codes"] == .array([]))
        }
    }

    /// Big noisy photos: a few hundred milliseconds each to decode and scan.
    func slowPhotos(_ count: Int, in hub: HubFixture) throws -> [String] {
        try (0..<count).map { try store(Drawings.photo(width: 3000, height: 2200, seed: UInt64(50 + $0), marks: []), in: hub) }
    }

    @Test func theTimeLimitMovesTheJobOnAsTimeout() throws {
        try withHub({ $0.analysis.timeoutMillis = 60 }) { hub in
            let client = try hub.connect()
            let photos = try slowPhotos(3, in: hub)
            try upload(client, id: "slow", photos: photos)
            let analysis = try record(client, "intake/slow")["analysis"]
            #expect(analysis?["status"] == "timeout")
            #expect(analysis?["reason"]?.stringValue?.contains("analysis.timeout") == true)
            let entries = analysis?["photos"]?.arrayValue ?? []
            #expect(entries.count == 3)
            #expect(entries.last?["error"] == "not analysed: the time limit passed first")
            // The worker's late result is dropped: one advance only.
            while hub.hub.analyzer.pending > 0 { usleep(20_000) }
            let history = try #require(try client.ok(#"{"op":"get","name":"intake/slow"}"#)["data"]?["history"]?.arrayValue)
            #expect(history.filter { $0["to"] == "analyzed" }.count == 1)
        }
    }

    @Test func aHubStoppedDuringAnalysisResumesItOnce() throws {
        let directory = try TemporaryDirectory()
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try upload(client, id: "resume", photos: try slowPhotos(3, in: hub))
            // Stopped while the worker has it (the job leaves the analyzer only when it ends).
            let deadline = PhotoAnalysis.now() + 5_000
            while hub.hub.analyzer.pending == 0, PhotoAnalysis.now() < deadline { usleep(5_000) }
            #expect(hub.hub.analyzer.pending == 1)
            let data = try #require(try client.ok(#"{"op":"get","name":"intake/resume"}"#)["data"]?.objectValue)
            #expect(data["stage"] == "media-uploaded")
        }
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            let data = try record(client, "intake/resume")
            #expect(data["analysis"]?["status"] == "done")
            #expect(data["history"]?.arrayValue?.filter { $0["to"] == "analyzed" }.count == 1)
        }
        // A third start finds nothing to do: the record stays analyzed once.
        try withHub(dataDirectory: directory.path) { hub in
            let client = try hub.connect()
            try client.ok(#"{"op":"get","name":"stats/intake"}"#)
            #expect(hub.hub.analyzer.pending == 0)
            let data = try record(client, "intake/resume")
            #expect(data["history"]?.arrayValue?.filter { $0["to"] == "analyzed" }.count == 1)
        }
    }

    @Test func theConfigSectionIsParsedAndCheckedByName() throws {
        let file = try HubConfigFile.parse(try JSONValue.parse(Array(#"""
            {"analysis": {"enabled": false, "ocr": true, "timeout": "2m", "workers": 2,
                          "serialPatterns": ["S/N \\d+"], "namePatterns": ["^Model"]}}
            """#.utf8)))
        let settings = try #require(file.analysis)
        #expect(!settings.enabled && settings.ocr && settings.timeoutMillis == 120_000 && settings.workers == 2)
        #expect(settings.serialPatterns == [#"S/N \d+"#] && settings.namePatterns == ["^Model"])
        #expect(AnalysisSettings.duration(.string("500ms")) == 500)
        #expect(AnalysisSettings.duration(.number(JSONNumber(1.5))) == 1500)
        let bad: [(String, String)] = [
            (#"{"analysis": {"timeout": "soon"}}"#, "$.analysis.timeout"),
            (#"{"analysis": {"timeout": "0s"}}"#, "$.analysis.timeout"),
            (#"{"analysis": {"workers": 0}}"#, "$.analysis.workers"),
            (#"{"analysis": {"ocr": "yes"}}"#, "$.analysis.ocr"),
            (#"{"analysis": {"serialPatterns": ["SN("]}}"#, "$.analysis.serialPatterns[0]"),
            (#"{"analysis": {"colour": 1}}"#, "$.analysis.colour"),
            (#"{"analysis": []}"#, "$.analysis"),
        ]
        for (text, path) in bad {
            #expect(throws: HubConfigFile.Invalid.self, "\(text)") {
                do { _ = try HubConfigFile.parse(try JSONValue.parse(Array(text.utf8))) } catch let error as HubConfigFile.Invalid {
                    #expect(error.path == path, "\(error)")
                    throw error
                }
            }
        }
    }

    @Test func proposalsFollowThePatterns() {
        var settings = AnalysisSettings()
        settings.namePatterns = ["^Model "]
        let outcome = IntakeAnalysisOutcome(
            job: IntakeAnalysisJob(name: "intake/x", photos: ["p"]), status: .done, reason: nil, millis: 5,
            photos: [.init(sha256: "p", codes: 2, millis: 5)],
            codes: [.init(found: FoundCode(text: "SN-1", symbology: "QR-Code"), photo: "p"),
                    .init(found: FoundCode(text: "ABC", symbology: "CODE-128"), photo: "p")],
            text: ["Model X200 drill", "Serial: SN 48213", "made somewhere"])
        let analysis = outcome.analysis(settings: settings, resolve: { .init(found: false, name: "items/\($0)") },
                                        item: "items/x", itemKeys: ["abc"], key: HubCore.lookupKey)
        #expect(analysis["text"] == .array(["Model X200 drill", "Serial: SN 48213", "made somewhere"]))
        // ABC is among the item's codes already (compared as /v1/resolve does, without case).
        #expect(analysis["proposals"] == .object(["serials": ["SN-1", "SN 48213"], "codes": [], "name": "Model X200 drill"]))
    }
}
