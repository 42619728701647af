//! HTTP/1.1 connections read by the task of the request they carry, and the pool of idle ones.
//!
//! The client speaks the part of HTTP/1.1 a benchmark meets itself: one request at a time on a
//! kept-alive connection, a response head, and a body framed by `content-length`, by chunked
//! transfer coding or by the connection's close. Why not a general HTTP client: here the request's
//! task reads its connection into the connection's own buffer and takes the body straight out of
//! it, so an arrival costs one wake-up and one `recv`; no connection task hands frames to the
//! request task over a channel, and no buffer is allocated or reference-counted per chunk. Every
//! read that returns bytes stamps its time ([`Lease::last_read`]): a chunk's time is the read that
//! brought it, not when a busy client got round to parsing it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method, Uri};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An idle connection older than this is closed rather than reused: servers close idle keep-alive
/// connections after a while (uvicorn after 5 s, most proxies after 60 s), and a request sent on
/// one the server is closing fails for no fault of the server's.
const MAX_IDLE: Duration = Duration::from_secs(4);

/// A response head longer than this is refused (servers send well under 8 KiB).
const MAX_HEAD: usize = 64 << 10;

/// A chunk-size or trailer line longer than this is refused.
const MAX_LINE: usize = 4096;

/// Room for one read: a token event is about 100 bytes, so a connection that fell behind (or a
/// server that writes many events at once) is caught up by one `recv`.
const READ_BUF: usize = 16 << 10;

