//! The outgoing side of one connection: encoded frames waiting for the socket, and who
//! writes them. A sender encodes its envelope (outside any lock), appends the frame to
//! the connection's one write buffer and, when no write is pending, writes the whole
//! buffer itself with a non-blocking write: a request or reply reaches the socket from
//! the task that made it, with no hop to another thread. When the socket would block, the
//! buffer is handed to the connection's writer task on the I/O thread, which drains it
//! when the socket is writable; senders meanwhile only append, so frames queued under
//! load leave in few large writes. The reader appends the replies of one read's frames
//! without writing and writes them at once when it has decoded them all.
//!
//! The buffer holds at most `outbound_queue` frames from bounded senders (requests,
//! replies, stream items); heartbeats are not counted and go before every frame not yet
//! started.

use std::{
    cell::RefCell,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    task::{Context, Poll, Waker},
    time::Instant,
};

use bytes::{Buf, BytesMut};
use tokio::{io::AsyncWrite, sync::Notify};
use tokio_util::codec::Encoder;

use crate::{
    envelope::Envelope,
    frame::{EnvelopeEncoder, WriteError},
    transport::WriteHalf,
};

/// Why a frame was not queued.
#[derive(Debug)]
pub(crate) enum PushError {
    /// The buffer holds `outbound_queue` frames (and, for a waiting sender, did until its
    /// deadline).
    Full,
    /// The connection closed.
    Closed,
    /// The envelope does not fit a frame or does not encode.
    Encode(WriteError),
    /// Writing to the socket failed: the connection is dead.
    Io(io::Error),
}

/// A buffer that a large message grew is given back once it drains.
const KEEP_CAPACITY: usize = 256 * 1024;

thread_local! {
    /// Where a sender encodes its envelope before taking the buffer's lock.
    static SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(4096));
}

struct State {
    io: Option<WriteHalf>,
    q: Queue,
    /// The writer task drains the queue (the socket would block and the task's waker is
    /// registered with it): senders only append.
    writer_owns: bool,
    /// Bytes were written since the last flush (TLS keeps records until flushed).
    unflushed: bool,
    closed: bool,
}

struct Queue {
    /// Encoded frames not yet (fully) written.
    buf: BytesMut,
    /// Bytes of the partly written frame at the head of `buf` (0: `buf` starts a frame).
    head_left: usize,
    /// Frames in `buf`, the partly written one included.
    frames: usize,
}

impl Queue {
    /// `n` bytes at the head of `buf` were written: drop them and count finished frames.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            if self.head_left == 0 {
                // `buf` starts a whole frame: its length prefix is there.
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                self.head_left = 4 + len as usize;
            }
            let k = n.min(self.head_left);
            self.buf.advance(k);
            self.head_left -= k;
            n -= k;
            if self.head_left == 0 {
                self.frames -= 1;
            }
        }
        if self.buf.is_empty() && self.buf.capacity() > KEEP_CAPACITY {
            self.buf = BytesMut::with_capacity(8192);
        }
    }
}

