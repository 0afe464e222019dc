//! xtask: the project's automation, run as `cargo xtask <command>`.
fn main() {
    eprintln!("usage: cargo xtask pgo");
    std::process::exit(2);
}
