//! The `Date` header value, formatted at most once a second per thread.

use std::cell::RefCell;
use std::time::{Duration, UNIX_EPOCH};

use mpm_core::coarse_clock;

thread_local! {
    static CACHE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
}

/// Append the current IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) to `out`.
pub(crate) fn append_now(out: &mut Vec<u8>) {
    // Every response reads the clock: the coarse one is a fraction of the cost.
    let secs = coarse_clock::unix_secs();
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != secs {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            if text.len() == 29 {
                c.1.copy_from_slice(text.as_bytes());
                c.0 = secs;
            } else {
                out.extend_from_slice(text.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&c.1);
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn date_is_an_imf_fixdate() {
        let mut out = Vec::new();
        crate::date::append_now(&mut out);
        let s = String::from_utf8(out).unwrap();
        assert_eq!(s.len(), 29);
        assert!(s.ends_with(" GMT"));
        assert!(httpdate::parse_http_date(&s).is_ok());
    }
}
