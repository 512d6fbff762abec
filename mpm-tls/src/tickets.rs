//! Session tickets every serving process can decrypt: prefork's children,
//! `--server-limit` processes, and every generation after a graceful restart.
//!
//! The ticket key of each period is derived (HKDF-SHA256) from a secret
//! made once when the server starts, before any fork, and from the period's
//! number (`unix time / period`). Every process therefore agrees on the key
//! of every period without any state shared at run time, and keys rotate by
//! themselves: a ticket is sealed (AES-256-GCM) with the key of the period
//! it is issued in and opened only in that period or the next, so it lives
//! one to two periods. A new master (a binary upgrade, a full restart of the
//! binary) makes a new secret: tickets issued before fall back to a full
//! handshake, or to the session cache.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::RwLock;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

use crate::error::{Error, Result};
use crate::stats::{Kind, Stats};

/// Bytes before the sealed session: the period number.
const PERIOD_LEN: usize = 8;

/// A [`ProducesTickets`] whose keys every process derives alike.
pub struct SharedTickets {
    secret: [u8; 32],
    period: u64,
    rng: SystemRandom,
    /// The keys of the last period used and the one before it.
    keys: RwLock<Option<(u64, LessSafeKey, LessSafeKey)>>,
    stats: Option<Stats>,
}

impl fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedTickets")
            .field("period", &self.period)
            .finish()
    }
}

impl SharedTickets {
    /// Tickets whose keys rotate every `period_secs` (at least 1), from a
    /// new random secret. Make it before forking.
    pub fn new(period_secs: u64, stats: Option<Stats>) -> Result<SharedTickets> {
        let rng = SystemRandom::new();
        let mut secret = [0u8; 32];
        rng.fill(&mut secret)
            .map_err(|_| Error::Config("no randomness for the session ticket secret".into()))?;
        Ok(SharedTickets {
            secret,
            period: period_secs.max(1),
            rng,
            keys: RwLock::new(None),
            stats,
        })
    }

    fn now_period(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        now / self.period
    }

    fn derive(&self, period: u64) -> LessSafeKey {
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"mpm session tickets");
        let prk = salt.extract(&self.secret);
        let info = period.to_be_bytes();
        let info = [&info[..]];
        let okm = prk
            .expand(&info, &AES_256_GCM)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        LessSafeKey::new(UnboundKey::from(okm))
    }

    /// Run `f` with the key of `period`, if it is the current one or the
    /// one before.
    fn with_key<R>(&self, period: u64, f: impl FnOnce(&LessSafeKey) -> R) -> Option<R> {
        let now = self.now_period();
        if period != now && period.checked_add(1) != Some(now) {
            return None;
        }
        {
            let keys = self.keys.read();
            if let Some((p, cur, prev)) = keys.as_ref() {
                if *p == now {
                    return Some(f(if period == now { cur } else { prev }));
                }
            }
        }
        let (cur, prev) = (self.derive(now), self.derive(now.wrapping_sub(1)));
        let r = f(if period == now { &cur } else { &prev });
        *self.keys.write() = Some((now, cur, prev));
        Some(r)
    }
}

impl ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.period).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let period = self.now_period();
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(PERIOD_LEN + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&period.to_be_bytes());
        out.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        self.with_key(period, |key| {
            key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(period.to_be_bytes()),
                &mut sealed,
            )
        })?
        .ok()?;
        out.extend_from_slice(&sealed);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < PERIOD_LEN + NONCE_LEN + 16 {
            return None;
        }
        let (head, rest) = cipher.split_at(PERIOD_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let period = u64::from_be_bytes(head.try_into().ok()?);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let mut buf = sealed.to_vec();
        let n = self.with_key(period, |key| {
            key.open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(period.to_be_bytes()),
                &mut buf,
            )
            .map(|p| p.len())
        })?;
        match n {
            Ok(n) => {
                if let Some(s) = &self.stats {
                    s.add(Kind::TicketsOpened);
                }
                buf.truncate(n);
                Some(buf)
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_with_the_same_secret_only() {
        let t = SharedTickets::new(3600, None).unwrap();
        let sealed = t.encrypt(b"session state").unwrap();
        assert_eq!(t.decrypt(&sealed).as_deref(), Some(&b"session state"[..]));
        // A copy of the ticketer (a forked child) opens it too.
        let twin = SharedTickets {
            secret: t.secret,
            period: t.period,
            rng: SystemRandom::new(),
            keys: RwLock::new(None),
            stats: None,
        };
        assert_eq!(
            twin.decrypt(&sealed).as_deref(),
            Some(&b"session state"[..])
        );
        let other = SharedTickets::new(3600, None).unwrap();
        assert_eq!(other.decrypt(&sealed), None);
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(t.decrypt(&tampered), None);
        assert_eq!(t.decrypt(&sealed[..10]), None);
    }

    #[test]
    fn tickets_of_old_periods_are_refused() {
        let t = SharedTickets::new(3600, None).unwrap();
        let mut sealed = t.encrypt(b"x").unwrap();
        let old = (t.now_period() - 2).to_be_bytes();
        sealed[..8].copy_from_slice(&old);
        assert_eq!(t.decrypt(&sealed), None);
    }
}
