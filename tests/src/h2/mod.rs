//! A raw-frame HTTP/2 client for the conformance suite
//! (`tests/tests/h2_conformance.rs`): it sends any frame, valid or not,
//! and checks what the server answers against RFC 9113 and RFC 7541.

pub mod conn;
pub mod frame;
pub mod hpack;

pub use conn::{Event, H2Conn, PeerSettings, Response, Target, ANSWER_TIMEOUT};
pub use frame::{code, flag, kind, setting, Frame, PREFACE};
pub use hpack::Field;
