//! A program that installed a logger of its own before mpm's error log is
//! installed keeps it: no panic, mpm's lines go to that logger, and its
//! log level still filters them. (A process of its own: the `log` facade
//! takes one logger per process.)

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

/// Keeps every record it is given.
struct Keeper(Mutex<Vec<(log::Level, String, String)>>);

impl log::Log for Keeper {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        self.0.lock().unwrap().push((
            record.level(),
            record.target().to_string(),
            record.args().to_string(),
        ));
    }
    fn flush(&self) {}
}

static KEEPER: Keeper = Keeper(Mutex::new(Vec::new()));

#[test]
fn a_logger_installed_first_is_kept_and_gets_mpms_lines() {
    log::set_logger(&KEEPER).unwrap();
    log::set_max_level(log::LevelFilter::Trace);
    assert!(
        !mpm_core::error_log::install(),
        "the program's logger stays"
    );
    assert!(
        !mpm_core::error_log::install(),
        "and stays on a second call"
    );
    mpm_core::log_warn!("mpm: a warning");
    mpm_core::log_notice!("mpm: a notice");
    // Below mpm's level (warn): not sent at all.
    mpm_core::log_info!("mpm: some information");
    let kept = KEEPER.0.lock().unwrap().clone();
    assert_eq!(
        kept,
        vec![
            (
                log::Level::Warn,
                "mpm".to_string(),
                "mpm: a warning".to_string()
            ),
            (
                log::Level::Info,
                "mpm".to_string(),
                "mpm: a notice".to_string()
            ),
        ]
    );
}
