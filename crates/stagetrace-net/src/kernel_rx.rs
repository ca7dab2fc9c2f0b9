//! [`KernelRx`]: a TCP stream that asks the kernel when its bytes arrived
//! (`SO_TIMESTAMPING` with `SOF_TIMESTAMPING_RX_SOFTWARE`, read from the
//! control messages of `recvmsg`), so a stamp of "the whole message is in"
//! can be the kernel's instead of the moment a busy event loop got round to
//! reading it (`docs/clocks.md`, "Kernel and user-space stamps").
//!
//! Why it matters: a server whose event loop waits for a CPU stamps its
//! receive late, and that wait used to count as uplink — the network blamed
//! for the server's own scheduling. With the kernel's stamp the uplink ends
//! when the bytes were in, and the wait until the loop read them is a
//! figure of its own (`rx_wait`).
//!
//! For TCP the kernel reports, with each `recvmsg`, the software receive
//! time of the newest segment it copied out. Where the kernel refuses the
//! option (not Linux, an old kernel) reads go straight through and
//! [`KernelRx::last_rx`] stays `None`: the user-space stamps stand.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Oldest kernel stamp believed, against the moment it is read: older is a
/// wall-clock step between the two readings, not a wait.
const MAX_AGE: Duration = Duration::from_secs(10);

/// A TCP stream whose reads note when the kernel had their bytes.
#[derive(Debug)]
pub(crate) struct KernelRx {
    inner: TcpStream,
    /// The kernel agreed to stamp this socket's receives.
    on: bool,
    /// The kernel's receive time of the newest bytes read so far.
    last: Option<Instant>,
}

impl KernelRx {
    /// Wraps `inner`, asking the kernel to stamp its receives.
    pub(crate) fn new(inner: TcpStream) -> Self {
        let on = sys::enable(&inner);
        KernelRx {
            inner,
            on,
            last: None,
        }
    }

    /// When the kernel had the newest bytes read so far, on this process's
    /// monotonic clock; `None` without kernel stamps.
    pub(crate) fn last_rx(&self) -> Option<Instant> {
        self.last
    }

    /// Whether the kernel stamps this socket's receives.
    #[cfg(test)]
    fn is_on(&self) -> bool {
        self.on
    }
}

impl AsyncRead for KernelRx {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.on {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let read = this.inner.try_io(tokio::io::Interest::READABLE, || {
                sys::recv_stamped(&this.inner, unfilled)
            });
            match read {
                Ok((n, stamp)) => {
                    if let Some(at) = stamp.and_then(sys::ago).and_then(to_instant) {
                        this.last = Some(at);
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// A stamp `ago` before now, on the monotonic clock.
fn to_instant(ago: Duration) -> Option<Instant> {
    (ago <= MAX_AGE)
        .then(|| Instant::now().checked_sub(ago))
        .flatten()
}

impl AsyncWrite for KernelRx {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use tokio::net::TcpStream;

    /// Asks the kernel for software receive stamps on `s`.
    pub(super) fn enable(s: &TcpStream) -> bool {
        let flags =
            (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
        // SAFETY: setsockopt reads one c_int through a valid pointer.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPING,
                std::ptr::from_ref(&flags).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        rc == 0
    }

    /// One non-blocking `recvmsg` into `buf`: the bytes read and the
    /// kernel's software receive stamp of the newest of them, if it sent
    /// one.
    pub(super) fn recv_stamped(
        s: &TcpStream,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<libc::timespec>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // Room for one SCM_TIMESTAMPING message (three timespecs), aligned
        // for the cmsg header.
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is a valid value of the plain C struct.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: msg points at a live iovec over `buf` and a live control
        // buffer, both of the lengths given.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut stamp = None;
        // SAFETY: the CMSG_* walk stays inside the control buffer the
        // kernel filled (msg_controllen was updated by recvmsg); the data
        // of an SCM_TIMESTAMPING message is three timespecs, read unaligned.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET
                    && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPING
                {
                    let ts: [libc::timespec; 3] =
                        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                    if ts[0].tv_sec != 0 || ts[0].tv_nsec != 0 {
                        stamp = Some(ts[0]);
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        Ok((usize::try_from(n).unwrap_or(0), stamp))
    }

    /// How long before now (the wall clock the kernel stamps with) `ts`
    /// was; `None` for a stamp in the future (a wall-clock step).
    pub(super) fn ago(ts: libc::timespec) -> Option<Duration> {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } != 0 {
            return None;
        }
        let ns = |t: libc::timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
        let ago = ns(now) - ns(ts);
        u64::try_from(ago).ok().map(Duration::from_nanos)
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;
    use std::time::Duration;

    use tokio::net::TcpStream;

    pub(super) fn enable(_: &TcpStream) -> bool {
        false
    }

    pub(super) fn recv_stamped(_: &TcpStream, _: &mut [u8]) -> io::Result<(usize, Option<()>)> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn ago(_: ()) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The kernel's stamp of bytes that sat in the socket while the reader
    /// slept lies before the read, by about the sleep: the wait between the
    /// bytes' arrival and the read is what a user-space stamp would have
    /// counted as network.
    #[test]
    fn bytes_that_waited_in_the_socket_carry_their_arrival_not_the_read() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(waited_bytes());
    }

    async fn waited_bytes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut tx = TcpStream::connect(addr).await.unwrap();
        let (rx, _) = listener.accept().await.unwrap();
        let mut rx = KernelRx::new(rx);
        if !rx.is_on() {
            assert!(
                std::env::var_os("CI").is_none() || !cfg!(target_os = "linux"),
                "the kernel refused SO_TIMESTAMPING under CI"
            );
            return;
        }
        // The kernel switches receive stamping on for the whole host through
        // a deferred work item when the first socket asks for it
        // (net_enable_timestamp): segments queued in the moments before it
        // runs carry no stamp. Wait, bounded, until a byte comes stamped.
        let mut warm = [0u8; 1];
        let mut stamped = false;
        for _ in 0..200 {
            tx.write_all(b"w").await.unwrap();
            rx.read_exact(&mut warm).await.unwrap();
            if rx.last_rx().is_some() {
                stamped = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(stamped, "no kernel receive stamp within 1 s of asking");
        let before_send = Instant::now();
        tx.write_all(b"hello").await.unwrap();
        let after_send = Instant::now();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut buf = [0u8; 5];
        let before_read = Instant::now();
        rx.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        let at = rx.last_rx().unwrap();
        // On loopback the segment reaches the socket as the send runs; the
        // stamp is no earlier than the send began (less the two clocks'
        // reading skew, a few µs) and long before the read.
        let skew = Duration::from_micros(50);
        assert!(at + skew >= before_send, "{at:?} {before_send:?}");
        assert!(
            at <= after_send + Duration::from_millis(5),
            "{at:?} {after_send:?}"
        );
        assert!(before_read.duration_since(at) >= Duration::from_millis(29));
    }
}
