@preconcurrency import Glibc
import COpenSSL

/// Self-signed certificates made at run time, for tests and for a first
/// `tally` run without a real certificate.
///
/// Built with the OpenSSL API rather than by running `openssl req`, so
/// tests need no external tool and the output does not depend on an
/// openssl.cnf. A client trusts the result by passing `certificateFile` as
/// `TLSContext.client(caFile:)`.
public enum TLSSelfSigned {
    /// Writes a new EC P-256 key and a self-signed X.509 v3 certificate for
    /// it, valid from five minutes ago (clock skew) for one day, as PEM.
    ///
    /// The files are `<commonName>-cert.pem` and `<commonName>-key.pem` in
    /// `directory` (characters outside `[A-Za-z0-9._-]` become `_`), replaced
    /// if they exist; the key file is mode 0600.
    ///
    /// - Parameters:
    ///   - commonName: the subject and issuer CN.
    ///   - subjectAltNames: IP literals become IP SANs, anything else DNS
    ///     SANs; clients match host names against these, not the CN.
    ///   - directory: an existing, writable directory.
    public static func generate(commonName: String,
                                subjectAltNames: [String] = ["127.0.0.1", "localhost"],
                                directory: String) throws(TLSError) -> (certificateFile: String, keyFile: String) {
        let sanValue = try subjectAltNameValue(subjectAltNames)
        OpenSSLErrorQueue.clear()
        let key = try makeKey()
        defer { EVP_PKEY_free(key) }
        let certificate = try makeCertificate(commonName: commonName, subjectAltName: sanValue, key: key)
        defer { X509_free(certificate) }

        let base = directory + "/" + fileStem(commonName)
        let certificateFile = base + "-cert.pem"
        let keyFile = base + "-key.pem"
        try writePEM(to: keyFile, mode: 0o600) { bio in
            PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil)
        }
        try writePEM(to: certificateFile, mode: 0o644) { bio in
            PEM_write_bio_X509(bio, certificate)
        }
        return (certificateFile, keyFile)
    }

    /// An X509V3 config value such as "IP:127.0.0.1,DNS:localhost".
    /// Names are checked first: the config syntax splits on commas and
    /// colons, so a name containing them could smuggle in other entries.
    static func subjectAltNameValue(_ names: [String]) throws(TLSError) -> String {
        guard !names.isEmpty else {
            throw TLSError("a self-signed certificate needs at least one subject alternative name")
        }
        var entries: [String] = []
        for name in names {
            if HostName.isIPAddress(name) {
                entries.append("IP:\(name)")
                continue
            }
            let allowed = !name.isEmpty && name.utf8.allSatisfy { byte in
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                    || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
                    || byte == UInt8(ascii: "*") || byte == UInt8(ascii: "_")
            }
            guard allowed else {
                throw TLSError("'\(name)' is neither an IP address nor a DNS name")
            }
            entries.append("DNS:\(name)")
        }
        return entries.joined(separator: ",")
    }

    /// An EC P-256 key: small certificates, fast handshakes, universally supported.
    private static func makeKey() throws(TLSError) -> OpaquePointer {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw .openSSL("cannot create EC key generator")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_group_name(context, "P-256") == 1 else {
            throw .openSSL("cannot set up P-256 key generation")
        }
        var key: OpaquePointer?
        guard EVP_PKEY_generate(context, &key) == 1, let key else {
            throw .openSSL("cannot generate P-256 key")
        }
        return key
    }

    private static func makeCertificate(commonName: String, subjectAltName: String,
                                        key: OpaquePointer) throws(TLSError) -> OpaquePointer {
        guard let certificate = X509_new() else {
            throw .openSSL("cannot create certificate")
        }
        do {
            try fill(certificate, commonName: commonName, subjectAltName: subjectAltName, key: key)
            return certificate
        } catch {
            X509_free(certificate)
            throw error
        }
    }

    private static func fill(_ certificate: OpaquePointer, commonName: String, subjectAltName: String,
                             key: OpaquePointer) throws(TLSError) {
        guard X509_set_version(certificate, Int(X509_VERSION_3)) == 1 else {
            throw .openSSL("cannot set certificate version")
        }
        // RFC 5280 §4.1.2.2: positive, unique per issuer, at most 20 octets.
        // 63 random bits make two test certificates' serials collide never in practice.
        var serial: UInt64 = 0
        guard withUnsafeMutableBytes(of: &serial, { RAND_bytes($0.baseAddress, Int32($0.count)) }) == 1,
              ASN1_INTEGER_set_uint64(X509_get_serialNumber(certificate), serial >> 1) == 1 else {
            throw .openSSL("cannot set certificate serial number")
        }
        guard X509_gmtime_adj(X509_getm_notBefore(certificate), -300) != nil,
              X509_gmtime_adj(X509_getm_notAfter(certificate), 86_400) != nil else {
            throw .openSSL("cannot set certificate validity")
        }
        guard let name = X509_get_subject_name(certificate),
              // MBSTRING_UTF8 is MBSTRING_FLAG, whose alias Swift does not import.
              X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_FLAG, commonName, -1, -1, 0) == 1,
              X509_set_issuer_name(certificate, name) == 1 else {
            throw .openSSL("cannot set certificate common name '\(commonName)'")
        }
        guard X509_set_pubkey(certificate, key) == 1 else {
            throw .openSSL("cannot set certificate public key")
        }

        // Issuer and subject are the certificate itself (self-signed), which
        // the subject key identifier "hash" value needs to know.
        var v3 = X509V3_CTX()
        X509V3_set_ctx(&v3, certificate, certificate, nil, nil, 0)
        let extensions: [(nid: Int32, value: String)] = [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_subject_key_identifier, "hash"),
            (NID_ext_key_usage, "serverAuth"),
            (NID_subject_alt_name, subjectAltName),
        ]
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_nconf_nid(nil, &v3, nid, value) else {
                throw .openSSL("cannot make certificate extension '\(value)'")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(certificate, ext, -1) == 1 else {
                throw .openSSL("cannot add certificate extension '\(value)'")
            }
        }
        guard X509_sign(certificate, key, EVP_sha256()) > 0 else {
            throw .openSSL("cannot sign certificate")
        }
    }

    /// Writes through a BIO over a descriptor we opened ourselves, so the
    /// key file is created (and kept, via fchmod, if it existed) with `mode`.
    private static func writePEM(to path: String, mode: mode_t,
                                 _ write: (OpaquePointer) -> Int32) throws(TLSError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else {
            throw TLSError("cannot create '\(path)': \(String(cString: strerror(errno)))")
        }
        guard fchmod(fd, mode) == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw TLSError("cannot set mode of '\(path)': \(message)")
        }
        OpenSSLErrorQueue.clear()
        guard let bio = BIO_new_fd(fd, BIO_CLOSE) else {
            close(fd)
            throw .openSSL("cannot open '\(path)' for writing")
        }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else {
            throw .openSSL("cannot write '\(path)'")
        }
    }

    private static func fileStem(_ commonName: String) -> String {
        let bytes = commonName.utf8.map { byte -> UInt8 in
            let keep = (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            return keep ? byte : UInt8(ascii: "_")
        }
        let stem = String(decoding: bytes, as: UTF8.self)
        // "." and ".." would name directories, not files.
        return stem.allSatisfy({ $0 == "." }) || stem.isEmpty ? "selfsigned" : stem
    }
}
