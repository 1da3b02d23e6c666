// SQLite: the embedded default store (used from the sync engine issue on).
#pragma once
#include <sqlite3.h>
