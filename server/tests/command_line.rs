//! The `mpm` binary as cargo builds it for this package's tests.
//!
//! A package's binaries are built by `cargo test` only when it has
//! integration tests: this file is also what makes `cargo test --workspace`
//! build `target/debug/mpm` (beside the examples it always builds), with
//! the rest of the workspace and before any test runs, so that the suite in
//! `tests/` finds it fresh and never runs a `cargo build` of its own.

#![allow(clippy::unwrap_used, missing_docs)]

use std::process::Command;

#[test]
fn the_binary_names_its_version_and_commands() {
    let bin = env!("CARGO_BIN_EXE_mpm");
    let version = Command::new(bin).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("mpm {}", env!("CARGO_PKG_VERSION"))
    );
    let help = Command::new(bin).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for command in ["serve", "check", "signal", "bench", "compare"] {
        assert!(help.contains(command), "--help lacks {command}:\n{help}");
    }
    // The flags nginx and httpd users look for first.
    let serve = Command::new(bin)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let serve = String::from_utf8_lossy(&serve.stdout);
    for flag in [
        "--gzip",
        "--precompressed",
        "--autoindex",
        "--error-page",
        "--expires",
        "--metrics-path",
    ] {
        assert!(serve.contains(flag), "serve --help lacks {flag}");
    }
}
