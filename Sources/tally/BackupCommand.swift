@preconcurrency import Glibc
import TallyProtocol
import TallyServer
import TallyStore
import TallyCommandLine

/// `tally backup DEST`: a consistent copy of a running hub's store and photos.
enum BackupCommand {
    static let help = """
    Usage: tally backup DEST [--data DIR] [--json]

    Copies the hub's store and photos into DEST, a new directory in an existing
    parent (or an empty one), while the hub keeps running and writing: the store
    as of one commit, checked for damage, then every photo (hard links when DEST
    is on the data directory's file system, copies otherwise), then
    DEST/tally-backup.json, written last, which marks the backup complete. It
    takes no lock: run it from cron or a systemd timer beside 'tally serve'.
    Put it back with 'tally restore DEST'.

    Options:
    \(options.help)

    Prints: backed up DIR to DEST: seq S, N records, L lists, P photos (SIZE) in T s
    Exit status: 0 done; 1 the copy failed (DEST is left as it was); 2 usage
    error (no store in DIR, DEST not empty, DEST's parent missing).
    """

    static let options = OptionTable(column: 15, [
        Option("data", "DIR", "the hub's data directory (default ./tally-data)"),
        Option("json", nil, "print DEST/tally-backup.json instead of the summary line"),
    ])

    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        let a = try Arguments(args, command: "backup", options: options)
        if a.flag("help") { print(help); return 0 }
        guard a.positionals.count == 1, let destination = a.positionals.first, !destination.isEmpty else {
            throw UsageError(message: "backup needs exactly one DEST directory, e.g. tally backup /var/backups/tally-$(date +%F)")
        }
        let directory = try dataDirectory(a, doing: "back up")
        let started = monotonicMillis()
        let report: HubBackup.BackupReport
        do {
            report = try HubBackup.backUp(dataDirectory: directory, to: destination)
        } catch {
            return BackupCommand.report(error)
        }
        let m = report.manifest
        if a.flag("json") {
            print(m.json.prettyString)
        } else {
            let photos = "\(m.photos) photo\(m.photos == 1 ? "" : "s") (\(size(m.photoBytes))"
                + (m.photos == 0 ? ")" : "; \(report.photosLinked) linked, \(report.photosCopied) copied)")
            print("backed up \(directory) to \(destination): seq \(m.headSeq), \(m.records) record\(m.records == 1 ? "" : "s"), "
                  + "\(m.lists) list\(m.lists == 1 ? "" : "s"), store \(size(Int(report.storeBytes))), \(photos) "
                  + "in \(seconds(since: started))")
        }
        return 0
    }

    /// `--data DIR` (default ./tally-data); `:memory:` has nothing on disk.
    static func dataDirectory(_ a: Arguments, doing verb: String) throws(UsageError) -> String {
        let directory = a.string("data") ?? "./tally-data"
        guard !directory.isEmpty else { throw UsageError(message: "--data needs a directory") }
        guard directory != ":memory:" else {
            throw UsageError(message: "--data :memory: keeps nothing on disk, so there is nothing to \(verb); give the hub's data directory")
        }
        return directory
    }

    /// Prints a backup or restore failure; its exit status (2: the command
    /// line names something unusable, 1: the work failed).
    static func report(_ error: BackupError) -> Int32 {
        printError(error.description)
        return error.isUsage ? 2 : 1
    }

    static func size(_ bytes: Int) -> String {
        if bytes < 1024 { return "\(bytes) B" }
        if bytes < 1 << 20 { return "\(bytes >> 10) KiB" }
        let tenths = bytes * 10 / (1 << 20)
        return "\(tenths / 10).\(tenths % 10) MiB"
    }

    static func monotonicMillis() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }

    static func seconds(since start: Int64) -> String {
        let tenths = (monotonicMillis() - start) / 100
        return "\(tenths / 10).\(tenths % 10) s"
    }
}

/// `tally restore SRC`: a backup put in place of a data directory's store.
enum RestoreCommand {
    static let help = """
    Usage: tally restore SRC [--data DIR] [--force] [--json]

    Puts the backup in SRC (a directory 'tally backup' made) in place as the
    store of DIR, with its photos. Stop the hub first: restore refuses while a
    hub holds DIR, and holds DIR itself until it is done. It checks the backup
    (complete, a Tally store this build reads, not damaged) before it changes
    anything, and replaces the store by a rename, so a crash leaves the old store
    or the new one. Start 'tally serve' afterwards; it brings an older schema up
    to date.

    The restored hub's change sequence goes on 2^32 past the backup's: every
    client, whatever it saw before the disk was lost, gets a fresh snapshot
    ("resnapshot": true) when it resumes, and none can mistake new changes for
    ones it saw.

    Options:
    \(options.help)

    Exit status: 0 restored; 1 refused or failed, nothing changed (a hub runs
    on DIR, DIR holds a store and --force is missing, the backup is damaged);
    2 usage error (SRC missing or not a backup).
    """

    static let options = OptionTable(column: 14, [
        Option("data", "DIR", "the data directory to restore into (default ./tally-data;", "created when missing)"),
        Option("force", nil, "replace the store DIR already holds (kept as",
               "DIR/\(HubBackup.replacedStoreName) until you delete it)"),
        Option("json", nil, "print the outcome as one JSON object"),
    ])

    static func run(_ args: ArraySlice<String>) throws(UsageError) -> Int32 {
        let a = try Arguments(args, command: "restore", options: options)
        if a.flag("help") { print(help); return 0 }
        guard a.positionals.count == 1, let source = a.positionals.first, !source.isEmpty else {
            throw UsageError(message: "restore needs exactly one SRC, the directory 'tally backup' made, e.g. tally restore /var/backups/tally-2025-06-01")
        }
        let directory = try BackupCommand.dataDirectory(a, doing: "restore into")
        let report: HubBackup.RestoreReport
        do {
            report = try HubBackup.restore(from: source, into: directory, force: a.flag("force"))
        } catch {
            return BackupCommand.report(error)
        }
        let m = report.manifest
        let s = report.store
        if a.flag("json") {
            var members: [(String, JSONValue)] = [
                ("backup", m.json), ("records", .number(JSONNumber(s.recordCount))),
                ("lists", .number(JSONNumber(s.listCount))), ("head", .number(JSONNumber(s.headSeq))),
                ("restoredFrom", .number(JSONNumber(s.restoredHead ?? m.headSeq))),
                ("photosLinked", .number(JSONNumber(report.photosLinked))),
                ("photosCopied", .number(JSONNumber(report.photosCopied))),
                ("photosPresent", .number(JSONNumber(report.photosPresent))),
            ]
            members.append(("replaced", report.replaced.map(JSONValue.string) ?? .null))
            print(JSONValue.object(JSONObject(members)).serializedString)
            return 0
        }
        print("restored \(source) into \(directory): \(s.recordCount) record\(s.recordCount == 1 ? "" : "s"), "
              + "\(s.listCount) list\(s.listCount == 1 ? "" : "s"), \(m.photos) photo\(m.photos == 1 ? "" : "s") "
              + "(\(report.photosCopied) copied, \(report.photosLinked) linked, \(report.photosPresent) already there)")
        print("the change sequence goes on after seq \(s.headSeq) (the backup was at seq \(m.headSeq)): "
              + "clients get a fresh snapshot when they reconnect")
        if let replaced = report.replaced {
            print("the replaced store is kept as \(replaced): delete it once the restored hub runs well")
        }
        return 0
    }
}
