//! The `mpm` binary as cargo builds it for this package's tests.
//!
//! A package's binaries are built by `cargo test` only when it has
//! integration tests: this file is also what makes `cargo test --workspace`
//! build `target/debug/mpm` (beside the examples it always builds), with
//! the rest of the workspace and before any test runs, so that the suite in
//! `tests/` finds it fresh and never runs a `cargo build` of its own.

#![forbid(unsafe_code)]
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

/// `mpm ARGS...`: its exit code, stdout and stderr.
fn mpm(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mpm"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn serve_and_check_are_described_by_their_own_words_not_a_settings_struct() {
    // Once `NoSettings`' doc comment described both commands.
    let stray = "The settings of an application that has none";
    for (args, own) in [
        (&["--help"][..], "Serve until SIGTERM or SIGINT"),
        (&["serve", "--help"][..], "Serve until SIGTERM or SIGINT"),
        (&["check", "--help"][..], "Check the configuration"),
    ] {
        let (code, help, _) = mpm(args);
        assert_eq!(code, Some(0), "{args:?}");
        assert!(!help.contains(stray), "{args:?}:\n{help}");
        assert!(help.contains(own), "{args:?} lacks {own:?}:\n{help}");
    }
}

#[test]
fn an_on_off_setting_takes_on_or_off_and_nothing_else() {
    for (flag, value) in [
        ("--gzip", "yes"),
        ("--autoindex", "true"),
        ("--keepalive", "1"),
    ] {
        let (code, stdout, stderr) = mpm(&["check", flag, value]);
        assert_eq!(code, Some(2), "{flag} {value}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        for m in [flag, &format!("'{value}'"), "on, off"] {
            assert!(stderr.contains(m), "{flag} {value}: {stderr:?} lacks {m:?}");
        }
    }
    let (code, stdout, stderr) = mpm(&["check", "--gzip", "on", "--autoindex", "OFF"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("configuration OK"), "{stdout}");
    // In a file: `on`, `off` or a TOML boolean; not `yes`.
    let dir = std::env::temp_dir().join(format!("mpm-onoff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.toml");
    std::fs::write(&file, "gzip = true\nautoindex = \"yes\"\n").unwrap();
    let (code, _, stderr) = mpm(&["check", "--config", file.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2: autoindex: invalid value 'yes' (expected on, off)"),
        "{stderr}"
    );
}

/// An application whose own setting is named like one of mpm's.
#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Clashing {
    /// The application's own timeout.
    #[arg(long, default_value_t = 5)]
    timeout: u64,
}

struct ClashingApp;

struct Nothing;

impl mpm::prelude::HttpHandler for Nothing {
    fn handle(&mut self, _: &mpm::prelude::Request<'_>) -> mpm::prelude::Response {
        mpm::prelude::Response::new(204)
    }
}

impl mpm::App for ClashingApp {
    type Handler = Nothing;
    type Settings = Clashing;

    fn handler(&self, _: &mpm::Config, _: &Clashing) -> Nothing {
        Nothing
    }
}

#[test]
fn an_application_setting_named_like_one_of_mpms_is_refused_at_start() {
    // The application runs in a child (this test binary again), so that its
    // one line on stderr can be read.
    if std::env::var_os("MPM_CLASHING_APP").is_some() {
        std::process::exit(mpm::main(ClashingApp));
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_application_setting_named_like_one_of_mpms_is_refused_at_start",
            "--nocapture",
        ])
        .env("MPM_CLASHING_APP", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "the application's setting --timeout has the name of mpm's --timeout; rename it"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
