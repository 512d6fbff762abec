//! How many children the master keeps.

use mpm_core::scoreboard::Scoreboard;

/// How many children a [`ProcessManager`](crate::ProcessManager) keeps.
#[derive(Debug, Clone, Copy)]
pub enum Sizing {
    /// Exactly this many (worker and event: `--server-limit`).
    Fixed(usize),
    /// As many as keep between `min_spare` and `max_spare` of them idle, as
    /// httpd's prefork does: checked once a second, forking 1, 2, 4 ... 32
    /// children a second while too few are idle and stopping one a second
    /// while too many are, never more than `max` in all. Connections that
    /// wait with no child idle are forked for at once, in rounds of 1, 2,
    /// 4 ... 32 children up to every 10 ms (see
    /// [`process_manager`](crate::process_manager#how-fast-preforks-pool-grows)).
    Spare {
        /// Children forked at start.
        start: usize,
        /// Fewest idle children.
        min_spare: usize,
        /// Most idle children.
        max_spare: usize,
        /// Most children (`--server-limit`).
        max: usize,
        /// Where the children's states are read (one slot per child).
        scoreboard: &'static Scoreboard,
    },
}
