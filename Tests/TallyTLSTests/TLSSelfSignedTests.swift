@preconcurrency import Glibc
import Testing
import TallyTestSupport
@testable import TallyTLS

@Suite struct TLSSelfSignedTests {
    @Test func writesPEMFilesWithAPrivateKeyMode() throws {
        let directory = try TemporaryDirectory()
        let files = try TLSSelfSigned.generate(commonName: "hub.example", directory: directory.path)
        #expect(files.certificateFile == directory.path + "/hub.example-cert.pem")
        #expect(files.keyFile == directory.path + "/hub.example-key.pem")

        var info = stat()
        #expect(stat(files.keyFile, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(try contents(of: files.certificateFile).hasPrefix("-----BEGIN CERTIFICATE-----"))
        #expect(try contents(of: files.keyFile).hasPrefix("-----BEGIN PRIVATE KEY-----"))
    }

    @Test func commonNameIsSanitizedIntoTheFileName() throws {
        let directory = try TemporaryDirectory()
        let files = try TLSSelfSigned.generate(commonName: "../a b", directory: directory.path)
        #expect(files.certificateFile == directory.path + "/.._a_b-cert.pem")
    }

    @Test func customSubjectAltNamesAreVerified() throws {
        let directory = try TemporaryDirectory()
        let files = try TLSSelfSigned.generate(commonName: "custom", subjectAltNames: ["hub.internal", "::1"],
                                               directory: directory.path)
        let server = try TLSContext.server(certificateChainFile: files.certificateFile, privateKeyFile: files.keyFile)
        let client = try TLSContext.client(caFile: files.certificateFile)
        for (name, verifies) in [("hub.internal", true), ("::1", true), ("localhost", false)] {
            let pair = try SocketPair()
            let connection = Connection(
                pair: pair,
                server: try TLSSession(context: server, fd: pair.serverFD, isServer: true),
                client: try TLSSession(context: client, fd: pair.clientFD, isServer: false, serverName: name))
            let result = connection.handshake().client
            #expect((result == .done(0)) == verifies, "\(name): \(result)")
        }
    }

    @Test func subjectAltNameValueClassifiesNames() throws {
        #expect(try TLSSelfSigned.subjectAltNameValue(["127.0.0.1", "localhost", "::1"])
                == "IP:127.0.0.1,DNS:localhost,IP:::1")
    }

    @Test(arguments: ["a,DNS:evil", "", "host name", "x:y"])
    func rejectsNamesThatAreNotHostNames(_ name: String) {
        #expect(throws: TLSError.self) { try TLSSelfSigned.subjectAltNameValue([name]) }
    }

    @Test func rejectsAnEmptyNameList() {
        #expect(throws: TLSError.self) { try TLSSelfSigned.subjectAltNameValue([]) }
    }

    @Test func missingDirectoryIsNamed() {
        do {
            _ = try TLSSelfSigned.generate(commonName: "x", directory: "/nonexistent-tally-dir")
            Issue.record("wrote into a missing directory")
        } catch {
            #expect(error.message.contains("/nonexistent-tally-dir/x-key.pem"))
        }
    }

    private func contents(of path: String) throws -> String {
        guard let file = fopen(path, "r") else { throw TestFailure("cannot open \(path)") }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
