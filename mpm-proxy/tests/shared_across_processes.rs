//! One process marking an upstream down is seen by every other: the state
//! lives in memory the server's processes share. A test binary of its own,
//! without the test harness, because `fork` refuses a process with more
//! than one thread (the harness runs tests on threads of its own).

#![forbid(unsafe_code)]
// A test binary: an unwrap that fails is the failure it reports.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use mpm_proxy::{now_ms, ProxyRoute, ProxyState, RouteTable, Transition};
use mpm_sys::fork::{exit_child, fork, Forked};

fn main() {
    let mut route =
        ProxyRoute::from_flag("/api/=http://10.0.0.1:8080,http://10.0.0.2:8080").unwrap();
    route.upstreams[0].fail_timeout = Duration::from_secs(3600);
    let table = RouteTable::new(vec![route]);
    // Made before the fork, as the master makes it before its children.
    let state = ProxyState::new(&table).unwrap();
    let up = state.route(0)[0];
    assert!(up.is_up(now_ms()));
    let epoch = mpm_sys::fork::epoch();
    match fork().unwrap() {
        Forked::Child => {
            // What was made before the fork can tell it is in a child
            // (the idle gauge's shares claim a row of their own by it).
            if mpm_sys::fork::epoch() == epoch {
                exit_child(2)
            }
            up.count_request();
            let marked = up.record_failure(now_ms());
            exit_child(if marked == Some(Transition::Down) {
                0
            } else {
                1
            })
        }
        Forked::Parent(pid) => {
            let status = nix::sys::wait::waitpid(pid, None).unwrap();
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(pid, 0),
                "the child marked it down"
            );
        }
    }
    assert!(!up.is_up(now_ms()), "the parent sees the child's mark");
    assert!(
        state.route(0)[1].is_up(now_ms()),
        "and only on that upstream"
    );
    let snap = &state.snapshot()[0];
    assert_eq!(
        (snap.requests, snap.failures, snap.marked_down, snap.up),
        (1, 1, 1, false)
    );
}
