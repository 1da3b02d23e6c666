@preconcurrency import Glibc
import Testing
import TallyProtocol
@testable import TallyServer
import TallyStore
import TallyTestSupport

/// `HubBackup`: a backup of a running hub restores record for record, with
/// its photos, and every client resumes it with a snapshot; bad input is
/// refused with the case that says what to fix, and changes nothing.
@Suite("Hub: backup and restore")
struct HubBackupTests {
    static let jump = SQLiteBackup.restoreSeqJump

    /// A PNG's signature and some bytes: enough for the blob store.
    static func photo(_ text: String) -> (sha256: String, bytes: [UInt8]) {
        let bytes: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(text.utf8)
        return ((try? BlobStore.sha256Hex(bytes)) ?? "", bytes)
    }

    /// A data directory a hub wrote `count` records `n/1…` (data `{"i":i}`),
    /// the list `l` and one photo into, and stopped. Returns the head seq.
    @discardableResult
    static func fill(_ directory: String, count: Int = 3, photo text: String = "p") throws -> Int64 {
        try withHub(dataDirectory: directory) { (hub: HubFixture) throws -> Int64 in
            let client = try hub.connect()
            for i in 1...count { try client.ok(#"{"op":"set","name":"n/\#(i)","data":{"i":\#(i)}}"#) }
            let photo = photo(text)
            _ = try hub.hub.blobs.put(sha256: photo.sha256, contentType: "image/png", bytes: photo.bytes)
            return try client.ok(#"{"op":"addEntry","list":"l","entry":"n/1"}"#)["seq"]?.numberValue?.int64Value ?? -1
        }
    }

    @Test func aBackupOfARunningHubRestoresRecordForRecordAndEverySinceResnapshots() throws {
        let data = try TemporaryDirectory(prefix: "tally-data")
        let backups = try TemporaryDirectory(prefix: "tally-backups")
        let destination = backups.path + "/b1"
        let photo = Self.photo("shelf")
        let backupHead: Int64
        let lastSeen: Int64
        do {
            let hub = try HubFixture(dataDirectory: data.path)
            defer { hub.close() }
            let client = try hub.connect()
            for i in 1...20 { try client.ok(#"{"op":"set","name":"n/\#(i)","data":{"i":\#(i),"s":"é"}}"#) }
            try client.ok(#"{"op":"addEntry","list":"l","entry":"n/1"}"#)
            _ = try hub.hub.blobs.put(sha256: photo.sha256, contentType: "image/png", bytes: photo.bytes)
            let report = try HubBackup.backUp(dataDirectory: data.path, to: destination)
            backupHead = report.manifest.headSeq
            #expect(backupHead == 21)
            #expect(report.manifest.records == 20 && report.manifest.lists == 1)
            #expect(report.manifest.photos == 1 && report.photosLinked == 1 && report.photosCopied == 0)
            #expect(try BackupManifest.read(from: destination) == report.manifest)
            // The hub goes on after the backup; a client sees these seqs.
            lastSeen = try client.ok(#"{"op":"set","name":"n/after","data":{}}"#)["seq"]?.numberValue?.int64Value ?? 0
            #expect(lastSeen == 22)
        }

        let restoredData = try TemporaryDirectory(prefix: "tally-restored")
        let directory = restoredData.path + "/data"
        let report = try HubBackup.restore(from: destination, into: directory, force: false)
        #expect(report.store.headSeq == backupHead + Self.jump && report.store.floorSeq == backupHead + Self.jump)
        #expect(report.store.restoredHead == backupHead && report.store.recordCount == 20)
        #expect(report.photosLinked + report.photosCopied == 1 && report.replaced == nil)

        try withHub(dataDirectory: directory) { (hub: HubFixture) throws in
            let client = try hub.connect()
            for i in 1...20 {
                let reply = try client.ok(#"{"op":"get","name":"n/\#(i)"}"#)
                #expect(reply["data"] == ["i": .int(Int64(i)), "s": "é"] && reply["version"] == 1)
            }
            #expect(try client.request(#"{"op":"get","name":"n/after"}"#).errorCode == "not_found")
            #expect(try client.ok(#"{"op":"get","list":"l"}"#)["entries"] == ["n/1"])
            #expect(try hub.hub.blobs.get(sha256: photo.sha256)?.bytes == photo.bytes)

            let head = backupHead + Self.jump
            let resumer = try hub.connect()
            let hello = try resumer.ok(#"{"op":"hello","protocol":1,"since":\#(lastSeen)}"#)
            #expect(hello["seq"] == .int(head) && hello["floor"] == .int(head) && hello["resumable"] == false)
            for since in [lastSeen, backupHead, 1] {
                let record = try resumer.ok(#"{"op":"subscribe","name":"n/2","since":\#(since)}"#)
                #expect(record["resnapshot"] == true && record["record"]?["data"] == ["i": 2, "s": "é"], "since \(since)")
                let prefix = try resumer.ok(#"{"op":"subscribe","prefix":"n/","since":\#(since)}"#)
                #expect(prefix["resnapshot"] == true && prefix["records"]?.arrayValue?.count == 20, "since \(since)")
            }
            #expect(try hub.http("GET", "/v1/changes?since=\(lastSeen)").status == 410)
            // New changes take seqs past the jump; a since at the restored head resumes.
            let write = try client.ok(#"{"op":"set","name":"n/2","path":"i","value":3}"#)
            #expect(write["seq"] == .int(head + 1))
            let push = try resumer.push()
            #expect(push["seq"] == .int(head + 1) && push["name"] == "n/2")
            let later = try hub.connect()
            let resumed = try later.ok(#"{"op":"subscribe","name":"n/2","since":\#(head)}"#)
            #expect(resumed["changes"]?.arrayValue?.count == 1 && resumed["resnapshot"] == nil)
        }
    }

    /// PROTOCOL.md: a since above the head (a client that saw a hub whose
    /// data was since restored by other means) is answered like one below
    /// the floor, over WebSocket and REST.
    @Test func aSinceAboveTheHeadIsAnsweredWithASnapshot() throws {
        try withHub { (hub: HubFixture) throws in
            let client = try hub.connect()
            try client.ok(#"{"op":"set","name":"n/1","data":{"v":1}}"#)
            try client.ok(#"{"op":"addEntry","list":"l","entry":"n/1"}"#)
            let resumer = try hub.connect()
            #expect(try resumer.ok(#"{"op":"hello","protocol":1,"since":50}"#)["resumable"] == false)
            #expect(try resumer.ok(#"{"op":"subscribe","name":"n/1"}"#)["resnapshot"] == true)
            #expect(try resumer.ok(#"{"op":"subscribe","prefix":"n/","since":3}"#)["resnapshot"] == true)
            let list = try resumer.ok(#"{"op":"subscribe","list":"l","since":3}"#)
            #expect(list["resnapshot"] == true && list["list"]?["entries"] == ["n/1"])
            #expect(try resumer.ok(#"{"op":"subscribe","name":"n/1","since":2}"#)["changes"] == [])
            let rest = try hub.http("GET", "/v1/changes?since=3")
            let body = try rest.json
            #expect(rest.status == 410 && body["error"]?["code"] == "resnapshot")
            #expect(try hub.http("GET", "/v1/changes?since=2").status == 200)
        }
    }

    // MARK: Bad input changes nothing

    @Test func backupRefusesADestinationItCannotUse() throws {
        let data = try TemporaryDirectory(prefix: "tally-data")
        try Self.fill(data.path)
        let backups = try TemporaryDirectory(prefix: "tally-backups")
        let busy = backups.path + "/busy"
        mkdir(busy, 0o700)
        let keep = busy + "/keep.txt"
        close(open(keep, O_WRONLY | O_CREAT, 0o600))

        func refusal(_ destination: String, data directory: String? = nil) -> BackupError? {
            do {
                _ = try HubBackup.backUp(dataDirectory: directory ?? data.path, to: destination)
                return nil
            } catch {
                return error
            }
        }
        let notEmpty = refusal(busy)
        guard case .destinationNotEmpty(busy)? = notEmpty else { Issue.record("\(String(describing: notEmpty))"); return }
        #expect(notEmpty?.isUsage == true)
        #expect(HubBackup.isDirectory(busy) && access(keep, F_OK) == 0)
        #expect(access(busy + "/" + SQLiteStore.fileName, F_OK) != 0)

        let orphan = backups.path + "/missing/b1"
        guard case .destinationParentMissing(orphan, backups.path + "/missing")? = refusal(orphan) else {
            Issue.record("parent"); return
        }
        #expect(!HubBackup.isDirectory(backups.path + "/missing"))
        guard case .destinationNotADirectory(keep)? = refusal(keep) else { Issue.record("file"); return }
        guard case .noStore(backups.path)? = refusal(backups.path + "/b2", data: backups.path) else { Issue.record("store"); return }
        #expect(!HubBackup.isDirectory(backups.path + "/b2"), "nothing made for a refused backup")

        // An empty directory is fine, and so is a trailing slash.
        let empty = backups.path + "/empty"
        mkdir(empty, 0o700)
        #expect(try HubBackup.backUp(dataDirectory: data.path + "/", to: empty + "/").manifest.records == 3)
    }

    @Test func restoreRefusesWhatIsNotACompleteBackup() throws {
        let data = try TemporaryDirectory(prefix: "tally-data")
        let head = try Self.fill(data.path)
        let scratch = try TemporaryDirectory(prefix: "tally-backups")
        let target = scratch.path + "/target"

        func refusal(_ source: String) -> BackupError? {
            do {
                _ = try HubBackup.restore(from: source, into: target, force: false)
                return nil
            } catch {
                return error
            }
        }
        guard case .sourceMissing? = refusal(scratch.path + "/none") else { Issue.record("missing"); return }
        // A data directory is not a backup: it has no manifest.
        let noManifest = refusal(data.path)
        guard case .notABackup(data.path, let reason)? = noManifest else { Issue.record("\(String(describing: noManifest))"); return }
        #expect(reason.contains("tally-backup.json") && noManifest?.isUsage == true)

        let backup = scratch.path + "/b"
        let made = try HubBackup.backUp(dataDirectory: data.path, to: backup)
        #expect(made.manifest.headSeq == head)
        // A manifest from another backup.
        var other = made.manifest
        other.headSeq += 1
        try other.write(to: backup)
        guard case .notABackup(_, let mismatch)? = refusal(backup) else { Issue.record("mismatch"); return }
        #expect(mismatch.contains("different backups"))
        try made.manifest.write(to: backup)
        // A store that is not one.
        let store = backup + "/" + SQLiteStore.fileName
        rename(store, store + ".saved")
        let fd = open(store, O_WRONLY | O_CREAT, 0o600)
        _ = write(fd, String(repeating: "text, not SQLite\n", count: 300), 5_100)
        close(fd)
        guard case .notABackup(_, let notSQLite)? = refusal(backup) else { Issue.record("text"); return }
        #expect(notSQLite.contains("not an SQLite database"))
        rename(store + ".saved", store)
        // No manifest: interrupted.
        unlink(backup + "/" + BackupManifest.fileName)
        guard case .notABackup? = refusal(backup) else { Issue.record("interrupted"); return }
        #expect(!HubBackup.isDirectory(target), "nothing is made for a refused restore")
    }

    @Test func restoreRefusesWhileAHubRunsAndAStoreWithoutForce() throws {
        let data = try TemporaryDirectory(prefix: "tally-data")
        try Self.fill(data.path, count: 2, photo: "old")
        let source = try TemporaryDirectory(prefix: "tally-source")
        try Self.fill(source.path, count: 5, photo: "new")
        let backups = try TemporaryDirectory(prefix: "tally-backups")
        let backup = backups.path + "/b"
        _ = try HubBackup.backUp(dataDirectory: source.path, to: backup)

        func refusal(force: Bool) -> BackupError? {
            do {
                _ = try HubBackup.restore(from: backup, into: data.path, force: force)
                return nil
            } catch {
                return error
            }
        }
        let running: BackupError?
        do {
            // Scoped: the store's connections close with the hub object.
            let hub = try HubFixture(dataDirectory: data.path)
            defer { hub.close() }
            running = refusal(force: true)
            let client = try hub.connect()
            #expect(try client.ok(#"{"op":"get","name":"n/2"}"#)["version"] == 1)
            #expect(try client.request(#"{"op":"get","name":"n/5"}"#).errorCode == "not_found")
        }
        guard case .hubRunning(data.path, let pid)? = running else { Issue.record("\(String(describing: running))"); return }
        #expect(pid == getpid() && running?.isUsage == false)
        #expect(running?.description.contains("stop it first") == true)

        let unforced = refusal(force: false)
        guard case .storeExists(data.path, let summary?)? = unforced else { Issue.record("\(String(describing: unforced))"); return }
        #expect(summary.recordCount == 2 && unforced?.description.contains("--force") == true)
        #expect(try SQLiteBackup.inspect(data.path + "/" + SQLiteStore.fileName, checkIntegrity: false).recordCount == 2)
        #expect(access(data.path + "/" + HubBackup.replacedStoreName, F_OK) != 0)

        // A restore a crash cut short left its copy behind: the hub ignores it.
        let leftover = data.path + "/" + HubBackup.restoringStoreName
        close(open(leftover, O_WRONLY | O_CREAT, 0o600))
        try withHub(dataDirectory: data.path) { (hub: HubFixture) throws in
            #expect(try hub.connect().ok(#"{"op":"get","name":"n/2"}"#)["data"] == ["i": 2])
        }
    }

    /// `force` replaces a store (kept aside), over what a cut-short restore
    /// left, and adds the backup's photos to those there. (Into a directory
    /// no hub of this process opened: a stopped hub's store connections
    /// close only with the hub object, and leaving WAL mode needs the only
    /// connection.)
    @Test func aForcedRestoreKeepsTheStoreItReplaces() throws {
        let old = try TemporaryDirectory(prefix: "tally-old")
        try Self.fill(old.path, count: 2, photo: "old")
        let new = try TemporaryDirectory(prefix: "tally-new")
        try Self.fill(new.path, count: 5, photo: "new")
        let backups = try TemporaryDirectory(prefix: "tally-backups")
        _ = try HubBackup.backUp(dataDirectory: old.path, to: backups.path + "/old")
        _ = try HubBackup.backUp(dataDirectory: new.path, to: backups.path + "/new")
        let data = backups.path + "/data"
        let first = try HubBackup.restore(from: backups.path + "/old", into: data, force: false)
        #expect(first.store.recordCount == 2 && first.replaced == nil)
        let leftover = data + "/" + HubBackup.restoringStoreName
        close(open(leftover, O_WRONLY | O_CREAT, 0o600))

        let report = try HubBackup.restore(from: backups.path + "/new", into: data, force: true)
        #expect(report.replaced == data + "/" + HubBackup.replacedStoreName)
        #expect(report.photosPresent == 0 && report.photosLinked + report.photosCopied == 1)
        #expect(try SQLiteBackup.inspect(try #require(report.replaced), checkIntegrity: true).recordCount == 2)
        #expect(access(leftover, F_OK) != 0)
        for suffix in ["-wal", "-shm", "-journal"] {
            #expect(access(data + "/" + SQLiteStore.fileName + suffix, F_OK) != 0)
        }
        try withHub(dataDirectory: data) { (hub: HubFixture) throws in
            let client = try hub.connect()
            #expect(try client.ok(#"{"op":"get","name":"n/5"}"#)["data"] == ["i": 5])
            // Both stores' photos: a restore adds photos, it never deletes one.
            #expect(try hub.hub.blobs.get(sha256: Self.photo("old").sha256) != nil)
            #expect(try hub.hub.blobs.get(sha256: Self.photo("new").sha256) != nil)
        }
    }

    /// Across file systems photos are copied, and each copy is checked
    /// against its name: a rotted file fails the backup, which leaves
    /// nothing behind.
    @Test func photosCopiedAcrossFileSystemsAreChecked() throws {
        var here = stat()
        var there = stat()
        guard stat("/tmp", &here) == 0, stat("/dev/shm", &there) == 0, here.st_dev != there.st_dev,
              access("/dev/shm", W_OK) == 0 else {
            return  // no second file system to copy to on this machine
        }
        let data = try TemporaryDirectory(prefix: "tally-data")
        try Self.fill(data.path, photo: "far")
        let backups = try TemporaryDirectory(prefix: "tally-backups", in: "/dev/shm")
        let report = try HubBackup.backUp(dataDirectory: data.path, to: backups.path + "/b1")
        #expect(report.photosCopied == 1 && report.photosLinked == 0)

        let photo = Self.photo("far")
        let file = data.path + "/blobs/\(photo.sha256.prefix(2))/\(photo.sha256)"
        let fd = open(file, O_WRONLY)
        _ = pwrite(fd, "X", 1, 9)
        close(fd)
        do {
            _ = try HubBackup.backUp(dataDirectory: data.path, to: backups.path + "/b2")
            Issue.record("a damaged photo was backed up")
        } catch {
            guard case .photoDamaged(let path, _) = error else { Issue.record("\(error)"); return }
            #expect(path == file)
        }
        #expect(!HubBackup.isDirectory(backups.path + "/b2"))
    }
}
