//! An upgraded connection (after `101 Switching Protocols`): bytes pumped
//! both ways between the client and the [`Tunnel`](crate::Tunnel), through
//! two bounded buffers (the connection's read buffer toward the upstream,
//! the tunnel's own toward the client), waiting on both sockets with
//! [`Interest::Await`]. Neither socket blocks: a blocking model's client
//! socket is made non-blocking for the tunnel's life, so that the one
//! thread serving it waits in `poll(2)` on both at once.

use std::io::{ErrorKind, Read};
use std::time::Instant;

use mpm_core::waiting::Await;
use mpm_core::{Interest, Stream};

use crate::state::{HttpConn, TunnelState, Waiting};

/// The most bytes toward the client buffered at once.
const DOWN_BUFFER: usize = 16 * 1024;

/// Did one move make progress, or end the tunnel?
enum Moved {
    Bytes(usize),
    Nothing,
    Failed,
}

/// Move what can be moved now, both ways; then wait for either socket, or
/// close when both sides are done or the tunnel sat idle too long. On an
/// event loop at most `budget` bytes move per call (then the loop serves
/// the others: [`Interest::Yield`]).
pub(crate) fn pump(c: &mut HttpConn, s: &mut Stream, budget: u64) -> Interest {
    let Some(mut waiting) = c.take_waiting() else {
        return Interest::Close;
    };
    let Waiting::Tunnel(t) = &mut *waiting else {
        c.set_waiting(waiting);
        return Interest::Close;
    };
    if s.is_blocking() && t.down.capacity() == 0 && s.socket().set_nonblocking(true).is_err() {
        return end(c, t);
    }
    if t.down.capacity() == 0 {
        t.down = c.pool.write_buffer();
    }
    let mut moved = 0u64;
    loop {
        let mut progress = false;
        // Client to upstream: what the read buffer holds goes first.
        for step in [to_upstream(c, t), from_client(c, s, t)] {
            match step {
                Moved::Bytes(n) => {
                    progress = true;
                    moved += n as u64;
                }
                Moved::Nothing => {}
                Moved::Failed => return end(c, t),
            }
        }
        if t.client_ended && c.start == c.filled && !t.upstream_shut {
            t.upstream_shut = true;
            let _ = t.tunnel.shutdown_write();
        }
        // Upstream to client.
        for step in [to_client(s, t), from_upstream(t)] {
            match step {
                Moved::Bytes(n) => {
                    progress = true;
                    moved += n as u64;
                }
                Moved::Nothing => {}
                Moved::Failed => return end(c, t),
            }
        }
        // The client's half shut once the upstream's last bytes are out:
        // held or gathered ones first (`Stream::shutdown_write`; a
        // shutdown of the socket itself went ahead of them, losing a
        // WebSocket's closing frame under event and uring). Until they
        // are, the tunnel waits for the client's room.
        if t.upstream_ended && t.down_pos == t.down.len() && !t.client_shut {
            match s.shutdown_write() {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                _ => t.client_shut = true,
            }
        }
        if t.upstream_shut && t.client_shut {
            return end(c, t); // both sides are done
        }
        if !progress {
            break;
        }
        if s.on_event_loop() && moved >= budget {
            t.last_moved = Instant::now();
            s.take_would_block();
            c.set_waiting(waiting);
            return Interest::Yield;
        }
    }
    // A WouldBlock here is a wait, not the blocking driver's timeout.
    s.take_would_block();
    let now = Instant::now();
    if moved > 0 {
        t.last_moved = now;
    }
    let until = mpm_core::deadline(t.last_moved, t.tunnel.idle_timeout());
    if now >= until {
        return end(c, t);
    }
    let read = !t.upstream_ended && t.down_pos == t.down.len();
    let write = c.start < c.filled;
    let wait = Await {
        fd: (read || write).then(|| t.tunnel.fd()),
        read,
        write,
        client_read: !t.client_ended && c.start == c.filled,
        client_write: t.down_pos < t.down.len() || (t.upstream_ended && !t.client_shut),
        until,
        stamp: None,
        // A client that closed its end may still read what the upstream
        // sends (the tunnel passes the half-close on). (A reset then ends
        // the tunnel at once under the blocking models; on a loop, at its
        // next write to the client or its idle timeout.)
        hang_up_ends: false,
    };
    c.set_waiting(waiting);
    Interest::Await(wait)
}

/// The tunnel is over: its buffer goes back to the pool, the upstream is
/// dropped (closed), and so is the client's connection.
fn end(c: &mut HttpConn, t: &mut TunnelState) -> Interest {
    c.pool.put_write(std::mem::take(&mut t.down));
    c.start = 0;
    c.filled = 0;
    Interest::Close
}

fn to_upstream(c: &mut HttpConn, t: &mut TunnelState) -> Moved {
    if c.start == c.filled {
        return Moved::Nothing;
    }
    loop {
        match t.tunnel.write(&c.buf[c.start..c.filled]) {
            Ok(0) => return Moved::Failed,
            Ok(n) => {
                c.consume(n);
                return Moved::Bytes(n);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Moved::Nothing,
            Err(_) => return Moved::Failed,
        }
    }
}

fn from_client(c: &mut HttpConn, s: &mut Stream, t: &mut TunnelState) -> Moved {
    if c.start < c.filled || t.client_ended {
        return Moved::Nothing;
    }
    c.make_room();
    loop {
        match s.read(&mut c.buf[c.filled..]) {
            Ok(0) => {
                t.client_ended = true;
                return Moved::Bytes(0);
            }
            Ok(n) => {
                c.filled += n;
                return Moved::Bytes(n);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Moved::Nothing,
            Err(_) => return Moved::Failed,
        }
    }
}

fn to_client(s: &mut Stream, t: &mut TunnelState) -> Moved {
    if t.down_pos == t.down.len() {
        return Moved::Nothing;
    }
    loop {
        match s.send(&t.down[t.down_pos..], false) {
            Ok(0) => return Moved::Failed,
            Ok(n) => {
                t.down_pos += n;
                if t.down_pos == t.down.len() {
                    t.down.clear();
                    t.down_pos = 0;
                }
                return Moved::Bytes(n);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Moved::Nothing,
            Err(_) => return Moved::Failed,
        }
    }
}

fn from_upstream(t: &mut TunnelState) -> Moved {
    if t.down_pos < t.down.len() || t.upstream_ended {
        return Moved::Nothing;
    }
    t.down.resize(DOWN_BUFFER, 0);
    loop {
        match t.tunnel.read(&mut t.down) {
            Ok(0) => {
                t.down.clear();
                t.upstream_ended = true;
                return Moved::Bytes(0);
            }
            Ok(n) => {
                t.down.truncate(n);
                t.down_pos = 0;
                return Moved::Bytes(n);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                t.down.clear();
                return Moved::Nothing;
            }
            Err(_) => {
                t.down.clear();
                return Moved::Failed;
            }
        }
    }
}
