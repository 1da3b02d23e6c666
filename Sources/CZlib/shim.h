// zlib for permessage-deflate (RFC 7692). deflateInit2/inflateInit2 are macros.
#pragma once
#include <zlib.h>

static inline int tally_deflateInit2(z_streamp strm, int level, int windowBits, int memLevel) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}
static inline int tally_inflateInit2(z_streamp strm, int windowBits) {
    return inflateInit2(strm, windowBits);
}
