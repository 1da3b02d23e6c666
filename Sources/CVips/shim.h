// libvips (Debian's libvips-dev): decodes JPEG, PNG, WebP, GIF and HEIC and
// makes thumbnails. Its calls take NULL-terminated option lists (C
// variadics, which Swift cannot call), so each use is a fixed wrapper here.
#pragma once
#include <string.h>
#include <vips/vips.h>

/// libvips reports a damaged file's details as GLib warnings on stderr
/// besides the error it returns: the caller gets the error, stderr nothing.
static void tally_vips_quiet(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data) {
    (void)domain; (void)level; (void)message; (void)data;
}

/// Once per process: no operation cache (photos pass once; memory stays
/// flat), one worker thread per pipeline (the caller chooses its threads),
/// and only the loaders libvips marks as fuzzed for untrusted input.
static inline int tally_vips_start(void) {
    if (VIPS_INIT("tally")) return -1;
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_cache_set_max_files(0);
    vips_concurrency_set(1);
    vips_block_untrusted_set(TRUE);
    g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE, tally_vips_quiet, NULL);
    return 0;
}

/// The header only (nothing decoded): width and height after the
/// orientation tag is applied are the caller's business; these are stored.
static inline VipsImage *tally_vips_header(const void *buf, size_t len) {
    return vips_image_new_from_buffer(buf, len, "", "access", VIPS_ACCESS_SEQUENTIAL, NULL);
}

/// Decoded, turned upright (EXIF orientation) and shrunk to fit
/// width × height (never enlarged), shrinking while loading where the
/// format allows (JPEG, WebP, HEIC).
static inline VipsImage *tally_vips_thumbnail(const void *buf, size_t len, int width, int height, VipsFailOn fail_on) {
    VipsImage *out = NULL;
    if (vips_thumbnail_buffer((void *)buf, len, &out, width, "height", height, "size", VIPS_SIZE_DOWN,
                              "fail_on", fail_on, NULL)) return NULL;
    return out;
}

/// One 8-bit grey band: alpha flattened onto white, colour to luminance.
static inline VipsImage *tally_vips_grey(VipsImage *in) {
    VipsImage *flat = NULL, *grey = NULL, *band = NULL, *cast = NULL;
    if (vips_image_hasalpha(in)) {
        VipsArrayDouble *white = vips_array_double_newv(1, 255.0);
        int failed = vips_flatten(in, &flat, "background", white, NULL);
        vips_area_unref(VIPS_AREA(white));
        if (failed) return NULL;
    } else {
        flat = in;
        g_object_ref(flat);
    }
    int failed = vips_colourspace(flat, &grey, VIPS_INTERPRETATION_B_W, NULL);
    g_object_unref(flat);
    if (failed) return NULL;
    failed = grey->Bands > 1 ? vips_extract_band(grey, &band, 0, NULL) : (g_object_ref(grey), band = grey, 0);
    g_object_unref(grey);
    if (failed) return NULL;
    failed = vips_cast_uchar(band, &cast, NULL);
    g_object_unref(band);
    return failed ? NULL : cast;
}

/// Computes `in` on the calling thread, into `out` (`len` bytes: width ×
/// height × bytes per pixel, rows packed). vips_image_write_to_memory would
/// hand the work to a libvips worker thread, which keeps the nice value of
/// whichever thread first needed it and trades the image with the caller
/// across cores; prepared here, the pixels cost the caller's thread only
/// (the analyser's, below the event loops). 0 on success.
static inline int tally_vips_pixels(VipsImage *in, void *out, size_t len) {
    size_t row = VIPS_IMAGE_SIZEOF_LINE(in);
    if (row * (size_t)in->Ysize != len) return -1;
    VipsRegion *region = vips_region_new(in);
    if (!region) return -1;
    VipsRect all = {0, 0, in->Xsize, in->Ysize};
    int failed = vips_region_prepare(region, &all);
    if (!failed) {
        for (int y = 0; y < in->Ysize; y++)
            memcpy((char *)out + (size_t)y * row, VIPS_REGION_ADDR(region, 0, y), row);
    }
    g_object_unref(region);
    return failed ? -1 : 0;
}

/// JPEG bytes (quality q, metadata stripped); g_free them.
static inline int tally_vips_jpeg(VipsImage *in, int q, void **buf, size_t *len) {
    return vips_jpegsave_buffer(in, buf, len, "Q", q, "strip", TRUE, "optimize_coding", TRUE, NULL);
}

/// WebP bytes (quality q, metadata stripped); g_free them.
static inline int tally_vips_webp(VipsImage *in, int q, void **buf, size_t *len) {
    return vips_webpsave_buffer(in, buf, len, "Q", q, "strip", TRUE, NULL);
}

/// PNG bytes (metadata stripped); g_free them.
static inline int tally_vips_png(VipsImage *in, void **buf, size_t *len) {
    return vips_pngsave_buffer(in, buf, len, "strip", TRUE, NULL);
}
