//! Accepting and serving connections, and staying up while doing it: a header-read timeout (a
//! request's head must complete once it starts), an idle timeout (no request in progress), a
//! request-body timeout, a connection cap (connections past it get a 503 and are closed), and an
//! accept back-off when file descriptors run out, so the loop never spins and the connections
//! already open (a health checker's among them) keep being served. What happens is reported as
//! [`Notice`]s.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::server::{self, Body, St};
use crate::SimError;

/// Connection time limits and the connection cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Once a request's first byte arrives, its head (request line and headers) must be complete
    /// within this long, or the connection is closed.
    pub header_timeout: Duration,
    /// A request's body must arrive within this long of its head, or it is answered 408.
    pub body_timeout: Duration,
    /// A connection with no request in progress and no byte received for this long is closed.
    pub idle_timeout: Duration,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

/// The largest `--max-connections`.
pub const MAX_CONNECTIONS: u32 = 1_000_000;

impl Limits {
    /// Refuses zero timeouts and a cap outside 1..=[`MAX_CONNECTIONS`].
    pub fn validate(&self) -> Result<(), SimError> {
        for (flag, d) in
            [("--header-timeout", self.header_timeout), ("--body-timeout", self.body_timeout), ("--idle-timeout", self.idle_timeout)]
        {
            if d.is_zero() {
                return Err(SimError::Input(format!("{flag} 0s would close every connection at once: give a duration > 0, e.g. 10s")));
            }
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(SimError::Input(format!("--max-connections {} is out of range: give 1..={MAX_CONNECTIONS}", self.max_connections)));
        }
        Ok(())
    }
}

/// Why the server closed a connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The request head did not complete within the header timeout.
    HeaderTimeout,
    /// Nothing arrived and nothing was in progress for the idle timeout.
    IdleTimeout,
}

/// Something the server's operator should know, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// `accept` failed for lack of file descriptors (or memory); accepting pauses and backs off.
    FdsExhausted {
        /// The operating system's error.
        error: String,
        /// The first pause (it doubles up to a second while the shortage lasts).
        pause: Duration,
    },
    /// Accepting works again after a shortage of file descriptors.
    FdsRecovered {
        /// How long the shortage lasted.
        after: Duration,
    },
    /// The connection cap was reached: new connections get 503 until one closes.
    ConnectionCap {
        /// The cap.
        cap: u32,
    },
    /// A connection was closed by a time limit.
    Dropped {
        /// The client, where known.
        peer: Option<SocketAddr>,
        /// Which limit.
        reason: DropReason,
        /// The limit's value.
        after: Duration,
    },
    /// `accept` failed for another reason (the loop goes on).
    AcceptFailed {
        /// The operating system's error.
        error: String,
    },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::FdsExhausted { error, pause } => write!(
                f,
                "out of file descriptors ({error}): pausing accept for {} ms and backing off; open connections are still served (raise `ulimit -n` or lower --max-connections)",
                pause.as_millis()
            ),
            Notice::FdsRecovered { after } => write!(f, "accepting connections again after {:.1} s without file descriptors", after.as_secs_f64()),
            Notice::ConnectionCap { cap } => write!(f, "connection cap of {cap} reached (--max-connections): new connections get HTTP 503 until one closes"),
            Notice::Dropped { peer, reason, after } => {
                let who = peer.map_or_else(|| "a client".to_string(), |p| p.to_string());
                let what = match reason {
                    DropReason::HeaderTimeout => "did not finish its request headers",
                    DropReason::IdleTimeout => "was idle",
                };
                write!(f, "closed the connection of {who}: it {what} for {:.1} s", after.as_secs_f64())
            }
            Notice::AcceptFailed { error } => write!(f, "accept failed: {error}"),
        }
    }
}

/// Sends notices without ever blocking the server: when nobody reads them, the newest are dropped.
#[derive(Debug, Clone)]
pub(crate) struct Notices(pub(crate) mpsc::Sender<Notice>);

impl Notices {
    fn send(&self, n: Notice) {
        let _ = self.0.try_send(n);
    }
}

/// One connection's clock: the last byte received, when the current request head began, and the
/// requests in progress.
struct Watch {
    epoch: Instant,
    last_read_ms: AtomicU64,
    head_since_ms: AtomicU64,
    in_flight: AtomicU32,
}

const NO_HEAD: u64 = u64::MAX;

