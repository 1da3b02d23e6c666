import COpenSSL
import TallyEngine

/// A configured user: the token is kept only as its SHA-256.
public struct HubUser: Sendable, Equatable {
    public var name: String
    public var role: String
    public var tokenHash: [UInt8]

    public init(name: String, role: String, tokenHash: [UInt8]) {
        self.name = name
        self.role = role
        self.tokenHash = tokenHash
    }
}

/// Checks bearer tokens against the configured users. Every check hashes
/// the token and compares it with every user's hash without stopping early,
/// so the time taken says nothing about which bytes matched, or whom.
public struct Authenticator: Sendable {
    public let users: [HubUser]

    public init(users: [HubUser]) { self.users = users }

    public func actor(token: String) -> Actor? {
        let hash = Self.sha256(Array(token.utf8))
        var found: HubUser?
        for user in users where Self.constantTimeEqual(user.tokenHash, hash) && found == nil {
            found = user
        }
        return found.map { Actor(user: $0.name, role: $0.role) }
    }

    /// The token of an `Authorization: Bearer …` header value.
    public static func bearerToken(_ header: String) -> String? {
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingSpaces
        return token.isEmpty ? nil : token
    }

    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        bytes.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { output in
                _ = SHA256(input.baseAddress, input.count, output.baseAddress)
            }
        }
        return digest
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}

extension Substring {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