/// One TCP connection and the bytes read from it but not yet taken.
struct Conn {
    tcp: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` already taken.
    pos: usize,
    /// When the last read that returned bytes returned.
    last_read: Option<Instant>,
}

impl Conn {
    fn new(tcp: TcpStream) -> Self {
        Self { tcp, buf: Vec::with_capacity(READ_BUF), pos: 0, last_read: None }
    }

    fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// One read into the buffer: the bytes it brought, 0 at the end of the stream. A read that
    /// brings bytes stamps its time the moment it returns.
    async fn read_more(&mut self) -> std::io::Result<usize> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        if self.buf.len() == self.buf.capacity() {
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            } else {
                self.buf.reserve(self.buf.capacity().max(READ_BUF));
            }
        }
        let n = self.tcp.read_buf(&mut self.buf).await?;
        if n > 0 {
            self.last_read = Some(Instant::now());
        }
        Ok(n)
    }

    /// True when the connection is still open, idle and has nothing unread (a server that closed
    /// it has sent the end of its stream). Never waits.
    fn usable(&self) -> bool {
        if !self.buffered().is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.tcp.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// Host and port: the connections to one of them are interchangeable.
type Key = (String, u16);

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Turns a host name and port into addresses. It may block (the system's resolver does), so it
/// runs on the blocking pool, and the connect limit covers it.
pub type Resolve = fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>;

/// The system's resolver (`getaddrinfo`: /etc/hosts, DNS, as nsswitch.conf says).
pub fn system_resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    (host, port).to_socket_addrs().map(Iterator::collect)
}

/// Idle keep-alive connections by origin, taken last-in first-out.
pub struct Pool {
    idle: Mutex<HashMap<Key, Vec<Idle>>>,
    opened: AtomicU64,
    resolve: Resolve,
}

impl Default for Pool {
    fn default() -> Self {
        Self::with_resolver(system_resolve)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("opened", &self.opened()).finish()
    }
}

/// One request, ready to be sent (again, on a fresh connection, if a reused one was closed): its
/// origin and its bytes on the wire, head and body.
#[derive(Clone)]
pub struct Target {
    key: Key,
    wire: Bytes,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The wire bytes may hold a key: never printed.
        f.debug_struct("Target").field("key", &self.key).field("bytes", &self.wire.len()).finish()
    }
}

impl Target {
    /// A request for the absolute `url`; `Err` names what is wrong with the URL.
    pub fn new(method: Method, url: &str, auth: Option<HeaderValue>, body: Bytes) -> Result<Self, String> {
        let u: Uri = url.parse().map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let host = u.host().filter(|h| !h.is_empty()).ok_or_else(|| format!("{url:?} has no host"))?;
        let port = u.port_u16().unwrap_or(80);
        let authority = u.authority().map(|a| a.as_str()).unwrap_or(host);
        // Credentials in a URL are never sent (they were stripped before); the Host header is
        // the authority without them.
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let hostv = HeaderValue::from_str(authority).map_err(|e| format!("{url:?}: the host is not a header value: {e}"))?;
        // A parsed URI's path and query hold no space, CR or LF: safe on the request line.
        let path = u.path_and_query().map_or("/", |p| p.as_str());
        let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let mut w = Vec::with_capacity(160 + body.len());
        for part in [method.as_str().as_bytes(), b" ", path.as_bytes(), b" HTTP/1.1\r\nhost: ", hostv.as_bytes(), b"\r\n"] {
            w.extend_from_slice(part);
        }
        if !body.is_empty() {
            w.extend_from_slice(b"content-type: application/json\r\n");
        }
        if !body.is_empty() || !matches!(method, Method::GET | Method::HEAD) {
            w.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
        }
        if let Some(a) = &auth {
            for part in [&b"authorization: "[..], a.as_bytes(), b"\r\n"] {
                w.extend_from_slice(part);
            }
        }
        w.extend_from_slice(b"\r\n");
        w.extend_from_slice(&body);
        Ok(Self { key: (bare, port), wire: Bytes::from(w) })
    }
}

/// Why a request got no response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// No TCP connection could be made.
    Connect(String),
    /// The connect limit passed.
    ConnectTimeout(String),
    /// The connection closed or broke before a response head (or the head was not HTTP/1.x).
    Closed(String),
}

/// A response head: what the caller needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// The `content-type`, lower case (empty when absent).
    pub content_type: String,
}

/// How the body of a response ends, and how far it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// `content-length`: this many bytes to go.
    Length(u64),
    /// Chunked transfer coding.
    Chunked(Chunked),
    /// Up to the connection's close.
    UntilClose,
    /// Read to its end.
    Done,
}

/// Where in the chunked coding the reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes to go.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last (empty) chunk: trailer lines up to a blank one.
    Trailer,
}

/// Why a request got no answer: `Unanswered` on a reused connection is worth one more try on a new
/// one (the server closed it while idle); `Broke` is not.
enum Failure {
    Unanswered(String),
    Broke(String),
}

impl Pool {
    /// A pool whose host names are resolved by `resolve` (the default is [`system_resolve`]).
    pub fn with_resolver(resolve: Resolve) -> Self {
        Self { idle: Mutex::default(), opened: AtomicU64::new(0), resolve }
    }

    /// Connections opened so far (a pool that reuses them opens about as many as requests run at
    /// once).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Sends `t` on an idle connection to its origin, or a new one, and reads the response head.
    /// A reused connection that turns out closed before any answer is replaced by a new one, once.
    /// `shown` is the URL as errors print it.
    pub async fn send(&self, t: &Target, shown: &str, connect: Duration) -> Result<(Head, Lease<'_>), SendError> {
        if let Some(conn) = self.checkout(&t.key) {
            let mut lease = Lease::new(self, t.key.clone(), conn);
            match lease.exchange(t).await {
                Ok(head) => return Ok((head, lease)),
                Err(Failure::Unanswered(_)) => {}
                Err(Failure::Broke(e)) => return Err(SendError::Closed(closed_detail(shown, &e))),
            }
        }
        let conn = self.connect(&t.key, shown, connect).await?;
        let mut lease = Lease::new(self, t.key.clone(), conn);
        match lease.exchange(t).await {
            Ok(head) => Ok((head, lease)),
            Err(Failure::Unanswered(e) | Failure::Broke(e)) => Err(SendError::Closed(closed_detail(shown, &e))),
        }
    }

    fn checkout(&self, key: &Key) -> Option<Conn> {
        loop {
            let idle = self.idle.lock().ok()?.get_mut(key)?.pop()?;
            if idle.since.elapsed() < MAX_IDLE && idle.conn.usable() {
                return Some(idle.conn);
            }
        }
    }

    fn checkin(&self, key: Key, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.entry(key).or_default().push(Idle { conn, since: Instant::now() });
        }
    }

    /// Resolves the host and opens a TCP connection, both within `limit`: a resolver that never
    /// answers (a DNS server dropping queries) is a connect timeout like a silent port. The lookup
    /// runs on the blocking pool; when the limit passes first it is left to finish on its own.
    async fn connect(&self, key: &Key, shown: &str, limit: Duration) -> Result<Conn, SendError> {
        let deadline = tokio::time::Instant::now() + limit;
        let (host, port, resolve) = (key.0.clone(), key.1, self.resolve);
        let lookup = async move {
            if let Ok(ip) = host.parse::<IpAddr>() {
                return Ok(vec![SocketAddr::new(ip, port)]);
            }
            tokio::task::spawn_blocking(move || resolve(&host, port)).await.map_err(std::io::Error::other)?
        };
        let addrs = match tokio::time::timeout_at(deadline, lookup).await {
            Err(_) => {
                return Err(SendError::ConnectTimeout(format!(
                    "cannot connect to {shown}: the host name {} did not resolve within {:.1} s (--connect-timeout); check the name and the DNS servers",
                    key.0,
                    limit.as_secs_f64()
                )))
            }
            Ok(Err(e)) => return Err(SendError::Connect(format!("cannot connect to {shown}: cannot resolve {}: {e}", key.0))),
            Ok(Ok(a)) if a.is_empty() => return Err(SendError::Connect(format!("cannot connect to {shown}: {} has no address", key.0))),
            Ok(Ok(a)) => a,
        };
        let tcp = match tokio::time::timeout_at(deadline, connect_any(&addrs)).await {
            Err(_) => {
                return Err(SendError::ConnectTimeout(format!("cannot connect to {shown}: connection timed out (--connect-timeout)")))
            }
            Ok(Err(e)) => return Err(SendError::Connect(format!("cannot connect to {shown}: {e}"))),
            Ok(Ok(s)) => s,
        };
        // Small requests go out at once: Nagle's delay would add to every latency measured.
        let _ = tcp.set_nodelay(true);
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Conn::new(tcp))
    }
}

/// Connects to the first address that accepts, in the resolver's order; the last error otherwise.
async fn connect_any(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = None;
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address to connect to")))
}

/// The detail of a connection that closed or broke before a response head.
fn closed_detail(shown: &str, e: &str) -> String {
    format!("{shown}: the connection closed before a response: {e}")
}

/// Where a response head ends (just past its blank line), if it is all in `b`.
fn head_end(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(p) = b[i..].iter().position(|&c| c == b'\n') {
        let nl = i + p;
        let rest = &b[nl + 1..];
        if rest.starts_with(b"\n") {
            return Some(nl + 2);
        }
        if rest.starts_with(b"\r\n") {
            return Some(nl + 3);
        }
        i = nl + 1;
    }
    None
}

/// A response head, parsed.
struct Parsed {
    head: Head,
    body: Body,
    keep_alive: bool,
}

/// Parses a response head (status line and header lines, up to its blank line).
fn parse_head(raw: &[u8]) -> Result<Parsed, String> {
    let text = String::from_utf8_lossy(raw);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let status = parts.next().and_then(|s| s.parse::<u16>().ok()).filter(|s| (100..1000).contains(s));
    let (Some(status), true) = (status, version.starts_with("HTTP/1.")) else {
        let shown: String = status_line.chars().take(80).collect();
        return Err(format!("the answer is not an HTTP/1.x response (its first line is {shown:?})"));
    };
    let mut keep_alive = version == "HTTP/1.1";
    let (mut length, mut coding, mut content_type) = (None::<u64>, None::<bool>, String::new());
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or_else(|| format!("a response header line has no colon: {line:?}"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value.parse().map_err(|_| format!("the content-length {value:?} is not a number"))?;
            if length.is_some_and(|l| l != n) {
                return Err("the response has two different content-lengths".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            coding = Some(value.rsplit(',').next().is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked")));
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = value.to_ascii_lowercase();
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && version == "HTTP/1.0" {
                    keep_alive = true;
                }
            }
        }
    }
    // RFC 9112 section 6.3: no body for 1xx, 204 and 304; a transfer coding overrides a length; a
    // coding that does not end in chunked, or no length at all, runs to the close.
    let body = match (status, coding, length) {
        (s, _, _) if s < 200 || s == 204 || s == 304 => Body::Done,
        (_, Some(true), _) => Body::Chunked(Chunked::Size),
        (_, None, Some(0)) => Body::Done,
        (_, None, Some(n)) => Body::Length(n),
        _ => {
            keep_alive = false;
            Body::UntilClose
        }
    };
    Ok(Parsed { head: Head { status, content_type }, body, keep_alive })
}

/// A line (without its CRLF or LF) at the start of `b`, and the bytes it takes with its end.
fn line_at(b: &[u8]) -> Option<(&[u8], usize)> {
    let nl = b.iter().position(|&c| c == b'\n')?;
    let line = &b[..nl];
    Some((line.strip_suffix(b"\r").unwrap_or(line), nl + 1))
}

/// The size of a chunk from its size line (hex digits, then perhaps `;extensions`).
fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let digits = line.split(|&c| c == b';').next().unwrap_or(b"");
    let digits = String::from_utf8_lossy(digits);
    let digits = digits.trim_matches([' ', '\t']);
    if digits.is_empty() || digits.len() > 15 {
        return Err(format!("a chunk size line {:?} has no size of at most 15 hex digits", String::from_utf8_lossy(line)));
    }
    u64::from_str_radix(digits, 16).map_err(|_| format!("a chunk size {digits:?} is not hexadecimal"))
}

/// A connection in use by one request: its response is read through the lease, by the request's
/// own task. Dropped before [`Lease::release`], the connection is closed.
pub struct Lease<'p> {
    pool: &'p Pool,
    key: Key,
    conn: Conn,
    body: Body,
    /// The server allows another request on this connection after this one.
    keep_alive: bool,
    /// The connection closed or broke.
    ended: bool,
}

impl std::fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).field("body", &self.body).field("ended", &self.ended).finish()
    }
}

impl<'p> Lease<'p> {
    fn new(pool: &'p Pool, key: Key, conn: Conn) -> Self {
        Self { pool, key, conn, body: Body::Done, keep_alive: false, ended: false }
    }

    /// Writes the request and reads its response head (skipping interim 1xx heads).
    async fn exchange(&mut self, t: &Target) -> Result<Head, Failure> {
        if let Err(e) = self.conn.tcp.write_all(&t.wire).await {
            self.ended = true;
            return Err(Failure::Unanswered(format!("the request could not be sent: {e}")));
        }
        let mut answered = false;
        loop {
            if let Some(end) = head_end(self.conn.buffered()) {
                let parsed = parse_head(&self.conn.buffered()[..end]).map_err(Failure::Broke)?;
                self.conn.pos += end;
                if parsed.head.status < 200 && parsed.head.status != 101 {
                    continue;
                }
                self.body = parsed.body;
                self.keep_alive = parsed.keep_alive;
                return Ok(parsed.head);
            }
            if self.conn.buffered().len() > MAX_HEAD {
                return Err(Failure::Broke(format!("the response head is longer than {} KiB", MAX_HEAD >> 10)));
            }
            match self.conn.read_more().await {
                Ok(0) => {
                    self.ended = true;
                    let e = "the server closed the connection";
                    return Err(if answered {
                        Failure::Broke(format!("{e} in the middle of the response head"))
                    } else {
                        Failure::Unanswered(e.into())
                    });
                }
                Ok(_) => answered = true,
                Err(e) => {
                    self.ended = true;
                    return Err(if answered { Failure::Broke(e.to_string()) } else { Failure::Unanswered(e.to_string()) });
                }
            }
        }
    }

    /// The next piece of the body already read from the connection, its framing removed; `None`
    /// when more must be read first ([`Lease::fill`]) or the body is done ([`Lease::body_done`]).
    /// `Err` when the framing is broken. Never waits and never allocates.
    pub fn take_data(&mut self) -> Result<Option<&[u8]>, String> {
        loop {
            let avail = self.conn.buf.len() - self.conn.pos;
            match self.body {
                Body::Done => return Ok(None),
                Body::Length(left) | Body::Chunked(Chunked::Data(left)) => {
                    if avail == 0 {
                        return Ok(None);
                    }
                    let n = usize::try_from(left).map_or(avail, |l| l.min(avail));
                    let left = left - n as u64;
                    self.body = match (self.body, left) {
                        (Body::Length(_), 0) => Body::Done,
                        (Body::Length(_), l) => Body::Length(l),
                        (_, 0) => Body::Chunked(Chunked::DataEnd),
                        (_, l) => Body::Chunked(Chunked::Data(l)),
                    };
                    let start = self.conn.pos;
                    self.conn.pos += n;
                    return Ok(Some(&self.conn.buf[start..start + n]));
                }
                Body::UntilClose => {
                    if avail == 0 {
                        return Ok(None);
                    }
                    let start = self.conn.pos;
                    self.conn.pos += avail;
                    return Ok(Some(&self.conn.buf[start..start + avail]));
                }
                Body::Chunked(Chunked::DataEnd) => match self.conn.buffered() {
                    [] | [b'\r'] => return Ok(None),
                    [b'\n', ..] => self.step(1, Body::Chunked(Chunked::Size)),
                    [b'\r', b'\n', ..] => self.step(2, Body::Chunked(Chunked::Size)),
                    _ => return Err("a chunk's data does not end where its size says".into()),
                },
                Body::Chunked(state) => {
                    let Some((line, used)) = line_at(self.conn.buffered()) else {
                        if avail > MAX_LINE {
                            return Err(format!("a chunk size or trailer line is longer than {MAX_LINE} bytes"));
                        }
                        return Ok(None);
                    };
                    let next = match state {
                        Chunked::Size => match chunk_size(line)? {
                            0 => Body::Chunked(Chunked::Trailer),
                            n => Body::Chunked(Chunked::Data(n)),
                        },
                        _ if line.is_empty() => Body::Done,
                        _ => Body::Chunked(Chunked::Trailer),
                    };
                    self.step(used, next);
                }
            }
        }
    }

    fn step(&mut self, used: usize, next: Body) {
        self.conn.pos += used;
        self.body = next;
    }

    /// The body was read to its end.
    pub fn body_done(&self) -> bool {
        self.body == Body::Done
    }

    /// Reads once more from the connection (waiting for bytes); `Err` when it closed or broke
    /// before the body's end. Safe to cancel: nothing read is lost.
    pub async fn fill(&mut self) -> Result<(), String> {
        match self.conn.read_more().await {
            Ok(0) => {
                self.ended = true;
                if self.body == Body::UntilClose {
                    self.body = Body::Done;
                    return Ok(());
                }
                Err("the server closed the connection before the response's end".into())
            }
            Ok(_) => Ok(()),
            Err(e) => {
                self.ended = true;
                Err(e.to_string())
            }
        }
    }

    /// Reads the rest of the body, at most `max` bytes.
    pub async fn collect(&mut self, max: usize) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        loop {
            while let Some(d) = self.take_data()? {
                if out.len() + d.len() > max {
                    return Err(format!("the body is longer than {max} bytes"));
                }
                out.extend_from_slice(d);
            }
            if self.body_done() {
                return Ok(out);
            }
            self.fill().await?;
        }
    }

    /// When the connection last read bytes: the arrival time of the data just taken.
    pub fn last_read(&self) -> Option<Instant> {
        self.conn.last_read
    }

    /// Hands the connection back for another request when its response was read to the end, the
    /// server allows another and it is still open; otherwise closes it.
    pub fn release(self) {
        if self.body == Body::Done && self.keep_alive && !self.ended && self.conn.usable() {
            let Lease { pool, key, conn, .. } = self;
            pool.checkin(key, conn);
        }
    }
}

#[cfg(test)]
mod tests;
