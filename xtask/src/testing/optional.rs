//! Tests that need an optional tool (g++ and asio, Go, valgrind, Debian's LLVM 14, rsvg-convert,
//! root): where it is missing they print one visible line, `skipped: <what> (<install hint>)`,
//! and pass, unless `MTY_TEST_REQUIRE_ALL=1` (as `.ci/run` sets), where they fail. Shared by
//! the unit tests and, through `#[path]`, the integration tests.

use std::io::Write as _;
use std::path::Path;

/// `true` when the test can go on. `present` says whether `what` is there.
pub fn have(what: &str, present: bool, hint: &str) -> bool {
    if present {
        return true;
    }
    if require_all() {
        panic!("{what} is missing, and MTY_TEST_REQUIRE_ALL=1 requires every test to run: {hint}");
    }
    // Straight to the process's stderr: the test harness captures `eprintln!` of a passing
    // test, and this line must be seen.
    let _ = writeln!(std::io::stderr(), "skipped: {what} ({hint})");
    false
}

/// `MTY_TEST_REQUIRE_ALL=1`: no test may skip.
pub fn require_all() -> bool {
    std::env::var_os("MTY_TEST_REQUIRE_ALL").is_some_and(|v| v == "1")
}

/// Whether `program` is an executable file, or found on PATH.
#[allow(dead_code)]
pub fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Whether this process runs as root (mounting a tmpfs needs it).
#[allow(dead_code)]
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}
