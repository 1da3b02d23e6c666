// ZBar (Debian's libzbar-dev): QR codes and linear barcodes (Code 128, EAN,
// …) in 8-bit grey pixels.
#pragma once
#include <zbar.h>

/// The "Y800" format (8-bit grey); zbar_fourcc is a macro.
static inline unsigned long tally_zbar_y800(void) { return zbar_fourcc('Y', '8', '0', '0'); }
