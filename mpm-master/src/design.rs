//! # Design notes
//!
//! Why the master is shaped the way it is. Nothing here is code.
//!
//! ## A master that can fork safely
//!
//! The process manager's master never starts a thread: `fork()` then copies
//! a process in which no lock is held by a thread the child lacks, and the
//! child may allocate freely. Signals reach the master as flags and a byte on
//! a pipe (signal-hook); they are blocked across each `fork()` and unblocked
//! in the child only once its own handlers replace the inherited ones, so a
//! signal sent to a newborn child is neither lost nor run by the master's
//! handlers. Prefork children stay single-threaded too: their stop handlers
//! do not restart system calls, so a child waiting for the accept mutex
//! notices it was told to go.
//!
//! ## Forking as soon as connections wait
//!
//! httpd's prefork grows its pool once a second, by 1, 2, 4 ... 32
//! children a second, while fewer than `MinSpareServers` are idle. A burst
//! of keep-alive clients, each holding a child, then waits out that ramp in
//! the listen backlog: 33 at once on the defaults were answered in
//! one-second waves, the last after 4.4 s. The master keeps that spare
//! count, and also forks the moment a connection waits with no child idle:
//! it polls the listening sockets with its signal pipe (a readable
//! listening socket is a connection in the backlog; the scoreboard alone
//! says every child is busy, not that anyone waits, and would need a
//! timer), and forks rounds of 1, 2, 4 ... 32 children, one round each
//! time the last round's children are busy and connections still wait, at
//! most one round every 10 ms: up to 3,200 children a second, in practice
//! as fast as they start (those 33 clients: 31 children in 5 rounds, all
//! answered within 75 ms). While an idle child is about to take the
//! connection, the sockets stay out of the poll for 10 ms, so the master
//! neither spins nor wakes more than 100 times a second for it. The
//! process manager's module docs say more.
