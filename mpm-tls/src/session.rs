//! One TLS connection over rustls's unbuffered API: the record buffers are
//! ours (from a pool, given back when the connection parks idle), and the
//! session is the [`Transport`] a handler's reads and writes go through.

use std::io::{self, ErrorKind};
use std::sync::Arc;
use std::time::Instant;

use mpm_core::{Interest, Stream, Transport};
use parking_lot::Mutex;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError};
use rustls::ServerConfig;

/// A buffer for received records: the largest TLS record (TLS 1.2's
/// 16 KiB of plaintext plus 2 KiB of expansion, and the header).
pub(crate) const RECORD_BUF: usize = 16 * 1024 + 2048 + 5;
/// Plaintext encrypted per write: four records, sent in one system call.
const WRITE_CHUNK: usize = 64 * 1024;
/// Coalesce writes that say more follows until this much is queued.
const CORK: usize = 16 * 1024;
/// Free buffers kept per kind; beyond it they are freed.
const KEPT: usize = 256;
/// An outgoing buffer grown past this is freed rather than kept.
const LARGEST_KEPT: usize = 2 * WRITE_CHUNK;

/// Record buffers shared by the connections of one factory.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    incoming: Mutex<Vec<Vec<u8>>>,
    outgoing: Mutex<Vec<Vec<u8>>>,
}

impl Pool {
    fn incoming(&self) -> Vec<u8> {
        self.incoming
            .lock()
            .pop()
            .unwrap_or_else(|| vec![0; RECORD_BUF])
    }

    fn outgoing(&self) -> Vec<u8> {
        self.outgoing.lock().pop().unwrap_or_default()
    }

    fn put_incoming(&self, buf: Vec<u8>) {
        if buf.len() == RECORD_BUF {
            let mut free = self.incoming.lock();
            if free.len() < KEPT {
                free.push(buf);
            }
        }
    }

    fn put_outgoing(&self, buf: Vec<u8>) {
        if !buf.is_empty() && buf.len() <= LARGEST_KEPT {
            let mut free = self.outgoing.lock();
            if free.len() < KEPT {
                free.push(buf);
            }
        }
    }
}

/// Why processing records stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The handshake needs more bytes from the peer.
    NeedInput,
    /// Established, nothing complete left to read.
    Idle,
    /// The plaintext handed in was encrypted.
    Encrypted,
    /// Both sides have closed.
    Closed,
}

/// A TLS connection's state.
pub(crate) struct Session {
    conn: UnbufferedServerConnection,
    /// Ciphertext received: `incoming[..in_len]`.
    incoming: Vec<u8>,
    in_len: usize,
    /// Ciphertext to send: `outgoing[out_pos..out_len]`.
    outgoing: Vec<u8>,
    out_pos: usize,
    out_len: usize,
    /// Plaintext decrypted, not yet read: `plain[plain_pos..]`.
    plain: Vec<u8>,
    plain_pos: usize,
    /// The peer sent close_notify.
    pub(crate) peer_closed: bool,
    /// The socket reached end-of-file.
    eof: bool,
    /// Has a byte arrived (the handshake begun)?
    touched: bool,
    /// rustls refused the connection (the alert is queued).
    pub(crate) failed: Option<rustls::Error>,
    close_queued: bool,
    /// Has rustls encoded anything to send (keys may exist)?
    encoded: bool,
    /// Has the first flight been looked at (plain HTTP, unknown name)?
    pub(crate) sniffed: bool,
    /// The handshake must be done by then.
    pub(crate) deadline: Option<Instant>,
    /// What the step whose records are still unsent asked for.
    pub(crate) after: Option<Interest>,
    pool: Arc<Pool>,
}

impl Session {
    pub(crate) fn new(
        config: Arc<ServerConfig>,
        pool: Arc<Pool>,
        deadline: Option<Instant>,
    ) -> Result<Session, rustls::Error> {
        Ok(Session {
            conn: UnbufferedServerConnection::new(config)?,
            incoming: Vec::new(),
            in_len: 0,
            outgoing: Vec::new(),
            out_pos: 0,
            out_len: 0,
            plain: Vec::new(),
            plain_pos: 0,
            peer_closed: false,
            eof: false,
            touched: false,
            failed: None,
            close_queued: false,
            encoded: false,
            sniffed: false,
            deadline,
            after: None,
            pool,
        })
    }

