// OpenSSL (libssl + libcrypto) for TLS and the WebSocket accept key (SHA-1).
#pragma once
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/bio.h>

// Macros that Swift cannot import, as functions.
static inline long tally_SSL_set_tlsext_host_name(SSL *s, const char *name) {
    return SSL_set_tlsext_host_name(s, name);
}
static inline long tally_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}
static inline long tally_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return SSL_CTX_set_min_proto_version(ctx, version);
}
static inline long tally_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_session_cache_mode(ctx, mode);
}

// SSL_OP_* are built with SSL_OP_BIT(n), a cast-and-shift macro Swift cannot import.
static inline uint64_t tally_SSL_OP_NO_TICKET(void) { return SSL_OP_NO_TICKET; }
static inline uint64_t tally_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t tally_SSL_OP_NO_COMPRESSION(void) { return SSL_OP_NO_COMPRESSION; }
