// libdmtx (Debian's libdmtx-dev): Data Matrix symbols in 8-bit grey pixels.
#pragma once
#include <dmtx.h>
