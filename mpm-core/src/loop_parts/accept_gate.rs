//! Whether a loop accepts now: able (a worker free, under the connection
//! cap, not stopping, no pause after a failed accept) and, with siblings
//! sharing the listeners, holding no more than its share of connections
//! by the [`ConnectionLedger`](crate::ConnectionLedger).

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

    /// The loop stops: its seat is free for a successor.
    pub fn release(&self) {
        if let Some(seat) = self.ledger {
            seat.release();
        }
    }
}
