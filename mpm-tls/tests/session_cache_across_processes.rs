//! The session cache across processes: what a child stores, its parent
//! finds. (A holder killed while it holds a lock: mpm-sys's
//! tests/across_processes.rs.) No test harness: `fork` needs this process to have one
//! thread, so the tests run one after another on `main`.

#![forbid(unsafe_code)]

use std::time::Duration;

use mpm_sys::fork::{exit_child, fork, Forked};
use mpm_tls::SharedSessionCache;
use nix::sys::wait::waitpid;
use rustls::server::StoresServerSessions;

fn in_child(f: impl FnOnce()) {
    match fork().expect("fork of a single-threaded process") {
        Forked::Child => {
            f();
            exit_child(0)
        }
        Forked::Parent(pid) => {
            waitpid(pid, None).expect("waitpid");
        }
    }
}

fn a_session_stored_in_a_child_is_found_in_the_parent() {
    let c = SharedSessionCache::new(64, Duration::from_secs(300), None).expect("a cache");
    in_child(|| {
        c.put(b"child".to_vec(), b"from the child".to_vec());
    });
    assert_eq!(c.get(b"child").as_deref(), Some(&b"from the child"[..]));
}

fn main() {
    a_session_stored_in_a_child_is_found_in_the_parent();
    println!("test a_session_stored_in_a_child_is_found_in_the_parent ... ok");
    println!("test result: ok. 1 passed");
}