    /// Nothing received, nothing sent: the socket alone is the connection
    /// (another process can take it over and do the handshake).
    pub(crate) fn untouched(&self) -> bool {
        !self.touched && !self.encoded && self.out_len == 0 && !self.eof
    }

    pub(crate) fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    pub(crate) fn resumed(&self) -> bool {
        self.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
    }

    pub(crate) fn is_tls13(&self) -> bool {
        self.conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3)
    }

    /// The ciphertext received and not yet processed.
    pub(crate) fn received(&self) -> &[u8] {
        &self.incoming[..self.in_len]
    }

    /// Bytes not yet sent.
    pub(crate) fn unsent(&self) -> usize {
        self.out_len - self.out_pos
    }

    /// Read once from the socket into the record buffer.
    pub(crate) fn fill(&mut self, raw: &mut Stream) -> io::Result<usize> {
        use std::io::Read;
        if self.incoming.is_empty() {
            self.incoming = self.pool.incoming();
        }
        if self.in_len == self.incoming.len() {
            // Only a record larger than TLS allows fills the buffer.
            return Err(io::Error::new(
                ErrorKind::InvalidData,
                "TLS record too large",
            ));
        }
        let n = raw.read(&mut self.incoming[self.in_len..])?;
        if n == 0 {
            self.eof = true;
        }
        self.touched |= n > 0;
        self.in_len += n;
        Ok(n)
    }

    /// Process the records received: handshake messages, decrypted
    /// application data (kept in `plain`), alerts; and encrypt `data`
    /// once the connection can. On error the alert to send is queued.
    pub(crate) fn process(&mut self, data: Option<&[u8]>) -> Result<Stop, rustls::Error> {
        let r = self.records(data);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
            let before = self.out_len;
            // The alert rustls queued for the peer.
            for _ in 0..8 {
                if !self.encode_alerts() {
                    break;
                }
            }
            // rustls queues none for some malformed first flights (a
            // handshake message longer than it allows): before any key
            // exists, a plaintext alert of our own says why.
            if self.out_len == before && self.conn.is_handshaking() && !self.encoded {
                let desc = match e {
                    rustls::Error::InvalidMessage(_) => 50, // decode_error
                    rustls::Error::PeerMisbehaved(_)
                    | rustls::Error::InappropriateMessage { .. }
                    | rustls::Error::InappropriateHandshakeMessage { .. } => 10, // unexpected_message
                    _ => 40, // handshake_failure
                };
                let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, desc];
                if self.outgoing.len() < self.out_len + alert.len() {
                    self.outgoing.resize(self.out_len + alert.len(), 0);
                }
                self.outgoing[self.out_len..self.out_len + alert.len()].copy_from_slice(&alert);
                self.out_len += alert.len();
            }
        }
        r
    }

    fn records(&mut self, data: Option<&[u8]>) -> Result<Stop, rustls::Error> {
        let Session {
            conn,
            incoming,
            in_len,
            outgoing,
            out_len,
            plain,
            peer_closed,
            encoded,
            ..
        } = self;
        loop {
            let discard;
            let stop = {
                let status = conn.process_tls_records(&mut incoming[..*in_len]);
                discard = status.discard;
                match status.state {
                    Err(e) => Some(Err(e)),
                    Ok(state) => match state {
                        ConnectionState::ReadTraffic(mut read) => {
                            while let Some(record) = read.next_record() {
                                match record {
                                    Ok(r) => plain.extend_from_slice(r.payload),
                                    Err(e) => return Err(e),
                                }
                            }
                            None
                        }
                        ConnectionState::EncodeTlsData(mut encode) => {
                            *encoded = true;
                            loop {
                                match encode.encode(&mut outgoing[*out_len..]) {
                                    Ok(n) => {
                                        *out_len += n;
                                        break;
                                    }
                                    Err(EncodeError::InsufficientSize(s)) => {
                                        outgoing.resize(*out_len + s.required_size, 0);
                                    }
                                    Err(EncodeError::AlreadyEncoded) => break,
                                }
                            }
                            None
                        }
                        // Encoded into our buffer: ours to send, as the socket allows.
                        ConnectionState::TransmitTlsData(transmit) => {
                            transmit.done();
                            None
                        }
                        ConnectionState::BlockedHandshake => Some(Ok(Stop::NeedInput)),
                        ConnectionState::PeerClosed => {
                            *peer_closed = true;
                            None
                        }
                        ConnectionState::Closed => {
                            *peer_closed = true;
                            Some(Ok(Stop::Closed))
                        }
                        ConnectionState::WriteTraffic(mut write) => match data {
                            None => Some(Ok(Stop::Idle)),
                            Some(data) => {
                                let records = data.len() / (16 * 1024) + 1;
                                let need = *out_len + data.len() + records * 64;
                                if outgoing.len() < need {
                                    outgoing.resize(need, 0);
                                }
                                loop {
                                    match write.encrypt(data, &mut outgoing[*out_len..]) {
                                        Ok(n) => {
                                            *out_len += n;
                                            break;
                                        }
                                        Err(EncryptError::InsufficientSize(s)) => {
                                            outgoing.resize(*out_len + s.required_size, 0);
                                        }
                                        Err(EncryptError::EncryptExhausted) => {
                                            break;
                                        }
                                    }
                                }
                                Some(Ok(Stop::Encrypted))
                            }
                        },
                        // Early data is off (max_early_data_size 0); nothing else exists yet.
                        _ => Some(Ok(Stop::Idle)),
                    },
                }
            };
            if discard > 0 {
                incoming.copy_within(discard..*in_len, 0);
                *in_len -= discard;
            }
            if let Some(stop) = stop {
                return stop;
            }
        }
    }

    /// Encode what rustls queued after an error (its alert); false once
    /// there is nothing left.
    fn encode_alerts(&mut self) -> bool {
        let Session {
            conn,
            incoming,
            in_len,
            outgoing,
            out_len,
            ..
        } = self;
        // The same buffer (rustls counts what it processed of it), less
        // what it said to discard.
        let status = conn.process_tls_records(&mut incoming[..*in_len]);
        let discard = status.discard;
        let more = match status.state {
            Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                if outgoing.len() < *out_len + 64 {
                    outgoing.resize(*out_len + 64, 0);
                }
                loop {
                    match encode.encode(&mut outgoing[*out_len..]) {
                        Ok(n) => {
                            *out_len += n;
                            break true;
                        }
                        Err(EncodeError::InsufficientSize(s)) => {
                            outgoing.resize(*out_len + s.required_size, 0);
                        }
                        Err(EncodeError::AlreadyEncoded) => break true,
                    }
                }
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                t.done();
                true
            }
            _ => false,
        };
        if discard > 0 {
            incoming.copy_within(discard..*in_len, 0);
            *in_len -= discard;
        }
        more
    }

    /// Queue close_notify (once), after everything written so far.
    pub(crate) fn queue_close_notify(&mut self) {
        if self.close_queued || self.failed.is_some() || self.is_handshaking() {
            return;
        }
        self.close_queued = true;
        // Process what arrived first (rustls hands out the state to write
        // in only then); what the peer still sends is the linger's to discard.
        if self.process(None).is_err() {
            return;
        }
        let Session {
            conn,
            incoming,
            in_len,
            outgoing,
            out_len,
            ..
        } = self;
        let status = conn.process_tls_records(&mut incoming[..*in_len]);
        let discard = status.discard;
        if let Ok(ConnectionState::WriteTraffic(mut write)) = status.state {
            if outgoing.len() < *out_len + 64 {
                outgoing.resize(*out_len + 64, 0);
            }
            if let Ok(n) = write.queue_close_notify(&mut outgoing[*out_len..]) {
                *out_len += n;
            }
        }
        if discard > 0 {
            incoming.copy_within(discard..*in_len, 0);
            *in_len -= discard;
        }
    }

    /// Send what is queued. `WouldBlock` if the socket is full (the rest
    /// stays queued).
    pub(crate) fn flush(&mut self, raw: &mut Stream, more: bool) -> io::Result<()> {
        while self.out_pos < self.out_len {
            match raw.send(&self.outgoing[self.out_pos..self.out_len], more) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out_pos = 0;
        self.out_len = 0;
        Ok(())
    }

    /// One try at sending what is queued (an alert before a close).
    pub(crate) fn flush_once(&mut self, raw: &mut Stream) {
        if self.out_pos < self.out_len {
            if let Ok(n) = raw.send(&self.outgoing[self.out_pos..self.out_len], false) {
                self.out_pos += n;
            }
        }
    }

    /// The connection parks idle: give the buffers back if nothing is in
    /// them, so that an idle connection holds only rustls's own state.
    pub(crate) fn park(&mut self) {
        if self.in_len == 0 && self.unsent() == 0 && self.plain_pos >= self.plain.len() {
            self.pool.put_incoming(std::mem::take(&mut self.incoming));
            self.pool.put_outgoing(std::mem::take(&mut self.outgoing));
            self.out_pos = 0;
            self.out_len = 0;
            self.plain = Vec::new();
            self.plain_pos = 0;
        }
    }

    fn ensure_outgoing(&mut self) {
        if self.outgoing.is_empty() {
            self.outgoing = self.pool.outgoing();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.pool.put_incoming(std::mem::take(&mut self.incoming));
        self.pool.put_outgoing(std::mem::take(&mut self.outgoing));
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, e)
}

impl Transport for Session {
    fn read(&mut self, raw: &mut Stream, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.plain_pos < self.plain.len() {
                let n = buf.len().min(self.plain.len() - self.plain_pos);
                buf[..n].copy_from_slice(&self.plain[self.plain_pos..self.plain_pos + n]);
                self.plain_pos += n;
                if self.plain_pos == self.plain.len() {
                    self.plain.clear();
                    self.plain_pos = 0;
                }
                return Ok(n);
            }
            if let Some(e) = &self.failed {
                return Err(tls_error(e.clone()));
            }
            if self.peer_closed || self.eof {
                return Ok(0);
            }
            if self.in_len > 0 {
                self.ensure_outgoing();
                self.process(None).map_err(tls_error)?;
                if self.plain_pos < self.plain.len() || self.peer_closed {
                    continue;
                }
            }
            self.fill(raw)?;
            if self.eof {
                return Ok(0);
            }
            self.ensure_outgoing();
            self.process(None).map_err(tls_error)?;
        }
    }

    fn write(&mut self, raw: &mut Stream, buf: &[u8], more: bool) -> io::Result<usize> {
        if let Some(e) = &self.failed {
            return Err(tls_error(e.clone()));
        }
        if self.unsent() > 0 {
            self.flush(raw, false)?;
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let chunk = &buf[..buf.len().min(WRITE_CHUNK)];
        self.ensure_outgoing();
        match self.process(Some(chunk)).map_err(tls_error)? {
            Stop::Encrypted => {}
            _ => return Err(ErrorKind::BrokenPipe.into()),
        }
        let more = more || chunk.len() < buf.len();
        if !more || self.unsent() >= CORK {
            match self.flush(raw, more) {
                Ok(()) => {}
                // Taken: the records go out when the socket has room
                // (the layer asks for it before the next wait).
                Err(e) if e.kind() == ErrorKind::WouldBlock && !raw.is_blocking() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(chunk.len())
    }

    fn holds_input(&self) -> bool {
        self.plain_pos < self.plain.len()
    }

    fn sendfile(
        &mut self,
        raw: &mut Stream,
        file: &std::fs::File,
        offset: &mut u64,
        count: usize,
    ) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        thread_local! {
            // One read buffer per thread, not per connection or per call.
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SCRATCH.with(|scratch| {
            let mut chunk = scratch.borrow_mut();
            if chunk.len() < WRITE_CHUNK {
                chunk.resize(WRITE_CHUNK, 0);
            }
            let want = count.min(WRITE_CHUNK);
            let n = loop {
                match file.read_at(&mut chunk[..want], *offset) {
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    other => break other?,
                }
            };
            if n == 0 {
                return Ok(0);
            }
            let sent = self.write(raw, &chunk[..n], count > n)?;
            *offset += sent as u64;
            Ok(sent)
        })
    }

    fn alpn(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Arc<ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let chain = vec![cert.der().clone()];
        let key = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        Arc::new(
            ServerConfig::builder_with_provider(Arc::new(crate::provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        )
    }

    #[test]
    fn a_malformed_hello_is_answered_with_an_alert() {
        let mut s = Session::new(config(), Arc::new(Pool::default()), None).unwrap();
        s.incoming = vec![0; RECORD_BUF];
        let garbage = [0x16, 0x03, 0x01, 0x00, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff];
        s.incoming[..garbage.len()].copy_from_slice(&garbage);
        s.in_len = garbage.len();
        let e = s.process(None);
        assert!(e.is_err(), "{e:?}");
        let sent = &s.outgoing[s.out_pos..s.out_len];
        assert_eq!(sent.first(), Some(&0x15), "{sent:?}");
    }
}
