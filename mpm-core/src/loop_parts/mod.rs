//! What the two event-loop models (event's epoll loop, uring's ring) share,
//! so that each is written once: the worker pool behind a loop and the way
//! connections come back to it ([`worker_pool`]), and the timeout queues a
//! loop expires in O(1) ([`timeout_queues`]), and whether a loop accepts
//! now ([`accept_gate`]).

pub mod accept_gate;
pub mod timeout_queues;
pub mod worker_pool;
