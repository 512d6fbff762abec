//! Read and write buffers shared by all connections, so that a connection
//! parked idle between requests holds none.

use parking_lot::Mutex;

/// The size of a fresh read buffer; larger heads and bodies grow it.
pub(crate) const READ_BUFFER: usize = 4 * 1024;
/// The capacity of a fresh write buffer.
const WRITE_BUFFER: usize = 4 * 1024;
/// Buffers kept for reuse, per kind; beyond it they are freed.
const KEPT: usize = 1024;
/// A buffer grown past this is freed rather than kept.
const LARGEST_KEPT: usize = 64 * 1024;

/// Free read buffers (zero-filled to [`READ_BUFFER`] once, contents stale)
/// and write buffers (empty, with capacity).
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    read: Mutex<Vec<Vec<u8>>>,
    write: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// A read buffer whose length is its usable size.
    pub(crate) fn read_buffer(&self) -> Vec<u8> {
        self.read
            .lock()
            .pop()
            .unwrap_or_else(|| vec![0; READ_BUFFER])
    }

    /// An empty write buffer.
    pub(crate) fn write_buffer(&self) -> Vec<u8> {
        self.write
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(WRITE_BUFFER))
    }

    /// Give back a read buffer.
    pub(crate) fn put_read(&self, buf: Vec<u8>) {
        if buf.len() == READ_BUFFER {
            let mut free = self.read.lock();
            if free.len() < KEPT {
                free.push(buf);
            }
        }
    }

    /// Give back a write buffer.
    pub(crate) fn put_write(&self, mut buf: Vec<u8>) {
        if buf.capacity() > 0 && buf.capacity() <= LARGEST_KEPT {
            buf.clear();
            let mut free = self.write.lock();
            if free.len() < KEPT {
                free.push(buf);
            }
        }
    }
}
