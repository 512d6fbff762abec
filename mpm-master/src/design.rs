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
