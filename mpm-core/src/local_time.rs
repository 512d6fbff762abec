//! Local time broken down, and the month and day names the logs use.

/// The broken-down local time of `secs` since the epoch.
pub fn local_time(secs: i64) -> libc::tm {
    mpm_sys::clock::local_time(secs)
}

/// Month names as logs write them.
pub const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
/// Day names as logs write them.
pub const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
