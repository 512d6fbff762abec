//! `mpm check`: validate flags and a configuration file without starting a
//! server (as `apachectl configtest`): 0 and one line when good, 2 and one
//! line naming the problem when not.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::time::Duration;

use tests::{run_mpm, TempDir};

#[test]
fn a_good_configuration_file_is_ok_and_nothing_is_bound_or_started() {
    let dir = TempDir::new("check");
    dir.write("index.html", b"x");
    // Its address is taken: a check that bound it would fail.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = dir.write(
        "mpm.toml",
        format!(
            "mpm = \"prefork\"\nlisten = [\"{}\"]\ndocroot = \"{}\"\nstart-servers = 2\n\
             pid-file = \"{}\"\ndrain-delay = \"2s\"\n",
            taken.local_addr().unwrap(),
            dir.path().display(),
            dir.path().join("mpm.pid").display()
        )
        .as_bytes(),
    );
    let out = run_mpm(
        &["check", "--config", config.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("mpm: configuration OK: prefork MPM"),
        "{}",
        out.stdout
    );
    // Then whether the uring model could run here.
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    assert!(
        out.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("mpm: uring ")),
        "{}",
        out.stdout
    );
    assert!(
        !dir.path().join("mpm.pid").exists(),
        "check wrote a pid file"
    );
}

#[test]
fn a_bad_configuration_file_is_one_line_and_exit_2() {
    let dir = TempDir::new("check-bad");
    let upgrade_not_executable = format!(
        "upgrade-binary = \"{}\"\n",
        dir.path().join("bad.toml").display()
    );
    for (text, says) in [
        ("listen = [\"nowhere\"]\n", "nowhere"),
        ("no-such-key = 1\n", "no-such-key"),
        ("threads-per-child = 0\n", "threads-per-child"),
        ("upgrade-binary = \"/no/such/mpm\"\n", "/no/such/mpm"),
        // A file that is there but cannot be run: this very file.
        (&upgrade_not_executable, "not executable"),
        // Paths no request can reach, and one path for two pages.
        ("status-path = \"/server status\"\n", "a space"),
        ("metrics-path = \"/metrics?x\"\n", "a query"),
        (
            "status-path = \"/s\"\nmetrics-path = \"/s\"\n",
            "--metrics-path /s",
        ),
    ] {
        let config = dir.write("bad.toml", text.as_bytes());
        let out = run_mpm(
            &["check", "--config", config.to_str().unwrap()],
            Duration::from_secs(20),
        );
        out.assert_one_line_error(text);
        assert!(out.stderr.contains(says), "{text}: {}", out.stderr);
    }
    // A value out of bounds in the file is refused even when a flag
    // overrides it this time (it was accepted, to fail once the flag went).
    let config = dir.write("overridden.toml", b"threads-per-child = 0\n");
    let out = run_mpm(
        &[
            "check",
            "--config",
            config.to_str().unwrap(),
            "--threads-per-child",
            "5",
        ],
        Duration::from_secs(20),
    );
    out.assert_one_line_error("a bad value a flag overrides");
    assert!(
        out.stderr
            .contains("line 1: threads-per-child: 0: at least 1"),
        "{}",
        out.stderr
    );
    let out = run_mpm(
        &["check", "--config", "/no/such/mpm.toml"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("/no/such/mpm.toml"), "{}", out.stderr);
}

#[test]
fn flags_win_over_the_file_and_are_checked_too() {
    let dir = TempDir::new("check-flags");
    let config = dir.write("mpm.toml", b"mpm = \"worker\"\n");
    let out = run_mpm(
        &[
            "check",
            "--config",
            config.to_str().unwrap(),
            "--mpm",
            "event",
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("event MPM"), "{}", out.stdout);
    let out = run_mpm(
        &[
            "check",
            "--config",
            config.to_str().unwrap(),
            "--docroot",
            "/no/such/root",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("/no/such/root"), "{}", out.stderr);
}

#[test]
fn proxy_upstreams_serve_refuses_are_refused_with_the_same_line() {
    let dir = TempDir::new("check-proxy");
    let no_pem = dir.write("no-cert.pem", b"garbage\n");
    let missing = dir.path().join("missing.pem");
    let route = |ca: &std::path::Path| {
        format!(
            "[[proxy]]\nprefix = \"/p/\"\nupstreams = [\"https://127.0.0.1:9/\"]\nca_file = \"{}\"\n",
            ca.display()
        )
    };
    let missing_ca = dir.write("missing-ca.toml", route(&missing).as_bytes());
    let bad_ca = dir.write("bad-ca.toml", route(&no_pem).as_bytes());
    let missing_client = dir.write(
        "missing-client.toml",
        format!(
            "[[proxy]]\nprefix = \"/p/\"\nupstreams = [\"https://127.0.0.1:9/\"]\n\
             client_cert = \"{m}\"\nclient_key = \"{m}\"\n",
            m = missing.display()
        )
        .as_bytes(),
    );
    let cases: [(&[&str], &str); 5] = [
        (
            &["--proxy", "/a/=http://no-such-host.invalid:80/"],
            "could not be resolved",
        ),
        (&["--proxy", "/a/=http://1.2.3.4.5/"], "1.2.3.4.5"),
        (
            &["--config", missing_ca.to_str().unwrap()],
            "cannot be read",
        ),
        (
            &["--config", bad_ca.to_str().unwrap()],
            "no CERTIFICATE block",
        ),
        (
            &["--config", missing_client.to_str().unwrap()],
            "the client certificate file",
        ),
    ];
    for (args, says) in cases {
        let with = |command: &str| {
            let mut all = vec![command, "--listen", "127.0.0.1:0", "--docroot"];
            all.push(dir.path().to_str().unwrap());
            all.extend_from_slice(args);
            run_mpm(&all, Duration::from_secs(20))
        };
        let (check, serve) = (with("check"), with("serve"));
        check.assert_one_line_error(&format!("check {args:?}"));
        serve.assert_one_line_error(&format!("serve {args:?}"));
        assert_eq!(check.stderr, serve.stderr, "{args:?}");
        assert!(check.stderr.contains(says), "{args:?}: {}", check.stderr);
    }
    // A route whose CA file holds a certificate, to an address: good.
    let pem = dir.write(
        "ca.pem",
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .unwrap()
            .cert
            .pem()
            .as_bytes(),
    );
    let good = dir.write("good.toml", route(&pem).as_bytes());
    let out = run_mpm(
        &["check", "--config", good.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("mpm: configuration OK"),
        "{}",
        out.stdout
    );
}

/// The README's defaults, as `check` reports what would run: the worker
/// MPM, one process of 256 threads, on 127.0.0.1:8080; prefork up to 256
/// processes; a bare `--listen` port is every IPv4 interface.
#[test]
fn the_readmes_defaults_are_what_check_says_would_run() {
    let first_line = |args: &[&str]| {
        let mut all = vec!["check"];
        all.extend_from_slice(args);
        let out = run_mpm(&all, Duration::from_secs(20));
        assert!(out.status.success(), "{args:?}: {}", out.stderr);
        out.stdout.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(
        first_line(&[]),
        "mpm: configuration OK: worker MPM, server-limit 1, threads-per-child 256, \
         listening on 127.0.0.1:8080"
    );
    assert!(
        first_line(&["--mpm", "prefork"])
            .starts_with("mpm: configuration OK: prefork MPM, server-limit 256, "),
        "{}",
        first_line(&["--mpm", "prefork"])
    );
    assert!(
        first_line(&["--listen", "8080"]).ends_with("listening on 0.0.0.0:8080"),
        "{}",
        first_line(&["--listen", "8080"])
    );
}
