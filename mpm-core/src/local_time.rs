//! Local time broken down, and the month and day names the logs use.

/// The broken-down local time of `secs` since the epoch.
pub fn local_time(secs: i64) -> libc::tm {
    // SAFETY: an all-zero `tm` is a valid value (the pointer field is null);
    // localtime_r only writes into it and reads `t`, both valid locals.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let t: libc::time_t = secs;
        libc::localtime_r(&t, &mut tm);
        tm
    }
}

/// Month names as logs write them.
pub const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
/// Day names as logs write them.
pub const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
