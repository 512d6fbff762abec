//! What holds between processes: shared memory written by a child is read
//! by its parent, and a child that dies holding a process mutex leaves it to
//! the next locker, who is told. No test harness: `fork` needs this process
//! to have one thread, so the tests run one after another on `main`.

use std::sync::atomic::{AtomicU64, Ordering};

use mpm_sys::fork::{exit_child, fork, Forked};
use mpm_sys::process_mutex::ProcessMutex;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::getpid;

fn in_child(f: impl FnOnce()) -> WaitStatus {
    match fork().expect("fork of a single-threaded process") {
        Forked::Child => {
            f();
            exit_child(0)
        }
        Forked::Parent(pid) => waitpid(pid, None).expect("waitpid"),
    }
}

fn a_childs_write_to_shared_memory_is_read_by_its_parent() {
    let n = mpm_sys::shared_memory::leak::<AtomicU64>("test").expect("map");
    in_child(|| n.store(42, Ordering::Relaxed));
    assert_eq!(n.load(Ordering::Relaxed), 42);
}

fn a_holder_killed_holding_the_mutex_leaves_it_to_the_next_who_is_told() {
    let m = &ProcessMutex::leak(1, "test").expect("mutex")[0];
    let status = in_child(|| {
        let guard = m.lock().expect("lock in the child");
        assert!(!guard.holder_died());
        std::mem::forget(guard);
        let _ = kill(getpid(), Signal::SIGKILL);
    });
    assert!(
        matches!(status, WaitStatus::Signaled(_, Signal::SIGKILL, _)),
        "{status:?}"
    );
    let guard = m.lock().expect("the dead holder's mutex");
    assert!(guard.holder_died(), "the next holder is told");
    drop(guard);
    let guard = m.try_lock().expect("try").expect("free again");
    assert!(!guard.holder_died(), "and it is consistent again");
}

fn a_mutex_held_by_a_live_process_is_refused() {
    let m = &ProcessMutex::leak(1, "test").expect("mutex")[0];
    let flag = mpm_sys::shared_memory::leak::<AtomicU64>("flag").expect("map");
    match fork().expect("fork") {
        Forked::Child => {
            {
                let _held = m.lock().expect("lock");
                flag.store(1, Ordering::Release);
                while flag.load(Ordering::Acquire) != 2 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            exit_child(0)
        }
        Forked::Parent(pid) => {
            while flag.load(Ordering::Acquire) != 1 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(m.try_lock().expect("try").is_none(), "held by the child");
            flag.store(2, Ordering::Release);
            waitpid(pid, None).expect("waitpid");
            let guard = m.lock().expect("lock");
            assert!(!guard.holder_died(), "released cleanly on its exit path");
        }
    }
}

fn main() {
    let tests: [(&str, fn()); 3] = [
        (
            "a_childs_write_to_shared_memory_is_read_by_its_parent",
            a_childs_write_to_shared_memory_is_read_by_its_parent,
        ),
        (
            "a_holder_killed_holding_the_mutex_leaves_it_to_the_next_who_is_told",
            a_holder_killed_holding_the_mutex_leaves_it_to_the_next_who_is_told,
        ),
        (
            "a_mutex_held_by_a_live_process_is_refused",
            a_mutex_held_by_a_live_process_is_refused,
        ),
    ];
    for (name, test) in tests {
        test();
        println!("test {name} ... ok");
    }
    println!("test result: ok. {} passed", tests.len());
}