impl Watch {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last_read_ms: AtomicU64::new(0),
            head_since_ms: AtomicU64::new(NO_HEAD),
            in_flight: AtomicU32::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn on_read(&self) {
        let now = self.now_ms();
        self.last_read_ms.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ = self.head_since_ms.compare_exchange(NO_HEAD, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The limit this connection has passed, if any.
    fn expired(&self, l: &Limits) -> Option<(DropReason, Duration)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let now = self.now_ms();
        let head = self.head_since_ms.load(Ordering::Acquire);
        let over = |since: u64, limit: Duration| u128::from(now.saturating_sub(since)) > limit.as_millis();
        if head != NO_HEAD {
            return over(head, l.header_timeout).then_some((DropReason::HeaderTimeout, l.header_timeout));
        }
        over(self.last_read_ms.load(Ordering::Relaxed), l.idle_timeout).then_some((DropReason::IdleTimeout, l.idle_timeout))
    }
}

/// Marks a request in progress on its connection until the response body is dropped.
struct InFlight(Arc<Watch>);

impl InFlight {
    fn enter(w: &Arc<Watch>) -> Self {
        w.in_flight.fetch_add(1, Ordering::AcqRel);
        w.head_since_ms.store(NO_HEAD, Ordering::Release);
        Self(Arc::clone(w))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last_read_ms.store(self.0.now_ms(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that ends its request's [`InFlight`] mark when it is dropped.
pub struct Tracked {
    inner: Body,
    _mark: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A stream that reports every read to its connection's [`Watch`].
struct Watched<S> {
    inner: S,
    watch: Arc<Watch>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.on_read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Resolves when the connection passes a time limit.
async fn watchdog(w: &Watch, l: &Limits) -> (DropReason, Duration) {
    let tick = (l.header_timeout.min(l.idle_timeout) / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        tokio::time::sleep(tick).await;
        if let Some(r) = w.expired(l) {
            return r;
        }
    }
}

/// Serves HTTP/1.1 on `io` until the client closes it or a time limit closes it.
pub(crate) async fn serve<S>(st: Arc<St>, io: S, peer: Option<SocketAddr>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let watch = Arc::new(Watch::new());
    let io = TokioIo::new(Watched { inner: io, watch: Arc::clone(&watch) });
    let (svc_st, svc_watch) = (Arc::clone(&st), Arc::clone(&watch));
    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let st = Arc::clone(&svc_st);
        let mark = InFlight::enter(&svc_watch);
        async move { Ok::<_, Infallible>(server::handle(st, req).await.map(|inner| Tracked { inner, _mark: mark })) }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, svc);
    tokio::select! {
        _ = conn => {}
        (reason, after) = watchdog(&watch, &st.cfg.limits) => st.notices.send(Notice::Dropped { peer, reason, after }),
    }
}

/// Whether an `accept` error means the process (or system) is out of descriptors or memory.
fn is_exhaustion(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// The accept back-off while file descriptors are short.
#[derive(Debug, Default)]
struct Backoff {
    pause: Option<Duration>,
    since: Option<Instant>,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    /// The pause after a failed accept.
    fn failed(&mut self, e: &std::io::Error, notices: &Notices) -> Duration {
        if !is_exhaustion(e) {
            notices.send(Notice::AcceptFailed { error: e.to_string() });
            return Self::FIRST;
        }
        let pause = self.pause.map_or(Self::FIRST, |p| (p * 2).min(Self::MAX));
        if self.since.is_none() {
            self.since = Some(Instant::now());
            notices.send(Notice::FdsExhausted { error: e.to_string(), pause });
        }
        self.pause = Some(pause);
        pause
    }

    fn accepted(&mut self, notices: &Notices) {
        self.pause = None;
        if let Some(t) = self.since.take() {
            notices.send(Notice::FdsRecovered { after: t.elapsed() });
        }
    }
}

/// Answers a connection past the cap with a 503 and closes it.
async fn refuse(mut sock: TcpStream, cap: u32) {
    let body =
        crate::wire::error_body(503, &format!("the server is at its connection cap of {cap} (--max-connections): retry later"), None);
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let write = async {
        sock.write_all(head.as_bytes()).await?;
        sock.write_all(&body).await?;
        sock.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

/// Accepts connections forever; dropping the future closes the listener and every connection.
pub(crate) async fn accept_loop(listener: TcpListener, st: Arc<St>) {
    let cap = st.cfg.limits.max_connections;
    let permits = Arc::new(Semaphore::new(cap as usize));
    let mut conns = JoinSet::new();
    let mut backoff = Backoff::default();
    let mut at_cap = false;
    loop {
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((sock, peer)) => {
                    backoff.accepted(&st.notices);
                    let _ = sock.set_nodelay(true);
                    match Arc::clone(&permits).try_acquire_owned() {
                        Ok(permit) => {
                            at_cap = false;
                            conns.spawn(serve_tcp(Arc::clone(&st), sock, peer, permit));
                        }
                        Err(_) => {
                            if !at_cap {
                                st.notices.send(Notice::ConnectionCap { cap });
                            }
                            at_cap = true;
                            conns.spawn(refuse(sock, cap));
                        }
                    }
                }
                Err(e) => tokio::time::sleep(backoff.failed(&e, &st.notices)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_tcp(st: Arc<St>, sock: TcpStream, peer: SocketAddr, _permit: OwnedSemaphorePermit) {
    serve(st, sock, Some(peer)).await;
}
