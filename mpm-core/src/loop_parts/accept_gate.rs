//! Whether a loop accepts now: able (a worker free, under the connection
//! cap, not stopping, no pause after a failed accept) and, with siblings
//! sharing the listeners, holding no more than its share of connections
//! by the [`ConnectionLedger`](crate::ConnectionLedger); and how long it
//! may sleep ([`sleep_for`]).

use std::time::{Duration, Instant};

use crate::LedgerSeat;

/// How soon a process that stopped accepting for balance looks at the
/// ledger again.
pub const BALANCE_RECHECK: Duration = Duration::from_millis(5);

/// A loop's accept decision and what it publishes in the ledger.
#[derive(Debug, Default)]
pub struct AcceptGate {
    ledger: Option<LedgerSeat>,
    published: Option<(usize, bool)>,
    /// When the seats of siblings that died were last looked for.
    ledger_checked: Option<Instant>,
    /// Not accepting only because a sibling holds fewer connections: the
    /// loop looks again within [`BALANCE_RECHECK`].
    pub balance_paused: bool,
    /// Times accepting was paused because the loop was not able to.
    pub listener_pauses: u64,
    /// Times accepting was paused for balance with siblings.
    pub balance_pauses: u64,
}

impl AcceptGate {
    /// A gate publishing in `ledger`'s seat (siblings share the listeners),
    /// which it claims.
    pub fn new(ledger: Option<LedgerSeat>) -> AcceptGate {
        if let Some(seat) = ledger {
            seat.claim();
        }
        AcceptGate {
            ledger,
            ..AcceptGate::default()
        }
    }

    /// Should the loop accept, holding `open` connections, `able` as the
    /// caller found it? `listening`: whether it does now; a change to
    /// "no" is counted as a pause.
    pub fn want(&mut self, now: Instant, able: bool, open: usize, listening: bool) -> bool {
        let mut balanced = true;
        if let Some(seat) = self.ledger {
            // Written only when it changes: siblings read this line.
            if self.published != Some((open, able)) {
                seat.publish(open, able);
                self.published = Some((open, able));
            }
            balanced = !able || seat.may_accept(open);
            if !balanced
                && self
                    .ledger_checked
                    .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
            {
                // Perhaps the sibling holding fewer died without saying so.
                seat.forget_the_dead();
                self.ledger_checked = Some(now);
                balanced = seat.may_accept(open);
            }
        }
        let want = able && balanced;
        self.balance_paused = able && !balanced;
        if listening && !want {
            if able {
                self.balance_pauses += 1;
            } else {
                self.listener_pauses += 1;
            }
        }
        want
    }

    /// Does the loop decide alone, with no siblings' ledger? Then it
    /// wants to accept exactly when it is able to.
    #[inline]
    pub fn alone(&self) -> bool {
        self.ledger.is_none()
    }

    /// The loop stops: its seat is free for a successor.
    pub fn release(&self) {
        if let Some(seat) = self.ledger {
            seat.release();
        }
    }
}

/// How long a loop may sleep at `now`: until the first of `moments` (its
/// timeouts, waits, an accept pause, the moment a stop closes idle
/// connections), at most a second, [`BALANCE_RECHECK`] while paused for
/// balance; stopping, until the drain's deadline, and past it (what is left
/// is in workers' hands: their returns wake the loop) until its give-up
/// time.
pub fn sleep_for(
    now: Instant,
    balance_paused: bool,
    moments: &[Option<Instant>],
    stop_deadline: Option<Instant>,
    drain: Option<&crate::Drain>,
) -> Duration {
    // The cap stays a duration, and the first moment the one moment
    // measured from now: a loop asks every turn, and each sum or
    // difference of instants costs a normalisation of its own.
    let cap = if balance_paused {
        BALANCE_RECHECK
    } else {
        Duration::from_secs(1)
    };
    let stop = stop_deadline.map(|d| match drain {
        Some(drain) if d <= now => drain.give_up_at(),
        _ => d,
    });
    let first = moments.iter().chain([&stop]).flatten().min();
    match first {
        Some(first) => first.saturating_duration_since(now).min(cap),
        None => cap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_sleeps_until_its_first_moment_and_a_second_at_most() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(sleep_for(now, false, &[None], None, None), ms(1000));
        assert_eq!(sleep_for(now, true, &[None], None, None), BALANCE_RECHECK);
        let moments = [Some(now + ms(300)), None, Some(now + ms(200))];
        assert_eq!(sleep_for(now, false, &moments, None, None), ms(200));
        assert_eq!(
            sleep_for(now, false, &moments, Some(now + ms(50)), None),
            ms(50)
        );
        // A moment already past: no sleep at all.
        assert_eq!(
            sleep_for(now, false, &[Some(now - ms(5))], None, None),
            Duration::ZERO
        );
    }

    #[test]
    fn without_a_ledger_the_gate_follows_the_loop_and_counts_its_pauses() {
        let now = Instant::now();
        let mut gate = AcceptGate::new(None);
        assert!(gate.want(now, true, 10, false));
        assert!(!gate.want(now, false, 10, true), "not able: no accepting");
        assert_eq!((gate.listener_pauses, gate.balance_pauses), (1, 0));
        assert!(!gate.balance_paused);
    }
}
