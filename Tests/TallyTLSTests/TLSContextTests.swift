@preconcurrency import Glibc
import Testing
import TallyTestSupport
@testable import TallyTLS

@Suite struct TLSContextTests {
    @Test func missingCertificateFileIsNamed() throws {
        let fixture = try Fixture()
        let missing = fixture.directory.path + "/nope-cert.pem"
        do {
            _ = try TLSContext.server(certificateChainFile: missing, privateKeyFile: fixture.keyFile)
            Issue.record("loaded a missing certificate")
        } catch {
            #expect(error.message.contains("certificate chain from '\(missing)'"))
            // OpenSSL's own text follows.
            #expect(error.message.contains("error:"))
        }
    }

    @Test func missingKeyFileIsNamed() throws {
        let fixture = try Fixture()
        let missing = fixture.directory.path + "/nope-key.pem"
        do {
            _ = try TLSContext.server(certificateChainFile: fixture.certificateFile, privateKeyFile: missing)
            Issue.record("loaded a missing key")
        } catch {
            #expect(error.message.contains("private key from '\(missing)'"))
            #expect(error.message.contains("error:"))
        }
    }

    @Test func mismatchedKeyIsNamed() throws {
        let fixture = try Fixture()
        let other = try TLSSelfSigned.generate(commonName: "other", directory: fixture.directory.path)
        do {
            _ = try TLSContext.server(certificateChainFile: fixture.certificateFile, privateKeyFile: other.keyFile)
            Issue.record("accepted a key that does not match")
        } catch {
            #expect(error.message.contains(other.keyFile))
            #expect(error.message.contains("mismatch"))
        }
    }

    @Test func certificateFileThatIsNotPEMIsNamed() throws {
        let fixture = try Fixture()
        do {
            // A key is not a certificate.
            _ = try TLSContext.server(certificateChainFile: fixture.keyFile, privateKeyFile: fixture.keyFile)
            Issue.record("loaded a key as a certificate")
        } catch {
            #expect(error.message.contains("certificate chain from '\(fixture.keyFile)'"))
        }
    }

    @Test func missingCAFileIsNamed() throws {
        let directory = try TemporaryDirectory()
        let missing = directory.path + "/ca.pem"
        do {
            _ = try TLSContext.client(caFile: missing)
            Issue.record("loaded a missing CA file")
        } catch {
            #expect(error.message.contains("CA certificates from '\(missing)'"))
        }
    }

    @Test func errorsLeaveTheQueueEmpty() throws {
        let directory = try TemporaryDirectory()
        #expect(throws: TLSError.self) {
            _ = try TLSContext.server(certificateChainFile: directory.path + "/x", privateKeyFile: directory.path + "/y")
        }
        #expect(OpenSSLErrorQueue.drain().isEmpty)
    }

    @Test func contextIsUsableFromAnotherThread() async throws {
        // TLSContext is Sendable: build here, use in a detached task.
        let fixture = try Fixture()
        let context = fixture.serverContext
        let ok = await Task.detached {
            let pair = try? SocketPair()
            guard let pair else { return false }
            return (try? TLSSession(context: context, fd: pair.serverFD, isServer: true)) != nil
        }.value
        #expect(ok)
    }
}
