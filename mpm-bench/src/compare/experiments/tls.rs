//! TLS under every MPM: keep-alive over TLS, a full handshake per request,
//! resumed handshakes, and the memory of idle TLS connections.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::{fastest_per_scenario, first_allocator, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, Tls, FILE, PAGE};
use mpm_core::MpmKind;

/// `mpm compare --experiment tls`.
pub(super) const TLS: Experiment = Experiment {
    name: "tls",
    question: "What does TLS cost each process model: keep-alive requests, full and resumed \
               handshakes per second, a 1 MiB file, and memory per idle TLS connection?",
    setup: "Each MPM serves compare's docroot (or, when workloads are given, the program's own \
            endpoints) on a TLS listener (`--listen-tls`, an ECDSA P-256 certificate compare \
            makes for the run) beside its plain one (which answers the status page). The bench \
            engine speaks TLS 1.3 with rustls, verifying nothing \
            (`--insecure`): full handshakes disable the client's session cache, resumed ones \
            keep it (session tickets). Idle connections each did one request over TLS.",
    variants,
    scenarios,
    columns: &[
        Column::ReqPerS,
        Column::P50,
        Column::P99,
        Column::CpuUsPerReq,
        Column::SyscallsPerReq,
        Column::PssMib,
        Column::PssPerConnKib,
        Column::ProcsThreads,
        Column::IdleServed,
    ],
    findings,
    per_syscall: false,
};

/// A certificate and key for this run, in a directory of its own.
pub(super) fn cert_files() -> Option<&'static (PathBuf, PathBuf)> {
    static FILES: OnceLock<Option<(PathBuf, PathBuf)>> = OnceLock::new();
    FILES
        .get_or_init(|| {
            let key = rcgen::KeyPair::generate().ok()?;
            let cert = rcgen::CertificateParams::new(vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
            ])
            .ok()?
            .self_signed(&key)
            .ok()?;
            let dir = std::env::temp_dir().join(format!(
                "mpm-compare-tls-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos())
            ));
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
            let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
            std::fs::write(&c, cert.pem()).ok()?;
            std::fs::write(&k, key.serialize_pem()).ok()?;
            Some((c, k))
        })
        .as_ref()
}

fn variants(sel: &Selection) -> Vec<Variant> {
    let workers = (sel.idle.iter().copied().max().unwrap_or(0) + 64).max(256);
    let Some((cert, key)) = cert_files() else {
        return Vec::new();
    };
    let allocator = first_allocator(sel);
    sel.mpms
        .iter()
        .map(|&mpm| {
            let mut flags = vec![
                "--max-request-workers".into(),
                workers.to_string(),
                "--listen-tls".into(),
                "127.0.0.1:0".into(),
                "--tls-cert".into(),
                cert.display().to_string(),
                "--tls-key".into(),
                key.display().to_string(),
            ];
            if mpm == MpmKind::Prefork {
                flags.extend(["--start-servers".into(), workers.to_string()]);
                flags.extend(["--max-spare".into(), workers.to_string()]);
            }
            Variant::new(mpm, allocator, flags).labelled(format!("{mpm}+tls"))
        })
        .collect()
}

/// An idle scenario over TLS, named for it.
fn idle_over_tls(idle: Scenario, n: usize) -> Scenario {
    let mut idle = idle.over_tls(Tls::Full);
    idle.name = format!("tls-idle-{n}");
    idle.title = format!("{n} idle TLS connections");
    idle
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    // Given workloads (an application's own, `--workload`, `METHOD:/path`)
    // replace the docroot's loads, over TLS too, with idle TLS connections
    // that each sent the first one's first request.
    if let Some(s) = sel.given(|w| Scenario::workload(w).over_tls(Tls::Full), idle_over_tls) {
        return s;
    }
    let mut s = vec![
        Scenario::keepalive(
            "tls-keepalive",
            "keep-alive over TLS, 1456-byte page, 50 connections",
            PAGE,
            50,
        )
        .over_tls(Tls::Full),
        Scenario::close(
            "tls-full",
            "a full TLS handshake per request, 20 at once",
            PAGE,
            20,
        )
        .over_tls(Tls::Full),
        Scenario::close(
            "tls-resumed",
            "a resumed TLS handshake per request (tickets), 20 at once",
            PAGE,
            20,
        )
        .over_tls(Tls::Resumed),
        Scenario::keepalive(
            "tls-file",
            "keep-alive over TLS, 1 MiB file, 10 connections",
            FILE,
            10,
        )
        .over_tls(Tls::Full),
    ];
    s.extend(
        sel.idle
            .iter()
            .map(|&n| idle_over_tls(Scenario::idle(n), n)),
    );
    s
}

fn findings(report: &Report) -> String {
    let text = fastest_per_scenario(report);
    if text.is_empty() {
        "Too few variants measured to compare.".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::scenario::ServerBin;
    use crate::workload::Workload;

    fn selection(workloads: Vec<Workload>) -> Selection {
        Selection::small(vec![MpmKind::Event], workloads)
    }

    #[test]
    fn every_scenario_goes_over_tls_given_workloads_included() {
        let own = scenarios(&selection(Vec::new()));
        assert!(own.iter().all(|s| s.tls != Tls::Off), "{own:?}");
        assert!(own.iter().any(|s| s.tls == Tls::Resumed));
        let given = scenarios(&selection(vec![Workload::get("api", "/api/users/1")]));
        let names: Vec<&str> = given.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["api", "tls-idle-3"]);
        for s in &given {
            assert_eq!((s.tls, s.server), (Tls::Full, ServerBin::Program), "{s:?}");
            assert_eq!(s.first_request().path, "/api/users/1");
        }
    }
}