impl State {
    /// Writes the queue and flushes, until done or the socket would block.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(io) = self.io.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        while !self.q.buf.is_empty() {
            match Pin::new(&mut *io).poll_write(cx, &self.q.buf) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the socket takes no more bytes",
                    )))
                }
                Poll::Ready(Ok(n)) => {
                    self.unflushed = true;
                    self.q.advance(n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.unflushed {
            match Pin::new(&mut *io).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The write buffer of one connection and its socket.
pub(crate) struct Outbox {
    state: Mutex<State>,
    /// Wakes the writer task: the buffer is its to drain, or the connection closed.
    pub(crate) writer_wake: Notify,
    /// Wakes senders waiting for room in the buffer.
    room: Notify,
    max_frames: usize,
    encoder: EnvelopeEncoder,
    /// Frames were queued without writing since the last [`Outbox::flush`]: only then
    /// has a flush anything to do (any other sender writes what it queues, or the
    /// writer task owns the buffer), so a read that made no reply takes no lock.
    held: AtomicBool,
}

impl Outbox {
    pub(crate) fn new(
        io: WriteHalf,
        pending: BytesMut,
        max_frames: usize,
        max_frame_bytes: usize,
    ) -> Outbox {
        // Bytes the handshake left unwritten are whole frames (it flushes; normally none).
        let mut buf = BytesMut::with_capacity(8192);
        buf.extend_from_slice(&pending);
        let state = State {
            io: Some(io),
            q: Queue {
                buf,
                head_left: 0,
                frames: count_frames(&pending),
            },
            writer_owns: false,
            unflushed: false,
            closed: false,
        };
        Outbox {
            state: Mutex::new(state),
            writer_wake: Notify::new(),
            room: Notify::new(),
            max_frames: max_frames.max(1),
            encoder: EnvelopeEncoder { max_frame_bytes },
            held: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves whole frames or a counted partial one:
        // the state stays usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes `env` and queues its frame; `bounded` senders are refused with `Full` when
    /// the buffer holds `outbound_queue` frames. With `write`, the buffer is written now
    /// unless the writer task owns it; without, the caller writes later ([`Outbox::flush`]).
    pub(crate) fn try_push(
        &self,
        env: &Envelope,
        bounded: bool,
        write: bool,
    ) -> Result<(), PushError> {
        SCRATCH.with(|scratch| {
            let mut scratch = match scratch.try_borrow_mut() {
                Ok(s) => s,
                // Not reentrant in practice; never panic if it were.
                Err(_) => {
                    return self.push_encoded(&encode(self.encoder, env)?, bounded, write, false)
                }
            };
            scratch.clear();
            let mut enc = self.encoder;
            enc.encode(env, &mut scratch).map_err(PushError::Encode)?;
            let r = self.push_encoded(&scratch, bounded, write, false);
            if scratch.capacity() > KEEP_CAPACITY {
                *scratch = BytesMut::with_capacity(4096);
            }
            r
        })
    }

    /// Queues a heartbeat frame ahead of every frame not yet started, and writes.
    pub(crate) fn push_first(&self, frame: &[u8]) -> Result<(), PushError> {
        self.push_encoded(frame, false, true, true)
    }

    fn push_encoded(
        &self,
        frame: &[u8],
        bounded: bool,
        write: bool,
        first: bool,
    ) -> Result<(), PushError> {
        let mut st = self.lock();
        if st.closed {
            return Err(PushError::Closed);
        }
        if bounded && st.q.frames >= self.max_frames {
            return Err(PushError::Full);
        }
        let q = &mut st.q;
        if first && !q.buf.is_empty() {
            // After the partly written frame, before the rest (a rare copy: once per
            // heartbeat interval, and only behind a backlog).
            let tail = q.buf.split_off(q.head_left);
            q.buf.extend_from_slice(frame);
            q.buf.unsplit(tail);
        } else {
            q.buf.extend_from_slice(frame);
        }
        q.frames += 1;
        if write {
            self.write_locked(&mut st)
        } else {
            self.held.store(true, Ordering::Release);
            Ok(())
        }
    }

    /// Queues `env`, waiting for room until `deadline` (forever without one). Room that
    /// comes only after the deadline is not taken (a sender whose thread was busy sees both
    /// at once): `Full`, and nothing was queued.
    pub(crate) async fn push(
        &self,
        env: &Envelope,
        deadline: Option<Instant>,
    ) -> Result<(), PushError> {
        match self.try_push(env, true, true) {
            Err(PushError::Full) => {}
            other => return other,
        }
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.try_push(env, true, true) {
                Err(PushError::Full) => {}
                other => return other,
            }
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d.into(), room).await.is_err() || Instant::now() >= d
                    {
                        return Err(PushError::Full);
                    }
                }
                None => room.await,
            }
        }
    }

    /// Writes what was queued without writing, unless the writer task owns the buffer.
    pub(crate) fn flush(&self) -> Result<(), PushError> {
        if !self.held.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let mut st = self.lock();
        if st.q.buf.is_empty() && !st.unflushed {
            return Ok(());
        }
        self.write_locked(&mut st)
    }

    fn write_locked(&self, st: &mut State) -> Result<(), PushError> {
        if st.writer_owns || st.closed {
            return Ok(());
        }
        let before = st.q.frames;
        // A non-blocking attempt: should the socket block, the writer task takes over
        // (its poll replaces this no-op waker with its own).
        let mut cx = Context::from_waker(Waker::noop());
        let r = st.drive(&mut cx);
        self.wake_senders(before, st.q.frames);
        match r {
            Poll::Ready(Ok(())) => Ok(()),
            Poll::Ready(Err(e)) => Err(PushError::Io(e)),
            Poll::Pending => {
                st.writer_owns = true;
                self.writer_wake.notify_one();
                Ok(())
            }
        }
    }

    fn wake_senders(&self, before: usize, after: usize) {
        if before >= self.max_frames && after < self.max_frames {
            self.room.notify_waiters();
        }
    }

    /// The writer task's poll: drains the buffer it owns (or finds nothing to do).
    pub(crate) fn poll_drain(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.lock();
        if st.closed {
            return Poll::Ready(Ok(()));
        }
        st.writer_owns = true;
        let before = st.q.frames;
        let r = st.drive(cx);
        self.wake_senders(before, st.q.frames);
        if r.is_ready() {
            st.writer_owns = false;
        }
        r
    }

    /// Refuses new frames and wakes every waiter; the writer task then shuts the socket.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.room.notify_waiters();
        self.writer_wake.notify_one();
    }

    /// Takes the socket and what is left to write, for the writer task's last flush.
    pub(crate) fn take_io(&self) -> Option<(WriteHalf, BytesMut)> {
        let mut st = self.lock();
        let buf = std::mem::take(&mut st.q.buf);
        st.q.frames = 0;
        st.q.head_left = 0;
        st.io.take().map(|io| (io, buf))
    }
}

fn encode(mut encoder: EnvelopeEncoder, env: &Envelope) -> Result<BytesMut, PushError> {
    let mut out = BytesMut::new();
    encoder.encode(env, &mut out).map_err(PushError::Encode)?;
    Ok(out)
}

fn count_frames(mut bytes: &[u8]) -> usize {
    let mut n = 0;
    while bytes.len() >= 4 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        bytes = &bytes[(4 + len).min(bytes.len())..];
        n += 1;
    }
    n
}
