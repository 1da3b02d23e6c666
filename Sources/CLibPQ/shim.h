// libpq, PostgreSQL's client library (Debian: libpq-dev), for TallyPostgres.
#pragma once
#include <libpq-fe.h>

// The PG_DIAG_* field codes are character-literal macros, which Swift does
// not import: the ones TallyPostgres reads, as functions.
static inline int tally_pg_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }
static inline int tally_pg_diag_severity(void) { return PG_DIAG_SEVERITY_NONLOCALIZED; }
static inline int tally_pg_diag_message_primary(void) { return PG_DIAG_MESSAGE_PRIMARY; }
static inline int tally_pg_diag_message_detail(void) { return PG_DIAG_MESSAGE_DETAIL; }
static inline int tally_pg_diag_message_hint(void) { return PG_DIAG_MESSAGE_HINT; }
static inline int tally_pg_diag_constraint_name(void) { return PG_DIAG_CONSTRAINT_NAME; }
