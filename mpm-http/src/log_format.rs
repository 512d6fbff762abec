//! Access-log formats, as httpd's `mod_log_config` writes them, and the local
//! time stamps both logs carry.
//!
//! * `common`: `%h %l %u %t "%r" %>s %b`
//! * `combined`: `common` followed by ` "%{Referer}i" "%{User-agent}i"`
//! * `upstream`: `combined` followed by nginx's upstream variables,
//!   ` "$upstream_addr" $upstream_status $upstream_response_time`: the
//!   address a reverse proxy (or a handler that called another server,
//!   [`Response::upstream`](crate::Response::upstream)) sent the request
//!   to (several, `a, b`, when one was tried after another), the status
//!   it answered, and the time the exchange took in seconds with
//!   milliseconds (`0.021`); `-` for each when the answer came from no
//!   upstream, or the upstream gave none (a 502 or 504 of the proxy's).
//!
//! Request fields are escaped as httpd's `ap_escape_logitem` does: `"` and
//! `\` get a backslash, `\n \r \t \b \v` their C escapes, and every other
//! byte that is not printable ASCII `\xhh`, so a client can neither forge a
//! line nor break a field.

use std::cell::Cell;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use mpm_core::local_time::{local_time, MONTHS};

/// Which fields an access-log line carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// The Common Log Format: `%h %l %u %t "%r" %>s %b`.
    #[default]
    Common,
    /// Common plus `"%{Referer}i" "%{User-agent}i"`.
    Combined,
    /// Combined plus `"$upstream_addr" $upstream_status
    /// $upstream_response_time`, as nginx names them.
    Upstream,
}

impl LogFormat {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Common => "common",
            LogFormat::Combined => "combined",
            LogFormat::Upstream => "upstream",
        }
    }
}

impl mpm_core::Choice for LogFormat {
    const ALL: &'static [Self] = &[LogFormat::Common, LogFormat::Combined, LogFormat::Upstream];

    fn name(self) -> &'static str {
        LogFormat::name(self)
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Append `bytes` to `out`, escaped as httpd's `ap_escape_logitem`.
pub(crate) fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x20..=0x7e => out.push(b),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'x',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]);
            }
        }
    }
}

/// Length of a CLF time stamp with its brackets: `[10/Oct/2000:13:55:36 -0700]`.
pub const CLF_TIME_LEN: usize = 28;

fn two(out: &mut [u8], at: usize, v: i32) {
    let v = v.clamp(0, 99) as u8;
    out[at] = b'0' + v / 10;
    out[at + 1] = b'0' + v % 10;
}

/// `[10/Oct/2000:13:55:36 -0700]` for `secs` since the epoch, in local time.
pub fn clf_time(secs: i64) -> [u8; CLF_TIME_LEN] {
    let tm = local_time(secs);
    let mut out = *b"[dd/Mmm/yyyy:hh:mm:ss +zzzz]";
    two(&mut out, 1, tm.tm_mday);
    out[4..7].copy_from_slice(MONTHS[tm.tm_mon.clamp(0, 11) as usize]);
    let year = tm.tm_year + 1900;
    two(&mut out, 8, year / 100);
    two(&mut out, 10, year % 100);
    two(&mut out, 13, tm.tm_hour);
    two(&mut out, 16, tm.tm_min);
    two(&mut out, 19, tm.tm_sec);
    let off = tm.tm_gmtoff / 60;
    out[22] = if off < 0 { b'-' } else { b'+' };
    let off = off.unsigned_abs() as i32;
    two(&mut out, 23, off / 60);
    two(&mut out, 25, off % 60);
    out
}

thread_local! {
    static CLF_CACHE: Cell<(u64, [u8; CLF_TIME_LEN])> =
        const { Cell::new((u64::MAX, [0; CLF_TIME_LEN])) };
}

/// The current time as [`clf_time`], formatted at most once a second per
/// thread (like the `Date` header).
pub fn clf_now() -> [u8; CLF_TIME_LEN] {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CLF_CACHE.with(|c| {
        let (cached, text) = c.get();
        if cached == secs {
            return text;
        }
        let text = clf_time(secs as i64);
        c.set((secs, text));
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(b: &[u8]) -> String {
        let mut out = Vec::new();
        escape_into(&mut out, b);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn quotes_backslashes_and_control_bytes_are_escaped_as_httpd_does() {
        assert_eq!(escaped(b"GET /a b"), "GET /a b");
        assert_eq!(escaped(b"a\"b\\c"), "a\\\"b\\\\c");
        assert_eq!(escaped(b"x\ny\rz\t"), "x\\ny\\rz\\t");
        assert_eq!(escaped(b"\x01\x7f\xc3\xa9"), "\\x01\\x7f\\xc3\\xa9");
    }

    #[test]
    fn clf_time_has_the_common_log_shape() {
        let t = String::from_utf8(clf_time(971_185_736).to_vec()).unwrap();
        // 2000-10-10T13:48:56Z in whatever zone the test runs.
        assert_eq!(t.len(), CLF_TIME_LEN);
        assert!(t.starts_with('[') && t.ends_with(']'), "{t}");
        assert!(t.contains("/Oct/2000:"), "{t}");
        let zone = &t[22..27];
        assert!(zone.starts_with(['+', '-']), "{t}");
        assert_eq!(clf_now().len(), CLF_TIME_LEN);
    }

    #[test]
    fn formats_are_named_as_httpd_names_them() {
        use mpm_core::Choice;
        assert_eq!(LogFormat::from_name("Combined"), Ok(LogFormat::Combined));
        // The valid names, which a bad value's one-line error lists.
        let names: Vec<_> = LogFormat::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(names, ["common", "combined", "upstream"]);
        assert!(LogFormat::from_name("json").is_err());
    }
}
