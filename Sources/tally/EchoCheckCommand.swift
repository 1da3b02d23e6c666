import TallyBench
import TallyNet
import TallyTLS
import TallyCommandLine

/// `tally echo-check URL`: checks a WebSocket echo server message by message.
enum EchoCheckCommand {
    static let help = """
    Usage: tally echo-check URL [options]

    Sends text and binary messages of many sizes to a WebSocket echo endpoint
    (this hub's /echo or any other) and checks every echo byte for byte.
    Prints one line per case and a summary; exit status 1 if any failed.

    Options:
    \(options.help)
    """

    static let options = OptionTable(column: 22, [
        Option("sizes", "LIST", "comma-separated sizes in bytes", "(default 0,1,125,126,127,65535,65536,1048576,16777216)"),
        Option("fragment", "BYTES", "send each message in fragments of this size"),
        Option("no-compression", nil, "do not offer permessage-deflate"),
        Option("ca", "FILE", "trust this PEM certificate for wss://"),
        Option("insecure", nil, "accept any certificate for wss:// (testing only)"),
    ])

    static func run(_ args: ArraySlice<String>) throws -> Int32 {
        let a = try Arguments(args, command: "echo-check", options: options)
        if a.flag("help") { print(help); return 0 }
        guard a.positionals.count == 1 else { throw UsageError(message: "echo-check needs exactly one URL") }
        var check = EchoCheck(url: a.positionals[0])
        if let list = a.string("sizes") {
            var sizes: [Int] = []
            for part in list.split(separator: ",") {
                guard let size = Int(part), size >= 0, size <= 64 << 20 else {
                    throw UsageError(message: "--sizes must list byte counts from 0 to 67108864, not '\(part)'")
                }
                sizes.append(size)
            }
            check.sizes = sizes
        }
        check.fragmentSize = try a.int("fragment", in: 1...(64 << 20))
        check.options.deflate.enabled = !a.flag("no-compression")
        check.options.maxMessageSize = 64 << 20
        if a.string("ca") != nil || a.flag("insecure") {
            do {
                check.tls = try TLSContext.client(caFile: a.string("ca"), verifyPeer: !a.flag("insecure"))
            } catch {
                throw CommandFailure.clientTLS(error)
            }
        }
        let group = try EventLoopGroup(threads: 1)
        let (passed, failed) = try check.run(on: group.next()) { print($0) }
        print("\(passed) passed, \(failed) failed")
        return failed == 0 ? 0 : 1
    }
}
