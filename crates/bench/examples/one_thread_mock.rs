//! A streaming server on one thread, for measuring the load generator (`scripts/bench-loadgen`).
//!
//! It speaks just enough of `/v1/completions` for `servetune bench --no-calibrate --metrics-url
//! off`: `GET /v1/models`, and a `POST` answered with `max_tokens` one-word events, the first
//! `--ttft-ms` after the request arrived and each next one `--itl-ms` after the previous, then a
//! finish event, a usage event and `[DONE]`. Send times are absolute (request start + TTFT + k x
//! ITL), so the gaps between them are whole timer ticks and do not drift. The simulator
//! (`servetune sim --exact`) is the first-class server; this one exists because it costs little
//! CPU and runs on one thread, so a benchmark can tell the client's CPU from the server's and
//! state how much of the machine the server was allowed.
//!
//! usage: one_thread_mock [--listen 127.0.0.1:0] [--ttft-ms 0] [--itl-ms 10]

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::Instant;

/// The timing every response follows.
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttft: Duration,
    itl: Duration,
}

/// A request head and body larger than this closes the connection.
const MAX_REQUEST: usize = 16 << 20;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("one_thread_mock: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let (listen, timing) = parse_args(std::env::args().skip(1))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async move {
        let listener = bind(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "one_thread_mock listening on http://{addr}").and_then(|()| out.flush()).map_err(|e| e.to_string())?;
        drop(out);
        loop {
            match listener.accept().await {
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    tokio::spawn(async move {
                        let _ = serve(s, timing).await;
                    });
                }
                // Out of descriptors or a reset before accept: try again shortly.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
}

/// A listener with room for a whole wave of connections: a benchmark at concurrency 4,096 opens
/// them all at once, and a connection the accept queue drops waits a second for its SYN to be sent
/// again, which would show as a second of TTFT (the kernel caps the queue at `somaxconn`).
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(8192)
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(SocketAddr, Timing), String> {
    let mut listen: SocketAddr = ([127, 0, 0, 1], 0).into();
    let mut timing = Timing { ttft: Duration::ZERO, itl: Duration::from_millis(10) };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let ms = || -> Result<Duration, String> {
            let v: f64 = value.parse().map_err(|_| format!("{flag} {value:?} is not a number of milliseconds"))?;
            Duration::try_from_secs_f64(v / 1e3).map_err(|_| format!("{flag} {value:?} is not a duration: give milliseconds >= 0"))
        };
        match flag.as_str() {
            "--listen" => listen = value.parse().map_err(|_| format!("--listen {value:?} is not an address like 127.0.0.1:0"))?,
            "--ttft-ms" => timing.ttft = ms()?,
            "--itl-ms" => timing.itl = ms()?,
            _ => return Err(format!("unknown flag {flag}: use --listen, --ttft-ms or --itl-ms")),
        }
    }
    Ok((listen, timing))
}

/// One parsed request: what the response needs.
struct Ask {
    models: bool,
    post: bool,
    max_tokens: u32,
    prompt_words: u32,
}

/// Answers requests on one keep-alive connection until the client closes it.
async fn serve(mut s: TcpStream, timing: Timing) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(4096);
    while let Some(ask) = read_request(&mut s, &mut buf).await? {
        let start = Instant::now();
        if ask.models {
            let body = br#"{"object":"list","data":[{"id":"one-thread-mock","object":"model"}]}"#;
            let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
            s.write_all(&[head.as_bytes(), body].concat()).await?;
        } else if ask.post {
            stream(&mut s, &mut out, &ask, start, timing).await?;
        } else {
            s.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await?;
        }
    }
    Ok(())
}

/// The event stream of one request, each token written when its absolute time comes.
async fn stream(s: &mut TcpStream, out: &mut Vec<u8>, ask: &Ask, start: Instant, t: Timing) -> std::io::Result<()> {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
    let n = ask.max_tokens.max(1);
    for k in 0..n {
        let at = start + t.ttft + t.itl * k;
        if at > Instant::now() {
            if !out.is_empty() {
                s.write_all(out).await?;
                out.clear();
            }
            tokio::time::sleep_until(at).await;
        }
        chunk(out, br#"data: {"choices":[{"index":0,"text":" tok","finish_reason":null}]}"#);
    }
    chunk(out, br#"data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#);
    let usage = format!(
        r#"data: {{"choices":[],"usage":{{"prompt_tokens":{},"completion_tokens":{n},"total_tokens":{}}}}}"#,
        ask.prompt_words,
        ask.prompt_words + n
    );
    chunk(out, usage.as_bytes());
    chunk(out, b"data: [DONE]");
    out.extend_from_slice(b"0\r\n\r\n");
    s.write_all(out).await
}

/// Appends one event (`event` plus its blank line) as one HTTP chunk.
fn chunk(out: &mut Vec<u8>, event: &[u8]) {
    let _ = write!(out, "{:x}\r\n", event.len() + 2);
    out.extend_from_slice(event);
    out.extend_from_slice(b"\n\n\r\n");
}

/// Reads one request (head and `content-length` body); `None` when the client closed.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<Ask>> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST || !fill(s, buf).await? {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if len > MAX_REQUEST {
        return Ok(None);
    }
    while buf.len() < head_end + len {
        if !fill(s, buf).await? {
            return Ok(None);
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned();
    buf.drain(..head_end + len);
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    Ok(Some(Ask {
        models: method == "GET" && path == "/v1/models",
        post: method == "POST" && path == "/v1/completions",
        max_tokens: number_after(&body, "\"max_tokens\":").unwrap_or(16),
        prompt_words: prompt_words(&body),
    }))
}

/// Reads more bytes; false at the end of the stream.
async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut tmp = [0u8; 8192];
    let n = s.read(&mut tmp).await?;
    buf.extend_from_slice(&tmp[..n]);
    Ok(n > 0)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn number_after(body: &str, key: &str) -> Option<u32> {
    let rest = body[body.find(key)? + key.len()..].trim_start();
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Words of the `prompt` string: the usage count the mock reports.
fn prompt_words(body: &str) -> u32 {
    let Some(i) = body.find("\"prompt\":\"") else {
        return 0;
    };
    let rest = &body[i + 10..];
    let end = rest.find('"').unwrap_or(rest.len());
    u32::try_from(rest[..end].split_whitespace().count()).unwrap_or(u32::MAX)
}
