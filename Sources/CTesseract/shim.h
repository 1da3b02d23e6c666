// Tesseract's C API (Debian's libtesseract-dev, with tesseract-ocr-eng for
// the English model): text in 8-bit grey pixels.
#pragma once
#include <tesseract/capi.h>
