// Open bugs the target knows about. While one is open, fuzzing (and the seed
// corpus) tolerates it, so a run explores past it instead of stopping at the
// same crash every time; its reproducer in Fuzz/regressions/FuzzEngine/ fails
// with TALLY_FUZZ_STRICT=1 until the bug is fixed (`run.sh regress` reports it
// as "open" meanwhile; regressions/FuzzEngine/README.md has the details). When
// it is fixed, delete the case: the check is then always on.
//
// None is open. To tolerate one, add a case here (with the reproducer's name)
// and guard its check with `KnownBug.<case>.tolerated`.
#if canImport(Glibc)
import Glibc
#endif

/// TALLY_FUZZ_STRICT=1: no known bug is tolerated; a comma-separated list of
/// case names: only those are checked.
let strictSetting: String? = getenv("TALLY_FUZZ_STRICT").map { String(cString: $0) }

enum KnownBug {}
